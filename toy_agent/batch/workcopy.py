"""A batch task's private copy of its repository, and its changes as a patch, through git.

One task = one fresh copy (a detached git worktree, a clone of a git URL, or a copy of a plain
folder) under a scratch folder. git runs with nothing of the repository's own run (hooks,
filters, an fsmonitor) and never writes into the source.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import shutil
import stat
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from toy_agent.batch.tasks import Task, is_git_checkout, is_git_url
from toy_agent.tree import file_kind

logger = logging.getLogger(__name__)


GIT_TIMEOUT = 300  # seconds for each git call on a copy (a walk of a huge tree included)
CLONE_TIMEOUT = 1800  # for a clone or a worktree checkout of a big repository


class GitError(Exception):
    """A git command that prepares or diffs a copy failed; the task ends with outcome error."""


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
    # The source's object store a shared clone reads (read-only) through its alternates.
    shared_objects: Path | None = None


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
        _checkout(dest, task.rev or "HEAD", env)
        commit = _git_text("rev-parse", "HEAD", cwd=dest, env=env)
        return Copy(dest, commit, env, base_commit=commit)
    source = Path(task.repo)
    if is_git_checkout(source):
        # A clone that borrows the source's objects (--shared: nothing is copied) and has its
        # own .git: the agent's git (stash, checkout -- FILE, commit) writes there, never into
        # the source, and no worktree is registered in it.
        try:
            commit = _git_text("rev-parse", "--verify", "--end-of-options",
                               f"{task.rev or 'HEAD'}^{{commit}}", cwd=source)  # fmt: skip
        except GitError:
            raise GitError(f"git clone failed: {task.rev or 'HEAD'} is not a commit of "
                           f"{source}") from None  # fmt: skip
        common = source / _git_text("rev-parse", "--git-common-dir", cwd=source)
        _git("clone", "--quiet", "--shared", "--no-checkout", "--", str(source), str(dest),
             timeout=CLONE_TIMEOUT)  # fmt: skip
        env |= {"GIT_DIR": str(dest / ".git"), "GIT_WORK_TREE": str(dest)}
        _checkout(dest, commit, env)
        objects = (common / "objects").resolve()
        return Copy(dest, commit, env, base_commit=commit, shared_objects=objects)
    shutil.copytree(source, dest, symlinks=True, copy_function=_copy_entry)
    _git("init", "--quiet", str(meta / "repo"))
    env |= {"GIT_DIR": str(meta / "repo" / ".git"), "GIT_WORK_TREE": str(dest)}
    _git("add", "--all", cwd=dest, env=env)
    return Copy(dest, _git_text("write-tree", cwd=dest, env=env), env)


def _checkout(dest: Path, rev: str, env: Mapping[str, str]) -> None:
    """Check `rev` out in the clone at `dest`, into the clone's own index (the private one is
    the driver's), so the agent's `git status` starts clean."""
    own = {k: v for k, v in env.items() if k != "GIT_INDEX_FILE"}
    _git("checkout", "--quiet", "--detach", rev, cwd=dest, env=own, timeout=CLONE_TIMEOUT)


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


def rebase_copy(copy: Copy) -> Copy:
    """The copy with its files as they are now as the base its patch is taken against (a
    task's setup is not the agent's work). `base_commit` stays the commit it started from."""
    _git("read-tree", copy.base, cwd=copy.path, env=copy.git_env)
    _git("add", "--all", cwd=copy.path, env=copy.git_env)
    return replace(copy, base=_git_text("write-tree", cwd=copy.path, env=copy.git_env))


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
