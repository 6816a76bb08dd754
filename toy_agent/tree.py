"""What a repository holds: the walk that skips what is ignored, each folder's scan remembered.

A folder's scan is reused until the folder changes; what git and humans ignore is skipped.

list_files and search_in_files both walk through a Tree, so they agree on what the repository
holds. Callers pass paths already resolved and confined to the repository root; nothing here
checks that.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import os
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from toy_agent.ignore import (
    _NOFOLLOW,
    IGNORE_FILE_MAX_REGEX,
    _names_with,
    _read_ignore_file,
    _Specs,
    gitignored,
    ignore_rules,
    ignored_names,
)

logger = logging.getLogger(__name__)

NOISE_DIRS = frozenset(
    {
        "node_modules", "__pycache__", "venv", ".venv", "build", "dist", "target", ".git", ".hg",
        ".svn", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox", ".nox", ".eggs",
        "htmlcov", "bower_components", ".next", ".gradle", ".idea", ".vscode",
    }
)  # fmt: skip
_KINDS = {
    stat.S_IFDIR: "dir", stat.S_IFREG: "file", stat.S_IFIFO: "fifo", stat.S_IFSOCK: "socket",
    stat.S_IFCHR: "char device", stat.S_IFBLK: "block device",
}  # fmt: skip
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_SCAN_FD = os.scandir in os.supports_fd and bool(_NOFOLLOW and _DIRECTORY)  # not on Windows


# A folder changed this close to its scan may change again without its timestamp moving (a
# timestamp is as coarse as a clock tick, or 2 s on FAT): its scan is not reused. Git's index
# has the same "racy" rule.
RACY_SECONDS = 2.0
WALK_CACHE_MAX_ENTRIES = 200_000  # beyond this many entries, a Tree stops remembering folders

_Entry = tuple[str, str]  # (repo-relative path, kind)
_Stamp = tuple[int, int, int, int]
# Paths in walk order, the special files' kinds, the depth below the walk's top (1: inside it)
_Run = tuple[list[str], dict[str, str], int]
_NO_KINDS: dict[str, str] = {}


@dataclass(frozen=True)
class _Folder:
    """One folder's scan: the repository paths of its entries that pass the name and ignore
    rules it was scanned with, sorted, a folder's with a "/" at the end (so they sort as git
    lists them). `odd` holds the kinds of the others that are not plain files: "link" for a
    symlink, checked again on every walk (its target can change without this folder
    changing), and the special files' kinds (see file_kind). `marks` are where the folders and
    links are; the rest is handed on in slices."""

    stamp: _Stamp | None  # the folder's (mtime, ctime, inode, device); None: not to be reused
    specs: _Specs
    has_ignore_file: bool
    paths: list[str]
    odd: dict[str, str]
    marks: list[int]
    is_venv: bool = False  # it holds a pyvenv.cfg: a virtualenv, whatever its name


class _Frame:
    """A folder part-way through a walk: its next mark, and where its next run starts."""

    __slots__ = ("path", "cut", "folder", "mark", "start")

    def __init__(self, path: str, rel: str, folder: _Folder):
        self.path, self.cut, self.folder = path, len(rel) + 1 if rel else 0, folder
        self.mark = self.start = 0


@dataclass
class Listing:
    """What a walk yields, for list_files: the paths in walk order (sorted, a folder's ending
    with "/"), the kinds of the special files among them, where in `paths` the folders are,
    and the runs of entries in one folder, as (start, stop, depth below the top: 1 for the
    entries right inside it)."""

    paths: list[str]
    special: dict[str, str]
    folders: list[int]
    runs: list[tuple[int, int, int]]


class Tree:
    """What a repository holds, for list_files and search: walks that skip what git and humans
    ignore, remembering each folder's scan until the folder changes.

    A folder's timestamp changes whenever an entry is added, removed or renamed in it, so a
    folder whose timestamp, and whose ignore rules, are as they were is not scanned again (git's
    untracked cache works the same way). Symlinks and virtualenv markers are checked on every
    walk. A Tree lives as long as its CodeRepositoryTools; nothing is kept on disk.
    `racy_seconds`: a folder or ignore file changed less than this before a scan is read again
    next time (RACY_SECONDS covers FAT; where timestamps are fine, a clock tick would do).
    """

    def __init__(
        self,
        root: Path,
        *,
        max_entries: int = WALK_CACHE_MAX_ENTRIES,
        racy_seconds: float = RACY_SECONDS,
    ):
        self.root = root
        self._folders: dict[str, _Folder] = {}
        self._ignore_files: dict[str, tuple[_Stamp, tuple[str, ...]]] = {}
        self._held = 0  # entries remembered, up to max_entries
        self._max_entries = max_entries
        self._racy_ns = int(racy_seconds * 1e9)
        self.scans = 0  # folders read from disk so far; the others came from memory
        self.unreadable: set[str] = set()  # folders the last scan could not read (permissions)
        self._warming: threading.Thread | None = None
        self._lock = threading.Lock()  # the bookkeeping of a walk and a warm-up at once

    def warm_up(self) -> None:
        """Walk the whole tree in a background thread, so that the first list or search finds
        it remembered (a run starts this as its first LLM call goes out). The thread lets
        others run between folders; a walk started meanwhile waits for it to finish."""
        if self._warming is not None and self._warming.is_alive():
            return

        def warm() -> None:
            for _ in self._runs(self.root, polite=True):
                pass

        self._warming = threading.Thread(target=warm, name="toy-agent-walk", daemon=True)
        self._warming.start()

    def walk(self, top: Path) -> Iterator[_Entry]:
        """Yield (repo-relative path, kind) under `top`, skipping what git and humans ignore. The
        kind is "dir", "file", or a special file's (see file_kind), which search never opens.

        Directory symlinks are never followed; file symlinks are kept, as "file", only when
        they resolve to a regular file inside the repository, so nothing outside is ever listed
        or searched. Entries come in git's order: "a.py" before "a/" and what is in it.
        """
        for paths, odd, _ in self._runs_after_warm_up(top):
            for path in paths:
                yield (path[:-1], "dir") if path[-1] == "/" else (path, odd.get(path, "file"))

    def listing(self, top: Path) -> Listing:
        """What walk yields, for list_files: built from the remembered scans a folder at a
        time, without a step per entry."""
        listing = Listing([], {}, [], [])
        paths = listing.paths
        for run, odd, depth in self._runs_after_warm_up(top):
            start = len(paths)
            paths += run
            listing.runs.append((start, len(paths), depth))
            if odd:
                listing.special.update((path, odd[path]) for path in run if path in odd)
            elif len(run) == 1 and run[0][-1] == "/":  # a folder comes alone, see _runs
                listing.folders.append(start)
        return listing

    def files(self, top: Path) -> Iterator[str]:
        """The regular files walk yields (and the links to them), in walk order: the files a
        search reads, never a FIFO or a device, which would block grep and rg or feed them
        endless bytes."""
        for paths, odd, _ in self._runs_after_warm_up(top):
            if odd:
                yield from (path for path in paths if path[-1] != "/" and path not in odd)
            else:
                yield from (path for path in paths if path[-1] != "/")

    def _runs_after_warm_up(self, top: Path) -> Iterator[_Run]:
        warming = self._warming
        if warming is not None and warming is not threading.current_thread():
            warming.join()  # its work would be done twice, and slower for sharing the GIL
        return self._runs(top, polite=False)

    def _runs(self, top: Path, polite: bool) -> Iterator[_Run]:
        """The walk as runs of paths, in path order (what is in a folder comes right after it,
        before its next sibling): slices of the remembered scans, so that a walk from memory
        costs little more than a copy. A folder, or a link to a file, comes as a run of one."""
        specs, explicit = self._ancestor_rules(top)
        rel_top = "" if top == self.root else _rel(self.root, top)
        frames = [_Frame(str(top), rel_top, self._folder(str(top), rel_top, specs, explicit))]
        while frames:
            frame, depth = frames[-1], len(frames)
            paths, marks, odd = frame.folder.paths, frame.folder.marks, frame.folder.odd
            if frame.mark == len(marks):
                if frame.start < len(paths):
                    yield paths[frame.start :], odd, depth
                frames.pop()
                continue
            at = marks[frame.mark]
            frame.mark += 1
            if at > frame.start:
                yield paths[frame.start : at], odd, depth
            frame.start = at + 1
            rel = paths[at]
            if rel[-1] != "/":  # a symlink
                if _is_inner_file_link(self.root, f"{frame.path}/{rel[frame.cut :]}"):
                    yield [rel], _NO_KINDS, depth
                continue
            rel = rel[:-1]
            path = f"{frame.path}/{rel[frame.cut :]}"
            if polite:
                time.sleep(0)  # let a thread waiting for the GIL (the LLM call) have it
            below = self._folder(path, rel, frame.folder.specs, explicit)
            if not below.is_venv:
                yield [paths[at]], _NO_KINDS, depth
                frames.append(_Frame(path, rel, below))

    def is_ignored(self, top: Path) -> bool:
        """Whether `top` itself is normally ignored (hidden, noise or gitignored). walk still
        lists such a folder when asked for it explicitly, without gitignore filtering below."""
        return self._ancestor_rules(top)[1]

    def _folder(self, directory: str, rel_dir: str, specs: _Specs, explicit: bool) -> _Folder:
        """The scan of `directory` under the ignore rules `specs` of the folders above: the
        last one if the folder has not changed since, else a new one."""
        now = time.time_ns()
        known = self._folders.get(directory)
        if known is not None and known.stamp is not None:
            try:
                st = os.stat(directory, follow_symlinks=False)
            except OSError:
                st = None
            if st is not None and known.stamp == _dir_stamp(st):
                here = self._with_ignore_file(specs, rel_dir, directory, known.has_ignore_file)
                if known.specs == here:
                    return known
        self.scans += 1  # not exact while a warm-up runs: a count for tests and the log
        try:
            st, (dirs, files, kinds) = _scan(directory)
        except OSError as exc:  # no permission, or a link or a file since its parent's scan
            logger.debug("cannot scan %s: %s", directory, exc)
            if isinstance(exc, PermissionError):
                with self._lock:
                    self.unreadable.add(rel_dir)
            return _Folder(None, specs, False, [], _NO_KINDS, [])
        if self.unreadable:
            with self._lock:
                self.unreadable.discard(rel_dir)
        stamp = _dir_stamp(st)
        has_ignore_file = not explicit and ".gitignore" in files
        here = self._with_ignore_file(specs, rel_dir, directory, has_ignore_file)
        paths, odd, marks = _kept(dirs, files, kinds, f"{rel_dir}/" if rel_dir else "", here)
        racy = st.st_mtime_ns + self._racy_ns > now or st.st_ctime_ns + self._racy_ns > now
        is_venv = "pyvenv.cfg" in files or "pyvenv.cfg" in dirs or "pyvenv.cfg" in kinds
        folder = _Folder(None if racy else stamp, here, has_ignore_file, paths, odd, marks, is_venv)
        with self._lock:
            replaced = self._folders.get(directory)
            held = self._held - (len(replaced.paths) if replaced is not None else 0)
            if held + len(paths) <= self._max_entries:
                self._held = held + len(paths)
                self._folders[directory] = folder
        return folder

    def _ancestor_rules(self, top: Path) -> tuple[_Specs, bool]:
        """Ignore rules in force at `top`, and whether `top` itself is ignored (asked for
        explicitly, in which case nothing below it is filtered by gitignore)."""
        specs = self._with_rules((), "", str(self.root / ".git" / "info" / "exclude"), False)
        directory, rel_dir = self.root, ""
        for part in top.relative_to(self.root).parts:
            specs = self._with_rules(specs, rel_dir, f"{directory}/.gitignore", False)
            directory, rel_dir = directory / part, f"{rel_dir}/{part}" if rel_dir else part
            if (
                part.startswith(".")
                or _is_noise_dir(part, str(directory))
                or gitignored(rel_dir, True, specs)
            ):
                return (), True
        return specs, False

    def _with_ignore_file(
        self, specs: _Specs, rel_dir: str, directory: str, present: bool
    ) -> _Specs:
        """`present`: the folder's scan found a regular file named .gitignore in it."""
        return (
            self._with_rules(specs, rel_dir, f"{directory}/.gitignore", True) if present else specs
        )

    def _with_rules(self, specs: _Specs, rel_dir: str, file: str, seen: bool) -> _Specs:
        """Add one ignore file's rules, read again only when the file has changed. `seen`: a
        scan found it a regular file (else it is checked before it is opened)."""
        known = self._ignore_files.get(file)
        if known is not None:
            try:
                st = os.stat(file, follow_symlinks=False)
            except OSError:
                return specs
            if known[0] != _file_stamp(st):
                known, seen = None, stat.S_ISREG(st.st_mode)
        if known is not None:
            lines = known[1]
        else:
            read = _read_ignore_file(file, seen)
            if read is None:
                return specs
            st, lines = read
            if st.st_mtime_ns + self._racy_ns < time.time_ns():
                self._ignore_files[file] = (_file_stamp(st), lines)
        rules = ignore_rules(lines)
        if rules is not None and rules.used < len(lines) and known is None:  # once per change
            logger.warning("%s would compile to over %d characters of regex; only its first %d "
                           "lines are used", file, IGNORE_FILE_MAX_REGEX, rules.used)  # fmt: skip
        return (*specs, (rel_dir, rules)) if rules is not None else specs


