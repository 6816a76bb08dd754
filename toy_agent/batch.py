"""The batch driver: every task of a JSONL file run, its result written, the progress shown.

Each task runs in its own copy of its repository (task_runner.run_task), on threads or as Ray
tasks (executors.py). Every result is written the same way, appended to `DIR/results.jsonl` as
each finishes, so a second run with the same `DIR` resumes. The task file is read in tasks.py,
the copies made in copies.py.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from toy_agent.copies import release_worktrees
from toy_agent.events import json_text
from toy_agent.executors import Executor, LocalExecutor, RayExecutor
from toy_agent.executors import provider_environment as provider_environment
from toy_agent.files import atomic_write
from toy_agent.llm import LlmConfigError
from toy_agent.mcp_config import McpError
from toy_agent.mcp_tools import McpTools
from toy_agent.messages import Usage
from toy_agent.permissions import Permissions
from toy_agent.sandbox import SandboxUnavailable, resolve_sandbox
from toy_agent.task_runner import RunSettings, StopSignal, build_llm
from toy_agent.task_runner import run_task as run_task
from toy_agent.tasks import BatchError, Task, _tasks, is_git_checkout, is_git_url, load_tasks
from toy_agent.tasks import parse_tasks as parse_tasks

# provider_environment, run_task and parse_tasks are importable from here as before the split.

logger = logging.getLogger(__name__)

RESULTS_FILE = "results.jsonl"
RECORD_KEYS = (
    "id", "outcome", "success", "check", "iterations", "usage", "cost_usd", "elapsed_seconds",
    "files_changed", "patch", "trajectory", "error", "base_commit",
    "baseline", "resolved", "already_passing", "keep", "keep_broken", "attempt", "attempts",
)  # fmt: skip
POLL_SECONDS = 0.5  # how often the driver wakes to redraw the progress line
DRAIN_SECONDS = 30.0  # after Ctrl-C, how long running tasks get to wind down


# ---------------------------------------------------------------------------- the results
class ResultsFolder:
    """DIR: results.jsonl (one line per finished task, appended as each finishes),
    patches/ID.diff and trajectories/ID.json. Only the driver writes here."""

    def __init__(self, out: str | os.PathLike[str]):
        self.path = Path(out)
        try:
            for folder in (self.path, self.path / "patches", self.path / "trajectories"):
                folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BatchError(f"cannot write --out {out}: {exc.strerror or exc}") from None
        if not os.access(self.path, os.W_OK):
            raise BatchError(f"cannot write --out {out}: not a writable folder")
        self.results = self.path / RESULTS_FILE

    def load(self) -> dict[str, dict[str, Any]]:
        """The recorded results by id (the last line of an id wins). Unreadable lines, such as
        one cut short by a crash, are dropped from the file, so appends stay well-formed."""
        if not self.results.exists():
            return {}
        text = self.results.read_text(encoding="utf-8", errors="replace")
        records: dict[str, dict[str, Any]] = {}
        bad = 0
        for line in text.splitlines():
            try:
                record = json.loads(line)
                records.pop(record["id"], None)
                records[record["id"]] = record
            except (ValueError, TypeError, KeyError):
                bad += line.strip() != ""
        if bad or (text and not text.endswith("\n")):
            logger.warning("%s: dropped %d unreadable line(s)", self.results, bad)
            self._rewrite(records.values())
        return records

    def forget(self, ids: Iterable[str]) -> None:
        """--redo: these ids' results go, so they run again (also if this run is stopped)."""
        drop = set(ids)
        self._rewrite(r for r in self.load().values() if r["id"] not in drop)

    def write(self, result: dict[str, Any]) -> dict[str, Any]:
        """Write the patch and trajectory, then append the record; returns the record."""
        task_id = result["id"]
        patch = Path("patches") / f"{task_id}.diff"
        trajectory = Path("trajectories") / f"{task_id}.json"
        if result["patch_data"]:  # whole or not at all, as the record that names it
            atomic_write(self.path / patch, result["patch_data"])
        else:
            (self.path / patch).unlink(missing_ok=True)  # an earlier run's would now be a lie
        if result["trajectory_data"] is not None:
            atomic_write(self.path / trajectory, json_text(result["trajectory_data"]) + "\n")
        else:
            (self.path / trajectory).unlink(missing_ok=True)
        for name, data in (result.get("attempt_files") or {}).items():  # each attempt's own
            atomic_write(self.path / name, data)
        record = {key: result.get(key) for key in RECORD_KEYS}
        record["patch"] = str(patch) if result["patch_data"] else None
        record["trajectory"] = str(trajectory) if result["trajectory_data"] is not None else None
        with self.results.open("a", encoding="utf-8") as f:
            f.write(json_text(record, indent=None) + "\n")
            f.flush()
            os.fsync(f.fileno())
        return record

    def _rewrite(self, records: Iterable[dict[str, Any]]) -> None:
        atomic_write(self.results, "".join(json_text(r, indent=None) + "\n" for r in records))


