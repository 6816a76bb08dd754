"""The batch driver: every task of a JSONL file run, its result written, the progress shown.

Each task runs in its own copy of its repository (worker.run_task), on threads or as Ray
tasks (executors.py). Every result is written the same way, appended to `DIR/results.jsonl` as
each finishes, so a second run with the same `DIR` resumes. The task file is read in tasks.py,
the copies made in workcopy.py.
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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from toy_agent.batch.environments import (
    ENGINES,
    EnvironmentError_,
    parse_env,
    remove_stale_containers,
)
from toy_agent.batch.executors import EXECUTORS, Executor
from toy_agent.batch.executors import provider_environment as provider_environment
from toy_agent.batch.swebench import SweOptions, load_instances_or_tasks, prediction
from toy_agent.batch.tasks import BatchError, Task, is_git_checkout, is_git_url
from toy_agent.batch.tasks import parse_tasks as parse_tasks
from toy_agent.batch.workcopy import release_worktrees
from toy_agent.batch.worker import build_llm
from toy_agent.batch.worker import run_task as run_task
from toy_agent.build import open_mcp
from toy_agent.events import json_text
from toy_agent.files import atomic_write
from toy_agent.llm import LlmConfigError
from toy_agent.mcp_config import McpError
from toy_agent.messages import Usage
from toy_agent.permissions import Permissions
from toy_agent.providers import PROVIDERS
from toy_agent.record import RESULTS_FILE as RESULTS_FILE
from toy_agent.record import jsonl_lines, results_lines
from toy_agent.sandbox import SandboxUnavailable, resolve_sandbox
from toy_agent.settings import RunSettings

# provider_environment, run_task and parse_tasks are importable from here as before the split.

logger = logging.getLogger(__name__)

PREDS_FILE, PREDS_JSON = "preds.jsonl", "preds.json"
RECORD_KEYS = (
    "id", "outcome", "success", "check", "iterations", "usage", "cost_usd", "elapsed_seconds",
    "files_changed", "patch", "trajectory", "error", "base_commit",
    "baseline", "resolved", "already_passing", "keep", "keep_broken", "attempt", "attempts",
    "tests", "log", "test_files", "metadata",
)  # fmt: skip
LOCK_FILE = ".lock"  # in DIR: held by the batch writing there (see ResultsFolder.claimed)
SCRATCH_PREFIX, OWNER_FILE = "toy-agent-batch-", "owner"  # a batch's scratch folder, its pid
RUNNING_SHOWN = 4  # running tasks named on the progress line
POLL_SECONDS = 0.5  # the progress line's clock: redrawn at least this often (and at once
# when a task starts, finishes, or its agent moves on a step)
DRAIN_SECONDS = 30.0  # after Ctrl-C, how long running tasks get to wind down


class BatchInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped the batch (run_batch raises it after the summary): a KeyboardInterrupt
    that carries the summary, so `--output json` can still print it."""

    def __init__(self, summary: BatchSummary):
        super().__init__()
        self.summary = summary


