"""One batch task, anywhere: a fresh copy, an agent, then the patch and the check.

`run_task` is the unit of work: plain arguments in, a plain dict out, so Ray can ship both.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import math
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from toy_agent import cuts
from toy_agent.agent import ReactAgent, RunResult
from toy_agent.context import DEFAULT_CONTEXT_BUDGET
from toy_agent.copies import GitError, collect_patch, prepare_copy, remove_copy
from toy_agent.events import TrajectoryRecorder
from toy_agent.hooks import Hooks
from toy_agent.llm import LlmClient, LlmConfigError, client_for
from toy_agent.mcp_config import McpError, McpServerConfig
from toy_agent.mcp_tools import McpTools
from toy_agent.messages import Usage
from toy_agent.permissions import Permissions
from toy_agent.pricing import meter_for
from toy_agent.providers import DEFAULT_PROVIDER
from toy_agent.redaction import Redactor
from toy_agent.sandbox import SandboxUnavailable, kill_live_groups, sandbox_note
from toy_agent.shell import run_shell
from toy_agent.tasks import Task
from toy_agent.tools import CodeRepositoryTools

logger = logging.getLogger(__name__)


_TASK_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("task_id", default=None)


class TaskLogFilter(logging.Filter):
    """Puts the id of the batch task a log record comes from in front of its message
    ("t3: LLM call failed: ..."): tasks run side by side, and their records mix."""

    def filter(self, record: logging.LogRecord) -> bool:
        task = _TASK_ID.get()
        if task is not None and getattr(record, "task_id", None) is None:
            record.msg, record.args = f"{task}: {record.getMessage()}", ()
            record.task_id = task  # once, whichever handler sees the record first
        return True


DEFAULT_CHECK_TIMEOUT = 600.0
CHECK_TAIL_CHARS = 2_000
_CHECK_HOW = "only the end of the check's output is kept; run the check itself to see it all"


@dataclass(frozen=True)
class RunSettings:
    """How every task's agent is built and checked: the CLI's agent flags.

    `make_llm` replaces the provider settings with a factory (a custom or scripted model); it
    is called once per task, in the worker."""

    provider: str = DEFAULT_PROVIDER
    model: str | None = None
    base_url: str | None = None
    max_retries: int = 4
    timeout: float = 120.0
    effort: str | None = None  # --effort; a task's own "effort" wins
    model_options: tuple[tuple[str, Any], ...] = ()  # --model-option, parsed
    openai_api: str = "chat"  # --openai-api
    replay: str | None = None
    replay_lenient: bool = False
    max_iterations: int = 10
    tool_format: str = "xml"
    context_budget: int = DEFAULT_CONTEXT_BUDGET
    allow_commands: bool = False
    sandbox: str = "auto"
    sandbox_network: bool = False
    sandbox_read: tuple[str, ...] = ()  # --sandbox-read: folders sandboxed commands may read
    mcp_servers: tuple[str | McpServerConfig, ...] = ()
    mcp_timeout: float = 30.0
    check_timeout: float = DEFAULT_CHECK_TIMEOUT
    max_cost: float | None = None  # per task, like --max-cost for one run
    price_input: float | None = None  # USD per million tokens, over the price table's
    price_output: float | None = None
    # What would ask is refused (no one is there to answer), the model told why.
    permissions: Permissions | None = None
    hooks: Hooks | None = None  # the user's --hook commands, run in each task's copy
    make_llm: Callable[[], LlmClient] | None = field(default=None, compare=False)


class Credentials:
    """The provider's key and base URL variables, for a task on another machine. Ray tasks get
    them as an argument, never in their runtime environment: Ray writes a runtime environment
    to its logs and shows it on its dashboard. The repr names the variables, never a value."""

    __slots__ = ("_variables",)

    def __init__(self, variables: Mapping[str, str]):
        self._variables = dict(variables)

    def environ(self) -> dict[str, str]:
        return dict(self._variables)

    def __repr__(self) -> str:
        return f"Credentials({', '.join(self._variables)})"


class StopSignal:
    """Ctrl-C for a batch on this machine: cancels every running agent, kills every running
    command (the agents' and the checks'), and tells tasks not to start or record anything."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._agents: set[ReactAgent] = set()
        self._lock = threading.Lock()

    def set(self) -> None:
        self._event.set()
        with self._lock:
            agents = list(self._agents)
        for agent in agents:
            agent.cancel()
        kill_live_groups()

    def is_set(self) -> bool:
        return self._event.is_set()

    @contextlib.contextmanager
    def attached(self, agent: ReactAgent) -> Iterator[None]:
        with self._lock:
            self._agents.add(agent)
        try:
            yield
        finally:
            with self._lock:
                self._agents.discard(agent)