# ------------------------------------------------------------------------------ the driver
@dataclass(frozen=True)
class BatchSummary:
    """How the batch stands: the result of every task of the file that has one."""

    records: tuple[dict[str, Any], ...]
    total: int
    ran: int  # tasks run (and recorded) by this call
    skipped: int  # tasks whose earlier result was kept
    interrupted: bool = False
    out: str = ""

    @property
    def passed(self) -> int:
        return sum(1 for r in self.records if r["success"])

    @property
    def failed(self) -> int:
        return len(self.records) - self.passed

    @property
    def not_run(self) -> int:
        return self.total - len(self.records)

    @property
    def exit_code(self) -> int:
        """0: every task completed and every check passed; 1 otherwise; 130: interrupted."""
        if self.interrupted:
            return 130
        return 0 if self.passed == self.total else 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total, "passed": self.passed, "failed": self.failed,
            "not_run": self.not_run, "ran": self.ran, "skipped": self.skipped,
            "interrupted": self.interrupted, "usage": _total_usage(self.records).to_dict(),
            "cost_usd": _total_cost(self.records),
            "results": str(Path(self.out) / RESULTS_FILE),
        }  # fmt: skip


def run_batch(
    tasks: str | os.PathLike[str] | Sequence[Mapping[str, Any]],
    out: str | os.PathLike[str],
    settings: RunSettings | None = None,
    *,
    workers: int = 1,
    redo: bool = False,
    executor: str = "local",
    ray_address: str | None = None,
    progress: TextIO | None = None,
    live: bool = False,
    quiet: bool = False,
    max_total_cost: float | None = None,
) -> BatchSummary:
    """Run every task (a JSONL file, or dicts with the same keys) with results in `out`.

    Tasks already in `out/results.jsonl` are skipped unless `redo`. Everything is checked
    before any task runs (BatchError). `progress` gets the progress line (`live`, on a
    terminal) or one line per finished task, then the summary table; `quiet`: the summary
    only. Ctrl-C keeps every finished result, prints the summary and re-raises
    KeyboardInterrupt; the tasks it stopped are not recorded, so the next run does them.
    `max_total_cost` (USD): no new task starts once the finished ones cost that much."""
    settings = settings or RunSettings()
    if isinstance(tasks, (str, os.PathLike)):
        task_list = load_tasks(tasks)
    else:
        task_list = _tasks(enumerate(tasks, 1), Path.cwd(), "tasks")
    if workers < 1:
        raise BatchError(f"workers must be at least 1, got {workers}")
    if executor not in ("local", "ray"):
        raise BatchError(f"unknown executor {executor!r}: use local or ray")
    if ray_address and executor != "ray":
        raise BatchError("--ray-address needs --executor ray")
    if executor == "local":
        settings = _preflight_local(settings, task_list)
    else:
        _preflight_llm(settings)
    folder = ResultsFolder(out)
    if redo:
        folder.forget(t.id for t in task_list)
    results = {k: v for k, v in folder.load().items() if k in {t.id for t in task_list}}
    todo = collections.deque(t for t in task_list if t.id not in results)
    view = BatchView(progress, live=live, quiet=quiet)
    view.start(len(task_list), len(todo), workers)
    scratch = Path(tempfile.mkdtemp(prefix="toy-agent-batch-")).resolve()
    engine: Executor | None = None
    ran, interrupted = 0, False
    try:
        if executor == "ray":
            engine = RayExecutor(settings, scratch, workers, ray_address)
        else:
            engine = LocalExecutor(settings, scratch, workers, StopSignal())

        def record(result: dict[str, Any]) -> None:
            nonlocal ran
            results[result["id"]] = folder.write(result)
            ran += 1
            view.finished(results[result["id"]])

        def budget_left() -> float | None:
            """What a task's attempts may still spend of --max-total-cost."""
            if max_total_cost is None:
                return None
            return max_total_cost - sum(r.get("cost_usd") or 0.0 for r in results.values())

        def over_budget() -> bool:
            left = budget_left()
            return left is not None and left <= 0

        interrupted = _drive(engine, todo, workers, record, view, over_budget, budget_left)
    finally:
        if engine is not None:
            engine.close()
        for source in {Path(t.repo) for t in task_list if not is_git_url(t.repo)}:
            if is_git_checkout(source):
                release_worktrees(source, scratch)
        shutil.rmtree(scratch, ignore_errors=True)
    records = tuple(results[t.id] for t in task_list if t.id in results)
    summary = BatchSummary(records, len(task_list), ran, len(task_list) - len(todo) - ran,
                           interrupted, str(out))  # fmt: skip
    view.summary(summary)
    if interrupted:
        raise KeyboardInterrupt
    return summary


