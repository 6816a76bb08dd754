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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from toy_agent.agent import ReactAgent, RunResult
from toy_agent.batch.environments import Environment, EnvironmentError_, image_for, parse_env
from toy_agent.batch.swebench import apply_patch, grade, patch_files
from toy_agent.batch.tasks import Instance, Task
from toy_agent.batch.workcopy import (
    Copy,
    GitError,
    collect_patch,
    prepare_copy,
    rebase_copy,
    remove_copy,
)
from toy_agent.build import build_agent, build_tools, open_mcp
from toy_agent.build import build_llm as build_model_client
from toy_agent.events import TrajectoryRecorder, json_text
from toy_agent.llm import LlmClient, LlmConfigError
from toy_agent.mcp_config import McpError
from toy_agent.messages import CommandResult, Usage
from toy_agent.redaction import Redactor
from toy_agent.sandbox import SandboxUnavailable, kill_live_groups
from toy_agent.settings import AgentSettings, RunSettings
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


DEFAULT_CHECK_TIMEOUT = AgentSettings.check_timeout  # its old home


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
        self.steps: dict[str, int] = {}  # a running task's id -> its agent's step, for the view
        # Set when a task moves on a step or ends: the driver wakes to redraw, and clears it.
        self.changed = threading.Event()

    def set(self) -> None:
        self._event.set()
        with self._lock:
            agents = list(self._agents)
        for agent in agents:
            agent.cancel()
        kill_live_groups()

    def is_set(self) -> bool:
        return self._event.is_set()

    def step(self, task_id: str, iteration: int) -> None:
        """The task's agent is at step `iteration` (called for each of its events)."""
        if self.steps.get(task_id) != iteration:
            self.steps[task_id] = iteration
            self.changed.set()

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
    settings = settings.for_task(task)
    check_command = None if task.instance else settings.agent.check
    limit = settings.batch.attempts
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
    except (GitError, OSError, McpError, LlmConfigError, SandboxUnavailable,
            EnvironmentError_) as exc:  # fmt: skip
        if stopped():
            return {"id": task.id, "outcome": "cancelled"}
        error = _redactor(credentials).redact(str(exc))  # a clone's URL may carry a token
        return failed_result(task.id, error, time.monotonic() - started
                             ) | instance_fields(task, {})  # fmt: skip
    finally:
        _TASK_ID.reset(named)
        if stop is not None:
            stop.steps.pop(task.id, None)


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
    logs: dict[str, str] = field(default_factory=dict)  # a SWE-bench grading's full logs

    def to_dict(self, files: Mapping[str, str]) -> dict[str, Any]:
        check = self.check
        return {
            "attempt": self.number, "outcome": _outcome(self.run), "resolved": self.resolved,
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
    kind, target = parse_env(settings.batch.env or "host")
    here, timeout = settings.tools, settings.agent.check_timeout
    environment = Environment(kind, image_for(target, task.id), here.sandbox_network,
                              owner=settings.batch.owner)  # fmt: skip
    try:
        copy = prepare_copy(task, scratch)
        redactor = _redactor(credentials)
        environment.start(copy.path, task.id)
        shared = [str(copy.shared_objects)] if copy.shared_objects else []
        tool_settings = replace(here, sandbox=here.sandbox if kind == "host" else "off",
                                sandbox_read=(*here.sandbox_read, *shared))  # fmt: skip
        tools = build_tools(tool_settings, copy.path, redactor,
                            None if kind == "host" else environment)  # fmt: skip
        if settings.batch.setup:
            copy = _set_up(copy, settings.batch.setup, tools, timeout)
        before = None
        logs: dict[str, str] = {}
        instance = task.instance
        if baseline:
            if instance is not None:
                graded = grade(copy, instance, tools, timeout, meta)
                before, logs["baseline"] = graded.check, graded.log
            elif check_command:
                before = run_check(check_command, tools, timeout)
            kept = tuple(c for c in task.keep
                         if tools.run_check(c, timeout).ok)  # fmt: skip
            if before is not None and before["passed"]:
                return _Attempt(0, RunResult("completed", 0, 0), b"", [], None, (), None,
                                copy.base_commit, False, before, kept, logs)  # fmt: skip
            if before is not None or task.keep:  # what the checks wrote (caches, bytecode)
                copy = rebase_copy(copy)  # is not the agent's work
        trajectory_file = meta / "trajectory.json"
        if settings.batch.gold and instance is not None:
            run = _apply_gold(copy, instance, meta)
        else:
            run = _run_agent(task, settings, tools, redactor, trajectory_file, stop, credentials)
        if stop and stop.is_set():
            return None
        if run.outcome == "cancelled":  # only --task-timeout cancels a run that goes on
            run = replace(
                run, error=f"--task-timeout: stopped after {settings.batch.task_timeout:g}s"
            )
        patch, files = collect_patch(copy)
        check = run.check if run.outcome in ("completed", "check_failed") else None
        if instance is not None:  # graded as the harness grades, whatever the outcome
            graded = grade(copy, instance, tools, timeout, meta)
            check, logs["after"] = graded.check, graded.log
        elif check is None and check_command:  # the run stopped without a verdict: one now
            check = run_check(check_command, tools, timeout)
        broken = tuple(c for c in kept if not tools.run_check(c, timeout).ok)
        if stop and stop.is_set():  # the stop killed a check: its verdict means nothing
            return None
        trajectory = (json.loads(trajectory_file.read_text(encoding="utf-8"))
                      if trajectory_file.exists() else None)  # fmt: skip
        passed = run.success if check is None else check["passed"]
        resolved = passed and not broken and (before is None or not before["passed"])
        return _Attempt(0, run, patch, files, check, broken, trajectory, copy.base_commit,
                        resolved, before, kept, logs)  # fmt: skip
    finally:
        environment.stop()
        if copy is not None:
            remove_copy(copy)
        shutil.rmtree(meta, ignore_errors=True)


def _set_up(copy: Copy, command: str, tools: CodeRepositoryTools, timeout: float) -> Copy:
    """A task's `setup` (a virtualenv and an install, say), run in the copy like a check before
    anything else; what it changed becomes the patch's base, so it is not in the patch. A
    setup that fails ends the task (outcome error, with the end of its output)."""
    result = tools.run_check(command, timeout)
    if not result.ok:
        how = "timed out" if result.timed_out else f"exited with {result.exit_code}"
        tail = result.output_tail.strip().splitlines()[-5:]
        raise GitError(f"the task's setup {how}: {command}" + "".join(f"\n{t}" for t in tail))
    return rebase_copy(copy)


def _apply_gold(copy: Copy, instance: Instance, meta: Path) -> RunResult:
    """--gold: the instance's own patch, as the agent's work, to prove the environment (one
    that is missing or does not apply ends the task with outcome error)."""
    if not instance.patch:
        raise GitError("--gold: the instance has no 'patch'")
    failure = apply_patch(copy, instance.patch, meta)
    if failure is not None:
        raise GitError(f"--gold: the instance's patch did not apply: {failure}")
    return RunResult("completed", 0, 0, result="the instance's gold patch, applied")


def instance_fields(task: Task, logs: Mapping[str, str]) -> dict[str, Any]:
    """What a SWE-bench task's record adds: the files its test_patch touches (left out of the
    prediction), its other fields, and its logs (path -> text, written to DIR/logs/)."""
    if task.instance is None:
        return {}
    names = {"baseline": f"logs/{task.id}.baseline.log", "after": f"logs/{task.id}.log"}
    return {
        "test_files": [path for path, _ in patch_files(task.instance.test_patch)],
        "metadata": task.instance.metadata,
        "log": names["after"] if "after" in logs else None,
        "log_files": {names[k]: v.encode() for k, v in logs.items()},
    }  # fmt: skip


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
        "tests": baseline.get("tests"), **instance_fields(task, attempt.logs),
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
            if a.trajectory is not None:
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
        "id": task.id, "outcome": _outcome(run),
        "success": success, "check": chosen.check,
        "iterations": run.iterations, "usage": usage.to_dict(),
        "cost_usd": round(sum(costs), 6) if costs else None,
        "elapsed_seconds": round(elapsed, 3), "files_changed": chosen.files,
        "error": run.error, "base_commit": chosen.base_commit,
        "baseline": baseline, "resolved": chosen.resolved, "already_passing": False,
        "keep": list(task.keep), "keep_broken": list(chosen.keep_broken),
        "attempt": chosen.number, "attempts": listed,
        "patch_data": chosen.patch, "trajectory_data": chosen.trajectory,
        "attempt_files": attempt_files, "tests": (chosen.check or {}).get("tests"),
        **instance_fields(task, {**numbered[0].logs, **chosen.logs}),
    }  # fmt: skip