# ---------------------------------------------------------------------------- the results
class ResultsFolder:
    """DIR: results.jsonl (one line per finished task, appended as each finishes),
    patches/ID.diff and trajectories/ID.json. Only the driver writes here."""

    def __init__(
        self, out: str | os.PathLike[str], model_name: str = "", patch_exclude: Sequence[str] = ()
    ):
        self.path = Path(out)
        self.model_name, self.patch_exclude = model_name, tuple(patch_exclude)
        try:
            for folder in (self.path, self.path / "patches", self.path / "trajectories"):
                folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BatchError(f"cannot write --out {out}: {exc.strerror or exc}") from None
        if not os.access(self.path, os.W_OK):
            raise BatchError(f"cannot write --out {out}: not a writable folder")
        self.results = self.path / RESULTS_FILE

    @contextlib.contextmanager
    def claimed(self) -> Iterator[None]:
        """This batch's, while it runs: a second batch on the same folder would run every
        task again beside it and rewrite results.jsonl under its appends. The lock is the
        kernel's (flock): a batch that was killed holds none."""
        try:
            import fcntl
        except ImportError:  # Windows: no flock
            yield
            return
        with open(self.path / LOCK_FILE, "a+", encoding="utf-8") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.seek(0)
                holder = f.read().strip() or "another process"
                raise BatchError(f"--out {self.path} is in use by another batch ({holder}): "
                                 "wait for it, or give another --out") from None  # fmt: skip
            except OSError as exc:  # a file system without locks (some NFS): go on unlocked
                logger.debug("cannot lock %s: %s", f.name, exc)
            f.truncate(0)
            f.write(f"pid {os.getpid()}")
            f.flush()
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def load(self) -> dict[str, dict[str, Any]]:
        """The recorded results by id (the last line of an id wins). Unreadable lines, such as
        one cut short by a crash, are dropped from the file, so appends stay well-formed."""
        if not self.results.exists():
            return {}
        text = self.results.read_text(encoding="utf-8", errors="replace")
        records, bad = results_lines(text)
        if bad or (text and not text.endswith("\n")):
            logger.warning("%s: dropped %d unreadable line(s)", self.results, bad)
            self._rewrite(records.values())
        return records

    def forget(self, ids: Iterable[str]) -> None:
        """--redo: these ids' results go, so they run again (also if this run is stopped)."""
        drop = set(ids)
        self._rewrite(r for r in self.load().values() if r["id"] not in drop)
        preds = [p for p in self.predictions() if p.get("instance_id") not in drop]
        if (self.path / PREDS_FILE).exists():
            atomic_write(self.path / PREDS_FILE,
                         "".join(json_text(p, indent=None) + "\n" for p in preds))  # fmt: skip
            self._write_preds_json(preds)

    def predictions(self) -> list[dict[str, Any]]:
        """preds.jsonl's entries (a line cut short by a crash left out)."""
        try:
            lines = jsonl_lines((self.path / PREDS_FILE).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        preds = []
        for line in lines:
            with contextlib.suppress(ValueError):
                preds.append(json.loads(line))
        return [p for p in preds if isinstance(p, dict)]

    def predict(self, record: dict[str, Any], patch: bytes) -> None:
        """Append the task's prediction to preds.jsonl, and rewrite preds.json (the harness
        reads either), one entry per instance: the latest."""
        entry = prediction(record, patch.decode("utf-8", "replace"), self.model_name,
                           self.patch_exclude)  # fmt: skip
        with (self.path / PREDS_FILE).open("a", encoding="utf-8") as f:
            f.write(json_text(entry, indent=None) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self._write_preds_json(self.predictions())

    def complete_predictions(self, records: Iterable[dict[str, Any]]) -> None:
        """A prediction for each SWE-bench record that has none (a batch stopped between the
        two lines)."""
        have = {p.get("instance_id") for p in self.predictions()}
        for record in records:
            if record.get("test_files") is not None and record["id"] not in have:
                patch = (self.path / record["patch"]).read_bytes() if record.get("patch") else b""
                self.predict(record, patch)

    def _write_preds_json(self, preds: list[dict[str, Any]]) -> None:
        latest = {p["instance_id"]: p for p in preds if "instance_id" in p}
        atomic_write(self.path / PREDS_JSON, json_text(latest) + "\n")

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
        for name, data in (result.get("log_files") or {}).items():  # a grading's whole logs
            (self.path / name).parent.mkdir(exist_ok=True)
            atomic_write(self.path / name, data)
        record = {key: result.get(key) for key in RECORD_KEYS}
        record["patch"] = str(patch) if result["patch_data"] else None
        record["trajectory"] = str(trajectory) if result["trajectory_data"] is not None else None
        with self.results.open("a", encoding="utf-8") as f:
            f.write(json_text(record, indent=None) + "\n")
            f.flush()
            os.fsync(f.fileno())
        if result.get("test_files") is not None:  # a SWE-bench instance: its prediction
            self.predict(record, result["patch_data"] or b"")
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
    swe: SweOptions | None = None,
    model_name: str | None = None,
    patch_exclude: Sequence[str] = (),
) -> BatchSummary:
    """Run every task (a JSONL file, or dicts with the same keys) with results in `out`.

    Tasks already in `out/results.jsonl` are skipped unless `redo`. Everything is checked
    before any task runs (BatchError). `progress` gets the progress line (`live`, on a
    terminal) or one line per finished task, then the summary table; `quiet`: the summary
    only. Ctrl-C keeps every finished result, prints the summary and raises BatchInterrupted
    (a KeyboardInterrupt with the summary); the tasks it stopped are not recorded, so the next
    run does them. A killed batch's copies are found and removed when the next one starts.
    `max_total_cost` (USD): no new task starts once the finished ones cost that much.
    SWE-bench instances (see swebench.py) are found, picked and graded by `swe`; their
    predictions go to preds.jsonl under `model_name` (default: provider/model), without the
    files `patch_exclude`'s globs match."""
    settings = settings or RunSettings()
    source = Path(tasks) if isinstance(tasks, (str, os.PathLike)) else tasks
    task_list = load_instances_or_tasks(source, swe)
    if workers < 1:
        raise BatchError(f"workers must be at least 1, got {workers}")
    engine_class = EXECUTORS.get(executor)
    if engine_class is None:
        raise BatchError(f"unknown executor {executor!r}: use {' or '.join(EXECUTORS)}")
    if ray_address and not engine_class.takes_address:
        takes = " or ".join(name for name, cls in EXECUTORS.items() if cls.takes_address)
        raise BatchError(f"--ray-address needs --executor {takes}")
    if engine_class.runs_here:
        settings = _preflight_local(settings, task_list)
    else:
        _preflight_llm(settings)
    folder = ResultsFolder(out, model_name or _model_name(settings), patch_exclude)
    with folder.claimed():  # one batch at a time in a folder
        if redo:
            folder.forget(t.id for t in task_list)
        results = {k: v for k, v in folder.load().items() if k in {t.id for t in task_list}}
        folder.complete_predictions(results.values())
        todo = collections.deque(t for t in task_list if t.id not in results)
        earlier = len(task_list) - len(todo)  # results kept from an earlier run
        view = BatchView(progress, live=live, quiet=quiet)
        view.start(len(task_list), len(todo), workers)
        sources = {Path(t.repo) for t in task_list if not is_git_url(t.repo)}
        sources = {source for source in sources if is_git_checkout(source)}
        remove_stale_scratch(sources)
        owner = _process_identity(os.getpid())
        for kind in _environment_kinds(settings, task_list) & set(ENGINES):
            for name in remove_stale_containers(kind, lambda o: o == owner or _alive(o)):
                logger.warning("removed container %s, left by a batch that was killed", name)
        settings = replace(settings, batch=replace(settings.batch, owner=owner))
        scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX)).resolve()
        (scratch / OWNER_FILE).write_text(_process_identity(os.getpid()), encoding="utf-8")
        engine: Executor | None = None
        ran, interrupted = 0, False
        try:
            engine = engine_class(settings, scratch, workers, ray_address)

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
            for source in sources:
                release_worktrees(source, scratch)
            shutil.rmtree(scratch, ignore_errors=True)
        if interrupted:  # Ctrl-C may have come between a record's line and its count: the file
            ids = {t.id for t in task_list}  # is what the next run will see, so it is the truth
            results = {k: v for k, v in folder.load().items() if k in ids}
            ran = len(results) - earlier
        records = tuple(results[t.id] for t in task_list if t.id in results)
        summary = BatchSummary(records, len(task_list), ran, earlier, interrupted, str(out))
        view.summary(summary)
        if interrupted:
            raise BatchInterrupted(summary)
        return summary