def _preflight_llm(settings: RunSettings) -> None:
    """Build the client once: a missing key or a bad --replay fails the batch, not each task."""
    if settings.make_llm is None:
        try:
            build_llm(settings)
        except LlmConfigError as exc:
            raise BatchError(str(exc)) from None


def _preflight_local(settings: RunSettings, tasks: Sequence[Task]) -> RunSettings:
    """What would fail every task fails the batch now (exit 2): the provider settings, the
    sandbox, the MCP servers. Returns the settings with the sandbox resolved, so it is probed
    and warned about once, not once per task."""
    _preflight_llm(settings)
    try:
        wants_sandbox = (
            settings.allow_commands or bool(settings.check) or any(t.check for t in tasks)
        )
        sandbox = resolve_sandbox(settings.sandbox, warn=wants_sandbox)
        if settings.mcp_servers:
            McpTools(list(settings.mcp_servers), timeout=settings.mcp_timeout).close()
    except McpError as exc:
        raise BatchError(str(exc)) from None
    except SandboxUnavailable as exc:
        raise BatchError(f"--sandbox bwrap: {exc}, or pass --sandbox off") from None
    permissions = settings.permissions
    if settings.allow_commands and (settings.sandbox, sandbox) == ("auto", "off"):
        # No sandbox, and the user did not turn it off: commands ask, and a batch never
        # asks, so they are refused (Permissions.for_tools, decided here for every task).
        permissions = replace(permissions or Permissions(), sandboxed=False)
    return replace(settings, sandbox=sandbox, permissions=permissions)


def _drive(
    engine: Executor,
    todo: collections.deque[Task],
    workers: int,
    record: Callable[[dict[str, Any]], None],
    view: BatchView,
    over_budget: Callable[[], bool] = lambda: False,
    budget_left: Callable[[], float | None] = lambda: None,
) -> bool:
    """Keep `workers` tasks running until none is left, or no new one may start past the
    total cost; True when stopped by Ctrl-C."""
    running: dict[Any, Task] = {}

    def collect(timeout: float) -> None:
        for handle, result in engine.finished(list(running), timeout):
            running.pop(handle)
            if result["outcome"] != "cancelled":
                record(result)

    try:
        while todo or running:
            if todo and over_budget():
                logger.warning("--max-total-cost reached: %d task(s) not started", len(todo))
                todo.clear()  # not recorded: a later run with a higher limit does them
            while todo and len(running) < workers:
                task = todo.popleft()
                running[engine.submit(replace(task, budget=budget_left()))] = task
            collect(POLL_SECONDS)
            view.update(len(running))
        return False
    except KeyboardInterrupt:
        view.stopping(len(running))
        with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C: stop waiting
            collect(0)  # what finished before the stop still counts
            engine.cancel(list(running))
            deadline = time.monotonic() + DRAIN_SECONDS
            while running and time.monotonic() < deadline:
                for handle, _ in engine.finished(list(running), POLL_SECONDS):
                    running.pop(handle)  # stopped mid-way: not recorded, so it reruns
        return True


