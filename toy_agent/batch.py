"""Batch runs: every task of a JSONL file, each in its own copy of its repository.

One task = one fresh copy (a detached git worktree, a clone of a git URL, or a copy of a plain
folder) under a scratch folder, one agent, then the copy's changes as a `git diff` patch and
an optional check command. The driver runs tasks on threads (`executor="local"`) or as Ray
tasks (`executor="ray"`) and writes every result the same way, appending to
`DIR/results.jsonl` as each finishes, so a second run with the same `DIR` resumes.

`run_task` is the unit of work: plain arguments in, a plain dict out, so Ray can ship both.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import contextvars
import itertools
import json
import logging
import math
import os
import re
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, TextIO

from toy_agent.agent import ReactAgent, RunResult
from toy_agent.context import DEFAULT_CONTEXT_BUDGET
from toy_agent.events import TrajectoryRecorder, json_text
from toy_agent.files import atomic_write
from toy_agent.llm import (
    PROVIDER_CLASSES,
    LlmClient,
    LlmConfigError,
    client_for,
    resolve_settings,
)
from toy_agent.mcp_config import McpError, McpServerConfig
from toy_agent.mcp_tools import McpTools
from toy_agent.messages import Usage
from toy_agent.permissions import Permissions
from toy_agent.pricing import meter_for
from toy_agent.redaction import Redactor
from toy_agent.sandbox import (
    SandboxUnavailable,
    kill_live_groups,
    resolve_sandbox,
    sandbox_note,
)
from toy_agent.search import file_kind
from toy_agent.tools import CodeRepositoryTools, run_shell

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


TASK_KEYS = ("id", "repo", "task", "rev", "check", "max_iterations")
REQUIRED_KEYS = ("id", "repo", "task")
TASK_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # ids name files: patches/ID.diff
RESULTS_FILE = "results.jsonl"
RECORD_KEYS = (
    "id", "outcome", "success", "check", "iterations", "usage", "cost_usd", "elapsed_seconds",
    "files_changed", "patch", "trajectory", "error", "base_commit",
)  # fmt: skip
DEFAULT_CHECK_TIMEOUT = 600.0
CHECK_TAIL_CHARS = 2_000
GIT_TIMEOUT = 300  # seconds for each git call on a copy (a walk of a huge tree included)
CLONE_TIMEOUT = 1800  # for a clone or a worktree checkout of a big repository
POLL_SECONDS = 0.5  # how often the driver wakes to redraw the progress line
DRAIN_SECONDS = 30.0  # after Ctrl-C, how long running tasks get to wind down
INSTALL_RAY = 'pip install "toy-agent[ray]"'


class BatchError(Exception):
    """A task file or batch setting that cannot run (CLI exit code 2); names the line."""


class GitError(Exception):
    """A git command that prepares or diffs a copy failed; the task ends with outcome error."""


# --------------------------------------------------------------------------------- the tasks
@dataclass(frozen=True)
class Task:
    """One line of the task file. `repo` is an absolute folder path or a git URL."""

    id: str
    repo: str
    task: str
    rev: str | None = None
    check: str | None = None
    max_iterations: int | None = None


@dataclass(frozen=True)
class RunSettings:
    """How every task's agent is built and checked: the CLI's agent flags.

    `make_llm` replaces the provider settings with a factory (a custom or scripted model); it
    is called once per task, in the worker."""

    provider: str = "claude"
    model: str | None = None
    base_url: str | None = None
    max_retries: int = 4
    timeout: float = 120.0
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
    make_llm: Callable[[], LlmClient] | None = field(default=None, compare=False)


def load_tasks(path: str | os.PathLike[str]) -> list[Task]:
    """The tasks of a JSONL file; relative repo paths are relative to the file's folder."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise BatchError(f"cannot read --tasks-file {path}: {reason}") from None
    return parse_tasks(text.splitlines(), base=path.parent, source=str(path))


def parse_tasks(lines: Iterable[str], *, base: Path, source: str = "tasks") -> list[Task]:
    """Every line checked before anything runs: BatchError naming `line N` (for a duplicate id,
    the later line). Blank lines are skipped."""

    def entries() -> Iterator[tuple[int, Any]]:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except ValueError as exc:
                raise BatchError(f"{source} line {number}: not valid JSON ({exc})") from None
            except RecursionError:
                raise BatchError(f"{source} line {number}: not valid JSON (nested too deeply)"
                                 ) from None  # fmt: skip

    return _tasks(entries(), base, source)


