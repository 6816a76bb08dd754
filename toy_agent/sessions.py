"""Sessions: each conversation saved as it goes, so a later run can continue it, and each
run's file changes, so they can be reverted.

A session is one JSON file, `ID.json`, under `$XDG_STATE_HOME/toy-agent/sessions/` (default
`~/.local/state/toy-agent/sessions/`), rewritten atomically after every step: the repository's
absolute path, the conversation (secrets redacted, as in a trajectory), and one record per run
(task, outcome, usage, cost). What undo needs lives beside it in `undo/ID.json`: for every run
that changed files, each file's bytes from before the run first changed it (not redacted: they
are written back) and a hash of its content after the run, to refuse an undo when the file
changed since. Both files are private to the user (mode 0600, folders 0700).

Before each step that can change files (an edit, a command, a user's tool made with
changes_files=True), the work tree is snapshotted into the session's private git store
(`checkpoints/ID/`, see toy_agent.checkpoints), and once more when the run ends: undo puts
back everything between a run's first snapshot and its last, commands' changes included, and
/rewind the files as they were after any step. Each step's record says how long the
conversation was after it. Without git, or for sessions saved before checkpoints, undo falls
back on the file tools' own backups: the run's `toy_agent.events.ChangeTracker` reads each
file once before its first change (also for the run's diff and /diff).

Old sessions are pruned when a run first saves: a session goes (with its undo data) once it
is neither among the newest `Retention.keep` (default 200) nor younger than `Retention.days`
(default 30). `toy-agent sessions` lists, shows and deletes them (`sessions_command`).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import re
import secrets
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from toy_agent.budget import CHARS_PER_TOKEN, cap_text, estimate_tokens
from toy_agent.checkpoints import (
    REPO_FILE,
    CheckpointError,
    Checkpoints,
    Snapshot,
    git_available,
)
from toy_agent.diffs import unified_diff
from toy_agent.events import (
    ChangeTracker,
    Event,
    RunFinished,
    RunStarted,
    StepFinished,
    ToolStarted,
    json_text,
)
from toy_agent.files import DIFF_MAX_BYTES, ToolError, atomic_write, diff_text, file_state, write_at
from toy_agent.messages import Message, Usage, visible
from toy_agent.record import SESSION_FORMAT as SESSION_FORMAT
from toy_agent.record import (
    TRAJECTORY_FORMAT,
    RecordError,
    observation_dict,
    remap_after_compaction,
    session_from_dict,
    trajectory_from_dict,
    undo_from_dict,
    without_note,
)
from toy_agent.tools import CodeRepositoryTools

if TYPE_CHECKING:
    from toy_agent.llm import LlmClient
    from toy_agent.pricing import CostMeter

DEFAULT_KEEP, DEFAULT_KEEP_DAYS = 200, 30
UNDO_FORMAT = "toy_agent.undo/1"
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


NOTE_START = "(Note: "  # what the model is told with the next task (after an undo)


def run_task(run: dict[str, Any]) -> str:
    """A run's task as the user gave it. A run saved before runs kept their `start` may hold
    the note the model got with it, which is taken off (record.without_note)."""
    task = str(run.get("task") or "")
    return task if "start" in run else without_note(task)


class SessionError(Exception):
    """A session that cannot be found, read or written (a usage error at the command line)."""


class UndoRefused(SessionError):
    """Undo would overwrite something: a file changed since the run, or cannot be restored."""


class NothingToUndo(SessionError):
    pass


def is_session_id(text: str) -> bool:
    return _ID.fullmatch(text) is not None


def state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where sessions live: $XDG_STATE_HOME/toy-agent/sessions (an absolute XDG_STATE_HOME
    only, as the XDG spec says), else ~/.local/state/toy-agent/sessions."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_STATE_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path.home() / ".local" / "state"
    return root / "toy-agent" / "sessions"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


@dataclass
class Session:
    """One conversation with one repository. `note` is told to the model with the next task
    (after an undo, that the files were reverted)."""

    id: str
    repo: str
    created_at: str = field(default_factory=_now)
    updated_at: str = ""
    messages: list[dict[str, Any]] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    compactions: list[dict[str, Any]] = field(default_factory=list)  # one per /compact
    checkpoint: dict[str, Any] | None = None  # the latest snapshot: how our steps left the tree

    def history(self) -> list[Message]:
        return [Message.from_dict(m) for m in self.messages]

    def spending(self) -> tuple[Usage, float | None, int]:
        """Tokens and dollars of every run and /compact so far, and how many of them had no
        price (their tokens count, their cost cannot)."""
        spent = [*self.runs, *self.compactions]
        usage = sum((Usage(**r["usage"]) for r in spent if isinstance(r.get("usage"), dict)),
                    Usage())  # fmt: skip
        costs = [r["cost_usd"] for r in spent if r.get("cost_usd") is not None]
        unpriced = sum(1 for r in spent if r.get("usage") and r.get("cost_usd") is None)
        return usage, (round(sum(costs), 6) if costs else None), unpriced

    def to_dict(self) -> dict[str, Any]:
        usage, cost, _ = self.spending()
        return {
            "format": SESSION_FORMAT, "id": self.id, "repo": self.repo,
            "created_at": self.created_at, "updated_at": self.updated_at,
            "settings": self.settings, "usage": usage.to_dict(), "cost_usd": cost,
            "note": self.note, "runs": self.runs, "compactions": self.compactions,
            "checkpoint": self.checkpoint, "messages": self.messages,
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: Any, session_id: str, source: str = "") -> Session:
        """The session a file holds, checked by record.session_from_dict (raises its
        RecordError, naming the field), here rather than mid-run."""
        session_from_dict(data, source or session_id)
        messages, runs = data.get("messages"), data.get("runs")
        compactions = data.get("compactions")
        return cls(
            session_id, data["repo"], str(data.get("created_at", "")),
            str(data.get("updated_at", "")), messages, runs if isinstance(runs, list) else [],
            dict(data.get("settings") or {}), str(data.get("note") or ""),
            compactions if isinstance(compactions, list) else [],
            data.get("checkpoint") if isinstance(data.get("checkpoint"), dict) else None,
        )  # fmt: skip


@dataclass(frozen=True)
class Unreadable:
    """A session file that cannot be read. It is listed as such, and --continue and --undo
    never step over it to an older session: it may be the latest of their repository."""

    path: Path
    mtime_ns: int
    error: str  # one line naming the file, as --resume ID says it
    repo: str | None  # the repository it still names; None when that cannot be told

    def refusal(self, repo: Path, flag: str) -> str:
        return (f"{self.error}; it may be the latest session of {repo}, so {flag} stops: see "
                f"`toy-agent sessions`, remove it (`toy-agent sessions delete {self.path.stem}`), "
                f"or name a session with --resume ID")  # fmt: skip


def _repo_named(path: Path) -> str | None:
    """The repository an unreadable session file names, when its text still says: toy-agent
    writes `repo` near the start, so a cut-off file keeps it. None when it cannot be told."""
    try:
        text = path.read_text("utf-8", errors="replace")
        data = json.loads(text)
    except OSError:
        return None
    except ValueError:
        found = re.search(r'"repo"\s*:\s*', text)
        try:
            data = {"repo": json.JSONDecoder().raw_decode(text, found.end())[0]} if found else {}
        except ValueError:
            return None
    repo = data.get("repo") if isinstance(data, dict) else None
    return repo if isinstance(repo, str) else None


@dataclass(frozen=True)
class Retention:
    """Which old sessions are kept: the newest `keep`, and any saved in the last `days`."""

    keep: int = DEFAULT_KEEP
    days: float = DEFAULT_KEEP_DAYS


class SessionStore:
    """The session files in one folder (default: `state_dir()`). With a `retention`, the first
    save prunes the sessions it does not keep (once per store: a save after every step stays
    cheap)."""

    def __init__(self, root: Path | None = None, retention: Retention | None = None):
        self.root = root if root is not None else state_dir()
        self.retention = retention
        self._pruned = retention is None

    def new(self, repo: Path) -> Session:
        session_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
        return Session(session_id, str(repo))

    def path(self, session: Session) -> Path:
        return self.root / f"{session.id}.json"

    def save(self, session: Session, undo: dict[str, list[dict[str, Any]]] | None = None) -> None:
        """Write the session (and its undo data, when given) atomically. Raises OSError."""
        session.updated_at = _now()
        _write_private(self.path(session), json_text(session.to_dict()))
        if undo:
            data = {"format": UNDO_FORMAT, "session": session.id, "runs": undo}
            _write_private(self.root / "undo" / f"{session.id}.json", json.dumps(data))
        if not self._pruned and self.retention is not None:
            self._pruned = True
            self.prune(self.retention, spare=session.id)

    def prune(self, retention: Retention, *, spare: str = "") -> list[str]:
        """Delete the sessions `retention` does not keep (never `spare`), and undo data whose
        session is gone; returns the ids deleted. Goes by the files' times: nothing is read."""
        cutoff = time.time() - retention.days * 86400
        try:
            files = sorted(((p.stat().st_mtime, p.stem) for p in self.root.glob("*.json")),
                           reverse=True)  # fmt: skip
            undo = [(p.stat().st_mtime, p.stem) for p in (self.root / "undo").glob("*.json")]
            undo += [(p.stat().st_mtime, p.name) for p in (self.root / "checkpoints").glob("*")]
        except OSError:
            return []
        kept = {stem for _, stem in files[: retention.keep]}
        old = [stem for mtime, stem in files if mtime < cutoff and stem not in kept]
        known = {stem for _, stem in files}
        old += [stem for mtime, stem in undo if mtime < cutoff and stem not in known]
        deleted = []
        for session_id in old:
            if session_id != spare and _ID.fullmatch(session_id):
                with contextlib.suppress(OSError):
                    self.delete(session_id)
                    deleted.append(session_id)
        return deleted

    def checkpoints(self, session: Session) -> Checkpoints | None:
        """The session's private snapshot store (None without git)."""
        if not git_available() or not session.repo:
            return None
        store = self.root / "checkpoints" / session.id
        seed = None if store.exists() else self._latest_store(session.repo)
        return Checkpoints(store, Path(session.repo), seed)

    def _latest_store(self, repo: str) -> Path | None:
        """The snapshot store of this repository's latest session, if any."""
        found = []
        for marker in (self.root / "checkpoints").glob(f"*/{REPO_FILE}"):
            with contextlib.suppress(OSError):
                if marker.read_text() == repo:
                    found.append((os.stat(marker.parent / "index").st_mtime_ns, marker.parent))
        return max(found)[1] if found else None

    def delete(self, session_id: str) -> bool:
        """Remove a session, its undo data and its snapshots; False when there was none of
        them. Raises OSError."""
        if not _ID.fullmatch(session_id):
            raise SessionError(f"{session_id!r} is not a session id")
        found = False
        snapshots = self.root / "checkpoints" / session_id
        if snapshots.is_dir() and not snapshots.is_symlink():
            shutil.rmtree(snapshots)
            found = True
        for path in (self.root / f"{session_id}.json", self.root / "undo" / f"{session_id}.json"):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                found = True
        return found

    def undo_data(self, session: Session) -> dict[str, list[dict[str, Any]]]:
        """Run index (as a string) -> that run's file changes; {} when it changed none."""
        path = self.root / "undo" / f"{session.id}.json"
        try:
            data = json.loads(path.read_text("utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise SessionError(
                f"cannot read the undo data of session {session.id}: {exc}"
            ) from None
        try:
            return undo_from_dict(data, str(path))
        except RecordError as exc:
            raise SessionError(str(exc)) from None

    def is_elsewhere(self, id_or_file: str) -> bool:
        """Whether --resume names a file outside this store: anyone's, so its content is input
        like a repository's."""
        given = Path(id_or_file).expanduser()
        return given.is_file() and given.resolve().parent != self.root.resolve()

    def load(self, id_or_file: str) -> Session:
        """A session by id, or from a file: a session file in this store continues that
        session; a session or trajectory file from elsewhere starts a new one with its
        conversation."""
        given = Path(id_or_file).expanduser()
        if given.is_file():
            return self._from_file(given)
        if not _ID.fullmatch(id_or_file):
            raise SessionError(f"--resume {id_or_file}: no such file, nor a session id")
        path = self.root / f"{id_or_file}.json"
        if not path.is_file():
            raise SessionError(f"no session {id_or_file} in {self.root}")
        return self._from_file(path)

    def entries(self, repo: Path | None) -> Iterator[Session | Unreadable]:
        """The session files of `repo` (of every repository: None), the latest first: each a
        Session, or Unreadable when it cannot be read (truncated, edited by hand), unless it
        still names another repository."""
        try:
            files = [(p.stat().st_mtime_ns, p) for p in self.root.glob("*.json")]
        except OSError:
            return
        for mtime_ns, path in sorted(files, reverse=True):
            try:
                session = self._from_file(path)
            except SessionError as exc:
                named = _repo_named(path)
                if path.exists() and (repo is None or named in (None, str(repo))):
                    yield Unreadable(path, mtime_ns, str(exc), named)
                continue
            if repo is None or session.repo == str(repo):
                yield session

    def latest(self, repo: Path) -> Session | None:
        """The latest session of `repo` (for --continue); SessionError when the latest file
        that may be its cannot be read: going on with an older one would be a surprise."""
        for entry in self.entries(repo):
            if isinstance(entry, Unreadable):
                raise SessionError(entry.refusal(repo, "--continue"))
            return entry
        return None

    def _from_file(self, path: Path) -> Session:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else str(exc)
            raise SessionError(f"cannot read {path}: {reason}") from None
        try:
            if isinstance(data, dict) and data.get("format") == TRAJECTORY_FORMAT:
                recording = trajectory_from_dict(data, str(path))
                repo = recording.setting("repo")
                fresh = self.new(Path(repo))
                fresh.repo = repo  # "" when the trajectory does not say: --repo decides
                fresh.messages = [m.to_dict() for m in recording.messages()]
                return fresh
            in_store = not self.is_elsewhere(str(path))
            session_id = path.stem if in_store else self.new(Path()).id
            session = Session.from_dict(data, session_id, str(path))
        except RecordError as exc:
            raise SessionError(str(exc)) from None
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise SessionError(f"{path} is not a toy_agent session or trajectory: {exc}") from None
        if not in_store:
            session.runs, session.checkpoint = [], None
        return session


def messages_from_trajectory(data: Any) -> list[Message]:
    """The conversation a trajectory's JSON records (record.Trajectory.messages). Raises
    record.RecordError."""
    return trajectory_from_dict(data).messages()


class SessionRecorder:
    """An event subscriber that saves `session` after every step and every run, with the
    file backups undo needs. `history` gives the agent's whole conversation (the events carry
    only what is sent, fitted to the budget). A failed write does not stop the run: `error`
    says why, for the caller to report."""

    def __init__(
        self,
        store: SessionStore,
        session: Session,
        tools: CodeRepositoryTools,
        history: Callable[[], Sequence[Message]],
        redact: Callable[[Any], Any] = lambda obj: obj,
    ):
        self.store, self.session, self.tools = store, session, tools
        self.history, self.redact = history, redact
        self.error: str | None = None
        self._checkpoint_error: str | None = None  # the run's, said after it
        self._undo = store.undo_data(session)
        self._changes: ChangeTracker | None = None  # the current run's
        self._own_tracker = False  # a run without an agent's tracker gets one of ours
        self._cache: list[tuple[Message, dict[str, Any]]] = []  # redacted once, not every step
        self._told: tuple[str, str] | None = None  # the next task as given, and its note
        self._snapped = -1  # the iteration whose snapshot is taken (one per step)

    def __call__(self, event: Event) -> None:
        match event:
            case RunStarted(task=task, settings=settings):
                self.session.settings = {k: v for k, v in settings.items() if k != "tools"}
                note = ""
                told, self._told = self._told, None
                if told is not None and task.endswith(told[0]):  # the note apart from it
                    task, note = told
                run = {
                    "task": self.redact(task),
                    "started_at": _now(),
                    "outcome": "running",
                    "start": len(self.history()) - 1,
                }  # where its task is in the messages
                self.session.runs.append(run | ({"note": self.redact(note)} if note else {}))
                self._own_tracker = event.changes is None
                self._changes = event.changes or ChangeTracker(self.tools)
                self._snapped, self._checkpoint_error = -1, None
            case ToolStarted():
                if self.tools.changes(event.action.tool_name) != "nothing":
                    self._snapshot_before(event.iteration)
                if self._own_tracker and self._changes is not None:
                    self._changes(event)
            case StepFinished(step=step):
                self.session.runs[-1].setdefault("steps", []).append({
                    "iteration": step.iteration, "messages": len(self.history()),
                    "tools": [a.tool_name for a in step.actions],
                    "compactions": len(self.session.compactions),
                    "observations": [self.redact(observation_dict(o, content=False))
                                     for o in step.observations],  # their text: the messages
                })  # fmt: skip
                self.save()
            case RunFinished(result=result):
                keys = ("outcome", "iterations", "error", "usage", "cost_usd", "files_changed")
                self.session.runs[-1].update({k: result.get(k) for k in keys},
                                             finished_at=_now())  # fmt: skip
                self._snapshot_end()
                self.save()
                self._changes = None

    def _snapshot_before(self, iteration: int) -> None:
        """The work tree before a step that may change files (once per step)."""
        if self._snapped == iteration:
            return
        self._snapped = iteration
        snapshot = self._snapshot()
        if snapshot is not None:
            snapshots = self.session.runs[-1].setdefault("snapshots", [])
            snapshots.append({"before_step": iteration, **snapshot.to_dict()})
            if len(snapshots) == 1:  # saved before the tool runs: a run killed in its first
                self.save()  # changing step is still the one --undo takes back

    def _snapshot_end(self) -> None:
        """The work tree as the run left it, when any of its steps may have changed it; what
        changed between its first snapshot and this one is what undo takes back."""
        run = self.session.runs[-1]
        if not run.get("snapshots"):
            return
        snapshot = self._snapshot()
        checkpoints = self.store.checkpoints(self.session)
        first = Snapshot.from_dict(run["snapshots"][0])
        if snapshot is None or checkpoints is None or first is None:
            return
        run["snapshots"].append({"before_step": None, **snapshot.to_dict()})
        self.session.checkpoint = snapshot.to_dict()
        try:
            changed = [c.path for c in checkpoints.changes(first, snapshot)]
        except CheckpointError as exc:
            self._checkpoint_error = f"no checkpoint of this run: {exc}"
            return
        run["changed"] = changed + checkpoints.big_changes(first, snapshot)

    def _snapshot(self) -> Snapshot | None:
        checkpoints = self.store.checkpoints(self.session)
        if checkpoints is None:
            return None
        try:
            return checkpoints.snapshot()
        except CheckpointError as exc:
            self._checkpoint_error = f"no checkpoint of this step: {exc}"
            return None

    def _redacted(self, history: Sequence[Message]) -> list[dict[str, Any]]:
        """The history as dicts, secrets redacted. A run only appends to its history, so the
        messages already redacted (the same objects) are not redacted again."""
        kept = 0
        while kept < min(len(self._cache), len(history)) and self._cache[kept][0] is history[kept]:
            kept += 1
        fresh = [(m, self.redact(m.to_dict())) for m in history[kept:]]
        self._cache = self._cache[:kept] + fresh
        return [data for _, data in self._cache]

    def conversation(self) -> list[Message]:
        """The session's conversation so far, for the next task to continue (redacted when it
        was saved, so not redacted again)."""
        messages = [Message.from_dict(data) for data in self.session.messages]
        self._cache = list(zip(messages, self.session.messages, strict=True))
        return messages

    def task(self, text: str) -> str:
        """The next task as the model gets it: after an undo, with a note saying so."""
        note, self.session.note = self.session.note, ""
        self._told = (text, note)
        return f"{note}\n\n{text}" if note else text

    def compact(self, llm: LlmClient, budget_tokens: int, cost: CostMeter | None = None
                ) -> Compacted | None:  # fmt: skip
        """/compact: the session's conversation, summarised by `llm` (see
        compact_conversation), saved with a record of what it saved. None: nothing to do, or
        a summary no shorter than what it replaces (then nothing changes)."""
        compacted = compact_conversation(self.conversation(), llm, budget_tokens)
        cost_usd = None
        if compacted is not None and cost is not None:
            cost.add(compacted.usage)
            cost_usd = round(cost.last, 6) if cost.known and cost.last is not None else None
        if compacted is None:
            return None
        applied = compacted.saved > 0  # a summary no shorter is dropped, its cost still counts
        if applied:
            self.session.messages = [self.redact(m.to_dict()) for m in compacted.messages]
            remap_after_compaction(self.session.runs, len(self._cache), len(compacted.messages))
        self.session.compactions.append({
            "compacted_at": _now(), "model": llm.model, "applied": applied,
            "runs": len(self.session.runs),  # the runs it summarised (their steps are gone)
            "messages_before": len(self._cache), "messages_after": len(compacted.messages),
            "tokens_before": compacted.tokens_before, "tokens_after": compacted.tokens_after,
            "usage": compacted.usage.to_dict(), "cost_usd": cost_usd,
            "summary": self.redact(compacted.summary),
        })  # fmt: skip
        self.conversation()  # the cache now holds the messages as saved
        try:
            self.store.save(self.session, self._undo)
        except OSError as exc:
            self.error = f"cannot save the session to {self.store.root}: {exc.strerror or exc}"
        return compacted if applied else None

    def start_new(self) -> None:
        """A new conversation (/clear): a new session from the next task on."""
        self.session = self.store.new(Path(self.session.repo))
        self._undo = {}

    def save(self) -> None:
        self.session.messages = self._redacted(self.history())
        if self._changes is not None and self.session.runs:
            changes = _undo_records(self._changes)
            index = str(len(self.session.runs) - 1)
            if changes or index in self._undo:
                self._undo[index] = changes
        try:
            self.store.save(self.session, self._undo)
        except OSError as exc:
            self.error = f"cannot save the session to {self.store.root}: {exc.strerror or exc}"
        else:
            self.error = self._checkpoint_error


# --- finding sessions again ---------------------------------------------------------------


@dataclass(frozen=True)
class SessionInfo:
    """One line of a session listing: what tells sessions apart at a glance."""

    id: str
    updated_at: str
    repo: str
    task: str  # the first line of the first task
    tasks: int
    outcome: str  # of the latest task ("" when none ran); "unreadable" for such a file
    error: str = ""  # why an unreadable file cannot be read

    @classmethod
    def of(cls, session: Session) -> SessionInfo:
        runs = [run for run in session.runs if isinstance(run, dict)]
        first = run_task(runs[0]) if runs else ""
        outcome = str(runs[-1].get("outcome") or "") if runs else ""
        line = first.strip().splitlines()[0] if first.strip() else ""
        return cls(session.id, session.updated_at or session.created_at, session.repo, line,
                   len(runs), outcome)  # fmt: skip

    @classmethod
    def of_unreadable(cls, entry: Unreadable) -> SessionInfo:
        saved = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(entry.mtime_ns / 1e9))
        return cls(entry.path.stem, saved, entry.repo or "", "", 0, "unreadable", entry.error)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "updated_at": self.updated_at, "repo": self.repo,
                "task": self.task, "tasks": self.tasks, "outcome": self.outcome,
                **({"error": self.error} if self.error else {})}  # fmt: skip


