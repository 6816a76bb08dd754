"""Sessions: each conversation saved as it goes, so a later run can continue it, and each
run's file changes, so they can be reverted.

A session is one JSON file, `ID.json`, under `$XDG_STATE_HOME/toy-agent/sessions/` (default
`~/.local/state/toy-agent/sessions/`), rewritten atomically after every step: the repository's
absolute path, the conversation (secrets redacted, as in a trajectory), and one record per run
(task, outcome, usage, cost). What undo needs lives beside it in `undo/ID.json`: for every run
that changed files, each file's bytes from before the run first changed it (not redacted: they
are written back) and a hash of its content after the run, to refuse an undo when the file
changed since. Both files are private to the user (mode 0600, folders 0700).

Only `write_file`/`edit_file` changes are tracked, as `toy_agent.events.ChangeTracker` does;
what `run_command` changes is not.
"""

from __future__ import annotations

import base64
import contextlib
import difflib
import hashlib
import json
import os
import re
import secrets
import stat
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toy_agent.events import (
    FILE_CHANGING_TOOLS,
    TRAJECTORY_FORMAT,
    Event,
    RunFinished,
    RunStarted,
    StepFinished,
    ToolStarted,
    json_text,
)
from toy_agent.messages import Image, LlmResponse, Message, Usage
from toy_agent.parsing import Action, Observation, get_format
from toy_agent.tools import CodeRepositoryTools, ToolError

SESSION_FORMAT = "toy_agent.session/1"
UNDO_FORMAT = "toy_agent.undo/1"
MAX_BACKUP_BYTES = 8 * 1024 * 1024  # a bigger file's content is not kept: no undo for it
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class SessionError(Exception):
    """A session that cannot be found, read or written (a usage error at the command line)."""


class UndoRefused(SessionError):
    """Undo would overwrite something: a file changed since the run, or cannot be restored."""


class NothingToUndo(SessionError):
    pass


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

    def history(self) -> list[Message]:
        return [Message.from_dict(m) for m in self.messages]

    def to_dict(self) -> dict[str, Any]:
        usage = sum((Usage(**r["usage"]) for r in self.runs if r.get("usage")), Usage())
        costs = [r["cost_usd"] for r in self.runs if r.get("cost_usd") is not None]
        return {
            "format": SESSION_FORMAT, "id": self.id, "repo": self.repo,
            "created_at": self.created_at, "updated_at": self.updated_at,
            "settings": self.settings, "usage": usage.to_dict(),
            "cost_usd": round(sum(costs), 6) if costs else None,
            "note": self.note, "runs": self.runs, "messages": self.messages,
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: Any, session_id: str) -> Session:
        if not isinstance(data, dict) or data.get("format") != SESSION_FORMAT:
            raise ValueError(f'not a session (expected "format": "{SESSION_FORMAT}")')
        messages, runs = data.get("messages"), data.get("runs")
        if not isinstance(data.get("repo"), str) or not isinstance(messages, list):
            raise ValueError('a session needs "repo" and "messages"')
        for message in messages:
            Message.from_dict(message)  # raises on a malformed one, here rather than mid-run
        return cls(
            session_id, data["repo"], str(data.get("created_at", "")),
            str(data.get("updated_at", "")), messages, runs if isinstance(runs, list) else [],
            dict(data.get("settings") or {}), str(data.get("note") or ""),
        )  # fmt: skip


