"""A run's objects from its settings (toy_agent.settings): the model client, the repository
tools, the MCP servers, the cost meter and the agent.

The one place that turns settings into a ReactAgent: a single run, an interactive session and
its /model switch, a replay, and every batch task on every executor (in a Ray worker too) go
through these functions. Errors are the modules' own (LlmConfigError, SandboxUnavailable,
McpError, PriceError); each caller words them for where it runs (a usage error on the command
line, a failed task in a batch).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toy_agent.agent import Confirm, ReactAgent
from toy_agent.llm import AdaptedClient, LlmClient, ReplayLlmClient, client_for
from toy_agent.mcp_tools import McpServerConfig, McpTools
from toy_agent.pricing import CostMeter, Price, meter_for
from toy_agent.providers import REPLAY
from toy_agent.redaction import Redactor
from toy_agent.settings import ModelSettings, RunSettings, ToolSettings
from toy_agent.tools import CodeRepositoryTools

if TYPE_CHECKING:
    from toy_agent.batch.environments import Environment


def build_llm(model: ModelSettings, environ: Mapping[str, str] = os.environ) -> LlmClient:
    """The model client: `make_llm`'s, else the provider's, with its key and base URL read
    from `environ` (a Ray worker's credentials, or this process's environment)."""
    if model.make_llm is not None:
        return model.make_llm()
    return client_for(
        model.provider, model=model.model, base_url=model.base_url, replay=model.replay,
        replay_lenient=model.replay_lenient, max_retries=model.max_retries,
        timeout=model.timeout, environ=environ, effort=model.effort,
        model_options=dict(model.model_options), show_thinking=model.show_thinking,
        openai_api=model.openai_api,
    )  # fmt: skip


def build_tools(
    tools: ToolSettings,
    repo: str | Path,
    redactor: Redactor,
    environment: Environment | None = None,
) -> CodeRepositoryTools:
    """The repository tools for `repo`; `environment`: where commands run, when not here."""
    return CodeRepositoryTools(
        repo, allow_commands=tools.allow_commands, redactor=redactor, sandbox=tools.sandbox,
        sandbox_network=tools.sandbox_network, sandbox_read=tools.sandbox_read,
        command_env=tools.command_env, environment=environment,
    )  # fmt: skip


def open_mcp(tools: ToolSettings, redactor: Redactor | None = None) -> McpTools | None:
    """The MCP servers, connected (None when there are none); the caller closes them.

    The run's `redactor` first learns the secrets the servers' config gives them (env and
    header values), before any starts: a server may echo them in its stderr, its errors or
    its results."""
    if not tools.mcp_servers:
        return None
    if redactor is not None:
        for config in tools.mcp_servers:
            for secret in config.secrets if isinstance(config, McpServerConfig) else ():
                redactor.add_secret(secret)
    redact = redactor.redact if redactor is not None else None
    return McpTools(list(tools.mcp_servers), timeout=tools.mcp_timeout, redact=redact)


def build_cost(model: ModelSettings, llm: LlmClient) -> CostMeter:
    """The meter of the model's price (the table's, or the settings' prices over it) and the
    spending limit. A replay costs nothing: the recording was paid for once."""
    llm = AdaptedClient.of(llm)  # a client written to the seed spec may name no model
    if llm.provider == REPLAY:
        return CostMeter(Price(0.0, 0.0), model.max_cost)
    return meter_for(llm.model, model.max_cost, model.price_input,
                     model.price_output)  # fmt: skip


def build_agent(
    settings: RunSettings,
    llm: LlmClient,
    tools: CodeRepositoryTools,
    mcp: McpTools | None = None,
    *,
    redactor: Redactor,
    subscribers: Sequence[Callable[[Any], None]] | Iterable[Any] = (),
    confirm: Confirm | None = None,
    instructions: str = "",
    session: Callable[[], str | None] | None = None,
) -> ReactAgent:
    """The agent of a run. `subscribers` get its events; `confirm` answers the questions its
    permissions ask (None: what would ask is refused); `session` names the session the hooks
    report."""
    agent = settings.agent
    if isinstance(llm, ReplayLlmClient):  # an observation naming the repository names this one
        llm.repo = tools.repo_path
    hooks = agent.hooks
    if hooks is not None and session is not None:
        hooks = replace(hooks, session=session)
    return ReactAgent(
        llm, tools=tools, max_iterations=agent.max_iterations, mcp_tools=mcp,
        tool_format=agent.tool_format, context_budget=agent.context_budget, redactor=redactor,
        on_event=list(subscribers), confirm=confirm, stream=agent.stream,
        instructions=instructions, cost=build_cost(settings.llm, llm),
        permissions=agent.permissions, check=agent.check, check_retries=agent.check_retries,
        check_timeout=agent.check_timeout, lint=settings.tools.lint,
        lint_commands=settings.tools.lint_commands, hooks=hooks,
    )  # fmt: skip