def recent_sessions(
    store: SessionStore, repo: Path | None = None, limit: int = 20
) -> list[SessionInfo]:
    """The latest `limit` sessions (all of them: 0), of `repo` or of every repository; a file
    that cannot be read is one line too, its outcome `unreadable`."""
    found = []
    for entry in store.entries(repo):
        found.append(SessionInfo.of_unreadable(entry) if isinstance(entry, Unreadable)
                     else SessionInfo.of(entry))  # fmt: skip
        if limit and len(found) >= limit:
            break
    return found


def format_sessions(infos: Sequence[SessionInfo], numbered: bool = False) -> str:
    """A table: id, time, outcome, repository, the first line of the task (shown safely: it
    is what a user or a file wrote)."""
    home = str(Path.home())
    rows = [("#",) * numbered + ("id", "updated", "outcome", "repository", "task")]
    for number, info in enumerate(infos, 1):
        repo = "~" + info.repo[len(home) :] if info.repo.startswith(home + os.sep) else info.repo
        task = _cut(info.task, 60) + (f" (+{info.tasks - 1} more)" if info.tasks > 1 else "")
        task = info.error or task
        rows.append((str(number),) * numbered + (
            info.id, info.updated_at[:16].replace("T", " "), info.outcome or "-",
            _cut(repo, 40) or "?", task or "(no task yet)"))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1]
             for row in rows]  # fmt: skip
    return visible("\n".join(line.rstrip() for line in lines))


