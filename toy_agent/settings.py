"""A run's settings as one frozen value: the model's, the tools', the agent's and a batch's.

Built once from the parsed flags (`RunSettings.from_args`: the config file, the TOY_AGENT_
variables and the .env are already merged into them, see toy_agent.config), narrowed for one
batch task by `for_task`, and turned into objects by toy_agent.build, the same way for a single
run, a session, a replay and every batch task on every executor.

Every default is written here, once: the flags (cli.build_parser), ReactAgent's keyword
defaults and the old module constants read it from these classes. This module imports nothing
heavy (it is read while `--help` is built, and by agent.py and llm.py), so what it names from
elsewhere is imported only for the type checker. A field whose name is its flag's `dest` is
read from the flags by that name: a new setting is its field and its flag.

The values pickle (a Ray worker gets them as an argument). Keys never travel in them: a worker
gets those separately (batch.worker.Credentials)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from toy_agent.providers import DEFAULT_PROVIDER

if TYPE_CHECKING:
    from toy_agent.batch.tasks import Task
    from toy_agent.hooks import Hooks
    from toy_agent.lint import LintMode
    from toy_agent.llm import LlmClient
    from toy_agent.mcp_config import McpServerConfig
    from toy_agent.permissions import Permissions


@dataclass(frozen=True)
class ModelSettings:
    """The model and how it is called; the price of its tokens and the spending limit."""

    provider: str = DEFAULT_PROVIDER  # --llm-provider, resolved (cli._settings)
    model: str | None = None  # None: the provider's default model
    base_url: str | None = None
    max_retries: int = 4  # retries of transient provider failures
    timeout: float = 120.0  # seconds for one whole response, streaming included
    effort: str | None = None  # a batch task's own "effort" wins
    model_options: tuple[tuple[str, Any], ...] = ()  # --model-option, parsed
    openai_api: str = "chat"  # or "responses", for the openai provider
    show_thinking: bool = False  # --show-thinking, resolved (auto: on with the live view)
    replay: str | None = None  # the recording the replay provider plays back
    replay_lenient: bool = False
    max_cost: float | None = None  # USD, per run (per task in a batch)
    price_input: float | None = None  # USD per million tokens, over the price table's
    price_output: float | None = None
    # A factory for any LlmClient, in place of the provider settings (Python callers, tests);
    # called once per run, in the worker.
    make_llm: Callable[[], LlmClient] | None = field(default=None, compare=False)

    def switched_to(self, name: str, current: str) -> ModelSettings:
        """/model NAME in a session whose provider is now `current`: a name that says its
        provider (claude-*, gemini-*, gpt-*, o3...) switches to it, with that provider's own
        key and base URL variables; another name stays with `current` and the base URL these
        settings give. No longer a replay; --openai-api stays the openai provider's."""
        from toy_agent.providers import provider_for_model

        row = provider_for_model(name)
        provider = row.name if row else current
        return replace(self, provider=provider, model=name,
                       base_url=self.base_url if provider == current else None,
                       openai_api=self.openai_api if provider == "openai" else "chat",
                       replay=None, replay_lenient=False)  # fmt: skip


@dataclass(frozen=True)
class ToolSettings:
    """The repository tools, the sandbox their commands run in, the edit checks, MCP servers."""

    allow_commands: bool = False  # offer run_command
    sandbox: str = "auto"  # bwrap, off or auto (resolved once per batch)
    sandbox_network: bool = False
    sandbox_read: tuple[str, ...] = ()  # folders and files sandboxed commands may read
    command_env: tuple[str, ...] = ()  # NAME or NAME=VALUE, given to commands
    mcp_servers: tuple[str | McpServerConfig, ...] = ()  # --mcp-server and --mcp-config's
    mcp_timeout: float = 30.0  # seconds for MCP start-up and for each MCP tool call
    lint: LintMode = "on"
    lint_commands: tuple[str, ...] = ()  # --lint-cmd


@dataclass(frozen=True)
class AgentSettings:
    """The loop: its limits, how actions are written, what is allowed, the done-check."""

    max_iterations: int = 10  # a batch task's own "max_iterations" wins
    tool_format: str = "xml"
    context_budget: int = 100_000  # tokens; below every supported cloud model's window
    check: str | None = None  # the command that decides whether the task is done
    check_retries: int = 2  # times the model may try again after a failed check
    check_timeout: float = 600.0  # seconds for each run of a check (and a batch's setup)
    permissions: Permissions | None = None  # None: auto (ask with a confirm)
    hooks: Hooks | None = None  # the user's --hook commands
    stream: bool = False  # the LLM's text shown as it comes (only with the live view)