def _tasks(entries: Iterable[tuple[int, Any]], base: Path, source: str) -> list[Task]:
    tasks: list[Task] = []
    first_line: dict[str, int] = {}
    for number, data in entries:
        where = f"{source} line {number}"
        task = task_from_dict(data, base=base, where=where)
        if task.id in first_line:
            raise BatchError(
                f"{where}: duplicate id {task.id!r} (first on line {first_line[task.id]})"
            )
        first_line[task.id] = number
        tasks.append(task)
    if not tasks:
        raise BatchError(f"{source} has no tasks")
    return tasks


def task_from_dict(data: Any, *, base: Path, where: str) -> Task:
    if not isinstance(data, dict):
        raise BatchError(f"{where}: expected a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - set(TASK_KEYS))
    if unknown:
        raise BatchError(f"{where}: unknown key {', '.join(map(repr, unknown))} "
                         f"(allowed: {', '.join(TASK_KEYS)})")  # fmt: skip
    for key in REQUIRED_KEYS:
        if not isinstance(data.get(key), str) or not data[key].strip():
            problem = "missing" if key not in data else "not a non-empty string"
            raise BatchError(f"{where}: {key!r} is {problem}")
    for key in ("rev", "check"):
        if data.get(key) is not None and (not isinstance(data[key], str) or not data[key].strip()):
            raise BatchError(f"{where}: {key!r} must be a non-empty string or null")
    limit = data.get("max_iterations")
    if limit is not None and (type(limit) is not int or limit < 1):
        raise BatchError(f"{where}: 'max_iterations' must be a whole number of at least 1")
    if (data.get("rev") or "").startswith("-"):  # git would read it as an option
        raise BatchError(f"{where}: 'rev' {data['rev']!r} cannot start with '-'")
    if not TASK_ID.fullmatch(data["id"]):
        raise BatchError(f"{where}: id {data['id']!r} must be letters, digits, '.', '_' or '-' "
                         "(at most 128, not starting with '.' or '-'): it names files")  # fmt: skip
    repo = data["repo"].strip()
    if not is_git_url(repo):
        folder = (base / Path(repo).expanduser()).resolve()
        if not folder.is_dir():
            raise BatchError(f"{where}: repo {repo} is not a folder (looked at {folder})")
        if data.get("rev") and not is_git_checkout(folder):
            raise BatchError(f"{where}: 'rev' needs a git repository, and {repo} is a plain "
                             "folder")  # fmt: skip
        repo = str(folder)
    return Task(data["id"], repo, data["task"], data.get("rev"), data.get("check"), limit)


def is_git_url(repo: str) -> bool:
    """`https://...`, `ssh://...`, `file://...` or scp-like `git@host:path`."""
    return bool(re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", repo) or
                re.match(r"[\w.-]+@[\w.-]+:", repo))  # fmt: skip


def is_git_checkout(folder: Path) -> bool:
    """The top of a git work tree (a subfolder of one is copied as a plain folder)."""
    return (folder / ".git").exists()


# ------------------------------------------------------------------------------ the copies
@dataclass(frozen=True)
class Copy:
    """A task's private copy of its repository, and how to diff it against where it started.

    `git_env` points git at a private index (and, for a worktree, a private object store that
    borrows the source's objects), so computing the patch writes nothing into the source."""

    path: Path
    base: str  # the commit (git) or tree (plain folder) the copy started from
    git_env: dict[str, str]
    worktree_of: Path | None = None  # the source repository the worktree is registered in
    base_commit: str | None = None


_source_locks: dict[str, threading.Lock] = {}
_source_locks_guard = threading.Lock()


def _source_lock(source: Path) -> threading.Lock:
    """`git worktree add/remove` on one repository, one at a time (they pick names racily)."""
    with _source_locks_guard:
        return _source_locks.setdefault(str(source), threading.Lock())


def prepare_copy(task: Task, scratch: Path) -> Copy:
    """A fresh copy under `scratch`: a worktree at `rev` (a git repository), a clone at `rev`
    (a git URL) or a copy (a plain folder). Raises GitError or OSError."""
    meta, dest = scratch / "meta" / task.id, scratch / "copies" / task.id
    meta.mkdir(parents=True, exist_ok=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    env = {"GIT_INDEX_FILE": str(meta / "index")}
    # Every later git call on the copy names its git folder and work tree, as they are now:
    # a command can rewrite the copy's .git (core.worktree=~ would put the home folder in
    # the patch), and git would follow it.
    if is_git_url(task.repo):
        _git("clone", "--quiet", "--no-checkout", "--", task.repo, str(dest),
             timeout=CLONE_TIMEOUT)  # fmt: skip
        env |= {"GIT_DIR": str(dest / ".git"), "GIT_WORK_TREE": str(dest)}
        _git("checkout", "--quiet", "--detach", task.rev or "HEAD", cwd=dest, env=env)
        commit = _git_text("rev-parse", "HEAD", cwd=dest, env=env)
        return Copy(dest, commit, env, base_commit=commit)
    source = Path(task.repo)
    if is_git_checkout(source):
        with _source_lock(source):
            _git("worktree", "add", "--detach", "--quiet", str(dest), task.rev or "HEAD",
                 cwd=source, timeout=CLONE_TIMEOUT)  # fmt: skip
        git_dir = _git_text("rev-parse", "--absolute-git-dir", cwd=dest)
        env |= {"GIT_DIR": git_dir, "GIT_WORK_TREE": str(dest)}
        commit = _git_text("rev-parse", "HEAD", cwd=dest, env=env)
        common = Path(_git_text("rev-parse", "--git-common-dir", cwd=source))
        (meta / "objects").mkdir()
        env |= {"GIT_OBJECT_DIRECTORY": str(meta / "objects"),
                "GIT_ALTERNATE_OBJECT_DIRECTORIES": str((source / common) / "objects")}  # fmt: skip
        return Copy(dest, commit, env, worktree_of=source, base_commit=commit)
    shutil.copytree(source, dest, symlinks=True, copy_function=_copy_entry)
    _git("init", "--quiet", str(meta / "repo"))
    env |= {"GIT_DIR": str(meta / "repo" / ".git"), "GIT_WORK_TREE": str(dest)}
    _git("add", "--all", cwd=dest, env=env)
    return Copy(dest, _git_text("write-tree", cwd=dest, env=env), env)


def _copy_entry(source: str, dest: str) -> None:
    """How a plain folder's copy takes each file: a regular file with its metadata, a FIFO
    made anew (opening it to copy would block), a socket or device file left out (a device
    could be read forever)."""
    mode = os.lstat(source).st_mode
    if stat.S_ISREG(mode):
        shutil.copy2(source, dest)
    elif stat.S_ISFIFO(mode):
        os.mkfifo(dest, stat.S_IMODE(mode))
    else:
        logger.warning("not copied: %s is a %s", source, file_kind(mode))


def collect_patch(copy: Copy) -> tuple[bytes, list[dict[str, Any]]]:
    """Everything that changed in the copy (new, deleted and binary files included) as a
    patch `git apply` takes at the base, and `{"path", "added", "removed"}` per file."""
    env, cwd = copy.git_env, copy.path
    _git("read-tree", copy.base, cwd=cwd, env=env)
    _git("add", "--all", cwd=cwd, env=env)
    diff = ("diff", "--cached", "--no-renames", "--no-color", "--no-ext-diff", "--no-textconv",
            "--src-prefix=a/", "--dst-prefix=b/")  # fmt: skip
    patch = _git(*diff, "--binary", copy.base, cwd=cwd, env=env)
    files = []
    for entry in _git(*diff, "--numstat", "-z", copy.base, cwd=cwd, env=env).split(b"\0"):
        if entry:
            added, removed, path = entry.decode("utf-8", "surrogateescape").split("\t", 2)
            files.append({"path": path, "added": int(added) if added != "-" else 0,
                          "removed": int(removed) if removed != "-" else 0})  # fmt: skip
    return patch, files


def remove_copy(copy: Copy) -> None:
    if copy.worktree_of is not None:
        with _source_lock(copy.worktree_of), contextlib.suppress(GitError):
            _git("worktree", "remove", "--force", str(copy.path), cwd=copy.worktree_of)
    shutil.rmtree(copy.path, ignore_errors=True)


def release_worktrees(source: Path, scratch: Path) -> None:
    """Unregister every worktree of `source` under `scratch` (a task that died mid-way leaves
    one behind), then prune: after a batch, the source lists no worktree of ours."""
    with contextlib.suppress(GitError):
        listing = _git_text("worktree", "list", "--porcelain", cwd=source)
        for line in listing.splitlines():
            if line.startswith("worktree ") and Path(line[9:]).is_relative_to(scratch):
                with contextlib.suppress(GitError):
                    _git("worktree", "remove", "--force", line[9:], cwd=source)
        _git("worktree", "prune", cwd=source)


# Settings with which git starts a program of the repository's choosing: hooks, an
# fsmonitor, submodule commands, an external diff. A repository someone else wrote (unlike a
# fresh clone) may set any of them in its .git/config, and git would run them here, outside
# any sandbox; every git call overrides them, and the filter drivers (see _filter_settings).
# (The last one only keeps git's advice out of its error lines.)
_SAFE_SETTINGS = (
    ("core.hooksPath", "/dev/null"), ("core.fsmonitor", "false"),
    ("submodule.recurse", "false"), ("diff.external", ""), ("advice.detachedHead", "false"),
)  # fmt: skip


def _git(
    *args: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = GIT_TIMEOUT,
) -> bytes:
    """git, with no prompts and nothing of the repository's run (see _SAFE_SETTINGS), stopped
    after `timeout` seconds; its last error line becomes a GitError."""
    full_env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", **(env or {})}
    settings = [*_SAFE_SETTINGS, *(_filter_settings(cwd, full_env) if cwd is not None else ())]
    # As -c (any git), and a name -c cannot carry ("=" in it) as GIT_CONFIG_* (git 2.31+).
    options = [f"{key}={value}" for key, value in settings if "=" not in key]
    full_env |= _config_environment(full_env, [(k, v) for k, v in settings if "=" in k])
    argv = ["git", *itertools.chain.from_iterable(("-c", option) for option in options), *args]
    try:
        done = subprocess.run(argv, cwd=cwd, env=full_env, stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=timeout)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise GitError(f"git {args[0]} did not finish in {timeout:g}s") from None
    if done.returncode != 0:
        lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise GitError(f"git {args[0]} failed: {lines[-1] if lines else done.returncode}")
    return done.stdout


def _filter_settings(cwd: Path, env: Mapping[str, str]) -> list[tuple[str, str]]:
    """Settings that turn off every filter driver the configuration seen from `cwd` defines:
    a driver's smudge command runs on checkout and its clean command on add, for the files a
    .gitattributes (the repository's, or one the agent wrote) assigns to it."""
    try:
        done = subprocess.run(
            ["git", "config", "--null", "--name-only", "--get-regexp", r"^filter\."],
            cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=GIT_TIMEOUT,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise GitError(f"git config did not finish in {GIT_TIMEOUT}s") from None
    names = os.fsdecode(done.stdout).split("\0")
    drivers = sorted(
        {name[len("filter.") : name.rindex(".")] for name in names if name.count(".") > 1}
    )
    off = (("smudge", ""), ("clean", ""), ("process", ""), ("required", "false"))
    return [(f"filter.{driver}.{key}", value) for driver in drivers for key, value in off]


def _config_environment(env: Mapping[str, str], settings: list[tuple[str, str]]) -> dict[str, str]:
    """`settings` as GIT_CONFIG_COUNT/KEY_n/VALUE_n variables (git's `-c`, without parsing a
    name that holds "="), after those `env` already has."""
    if not settings:
        return {}
    try:
        first = int(env.get("GIT_CONFIG_COUNT", "0"))
    except ValueError:
        first = 0
    variables = {"GIT_CONFIG_COUNT": str(first + len(settings))}
    for n, (key, value) in enumerate(settings, first):
        variables |= {f"GIT_CONFIG_KEY_{n}": key, f"GIT_CONFIG_VALUE_{n}": value}
    return variables


def _git_text(*args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None) -> str:
    return _git(*args, cwd=cwd, env=env).decode("utf-8", "surrogateescape").strip()


# ------------------------------------------------------------------------- one task, anywhere
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
    llm = build_llm(settings, credentials)
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
            permissions=settings.permissions,
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
    )  # fmt: skip


def run_check(command: str, tools: CodeRepositoryTools, timeout: float) -> dict[str, Any]:
    """The task's check in its copy, sandboxed like run_command (no secrets in its
    environment; in bubblewrap when the sandbox is on), killed after `timeout` seconds."""
    code, output, timed_out = run_shell(
        command, tools.repo_path, math.ceil(timeout), policy=tools.sandbox_policy
    )
    tail = tools.redactor.redact(output)[-CHECK_TAIL_CHARS:]
    if timed_out:
        tail += f"\n[the check timed out after {timeout:g}s and was killed]"
        return {"passed": False, "exit_code": None, "output_tail": tail}
    check: dict[str, Any] = {"passed": code == 0, "exit_code": code, "output_tail": tail}
    policy = tools.sandbox_policy
    note = sandbox_note(policy, output, code, for_user=True) if policy and code != 0 else None
    if note:
        check["sandbox_note"] = tools.redactor.redact(note)
    return check


# ------------------------------------------------------------------------------- executors
class Executor(Protocol):
    """Where tasks run: `submit` starts one, `finished` returns the (handle, result) pairs
    done within `timeout`, `cancel` stops the given ones, `close` releases the engine."""

    def submit(self, task: Task) -> Any: ...
    def finished(
        self, handles: Sequence[Any], timeout: float
    ) -> list[tuple[Any, dict[str, Any]]]: ...
    def cancel(self, handles: Sequence[Any]) -> None: ...
    def close(self) -> None: ...


class LocalExecutor:
    """Threads: tasks spend their time waiting on the LLM, so threads scale with --workers."""

    def __init__(self, settings: RunSettings, scratch: Path, workers: int, stop: StopSignal):
        self._settings, self._scratch, self._stop = settings, scratch, stop
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, "toy-agent-task")

    def submit(self, task: Task) -> concurrent.futures.Future[dict[str, Any]]:
        return self._pool.submit(run_task, task, self._settings, self._scratch, self._stop)

    def finished(
        self, handles: Sequence[concurrent.futures.Future[dict[str, Any]]], timeout: float
    ) -> list[tuple[Any, dict[str, Any]]]:
        done, _ = concurrent.futures.wait(
            handles, timeout, return_when=concurrent.futures.FIRST_COMPLETED
        )
        return [(future, future.result()) for future in done]

    def cancel(self, handles: Sequence[Any]) -> None:
        self._stop.set()  # every task on this machine: the batch is stopping

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


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


class RayExecutor:
    """Each task is a Ray task on an existing cluster (`address`, or RAY_ADDRESS), or on a local
    Ray instance started here and stopped in close(). Workers get the provider's key and base
    URL as an argument (see Credentials) and prepare their own copy; the result comes back."""

    def __init__(self, settings: RunSettings, scratch: Path, workers: int, address: str | None):
        try:
            import ray
        except ImportError:
            raise BatchError(f"--executor ray needs the ray package: {INSTALL_RAY}") from None
        except Exception as exc:  # a broken install: a grpc or protobuf mismatch is common
            raise BatchError(f"--executor ray: importing ray failed ({_one_line(exc)}); "
                             f"reinstall it: {INSTALL_RAY}") from None  # fmt: skip
        self._ray = ray
        self._settings, self._scratch = settings, scratch
        cluster = address or os.environ.get("RAY_ADDRESS")
        self._started_here = not ray.is_initialized()
        try:
            if self._started_here and cluster:
                ray.init(address=cluster, logging_level=logging.WARNING)
            elif self._started_here:
                ray.init(address="local", num_cpus=workers, include_dashboard=False,
                         logging_level=logging.WARNING)  # fmt: skip
        except Exception as exc:  # ConnectionError, TimeoutError, RuntimeError, ray's own
            where = f"the Ray cluster at {cluster}" if cluster else "a local Ray instance"
            message = f"--executor ray: could not start or reach {where} ({_one_line(exc)})"
            raise BatchError(f"{message}; check --ray-address or RAY_ADDRESS") from None
        self._credentials = Credentials(provider_environment(settings))
        self._runtime_env: dict[str, Any] = {}
        if cluster:  # the workers may not have toy_agent (this version of it) installed
            self._runtime_env["py_modules"] = [str(Path(__file__).resolve().parent)]
        self._remote = ray.remote(num_cpus=1, max_retries=0)(run_task)
        self._ids: dict[Any, str] = {}

    def submit(self, task: Task) -> Any:
        options = self._remote.options(runtime_env=self._runtime_env)
        ref = options.remote(
            task, self._settings, str(self._scratch), credentials=self._credentials
        )
        self._ids[ref] = task.id
        return ref

    def finished(self, handles: Sequence[Any], timeout: float) -> list[tuple[Any, dict[str, Any]]]:
        ray = self._ray
        ready, rest = ray.wait(list(handles), num_returns=1, timeout=timeout)
        if ready and rest:
            ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
        results: list[tuple[Any, dict[str, Any]]] = []
        for ref in ready:
            task_id = self._ids.pop(ref)
            try:
                results.append((ref, ray.get(ref)))
            except ray.exceptions.RayTaskError:
                raise  # a bug in run_task: it raises, as it would on a thread
            except ray.exceptions.RayError as exc:  # the worker or its node died, or cancelled
                error = f"the Ray task failed: {type(exc).__name__}: {exc}"
                results.append((ref, failed_result(task_id, error)))
        return results

    def cancel(self, handles: Sequence[Any]) -> None:
        for ref in handles:
            with contextlib.suppress(Exception):
                self._ray.cancel(ref)

    def close(self) -> None:
        if self._started_here:
            self._ray.shutdown()


def _one_line(exc: BaseException) -> str:
    """`Type: the last line of the message`, for an error from a library we do not control."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[-1].strip()}" if lines else type(exc).__name__


def provider_environment(settings: RunSettings) -> dict[str, str]:
    """The key, base URL and API version variables a worker's client reads, from this
    environment."""
    if settings.make_llm is not None or settings.provider not in PROVIDER_CLASSES:
        return {}
    facts = PROVIDER_CLASSES[settings.provider]
    key, url = resolve_settings(settings.provider, None, settings.base_url, os.environ)
    variables = {facts.key_envs[0]: key, facts.base_url_env: url}
    if facts.api_version_env and os.environ.get(facts.api_version_env):
        variables[facts.api_version_env] = os.environ[facts.api_version_env]
    return variables


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
        if result["patch_data"]:
            (self.path / patch).write_bytes(result["patch_data"])
        else:
            (self.path / patch).unlink(missing_ok=True)  # an earlier run's would now be a lie
        if result["trajectory_data"] is not None:
            text = json_text(result["trajectory_data"])
            (self.path / trajectory).write_text(text + "\n", encoding="utf-8")
        else:
            (self.path / trajectory).unlink(missing_ok=True)
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

        def over_budget() -> bool:
            spent = sum(r.get("cost_usd") or 0.0 for r in results.values())
            return max_total_cost is not None and spent >= max_total_cost

        interrupted = _drive(engine, todo, workers, record, view, over_budget)
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
        wants_sandbox = settings.allow_commands or any(t.check for t in tasks)
        sandbox = resolve_sandbox(settings.sandbox, warn=wants_sandbox)
        if settings.mcp_servers:
            McpTools(list(settings.mcp_servers), timeout=settings.mcp_timeout).close()
    except McpError as exc:
        raise BatchError(str(exc)) from None
    except SandboxUnavailable as exc:
        raise BatchError(f"--sandbox bwrap: {exc}, or pass --sandbox off") from None
    return replace(settings, sandbox=sandbox)


def _drive(
    engine: Executor,
    todo: collections.deque[Task],
    workers: int,
    record: Callable[[dict[str, Any]], None],
    view: BatchView,
    over_budget: Callable[[], bool] = lambda: False,
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
                running[engine.submit(task)] = task
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
            check = r["check"]
            verdict = "-" if check is None else "passed" if check["passed"] else "failed"
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
    if check is not None:
        parts.append("check passed" if check["passed"] else
                     f"check failed (exit {check['exit_code']})")  # fmt: skip
    n = record["iterations"]
    parts += [f"{n} iteration{'s' * (n != 1)}", f"{_count(_tokens(record))} tokens",
              _duration(record["elapsed_seconds"])]  # fmt: skip
    if record["outcome"] == "error" and record.get("error"):
        parts.append(record["error"])
    return "  ".join(parts)


def _tokens(record: dict[str, Any]) -> int:
    usage = record.get("usage") or {}
    return int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))


def _total_usage(records: Iterable[dict[str, Any]]) -> Usage:
    total = Usage()
    for r in records:
        usage = r.get("usage") or {}
        total += Usage(usage.get("input_tokens", 0), usage.get("output_tokens", 0),
                       usage.get("cached_tokens", 0))  # fmt: skip
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