def _outcome(run: RunResult) -> str:
    """A record's outcome: the agent's, or "timeout" for a run --task-timeout cancelled (a run
    the batch's stop cancelled is never recorded)."""
    return "timeout" if run.outcome == "cancelled" else run.outcome


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
    """The task's agent (`settings` are already the task's), built as every run's is, run
    until it ends, the batch stops it, or --task-timeout cancels it."""
    llm = build_llm(settings, credentials)
    with open_mcp(settings.tools, redactor) or contextlib.nullcontext() as mcp:
        # The second subscriber closes a race: a stop set just before run_result() began
        # (which clears the agent's cancel flag) still cancels it at its first event.
        agent = build_agent(
            settings, llm, tools, mcp, redactor=redactor,
            subscribers=[TrajectoryRecorder(trajectory, redactor.redact_obj),
                         lambda event: agent.cancel() if stop and stop.is_set() else None,
                         lambda event: _count_step(stop, task.id, event)],
        )  # fmt: skip
        limit = settings.batch.task_timeout
        timer = threading.Timer(limit or 0, agent.cancel)
        timer.daemon = True
        if limit:
            timer.start()
        try:
            with stop.attached(agent) if stop else contextlib.nullcontext():
                result = agent.run_result(task.task)
        finally:
            timer.cancel()
        if result.outcome == "provider_error":  # the agent leaves reporting it to its caller
            logger.warning("LLM call failed: %s", result.error)
        return result


def _count_step(stop: StopSignal | None, task_id: str, event: Any) -> None:
    if stop is not None and isinstance(getattr(event, "iteration", None), int):
        stop.step(task_id, event.iteration)


def build_llm(settings: RunSettings, credentials: Credentials | None = None) -> LlmClient:
    """The task's model client (toy_agent.build's): keys and base URLs come from
    `credentials` when given (a Ray worker's), else from this environment."""
    environ = os.environ if credentials is None else credentials.environ()
    return build_model_client(settings.llm, environ)


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