@dataclass(frozen=True)
class BatchSettings:
    """What only a batch has: each task's defaults where its line gives none, and its limits."""

    attempts: int = 1  # independent attempts per task
    gold: bool = False  # a SWE-bench instance's own patch instead of the agent
    task_timeout: float | None = None  # seconds an attempt's agent may run
    setup: str | None = None  # run once in each copy before anything else
    env: str | None = None  # where commands run: host, rootfs:DIR, docker:IMAGE, podman:IMAGE
    owner: str = ""  # the batch's process, on the containers it starts (set by run_batch)


_PARTS: dict[str, type[Any]] = {
    "llm": ModelSettings,
    "tools": ToolSettings,
    "agent": AgentSettings,
    "batch": BatchSettings,
}
# A field's name says its part: the names are unique across the parts (tested).
_PART_OF = {f.name: part for part, cls in _PARTS.items() for f in fields(cls)}


@dataclass(frozen=True, init=False)
class RunSettings:
    """Everything a run is built from (toy_agent.build), in four parts.

    `RunSettings(provider="openai", allow_commands=True, make_llm=...)`: any field of the
    parts by its name; `RunSettings(llm=ModelSettings(...), ...)`: whole parts; both mix.
    (The model's part is `llm`: `model` is the model's name, a field of it.)"""

    llm: ModelSettings
    tools: ToolSettings
    agent: AgentSettings
    batch: BatchSettings

    def __init__(
        self,
        llm: ModelSettings | None = None,
        tools: ToolSettings | None = None,
        agent: AgentSettings | None = None,
        batch: BatchSettings | None = None,
        **settings: Any,
    ) -> None:
        given = {"llm": llm, "tools": tools, "agent": agent, "batch": batch}
        by_part: dict[str, dict[str, Any]] = {part: {} for part in _PARTS}
        for name, value in settings.items():
            if name not in _PART_OF:
                raise TypeError(f"RunSettings() got an unexpected keyword argument {name!r}")
            by_part[_PART_OF[name]][name] = value
        for part, cls in _PARTS.items():
            value = given[part] or cls()
            object.__setattr__(self, part, replace(value, **by_part[part]))

    @classmethod
    def from_args(cls, args: argparse.Namespace, *, live: bool = False) -> RunSettings:
        """The settings the parsed flags say (after cli._settings resolved the provider, the
        permissions and the hooks). `live`: a live view shows the run, so `--show-thinking
        auto` asks for the thinking and `--stream` streams. Raises LlmConfigError for a bad
        --model-option and McpError for a bad --mcp-server or --mcp-config."""
        from toy_agent.llm import parse_model_options
        from toy_agent.mcp_config import load_mcp_config, parse_server_arg

        servers = [parse_server_arg(arg) for arg in args.mcp_server]
        if args.mcp_config:
            servers += load_mcp_config(args.mcp_config)
        thinking = args.show_thinking == "on" or (args.show_thinking == "auto" and live)
        return cls(
            llm=_read(ModelSettings, args, provider=args.llm_provider,
                        model_options=tuple(parse_model_options(args.model_option).items()),
                        show_thinking=thinking),
            tools=_read(ToolSettings, args, mcp_servers=tuple(servers),
                        lint_commands=tuple(args.lint_cmd)),
            agent=_read(AgentSettings, args, stream=bool(args.stream and live)),
            batch=_read(BatchSettings, args),
        )  # fmt: skip

    def for_task(self, task: Task) -> RunSettings:
        """These settings with what a task-file line says for itself (it wins)."""
        return replace(
            self,
            llm=replace(self.llm, effort=task.effort or self.llm.effort),
            agent=replace(self.agent, max_iterations=task.max_iterations or
                          self.agent.max_iterations, check=task.check or self.agent.check),
            batch=replace(self.batch, attempts=task.attempts or self.batch.attempts,
                          setup=task.setup or self.batch.setup, env=task.env or self.batch.env),
        )  # fmt: skip


def _read(cls: type[Any], args: argparse.Namespace, **given: Any) -> Any:
    """`cls` from the flags whose `dest` is a field's name (lists as tuples), and `given`."""
    values = {
        f.name: _frozen(getattr(args, f.name))
        for f in fields(cls)
        if f.name not in given and hasattr(args, f.name)
    }
    return cls(**values, **given)


def _frozen(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value
