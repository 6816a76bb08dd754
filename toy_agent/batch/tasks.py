"""Task files for batch runs: one JSON object a line, every line checked before anything runs."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toy_agent.providers import EFFORTS
from toy_agent.record import jsonl_lines

TASK_KEYS = (
    "id", "repo", "task", "rev", "check", "max_iterations", "effort", "keep", "attempts", "setup",
    "env",
)  # fmt: skip
REQUIRED_KEYS = ("id", "repo", "task")
TASK_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # ids name files: patches/ID.diff


class BatchError(Exception):
    """A task file or batch setting that cannot run (CLI exit code 2); names the line."""


@dataclass(frozen=True)
class Task:
    """One line of the task file. `repo` is an absolute folder path or a git URL."""

    id: str
    repo: str
    task: str
    rev: str | None = None
    check: str | None = None
    max_iterations: int | None = None
    effort: str | None = None  # low, medium or high: this task's --effort
    keep: tuple[str, ...] = ()  # checks that pass before and must still pass after
    attempts: int | None = None  # independent attempts, stopping at the first resolved
    budget: float | None = field(default=None, compare=False)  # USD left of --max-total-cost
    instance: Instance | None = field(default=None, compare=False)  # a SWE-bench instance's
    setup: str | None = None  # run once in the copy before anything else; not in the patch
    env: str | None = None  # where its commands run: host, rootfs:DIR, docker:IMAGE, podman:IMAGE


@dataclass(frozen=True)
class Instance:
    """What a SWE-bench instance adds to its task: how it is graded (swebench.py), its gold
    patch for --gold, and its other fields, kept in the results as metadata."""

    test_patch: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    patch: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict, compare=False)
    test_command: str = "python -m pytest -rA"


def load_tasks(path: str | os.PathLike[str]) -> list[Task]:
    """The tasks of a JSONL file; relative repo paths are relative to the file's folder."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise BatchError(f"cannot read --tasks-file {path}: {reason}") from None
    return parse_tasks(jsonl_lines(text), base=path.parent, source=str(path))


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
    for key in ("rev", "check", "setup", "env"):
        if data.get(key) is not None and (not isinstance(data[key], str) or not data[key].strip()):
            raise BatchError(f"{where}: {key!r} must be a non-empty string or null")
    for key in ("max_iterations", "attempts"):
        limit = data.get(key)
        if limit is not None and (type(limit) is not int or limit < 1):
            raise BatchError(f"{where}: {key!r} must be a whole number of at least 1")
    limit = data.get("max_iterations")
    keep = data.get("keep") or []
    if isinstance(keep, str):
        keep = [keep]
    if not isinstance(keep, list) or not all(isinstance(k, str) and k.strip() for k in keep):
        raise BatchError(f"{where}: 'keep' must be a list of check commands (non-empty strings)")
    effort = data.get("effort")
    if effort is not None and effort not in EFFORTS:
        raise BatchError(f"{where}: 'effort' must be one of {', '.join(EFFORTS)} or null")
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
    return Task(data["id"], repo, data["task"], data.get("rev"), data.get("check"), limit,
                effort, tuple(keep), data.get("attempts"), setup=data.get("setup"),
                env=data.get("env"))  # fmt: skip


def is_git_url(repo: str) -> bool:
    """`https://...`, `ssh://...`, `file://...` or scp-like `git@host:path`."""
    return bool(re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", repo) or
                re.match(r"[\w.-]+@[\w.-]+:", repo))  # fmt: skip


def is_git_checkout(folder: Path) -> bool:
    """The top of a git work tree (a subfolder of one is copied as a plain folder)."""
    return (folder / ".git").exists()