def remove_stale_scratch(sources: Iterable[Path]) -> list[Path]:
    """The scratch folders of batches that were killed (`kill -9`, a crash: their process is
    gone), removed, and their worktrees unregistered from `sources`; returns what went."""
    removed = []
    for folder in Path(tempfile.gettempdir()).glob(SCRATCH_PREFIX + "*"):
        try:
            owner = (folder / OWNER_FILE).read_text(encoding="utf-8")
            pid = int(owner.split()[0])
        except (OSError, ValueError, IndexError):
            continue  # not ours to judge (a batch of an older version, or still starting)
        if _process_identity(pid) == owner:
            continue  # its batch is still running
        for source in sources:
            release_worktrees(source, folder.resolve())
        shutil.rmtree(folder, ignore_errors=True)
        logger.warning("removed %s, left by a batch that was killed", folder)
        removed.append(folder)
    return removed


def _alive(identity: str) -> bool:
    """Whether the process a container's or scratch folder's owner names is still running."""
    try:
        return _process_identity(int(identity.split()[0])) == identity
    except (ValueError, IndexError):
        return True  # not ours to judge


def _process_identity(pid: int) -> str:
    """`pid` and its start time (/proc/PID/stat's 22nd field): a pid reused by another process
    after a reboot or a wrap does not look like the batch that wrote it."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            started = f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""
    return f"{pid} {started}"


def _model_name(settings: RunSettings) -> str:
    """A prediction's model_name_or_path: provider/model, or "gold" for --gold."""
    if settings.batch.gold:
        return "gold"
    model = settings.llm
    row = PROVIDERS.get(model.provider)
    return f"{model.provider}/{model.model or (row.default_model if row else '')}"