def pick_session(
    infos: Sequence[SessionInfo], read: Callable[[str], str] = input, out: TextIO | None = None
) -> str | None:
    """The id of the session a person picks by number from `infos`; None for none (an empty
    answer, or end of input)."""
    out = out or sys.stdout
    print(format_sessions(infos, numbered=True), file=out, flush=True)
    while True:
        try:
            answer = read(f"resume which session? 1-{len(infos)} (Enter: none): ").strip()
        except EOFError:
            return None
        if not answer:
            return None
        if answer.isdigit() and 1 <= int(answer) <= len(infos):
            return infos[int(answer) - 1].id
        print(f"type a number from 1 to {len(infos)}, or press Enter", file=out, flush=True)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


class _CommandParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise SessionError(message)


def sessions_command(argv: Sequence[str], out: TextIO | None = None) -> int:
    """`toy-agent sessions [list|show ID|delete ID...]`: find, read and remove saved sessions.
    A mistake is one line on stderr and exit code 2."""
    out = out or sys.stdout
    where = f"Saved sessions: list them, show one, delete some. They live in {state_dir()}."
    parser = _CommandParser(prog="toy-agent sessions", description=where)
    commands = parser.add_subparsers(dest="command", parser_class=_CommandParser)
    listing = commands.add_parser("list", help="the latest sessions, newest first (default)")
    listing.add_argument("--repo", metavar="PATH", help="only the sessions of this repository")
    listing.add_argument("--limit", type=int, default=20, metavar="N",
                         help="how many (default: 20; 0: all)")  # fmt: skip
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    show = commands.add_parser("show", help="one session: its tasks, outcomes, tokens, cost")
    show.add_argument("id", metavar="ID")
    show.add_argument("--json", action="store_true", help="the whole session file")
    delete = commands.add_parser("delete", help="remove sessions, their undo data and snapshots")
    delete.add_argument("ids", nargs="+", metavar="ID")
    store = SessionStore()
    try:
        args = parser.parse_args(list(argv) or ["list"])
        if args.command == "show":
            session = store.load(args.id) if _ID.fullmatch(args.id) else None
            if session is None or store.is_elsewhere(args.id):
                raise SessionError(f"no session {args.id} in {store.root}")
            print(json_text(session.to_dict()) if args.json else describe_session(session),
                  file=out)  # fmt: skip
            return 0
        if args.command == "delete":
            missing = [i for i in args.ids if not store.delete(i)]
            for session_id in (i for i in args.ids if i not in missing):
                print(f"deleted {session_id}", file=out)
            if missing:
                raise SessionError(f"no session {', '.join(missing)} in {store.root}")
            return 0
        repo = Path(args.repo).expanduser().resolve() if getattr(args, "repo", None) else None
        infos = recent_sessions(store, repo, max(0, getattr(args, "limit", 20)))
        if getattr(args, "json", False):
            for info in infos:
                print(json_text(info.to_dict(), indent=None), file=out)
        else:
            print(format_sessions(infos) if infos else f"no sessions in {store.root}", file=out)
        return 0
    except (SessionError, OSError) as exc:
        text = str(exc) if isinstance(exc, SessionError) else f"{exc.strerror or exc}"
        print(f"toy-agent: error: {visible(text)}", file=sys.stderr)
        return 2