# ------------------------------------------------------------------------------- the view
class BatchView:
    """On a terminal a progress line (done/total, running, passed/failed, tokens, cost, ETA)
    with a line above it per finished task; elsewhere just those lines; then a summary."""

    def __init__(self, stream: TextIO | None, *, live: bool = False, quiet: bool = False):
        self.stream, self.live, self.quiet = stream, live, quiet
        self.total = self.done = self.to_run = self.finished_now = 0
        self.passed = self.failed = self.tokens = 0
        self.cost: float | None = None
        self.started = time.monotonic()

    def start(self, total: int, to_run: int, workers: int) -> None:
        self.total, self.to_run, self.done = total, to_run, total - to_run
        self.started = time.monotonic()
        earlier = f" ({self.done} of {total} already have results)" if self.done else ""
        self._line(f"{to_run} task{'s' * (to_run != 1)} to run with {workers} "
                   f"worker{'s' * (workers != 1)}{earlier}")  # fmt: skip

    def finished(self, record: dict[str, Any]) -> None:
        self.done += 1
        self.finished_now += 1
        self.passed += record["success"]
        self.failed += not record["success"]
        self.tokens += _tokens(record)
        if record.get("cost_usd") is not None:
            self.cost = (self.cost or 0.0) + record["cost_usd"]
        if not self.quiet:
            self._line(f"[{self.done}/{self.total}] {_task_line(record)}")

    def update(self, running: int) -> None:
        if not self.live or self.stream is None:
            return
        parts = [f"{self.done}/{self.total} done", f"{running} running",
                 f"✓ {self.passed} ✗ {self.failed}", f"{_count(self.tokens)} tokens"]  # fmt: skip
        if self.cost is not None:
            parts.append(f"${self.cost:.2f}")
        elapsed = time.monotonic() - self.started
        parts.append(_duration(elapsed))
        if self.finished_now and self.to_run > self.finished_now:
            eta = elapsed / self.finished_now * (self.to_run - self.finished_now)
            parts.append(f"ETA {_duration(eta)}")
        self.stream.write("\r\x1b[K" + " · ".join(parts))
        self.stream.flush()

    def stopping(self, running: int) -> None:
        if running:
            self._line(f"stopping: {running} running task{'s' * (running != 1)} will not be "
                       "recorded and run again next time")  # fmt: skip

    def summary(self, summary: BatchSummary) -> None:
        if self.stream is None:
            return
        rows = [("id", "outcome", "check", "iterations", "tokens", "time")]
        for r in summary.records:
            verdict = _verdict(r)
            rows.append((r["id"], r["outcome"], verdict, str(r["iterations"]),
                         _count(_tokens(r)), _duration(r["elapsed_seconds"])))  # fmt: skip
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
                 for row in rows]  # fmt: skip
        cost, usage = _total_cost(summary.records), _total_usage(summary.records)
        totals = [f"{summary.total} tasks: {summary.passed} passed, {summary.failed} failed"
                  + (f", {summary.not_run} not run" if summary.not_run else ""),
                  f"{_count(usage.input_tokens + usage.output_tokens)} tokens",
                  f"${cost:.2f}" if cost is not None else "cost unknown",
                  _duration(time.monotonic() - self.started)]  # fmt: skip
        if summary.skipped:
            totals.append(f"{summary.skipped} from an earlier run")
        self._line("\n".join(lines))
        self._line(" · ".join(totals) + f"\nresults: {Path(summary.out) / RESULTS_FILE}")

    def _line(self, text: str) -> None:
        if self.stream is None:
            return
        self.stream.write(("\r\x1b[K" if self.live else "") + text + "\n")
        self.stream.flush()


def _task_line(record: dict[str, Any]) -> str:
    check = record["check"]
    parts = [("✓ " if record["success"] else "✗ ") + record["id"], record["outcome"]]
    if record.get("already_passing"):
        parts.append("the check already passed before the agent started")
    elif check is not None:
        parts.append("check passed" if check["passed"] else
                     f"check failed (exit {check['exit_code']})")  # fmt: skip
    if record.get("keep_broken"):
        parts.append(f"broke keep: {', '.join(record['keep_broken'])}")
    tries = len(record.get("attempts") or ())
    if tries > 1:
        parts.append(f"attempt {record.get('attempt')} of {tries}")
    n = record["iterations"]
    parts += [f"{n} iteration{'s' * (n != 1)}", f"{_count(_tokens(record))} tokens",
              _duration(record["elapsed_seconds"])]  # fmt: skip
    if record["outcome"] == "error" and record.get("error"):
        parts.append(record["error"])
    return "  ".join(parts)


def _verdict(record: dict[str, Any]) -> str:
    """The summary table's check column: resolved means failing before, passing after."""
    check = record["check"]
    if record.get("already_passing"):
        return "already passing"
    if check is None:
        return "-"
    if record.get("keep_broken"):
        return "broke keep"
    if record.get("baseline") is not None:
        return "resolved" if record.get("resolved") else "not resolved"
    return "passed" if check["passed"] else "failed"


def _tokens(record: dict[str, Any]) -> int:
    usage = record.get("usage") or {}
    return int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))


def _total_usage(records: Iterable[dict[str, Any]]) -> Usage:
    total = Usage()
    for r in records:
        total += Usage.from_dict(r.get("usage"))
    return total


def _total_cost(records: Iterable[dict[str, Any]]) -> float | None:
    costs = [r["cost_usd"] for r in records if r.get("cost_usd") is not None]
    return round(sum(costs), 6) if costs else None


def _count(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f}M"
    return f"{n / 1000:.1f}k" if n >= 1000 else str(n)


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"