def _preflight_llm(settings: RunSettings) -> None:
    """Build the client once: a missing key or a bad --replay fails the batch, not each task."""
    if settings.llm.make_llm is None and not settings.batch.gold:  # --gold runs no model
        try:
            build_llm(settings)
        except LlmConfigError as exc:
            raise BatchError(str(exc)) from None


def _environment_kinds(settings: RunSettings, tasks: Sequence[Task]) -> set[str]:
    """The kinds of the tasks' environments (host, rootfs, docker, podman), each checked."""
    kinds = set()
    for spec in {settings.for_task(t).batch.env or "host" for t in tasks}:
        try:
            kind, target = parse_env(spec)
        except EnvironmentError_ as exc:
            raise BatchError(str(exc)) from None
        if kind == "rootfs" and not Path(target).is_dir():
            raise BatchError(f"env {spec}: {target} is not a folder")
        kinds.add(kind)
    return kinds


def _preflight_local(settings: RunSettings, tasks: Sequence[Task]) -> RunSettings:
    """What would fail every task fails the batch now (exit 2): the provider settings, the
    sandbox, the MCP servers. Returns the settings with the sandbox resolved, so it is probed
    and warned about once, not once per task."""
    _preflight_llm(settings)
    tools = settings.tools
    try:
        wants_sandbox = (
            tools.allow_commands or bool(settings.agent.check) or any(t.check for t in tasks)
        )
        sandbox = resolve_sandbox(tools.sandbox, warn=wants_sandbox)
        mcp = open_mcp(tools)
        if mcp is not None:
            mcp.close()
    except McpError as exc:
        raise BatchError(str(exc)) from None
    except SandboxUnavailable as exc:
        raise BatchError(f"--sandbox bwrap: {exc}, or pass --sandbox off") from None
    kinds = _environment_kinds(settings, tasks)
    permissions = settings.agent.permissions
    if (tools.allow_commands and (tools.sandbox, sandbox) == ("auto", "off")
            and "host" in kinds):  # fmt: skip
        # No sandbox, and the user did not turn it off: commands ask, and a batch never
        # asks, so they are refused (Permissions.for_tools, decided here for every task).
        permissions = replace(permissions or Permissions(), sandboxed=False)
    return replace(
        settings,
        tools=replace(tools, sandbox=sandbox),
        agent=replace(settings.agent, permissions=permissions),
    )


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
            steps = engine.steps()
            view.update(len(running), [(t.id, steps.get(t.id)) for t in running.values()])
            collect(POLL_SECONDS)
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
        self._terminal = _Terminal(stream) if live and stream is not None else None
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

    def update(self, running: int, tasks: Sequence[tuple[str, int | None]] = ()) -> None:
        """Redraw the progress line; `tasks`: the running tasks' ids and their agents' steps."""
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
        names = [name if step is None else f"{name} step {step}" for name, step in tasks]
        if names:
            shown = ", ".join(names[:RUNNING_SHOWN])
            parts.append(shown + (f" +{len(names) - RUNNING_SHOWN}" if len(names) > RUNNING_SHOWN
                                  else ""))  # fmt: skip
        if self._terminal is not None:
            self._terminal.progress(" · ".join(parts))

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
        if self._terminal is not None:
            self._terminal.line(text)
        elif self.stream is not None:
            self.stream.write(text + "\n")
            self.stream.flush()


class _Terminal:
    """The progress line on a terminal, drawn by rich: erased and drawn again in place, cut
    to the width (a wrapped line could not be erased), and erased before each line above it."""

    def __init__(self, stream: TextIO):
        from rich.console import Console

        self.console = Console(
            file=stream, force_terminal=True, color_system=None, soft_wrap=True, markup=False,
            emoji=False, highlight=False,
        )  # fmt: skip

    def progress(self, text: str) -> None:
        from rich.text import Text

        line = Text(text)
        line.truncate(max(self.console.width - 1, 10), overflow="ellipsis")
        self._erase()
        self.console.print(line, end="")

    def line(self, text: str) -> None:
        self._erase()
        self.console.print(text)

    def _erase(self) -> None:
        from toy_agent.view import erase_line

        self.console.control(erase_line())


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