def walk(root: Path, top: Path) -> Iterator[_Entry]:
    """Tree.walk, once (see there)."""
    return Tree(root).walk(top)


def _scan(
    directory: str,
) -> tuple[os.stat_result, tuple[list[str], list[str], dict[str, str]]]:
    """The stat of the folder `directory` and its entries as _names gives them; OSError when
    it is not a folder (a symlink to one included). Where the OS allows, the folder is opened
    without following a symlink and read through that descriptor: no window between the check
    and the read, and no path joined for each entry."""
    if not _SCAN_FD:
        st = os.stat(directory, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode):
            raise NotADirectoryError(directory)
        with os.scandir(directory) as scan:
            return st, _names(list(scan))
    fd = os.open(directory, os.O_RDONLY | _NOFOLLOW | _DIRECTORY)
    try:
        with os.scandir(fd) as scan:
            return os.fstat(fd), _names(list(scan))  # fd open: a special file's stat needs it
    finally:
        os.close(fd)


def _names(found: list[os.DirEntry[str]]) -> tuple[list[str], list[str], dict[str, str]]:
    """The names of one folder's folders, of its regular files, and the kinds of the rest:
    "link" for a symlink, else a special file's (see file_kind)."""
    files = [e.name for e in found if e.is_file(follow_symlinks=False)]  # no syscall: the
    if len(files) == len(found):  # scan knows; and most folders hold files only
        return [], files, {}
    dirs = [e.name for e in found if e.is_dir(follow_symlinks=False)]
    kinds = {}
    if len(dirs) + len(files) < len(found):  # symlinks and special files, seldom any
        usual = {*dirs, *files}
        for entry in found:
            if entry.name in usual:
                continue
            try:
                kinds[entry.name] = (
                    "link"
                    if entry.is_symlink()
                    else file_kind(entry.stat(follow_symlinks=False).st_mode)
                )
            except OSError:
                continue
    return dirs, files, kinds