class SessionStore:
    """The session files in one folder (default: `state_dir()`)."""

    def __init__(self, root: Path | None = None):
        self.root = root if root is not None else state_dir()

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

    def undo_data(self, session: Session) -> dict[str, list[dict[str, Any]]]:
        """Run index (as a string) -> that run's file changes; {} when it changed none."""
        try:
            data = json.loads((self.root / "undo" / f"{session.id}.json").read_text("utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise SessionError(
                f"cannot read the undo data of session {session.id}: {exc}"
            ) from None
        runs = data.get("runs") if isinstance(data, dict) else None
        return runs if isinstance(runs, dict) else {}

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

    def sessions(self, repo: Path) -> Iterator[Session]:
        """The sessions of `repo`, the latest first; unreadable files are skipped."""
        try:
            files = [(p.stat().st_mtime_ns, p) for p in self.root.glob("*.json")]
        except OSError:
            return
        for _, path in sorted(files, reverse=True):
            with contextlib.suppress(OSError, ValueError, TypeError, KeyError, SessionError):
                session = self._from_file(path)
                if session.repo == str(repo):
                    yield session

    def latest(self, repo: Path) -> Session | None:
        return next(self.sessions(repo), None)

    def _from_file(self, path: Path) -> Session:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else str(exc)
            raise SessionError(f"cannot read {path}: {reason}") from None
        try:
            if isinstance(data, dict) and data.get("format") == TRAJECTORY_FORMAT:
                repo = str((data.get("settings") or {}).get("repo") or "")
                fresh = self.new(Path(repo))
                fresh.repo = repo  # "" when the trajectory does not say: --repo decides
                fresh.messages = [m.to_dict() for m in messages_from_trajectory(data)]
                return fresh
            in_store = not self.is_elsewhere(str(path))
            session = Session.from_dict(data, path.stem if in_store else self.new(Path()).id)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise SessionError(f"{path} is not a toy_agent session or trajectory: {exc}") from None
        if not in_store:
            session.runs = []
        return session


def messages_from_trajectory(data: dict[str, Any]) -> list[Message]:
    """The conversation a trajectory records: the task, then each step's reply and the
    observations (or parse error) the model was sent back, in the run's action format."""
    fmt = get_format(str((data.get("settings") or {}).get("tool_format") or "xml"))
    messages = [Message("user", str(data["task"]))]
    for step in data["steps"]:
        response = LlmResponse.from_dict(step["response"])
        messages.append(Message("assistant", response.text, tool_calls=response.tool_calls))
        actions = [Action(**a) for a in step.get("actions") or ()]
        if step.get("parse_error"):
            error = f"Error: {step['parse_error']}"
            calls = [Action(c.name, c.arguments, c.id) for c in response.tool_calls]
            if calls:
                messages.append(
                    fmt.observation_message([Observation(a, error, True) for a in calls])
                )
            else:
                messages.append(Message("user", str(step["parse_error"])))
            continue
        observations = [
            Observation(
                action,
                str(o.get("content", "")),
                bool(o.get("is_error")),
                tuple(map(Image.from_reference, o.get("images") or ())),
            )
            for action, o in zip(actions, step.get("observations") or (), strict=False)
        ]
        if observations:
            messages.append(fmt.observation_message(observations))
    return messages


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
        self._undo = store.undo_data(session)
        self._backup: FileBackup | None = None
        self._cache: list[tuple[Message, dict[str, Any]]] = []  # redacted once, not every step

    def __call__(self, event: Event) -> None:
        match event:
            case RunStarted(task=task, settings=settings):
                self.session.settings = {k: v for k, v in settings.items() if k != "tools"}
                self.session.runs.append({"task": self.redact(task), "started_at": _now(),
                                          "outcome": "running"})  # fmt: skip
                self._backup = FileBackup(self.tools)
            case ToolStarted(action=action) if self._backup is not None:
                self._backup.before(action)
            case StepFinished():
                self.save()
            case RunFinished(result=result):
                keys = ("outcome", "iterations", "error", "usage", "cost_usd", "files_changed")
                self.session.runs[-1].update({k: result.get(k) for k in keys},
                                             finished_at=_now())  # fmt: skip
                self.save()
                self._backup = None

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
        return f"{note}\n\n{text}" if note else text

    def start_new(self) -> None:
        """A new conversation (/clear): a new session from the next task on."""
        self.session = self.store.new(Path(self.session.repo))
        self._undo = {}

    def save(self) -> None:
        self.session.messages = self._redacted(self.history())
        if self._backup is not None and self.session.runs:
            changes = self._backup.changes()
            index = str(len(self.session.runs) - 1)
            if changes or index in self._undo:
                self._undo[index] = changes
        try:
            self.store.save(self.session, self._undo)
        except OSError as exc:
            self.error = f"cannot save the session to {self.store.root}: {exc.strerror or exc}"
        else:
            self.error = None


# --- file backups and undo ----------------------------------------------------------------


class FileBackup:
    """Each file a run changes, as it was before the run first changed it (in bytes, so any
    file comes back exactly), and which of its folders the run created."""

    def __init__(self, tools: CodeRepositoryTools):
        self.repo = tools.repo_path
        self.tools = tools
        self.files: dict[str, dict[str, Any]] = {}

    def before(self, action: Action) -> None:
        path = action.parameters.get("path")
        if action.tool_name not in FILE_CHANGING_TOOLS or not isinstance(path, str):
            return
        try:
            rel = self.tools.relative(path)
        except ToolError:  # the tool will refuse it too
            return
        if rel in self.files:
            return
        data, digest = _read(self.repo, rel)
        parents = list(Path(rel).parents)[:-1]  # "a/b/c.py" -> a/b, a
        backup: dict[str, Any] = {
            "path": rel, "before_sha256": digest,
            "new_dirs": [str(p) for p in reversed(parents) if not (self.repo / p).exists()],
        }  # fmt: skip
        if data is None and digest is not None:  # too big, not a regular file, unreadable
            too_big = f"larger than {MAX_BACKUP_BYTES // (1024 * 1024)} MB"
            backup["unrestorable"] = digest.strip("<>") if digest.startswith("<") else too_big
        elif data is not None:
            backup.update(_encode(data))
        self.files[rel] = backup

    def changes(self) -> list[dict[str, Any]]:
        """The files whose content differs from before the run, with their hash now."""
        changed = []
        for rel, backup in self.files.items():
            _, now = _read(self.repo, rel, keep=False)
            if now != backup["before_sha256"]:
                changed.append({**backup, "after_sha256": now})
        return changed


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
    for session in store.sessions(repo):
        found = _undoable(store, session)
        if found is not None:
            started = str(session.runs[found[0]].get("started_at", ""))
            if latest is None or started > latest[0]:
                latest = (started, session, *found)
    if latest is None:
        raise NothingToUndo(f"nothing to undo: no saved run changed a file in {repo}")
    return _undo(store, *latest[1:])


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
        now, _ = _read(repo, rel)
        if before == now or (before is None and "unrestorable" in change):
            continue
        diff = difflib.unified_diff(
            _text_lines(before), _text_lines(now),
            fromfile=f"a/{rel}" if before is not None else "/dev/null",
            tofile=f"b/{rel}" if now is not None else "/dev/null",
        )  # fmt: skip
        out.append("".join(diff))
    return "".join(out)


def _undoable(store: SessionStore, session: Session) -> tuple[int, list[dict[str, Any]]] | None:
    undo = store.undo_data(session)
    for index in reversed(range(len(session.runs))):
        if not session.runs[index].get("undone") and undo.get(str(index)):
            return index, undo[str(index)]
    return None


def _undo(
    store: SessionStore, session: Session, index: int, changes: list[dict[str, Any]]
) -> Undone:
    repo = Path(session.repo)
    changed = [c["path"] for c in changes if _read(repo, c["path"], keep=False)[1]
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
                _replace(target, before)
        except OSError as exc:
            done = ", ".join(restored + removed) or "nothing"
            raise UndoRefused(f"undo stopped at {change['path']}: {exc.strerror or exc} "
                              f"(reverted so far: {done})") from exc  # fmt: skip
        (removed if before is None else restored).append(change["path"])
    task = str(session.runs[index].get("task", ""))
    session.runs[index]["undone"] = True
    files = ", ".join(restored + removed)
    session.note = (f"(Note: the user reverted the file changes of the earlier task {task!r}; "
                    f"{files} are as they were before it.)")  # fmt: skip
    try:
        store.save(session)
    except OSError as exc:
        raise SessionError(f"reverted the files, but cannot save the session: {exc}") from exc
    return Undone(session, task, restored, removed)


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


def _read(repo: Path, rel: str, keep: bool = True) -> tuple[bytes | None, str | None]:
    """(content, sha256) of a file; (None, None) when it does not exist. With `keep` false the
    content is None. Over MAX_BACKUP_BYTES no copy is kept and the file is not read at all (it
    may be a sparse terabyte): its size and times stand for the hash. A file that cannot be
    read as a regular file (a link, a FIFO, no permission) gives (None, "<why>")."""
    try:
        fd = os.open(repo / rel, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"<{exc.strerror or exc}>"
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            return None, "<not a regular file>"
        if st.st_size > MAX_BACKUP_BYTES:
            return None, f"{st.st_size} bytes, modified {st.st_mtime_ns}, {st.st_ctime_ns}"
        digest, chunks = hashlib.sha256(), []
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
            if keep:
                chunks.append(chunk)
    return b"".join(chunks) if keep else None, digest.hexdigest()


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


def _text_lines(data: bytes | None) -> list[str]:
    lines = (data or b"").decode("utf-8", "replace").splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n\\ No newline at end of file\n"
    return lines


def _replace(target: Path, data: bytes) -> None:
    """Write `data` over `target` atomically, keeping the file's mode."""
    try:
        mode: int | None = stat.S_IMODE(os.lstat(target).st_mode)
    except FileNotFoundError:
        mode = None
    tmp = target.with_name(f".{target.name[:100]}.{secrets.token_hex(4)}.undo.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
            if mode is not None:
                os.fchmod(f.fileno(), mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _write_private(path: Path, text: str) -> None:
    """Atomically, readable by the user only: a session holds the conversation, and the undo
    data the files' old contents."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text + "\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
