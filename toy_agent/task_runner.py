"""One batch task, anywhere: a fresh copy, an agent, then the patch and the check.

`run_task` is the unit of work: plain arguments in, a plain dict out, so Ray can ship both.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from toy_agent.agent import DEFAULT_CHECK_RETRIES, ReactAgent, RunResult
from toy_agent.context import DEFAULT_CONTEXT_BUDGET
from toy_agent.copies import GitError, collect_patch, prepare_copy, remove_copy
from toy_agent.events import TrajectoryRecorder, json_text
from toy_agent.hooks import Hooks
from toy_agent.lint import LintMode
from toy_agent.llm import LlmClient, LlmConfigError, client_for
from toy_agent.mcp_config import McpError, McpServerConfig
from toy_agent.mcp_tools import McpTools
from toy_agent.messages import CommandResult, Usage
from toy_agent.permissions import Permissions
from toy_agent.pricing import meter_for
from toy_agent.providers import DEFAULT_PROVIDER
from toy_agent.redaction import Redactor
from toy_agent.sandbox import SandboxUnavailable, kill_live_groups
from toy_agent.tasks import Task
from toy_agent.tools import CHECK_TAIL_CHARS as CHECK_TAIL_CHARS  # its old home
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
    command_env: tuple[str, ...] = ()  # --command-env: NAME or NAME=VALUE, given to commands
    mcp_servers: tuple[str | McpServerConfig, ...] = ()
    mcp_timeout: float = 30.0
    check_timeout: float = DEFAULT_CHECK_TIMEOUT
    check: str | None = None  # --check: the check of tasks that give none
    check_retries: int = DEFAULT_CHECK_RETRIES  # times the model may try after a failed check
    attempts: int = 1  # --attempts: of tasks that give none
    lint: LintMode = "on"  # --lint
    lint_commands: tuple[str, ...] = ()  # --lint-cmd
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
    """Run one task and return its result: the results.jsonl fields, plus `patch_data`
    (bytes), `trajectory_data` (a dict) and `attempt_files` (path -> bytes, when there were
    several attempts) for the driver to write. A run that was stopped comes back with outcome
    "cancelled" and is not recorded. `credentials`: the provider's variables, when this
    process's environment may not have them (a Ray worker).

    Before the agent starts, the task's check and `keep` checks run on the untouched copy
    (the baseline): a check that already passes makes the task "already passing", and the
    agent is not run. Then up to `attempts` attempts, each in a fresh copy, stop at the first
    that resolves the task (its check passes where it failed, and no `keep` check broke)."""
    started = time.monotonic()
    scratch = Path(scratch)
    stopped = stop.is_set if stop else (lambda: False)
    named = _TASK_ID.set(task.id)
    check_command = task.check or settings.check
    limit = task.attempts or settings.attempts
    try:
        if stopped():
            return {"id": task.id, "outcome": "cancelled"}
        attempts: list[_Attempt] = []
        baseline: dict[str, Any] | None = None
        kept: tuple[str, ...] = ()
        for number in range(1, limit + 1):
            first = number == 1
            attempt = _attempt(task, settings, scratch, stop, credentials, check_command,
                               kept, baseline=first)  # fmt: skip
            if attempt is None or stopped():
                return {"id": task.id, "outcome": "cancelled"}
            if first:
                baseline, kept = attempt.baseline, attempt.kept
                if baseline is not None and baseline["passed"]:
                    return _already_passing(task, baseline, attempt, time.monotonic() - started)
            attempts.append(attempt)
            spent = sum(a.run.cost_usd or 0.0 for a in attempts)
            if attempt.resolved or (task.budget is not None and spent >= task.budget):
                break
        return _task_result(task, attempts, baseline, kept, time.monotonic() - started)
    except (GitError, OSError, McpError, LlmConfigError, SandboxUnavailable) as exc:
        if stopped():
            return {"id": task.id, "outcome": "cancelled"}
        error = _redactor(credentials).redact(str(exc))  # a clone's URL may carry a token
        return failed_result(task.id, error, time.monotonic() - started)
    finally:
        _TASK_ID.reset(named)


@dataclass(frozen=True)
class _Attempt:
    """One attempt at a task, in its own copy: the run and what the checks said after it."""

    number: int
    run: RunResult
    patch: bytes
    files: list[dict[str, Any]]
    check: dict[str, Any] | None
    keep_broken: tuple[str, ...]
    trajectory: dict[str, Any] | None
    base_commit: str | None
    resolved: bool
    baseline: dict[str, Any] | None = None  # the first attempt's: the check before the agent
    kept: tuple[str, ...] = ()  # the keep checks that passed before the agent

    def to_dict(self, files: Mapping[str, str]) -> dict[str, Any]:
        check = self.check
        return {
            "attempt": self.number, "outcome": self.run.outcome, "resolved": self.resolved,
            "iterations": self.run.iterations, "usage": self.run.usage.to_dict(),
            "cost_usd": self.run.cost_usd,
            "check": None if check is None else {"passed": check["passed"],
                                                 "exit_code": check["exit_code"]},
            "keep_broken": list(self.keep_broken), "files_changed": self.files,
            "patch": files.get("patch"), "trajectory": files.get("trajectory"),
        }  # fmt: skip


def _attempt(
    task: Task,
    settings: RunSettings,
    scratch: Path,
    stop: StopSignal | None,
    credentials: Credentials | None,
    check_command: str | None,
    kept: tuple[str, ...],
    *,
    baseline: bool,
) -> _Attempt | None:
    """One attempt in a fresh copy (the first also takes the baseline); None when stopped."""
    meta = scratch / "meta" / task.id
    copy = None
    try:
        copy = prepare_copy(task, scratch)
        redactor = _redactor(credentials)
        tools = CodeRepositoryTools(
            copy.path, allow_commands=settings.allow_commands, redactor=redactor,
            sandbox=settings.sandbox, sandbox_network=settings.sandbox_network,
            sandbox_read=settings.sandbox_read, command_env=settings.command_env,
        )  # fmt: skip
        before = None
        if baseline:
            if check_command:
                before = run_check(check_command, tools, settings.check_timeout)
            kept = tuple(c for c in task.keep
                         if tools.run_check(c, settings.check_timeout).ok)  # fmt: skip
            if before is not None and before["passed"]:
                return _Attempt(0, RunResult("completed", 0, 0), b"", [], None, (), None,
                                copy.base_commit, False, before, kept)  # fmt: skip
        trajectory_file = meta / "trajectory.json"
        run = _run_agent(task, settings, tools, redactor, trajectory_file, stop, credentials)
        if run.outcome == "cancelled" or (stop and stop.is_set()):
            return None
        patch, files = collect_patch(copy)
        check = run.check if run.outcome in ("completed", "check_failed") else None
        if check is None and check_command:  # the run stopped without a verdict: one now
            check = run_check(check_command, tools, settings.check_timeout)
        broken = tuple(c for c in kept if not tools.run_check(c, settings.check_timeout).ok)
        if stop and stop.is_set():  # the stop killed a check: its verdict means nothing
            return None
        trajectory = json.loads(trajectory_file.read_text(encoding="utf-8"))
        passed = run.success if check is None else check["passed"]
        resolved = passed and not broken and (before is None or not before["passed"])
        return _Attempt(0, run, patch, files, check, broken, trajectory, copy.base_commit,
                        resolved, before, kept)  # fmt: skip
    finally:
        if copy is not None:
            remove_copy(copy)
        shutil.rmtree(meta, ignore_errors=True)


def _already_passing(
    task: Task, baseline: dict[str, Any], attempt: _Attempt, elapsed: float
) -> dict[str, Any]:
    """A task whose check passed before the agent touched anything: nothing to resolve."""
    return {
        **failed_result(task.id, "the check already passes on the untouched repository: "
                        "there is nothing for the agent to fix", elapsed),
        "outcome": "already_passing", "baseline": baseline, "check": baseline,
        "base_commit": attempt.base_commit, "resolved": False, "already_passing": True,
        "keep": list(task.keep), "keep_broken": [], "attempts": [],
    }  # fmt: skip


def _task_result(
    task: Task,
    attempts: list[_Attempt],
    baseline: dict[str, Any] | None,
    kept: tuple[str, ...],
    elapsed: float,
) -> dict[str, Any]:
    """The task's record: its chosen attempt (the resolved one, else the one that broke the
    fewest keep checks, the latest of those), with every attempt listed."""
    numbered = [replace(a, number=n) for n, a in enumerate(attempts, 1)]
    resolved = [a for a in numbered if a.resolved]
    chosen = resolved[0] if resolved else min(reversed(numbered),
                                              key=lambda a: len(a.keep_broken))  # fmt: skip
    several = len(numbered) > 1
    attempt_files: dict[str, bytes] = {}
    listed = []
    for a in numbered:
        files: dict[str, str] = {}
        if several:
            files["trajectory"] = f"trajectories/{task.id}.attempt-{a.number}.json"
            attempt_files[files["trajectory"]] = (json_text(a.trajectory) + "\n").encode()
            if a.patch:
                files["patch"] = f"patches/{task.id}.attempt-{a.number}.diff"
                attempt_files[files["patch"]] = a.patch
        listed.append(a.to_dict(files))
    run = chosen.run
    usage = Usage()
    for a in numbered:
        usage += a.run.usage
    costs = [a.run.cost_usd for a in numbered if a.run.cost_usd is not None]
    success = chosen.resolved if (task.check or baseline is not None) else (
        run.success and not chosen.keep_broken)  # fmt: skip
    return {
        "id": task.id, "outcome": run.outcome, "success": success, "check": chosen.check,
        "iterations": run.iterations, "usage": usage.to_dict(),
        "cost_usd": round(sum(costs), 6) if costs else None,
        "elapsed_seconds": round(elapsed, 3), "files_changed": chosen.files,
        "error": run.error, "base_commit": chosen.base_commit,
        "baseline": baseline, "resolved": chosen.resolved, "already_passing": False,
        "keep": list(task.keep), "keep_broken": list(chosen.keep_broken),
        "attempt": chosen.number, "attempts": listed,
        "patch_data": chosen.patch, "trajectory_data": chosen.trajectory,
        "attempt_files": attempt_files,
    }  # fmt: skip


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
        "baseline": None, "resolved": False, "already_passing": False, "keep": [],
        "keep_broken": [], "attempt": None, "attempts": [],
        "patch_data": b"", "trajectory_data": None, "attempt_files": {},
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
            permissions=settings.permissions, check=task.check or settings.check,
            check_retries=settings.check_retries, check_timeout=settings.check_timeout,
            lint=settings.lint, lint_commands=settings.lint_commands, hooks=settings.hooks,
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
    return check_record(tools.run_check(command, timeout), attempts=1)


def check_record(result: CommandResult, attempts: int) -> dict[str, Any]:
    """A check as results.jsonl, --output json and the trajectory record it."""
    check: dict[str, Any] = {
        "command": result.command, "passed": result.ok, "exit_code": result.exit_code,
        "output_tail": result.output_tail, "attempts": attempts,
        "seconds": round(result.seconds, 3), "timed_out": result.timed_out,
    }  # fmt: skip
    if result.sandbox_note:
        check["sandbox_note"] = result.sandbox_note
    return check