def run_task(
    task: Task,
    settings: RunSettings,
    scratch: str | Path,
    stop: StopSignal | None = None,
    credentials: Credentials | None = None,
) -> dict[str, Any]:
    """Run one task in a fresh copy and return its result: the results.jsonl fields, plus
    `patch_data` (bytes) and `trajectory_data` (a dict) for the driver to write. A run that
    was stopped comes back with outcome "cancelled" and is not recorded. `credentials`: the
    provider's variables, when this process's environment may not have them (a Ray worker)."""
    started = time.monotonic()
    scratch = Path(scratch)
    meta = scratch / "meta" / task.id
    stopped = stop.is_set if stop else (lambda: False)
    copy = None
    named = _TASK_ID.set(task.id)
    try:
        if stopped():
            return {"id": task.id, "outcome": "cancelled"}
        copy = prepare_copy(task, scratch)
        redactor = _redactor(credentials)
        tools = CodeRepositoryTools(
            copy.path, allow_commands=settings.allow_commands, redactor=redactor,
            sandbox=settings.sandbox, sandbox_network=settings.sandbox_network,
            sandbox_read=settings.sandbox_read,
        )  # fmt: skip
        trajectory_file = meta / "trajectory.json"
        run = _run_agent(task, settings, tools, redactor, trajectory_file, stop, credentials)
        if run.outcome == "cancelled" or stopped():
            return {"id": task.id, "outcome": "cancelled"}
        patch, files = collect_patch(copy)
        check = run_check(task.check, tools, settings.check_timeout) if task.check else None
        if stopped():  # the stop killed the check: its verdict means nothing
            return {"id": task.id, "outcome": "cancelled"}
        trajectory = json.loads(trajectory_file.read_text(encoding="utf-8"))
        return {
            "id": task.id, "outcome": run.outcome,
            "success": run.success and (check is None or check["passed"]), "check": check,
            "iterations": run.iterations, "usage": run.usage.to_dict(),
            "cost_usd": getattr(run, "cost_usd", None),  # None: no price known for the model
            "elapsed_seconds": round(time.monotonic() - started, 3), "files_changed": files,
            "error": run.error, "base_commit": copy.base_commit,
            "patch_data": patch, "trajectory_data": trajectory,
        }  # fmt: skip
    except (GitError, OSError, McpError, LlmConfigError, SandboxUnavailable) as exc:
        if stopped():
            return {"id": task.id, "outcome": "cancelled"}
        error = _redactor(credentials).redact(str(exc))  # a clone's URL may carry a token
        return failed_result(task.id, error, time.monotonic() - started)
    finally:
        if copy is not None:
            remove_copy(copy)
        shutil.rmtree(meta, ignore_errors=True)
        _TASK_ID.reset(named)


def _redactor(credentials: Credentials | None) -> Redactor:
    """A task's redactor: the secrets of this environment with the variables it was handed,
    by the same rule (the key is one; a base URL is not)."""
    if credentials is None:
        return Redactor()
    return Redactor(environ={**os.environ, **credentials.environ()})


def failed_result(task_id: str, error: str, elapsed: float = 0.0) -> dict[str, Any]:
    """The result of a task that could not run (a clone failed, an MCP server did not start)."""
    return {
        "id": task_id, "outcome": "error", "success": False, "check": None, "iterations": 0,
        "usage": Usage().to_dict(), "cost_usd": None, "elapsed_seconds": round(elapsed, 3),
        "files_changed": [], "error": error, "base_commit": None,
        "patch_data": b"", "trajectory_data": None,
    }  # fmt: skip


def _run_agent(
    task: Task,
    settings: RunSettings,
    tools: CodeRepositoryTools,
    redactor: Redactor,
    trajectory: Path,
    stop: StopSignal | None,
    credentials: Credentials | None,
) -> RunResult:
    llm = build_llm(replace(settings, effort=task.effort or settings.effort), credentials)
    cost = meter_for(getattr(llm, "model", "") or "", settings.max_cost, settings.price_input,
                     settings.price_output)  # fmt: skip
    mcp_session = (
        McpTools(list(settings.mcp_servers), timeout=settings.mcp_timeout)
        if settings.mcp_servers else contextlib.nullcontext(None)
    )  # fmt: skip
    with mcp_session as mcp:
        # The second subscriber closes a race: a stop set just before run_result() began
        # (which clears the agent's cancel flag) still cancels it at its first event.
        agent = ReactAgent(
            llm, tools=tools, max_iterations=task.max_iterations or settings.max_iterations,
            mcp_tools=mcp, tool_format=settings.tool_format,
            context_budget=settings.context_budget, redactor=redactor, cost=cost,
            permissions=settings.permissions, hooks=settings.hooks,
            on_event=[TrajectoryRecorder(trajectory, redactor.redact_obj),
                      lambda event: agent.cancel() if stop and stop.is_set() else None],
        )  # fmt: skip
        with stop.attached(agent) if stop else contextlib.nullcontext():
            result = agent.run_result(task.task)
        if result.outcome == "provider_error":  # the agent leaves reporting it to its caller
            logger.warning("LLM call failed: %s", result.error)
        return result


def build_llm(settings: RunSettings, credentials: Credentials | None = None) -> LlmClient:
    """The task's model client, from the provider settings: keys and base URLs come from
    `credentials` when given (a Ray worker's), else from this environment."""
    if settings.make_llm is not None:
        return settings.make_llm()
    return client_for(
        settings.provider, model=settings.model, base_url=settings.base_url,
        replay=settings.replay, replay_lenient=settings.replay_lenient,
        max_retries=settings.max_retries, timeout=settings.timeout,
        environ=os.environ if credentials is None else credentials.environ(),
        effort=settings.effort, model_options=dict(settings.model_options),
        openai_api=settings.openai_api,
    )  # fmt: skip


def run_check(command: str, tools: CodeRepositoryTools, timeout: float) -> dict[str, Any]:
    """The task's check in its copy, sandboxed like run_command (no secrets in its
    environment; in bubblewrap when the sandbox is on), killed after `timeout` seconds."""
    code, output, timed_out = run_shell(
        command, tools.repo_path, math.ceil(timeout), policy=tools.sandbox_policy
    )
    tail = cuts.cut(tools.redactor.redact(output), CHECK_TAIL_CHARS, _CHECK_HOW, keep="tail")
    if timed_out:
        tail += f"\n[the check timed out after {timeout:g}s and was killed]"
        return {"passed": False, "exit_code": None, "output_tail": tail}
    check: dict[str, Any] = {"passed": code == 0, "exit_code": code, "output_tail": tail}
    policy = tools.sandbox_policy
    note = sandbox_note(policy, output, code, for_user=True) if policy and code != 0 else None
    if note:
        check["sandbox_note"] = tools.redactor.redact(note)
    return check