def _kept(
    dirs: list[str], files: list[str], kinds: dict[str, str], prefix: str, specs: _Specs
) -> tuple[list[str], dict[str, str], list[int]]:
    """The entries of one folder (see _names) that pass the name and ignore rules: their sorted
    repository paths (a folder's ends with "/"), the kinds of those that are neither folders
    nor regular files ("link" for any symlink: Tree.walk checks its target each time), and
    where the folders and links are.

    This runs for every entry of a cold walk, so the files (most entries) are looked at as one
    string, the names between NULs, which no name contains: a search of it finds whether any
    is hidden or compiled, and which an ignore rule could match (see _Rules). Only those names
    meet a Python loop or the regexes."""
    if kinds:
        files = files + list(kinds)
    dirs = [
        n for n in dirs
        if n[0] != "." and not n.endswith(_COMPILED) and n not in NOISE_DIRS
        and not n.endswith(".egg-info")
    ]  # fmt: skip
    block = "\0" + "\0".join(files) + "\0"
    hidden = _names_with(block, _COMPILED, (".",))  # a .gitignore, mostly
    if hidden:
        files = _without(files, hidden)
    if specs:
        ignored = ignored_names(block, hidden, dirs, prefix, specs)
        if ignored:
            files = _without(files, ignored)
            dirs = _without(dirs, ignored) if dirs else dirs
    paths = list(map(prefix.__add__, files))
    marked = [f"{prefix}{n}/" for n in dirs]
    paths += marked
    paths.sort()
    odd = {prefix + n: kinds[n] for n in files if n in kinds} if kinds else _NO_KINDS
    marked += [path for path, kind in odd.items() if kind == "link"]
    return paths, odd, sorted(map(bisect.bisect_left, itertools.repeat(paths), marked))