def describe_session(session: Session) -> str:
    usage, cost, unpriced = session.spending()
    lines = [
        f"session   {session.id}",
        f"repo      {session.repo}",
        f"created   {session.created_at}",
        f"updated   {session.updated_at}",
        f"messages  {len(session.messages)}"
        + (f" ({len(session.compactions)} /compact)" if session.compactions else ""),
        f"tokens    {format_usage(usage)}",
        f"cost      {format_cost(cost, unpriced)}",
    ]
    for number, run in enumerate((r for r in session.runs if isinstance(r, dict)), 1):
        task = run_task(run).strip()
        more = " …" if len(task.splitlines()) > 1 else ""
        undone = ", undone" if run.get("undone") else ""
        lines.append(f"task {number}: [{run.get('outcome')}{undone}] "
                     f"{_cut(task.splitlines()[0] if task else '', 100)}{more}")  # fmt: skip
    return visible("\n".join(lines))


def format_usage(usage: Usage) -> str:
    cached = f" ({usage.cached_tokens:,} cached)" if usage.cached_tokens else ""
    return f"{usage.input_tokens:,} in{cached}, {usage.output_tokens:,} out"


def format_cost(cost: float | None, unpriced: int = 0) -> str:
    if cost is None:
        return "unknown (no price for the model: see --price-input)" if unpriced else "$0"
    without = f" (+{unpriced} call(s) without a price)" if unpriced else ""
    return f"${cost:.4f}{without}"


# --- /compact ---------------------------------------------------------------------------------

COMPACT_KEEP_MESSAGES = 4  # the latest steps stay as they are (as context.KEEP_RECENT_MESSAGES)
SUMMARY_HEADER = "Summary of the earlier steps of this session (they were compacted):"
COMPACT_SYSTEM_PROMPT = """\
You summarise the work of a coding agent so far, so that it can go on with a shorter \
conversation. Write a concise summary in plain text: each task it was given and how it ended, \
the files it read and changed (with paths), facts it learned about the code, commands it ran \
and their results, and what is still open. Keep names, paths and numbers exact. Do not invent \
anything; do not call tools."""


@dataclass(frozen=True)
class Compacted:
    messages: list[Message]
    tokens_before: int
    tokens_after: int
    usage: Usage
    summary: str = ""

    @property
    def saved(self) -> int:
        return self.tokens_before - self.tokens_after


def compact_conversation(
    messages: Sequence[Message], llm: LlmClient, budget_tokens: int
) -> Compacted | None:
    """The conversation with the steps between its first task and its latest steps replaced
    by a summary the model writes (None: too short to compact). The summary joins the first
    message, and what is kept starts at an assistant turn, so the roles still alternate and no
    native tool result loses its call. Raises LlmError; SessionError for an empty summary."""
    cut = len(messages) - COMPACT_KEEP_MESSAGES
    while cut > 1 and messages[cut].role != "assistant":
        cut -= 1
    if cut <= 1:
        return None
    first, older, kept = messages[0], messages[1:cut], list(messages[cut:])
    transcript = "\n\n".join(_transcript(m) for m in older)
    transcript = cap_text(transcript, budget_tokens * CHARS_PER_TOKEN // 2)
    request = Message("user", f"The first task:\n{first.content}\n\nThe steps since:\n"
                              f"{transcript}\n\nWrite the summary now.")  # fmt: skip
    response = llm.call_llm(COMPACT_SYSTEM_PROMPT, [request])
    summary = response.text.strip()
    if not summary:
        raise SessionError("the model wrote an empty summary: nothing was compacted")
    head = Message("user", f"{first.content}\n\n{SUMMARY_HEADER}\n{summary}")
    compacted = [head, *kept]
    return Compacted(compacted, estimate_tokens(messages), estimate_tokens(compacted),
                     response.usage, summary)  # fmt: skip


def _transcript(message: Message) -> str:
    parts = [cap_text(message.content, 4000)] if message.content.strip() else []
    parts += [f"(calls {c.name} {json.dumps(c.arguments)[:2000]})" for c in message.tool_calls]
    parts += [f"(result of {r.name}: {cap_text(r.content, 4000)})" for r in message.tool_results]
    return f"[{message.role}] " + "\n".join(parts)


# --- file backups and undo ----------------------------------------------------------------


def _undo_records(changes: ChangeTracker) -> list[dict[str, Any]]:
    """The run's undo data: each file whose content differs from before the run, with its
    bytes from before (from the change tracker's one read) and its hash now."""
    records = []
    for rel, before in changes.before.items():
        now = changes.now(rel, keep=False).digest
        if now == before.digest:
            continue
        record: dict[str, Any] = {"path": rel, "before_sha256": before.digest,
                                  "new_dirs": changes.new_dirs.get(rel, [])}  # fmt: skip
        if before.data is None and before.digest is not None:  # too big, not regular, unreadable
            too_big = f"larger than {DIFF_MAX_BYTES >> 20} MB"
            record["unrestorable"] = too_big if before.too_big else before.digest.strip("<>")
        elif before.data is not None:
            record.update(_encode(before.data))
        records.append({**record, "after_sha256": now})
    return records


@dataclass(frozen=True)
class Undone:
    session: Session
    task: str
    restored: list[str]
    removed: list[str]

    def describe(self) -> str:
        parts = [f"restored {', '.join(self.restored)}"] if self.restored else []
        parts += [f"removed {', '.join(self.removed)}"] if self.removed else []
        return f"reverted the file changes of {self.task!r}: {'; '.join(parts)}"


def undo_last_run(store: SessionStore, session: Session) -> Undone:
    """Revert the latest run of `session` that changed files and is not undone yet."""
    found = _undoable(store, session)
    if found is None:
        raise NothingToUndo("nothing to undo: no task of this session changed a file")
    return _undo(store, session, *found)


def undo_latest_in_repo(store: SessionStore, repo: Path) -> Undone:
    """Revert the latest run in `repo` (of any session) that changed files, not undone yet."""
    latest: tuple[str, Session, int, list[dict[str, Any]]] | None = None
    unreadable: list[Unreadable] = []
    for session in store.entries(repo):
        if isinstance(session, Unreadable):
            unreadable.append(session)
            continue
        found = _undoable(store, session)
        if found is not None:
            started = str(session.runs[found[0]].get("started_at", ""))
            if latest is None or started > latest[0]:
                latest = (started, session, *found)
    # A file saved since that run started may hold a later run: never undo past it.
    since = _timestamp(latest[0]) if latest is not None else None
    for entry in unreadable:
        if since is None or entry.mtime_ns >= since * 1e9:
            raise SessionError(entry.refusal(repo, "--undo"))
    if latest is None:
        raise NothingToUndo(f"nothing to undo: no saved run changed a file in {repo}")
    return _undo(store, *latest[1:])


def _timestamp(saved: str) -> float | None:
    """A time as _now() writes it, in seconds since the epoch (None: not such a time)."""
    try:
        return datetime.strptime(saved, "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except ValueError:
        return None


def session_diff(store: SessionStore, session: Session) -> str:
    """A unified diff of every file the session's runs changed: from before the first run
    that changed it to now."""
    first: dict[str, dict[str, Any]] = {}
    undo = store.undo_data(session)
    for index in sorted(undo, key=int):
        for change in undo[index]:
            first.setdefault(change["path"], change)
    repo, out = Path(session.repo), []
    for rel, change in first.items():
        before = _decoded(change)
        now = file_state(repo, rel).data
        if before == now or (before is None and "unrestorable" in change):
            continue
        out.append(unified_diff(rel, _diff_text(before), _diff_text(now), git=True))
    return "".join(out)


def _undoable(store: SessionStore, session: Session) -> tuple[int, list[dict[str, Any]]] | None:
    undo = store.undo_data(session)
    for index in reversed(range(len(session.runs))):
        run = session.runs[index]
        if run.get("undone") or run.get("rewound"):
            continue
        if run.get("changed") and len(run.get("snapshots") or ()) >= 2:
            return index, []
        if run.get("outcome") == "running" and run.get("snapshots"):  # killed mid-run
            return index, []
        if undo.get(str(index)):
            return index, undo[str(index)]
    return None


def _undo(
    store: SessionStore, session: Session, index: int, changes: list[dict[str, Any]]
) -> Undone:
    if not changes:
        return _undo_by_snapshots(store, session, index)
    repo = Path(session.repo)
    changed = [c["path"] for c in changes if file_state(repo, c["path"], keep=False).digest
               != c["after_sha256"]]  # fmt: skip
    if changed:
        raise UndoRefused(f"cannot undo: changed since the run: {', '.join(changed)}")
    lost = [f"{c['path']} ({c['unrestorable']})" for c in changes if "unrestorable" in c]
    if lost:
        raise UndoRefused(f"cannot undo: no copy was kept of {', '.join(lost)}")
    targets = [(change, _target(repo, change["path"])) for change in changes]
    restored: list[str] = []
    removed: list[str] = []
    for change, target in targets:
        before = _decoded(change)
        try:
            if before is None:
                target.unlink(missing_ok=True)
                for folder in reversed(change.get("new_dirs") or ()):
                    with contextlib.suppress(OSError):
                        (repo / folder).rmdir()  # only if the run left it empty
            else:
                write_at(repo, change["path"], before)
        except (OSError, ToolError) as exc:
            done = ", ".join(restored + removed) or "nothing"
            reason = getattr(exc, "strerror", None) or exc
            raise UndoRefused(f"undo stopped at {change['path']}: {reason} "
                              f"(reverted so far: {done})") from exc  # fmt: skip
        (removed if before is None else restored).append(change["path"])
    return _undone(store, session, index, restored, removed)


def _undone(
    store: SessionStore, session: Session, index: int, restored: list[str], removed: list[str]
) -> Undone:
    task = run_task(session.runs[index])
    session.runs[index]["undone"] = True
    files = ", ".join(restored + removed)
    state = "is as it was" if len(restored + removed) == 1 else "are as they were"
    session.note = (f"{NOTE_START}the user reverted the file changes of the earlier task "
                    f"{task!r}; {files} {state} before it.)")  # fmt: skip
    _save_after(store, session, "reverted the files")
    return Undone(session, task, restored, removed)


def _undo_by_snapshots(store: SessionStore, session: Session, index: int) -> Undone:
    """Put back what run `index` changed, commands included: its first snapshot's files
    where its last snapshot differs from it, refused when one changed since the run. A run
    that was killed (still "running", no last snapshot) changed what differs now."""
    run = session.runs[index]
    snapshots = run["snapshots"]
    checkpoints = store.checkpoints(session)
    if checkpoints is None:
        raise UndoRefused("cannot undo: git is needed to restore this run's snapshots")
    first = Snapshot.from_dict(snapshots[0])
    try:
        killed = run.get("outcome") == "running"
        last = checkpoints.snapshot() if killed else Snapshot.from_dict(snapshots[-1])
        if first is None or last is None:
            raise UndoRefused("cannot undo: git is needed to restore this run's snapshots")
        restored = checkpoints.restore(first, last, "undo")
    except CheckpointError as exc:
        raise UndoRefused(str(exc)) from None
    _mark_now(checkpoints, session)
    return _undone(store, session, index, restored.written, restored.removed)


def _mark_now(checkpoints: Checkpoints, session: Session) -> None:
    """After undo or /rewind: the tree as we left it is what the next check compares with."""
    with contextlib.suppress(CheckpointError):
        session.checkpoint = checkpoints.snapshot().to_dict()


def _save_after(store: SessionStore, session: Session, done: str) -> None:
    try:
        store.save(session)
    except OSError as exc:
        raise SessionError(f"{done}, but cannot save the session: {exc}") from exc


# --- /rewind ------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepPoint:
    """A step /rewind can go back to: the files as it left them, the conversation up to it."""

    number: int  # 1-based, over the session's steps that can still be rewound to
    run: int
    iteration: int
    task: str
    tools: tuple[str, ...]
    messages: int

    def describe(self) -> str:
        task = self.task.strip().splitlines()[0] if self.task.strip() else ""
        tools = ", ".join(self.tools) or "(answer)"
        return f"{self.number:>3}. task {_cut(task, 40)!r} step {self.iteration}: {tools}"


def rewind_points(session: Session) -> list[StepPoint]:
    """The steps of the session, in order, that /rewind can go back to: those of runs not
    undone or rewound, since the last /compact (which rewrote the conversation before it)."""
    points: list[StepPoint] = []
    for index, run in enumerate(session.runs):
        if not isinstance(run, dict) or run.get("undone") or run.get("rewound"):
            continue
        for step in run.get("steps") or ():
            if step.get("compactions") == len(session.compactions):
                points.append(StepPoint(len(points) + 1, index, int(step["iteration"]),
                                        run_task(run), tuple(step.get("tools") or ()),
                                        int(step["messages"])))  # fmt: skip
    return points


@dataclass(frozen=True)
class Rewound:
    point: StepPoint
    written: list[str]
    removed: list[str]
    messages: int

    def describe(self) -> str:
        parts = [f"put back {', '.join(self.written)}"] if self.written else []
        parts += [f"removed {', '.join(self.removed)}"] if self.removed else []
        files = "; ".join(parts) or "no file differed"
        return (
            f"rewound to step {self.point.number} ({files}); the conversation now ends "
            f"after it ({self.messages} messages)"
        )


def rewind_to(store: SessionStore, session: Session, point: StepPoint) -> Rewound:
    """The files as step `point` left them (refused when one changed since the session's
    last step) and the conversation cut after it; the later steps are dropped."""
    target = _snapshot_after(session, point)
    expected = Snapshot.from_dict(session.checkpoint)
    checkpoints = store.checkpoints(session)
    if checkpoints is None and any(r.get("changed") or r.get("files_changed")
                                   for r in session.runs[point.run :]):  # fmt: skip
        raise UndoRefused("cannot rewind: git is needed to put the files back")
    written: list[str] = []
    removed: list[str] = []
    if target is not None and expected is not None:
        if checkpoints is None:
            raise UndoRefused("cannot rewind: git is needed to put the files back")
        try:
            restored = checkpoints.restore(target, expected, "rewind")
        except CheckpointError as exc:
            raise UndoRefused(str(exc)) from None
        written, removed = restored.written, restored.removed
        _mark_now(checkpoints, session)
    run = session.runs[point.run]
    run["steps"] = [s for s in run.get("steps") or () if s["iteration"] <= point.iteration]
    kept = [s for s in run.get("snapshots") or ()
            if s["before_step"] is not None and s["before_step"] <= point.iteration]  # fmt: skip
    first = Snapshot.from_dict(kept[0]) if kept else None
    run["changed"] = []
    if first is not None and target is not None and checkpoints is not None:
        kept.append({"before_step": None, **target.to_dict()})
        with contextlib.suppress(CheckpointError):
            run["changed"] = [c.path for c in checkpoints.changes(first, target)]
    run["snapshots"] = kept
    for later in session.runs[point.run + 1 :]:
        later["rewound"] = True
    session.messages = session.messages[: point.messages]
    _save_after(store, session, "rewound the files")
    return Rewound(point, written, removed, point.messages)


def _snapshot_after(session: Session, point: StepPoint) -> Snapshot | None:
    """The first snapshot taken after the step: before a later step that could change
    files, or at the end of a run. None when no step after it could change files."""
    for index in range(point.run, len(session.runs)):
        run = session.runs[index]
        if run.get("undone") or run.get("rewound"):
            continue
        for snap in run.get("snapshots") or ():
            later = snap["before_step"] is None or snap["before_step"] > point.iteration
            if index > point.run or later:
                return Snapshot.from_dict(snap)
    return None


def _target(repo: Path, rel: str) -> Path:
    """The file to write back, refused when a folder on its way is now a link (or is gone)."""
    target = repo / rel
    try:
        real_parent = target.parent.resolve(strict=True)
    except OSError:
        raise UndoRefused(f"cannot undo: the folder of {rel} is gone") from None
    if real_parent != target.parent:
        raise UndoRefused(f"cannot undo: the folder of {rel} is now a link")
    return target


def _encode(data: bytes) -> dict[str, str]:
    try:
        return {"before": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"before_base64": base64.b64encode(data).decode("ascii")}


def _decoded(change: dict[str, Any]) -> bytes | None:
    if "before_base64" in change:
        return base64.b64decode(change["before_base64"])
    before = change.get("before")
    return before.encode("utf-8") if isinstance(before, str) else None


def _diff_text(data: bytes | None) -> str | None:
    return None if data is None else diff_text(data)


def _write_private(path: Path, text: str) -> None:
    """Atomically, readable by the user only: a session holds the conversation, and the undo
    data the files' old contents."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    atomic_write(path, text + "\n", mode=0o600)