def _without(names: list[str], dropped: set[str]) -> list[str]:
    """`names` less `dropped`: a few are removed in place (list.remove scans in C)."""
    if len(dropped) > 8:
        return [n for n in names if n not in dropped]
    for name in dropped:
        if name in names:  # else in the other list
            names.remove(name)
    return names


# What the walk never lists, whatever the ignore files say: compiled Python.
_COMPILED = (".pyc", ".pyo")


def file_kind(mode: int) -> str:
    """A stat mode in words: "dir", "file", "fifo", "socket", "char device", "block device"."""
    return _KINDS.get(stat.S_IFMT(mode), "special file")


def _is_inner_file_link(root: Path, link: str) -> bool:
    try:
        target = Path(link).resolve()
    except (OSError, RuntimeError):
        return False
    return target.is_relative_to(root) and target.is_file()


def _rel(root: Path, resolved: Path) -> str:
    return resolved.relative_to(root).as_posix() or "."


def _dir_stamp(st: os.stat_result) -> _Stamp:
    return (st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


def _file_stamp(st: os.stat_result) -> _Stamp:
    return (st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_size)


def _is_noise_dir(name: str, path: str) -> bool:
    return (
        name in NOISE_DIRS
        or name.endswith(".egg-info")
        or os.path.exists(os.path.join(path, "pyvenv.cfg"))  # a virtualenv, whatever its name
    )
