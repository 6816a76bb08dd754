"""Which files of a repository count, and finding text in them.

list_files and search_in_files must agree on what the repository holds, and every search backend
(grep, rg, Python) must give the same answer, so the ignore rules, the walk and the backends live
here together, apart from the tools' own job of confining paths and wording observations. Callers
pass paths already resolved and confined to the repository root; nothing here checks that.
"""

from __future__ import annotations

import bisect
import fnmatch
import functools
import heapq
import itertools
import json
import logging
import os
import platform
import re
import shutil
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from toy_agent.environment import child_environment
from toy_agent.files import open_regular_fd
from toy_agent.messages import shown_path

logger = logging.getLogger(__name__)

NOISE_DIRS = frozenset(
    {
        "node_modules", "__pycache__", "venv", ".venv", "build", "dist", "target", ".git", ".hg",
        ".svn", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox", ".nox", ".eggs",
        "htmlcov", "bower_components", ".next", ".gradle", ".idea", ".vscode",
    }
)  # fmt: skip
SEARCH_MAX_MATCHES = 100
SEARCH_LINE_CHARS = 200
SEARCH_TIMEOUT = 60
FILE_PATTERN_MAX_GLOBS = 256  # what a file_pattern's {a,b} may expand to
RESEARCH_MAX_BYTES = 64 << 20  # a shown file with lone CRs is searched again up to this size
SEARCH_BACKENDS = ("rg", "grep", "python")
IGNORE_FILE_MAX_BYTES = 1 << 20  # a hostile .gitignore is read only this far
IGNORE_FILE_MAX_LINES = 10_000
# A longer .gitignore line, or one with more stars, is skipped: no real pattern is, and it
# compiles to a big regex (each star is an atomic group, see _ignore_regex).
IGNORE_PATTERN_MAX_CHARS = 1024
IGNORE_PATTERN_MAX_STARS = 32
_KINDS = {
    stat.S_IFDIR: "dir", stat.S_IFREG: "file", stat.S_IFIFO: "fifo", stat.S_IFSOCK: "socket",
    stat.S_IFCHR: "char device", stat.S_IFBLK: "block device",
}  # fmt: skip
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_SCAN_FD = os.scandir in os.supports_fd and bool(_NOFOLLOW and _DIRECTORY)  # not on Windows

_Specs = tuple[tuple[str, "_Rules"], ...]  # (folder, its ignore file)
Match = tuple[str, int, str]  # (repo-relative path, line number, line text)


class SearchError(Exception):
    """The search cannot be done as asked; the message is meant for the LLM."""


class _BackendFailed(Exception):
    """A search backend could not run this search; the next one may."""


@dataclass(frozen=True)
class SearchResult:
    """What one search found, with enough to word the observation and the log line. Only the
    lines shown are kept: a broad pattern can match tens of thousands of them."""

    shown: list[Match]  # the first SEARCH_MAX_MATCHES matches, by path then line number
    n_matches: int  # matching lines in all
    n_matched_files: int
    n_files: int  # files searched
    backend: str  # the backend that answered


# --------------------------------------------------------------------------------- walking
# A folder changed this close to its scan may change again without its timestamp moving (a
# timestamp is as coarse as a clock tick, or 2 s on FAT): its scan is not reused. Git's index
# has the same "racy" rule.
_RACY_NS = 2_000_000_000
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
    """

    def __init__(self, root: Path, *, max_entries: int = WALK_CACHE_MAX_ENTRIES):
        self.root = root
        self._folders: dict[str, _Folder] = {}
        self._ignore_files: dict[str, tuple[_Stamp, tuple[str, ...]]] = {}
        self._held = 0  # entries remembered, up to max_entries
        self._max_entries = max_entries
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
        racy = st.st_mtime_ns + _RACY_NS > now or st.st_ctime_ns + _RACY_NS > now
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
                or _gitignored(rel_dir, True, specs)
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
            if st.st_mtime_ns + _RACY_NS < time.time_ns():
                self._ignore_files[file] = (_file_stamp(st), lines)
        rules = _ignore_rules(lines)
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
        ignored = _ignored_names(block, hidden, dirs, prefix, specs)
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


def _ignored_names(
    block: str, hidden: set[str], dirs: list[str], prefix: str, specs: _Specs
) -> set[str]:
    """The names among the files in `block` (see _kept) but not in `hidden`, and among `dirs`,
    entries of the folder at `prefix`, that the ignore files `specs` ignore: git's rule, the
    deepest ignore file with a matching pattern decides, and in it the last matching pattern.
    Only the names some ignoring pattern could match are put to the regexes."""
    ends: tuple[str, ...] = ()
    starts: tuple[str, ...] = ()
    for _, rules in specs:
        if rules.any_name:
            candidates = {*filter(None, block.split("\0")), *dirs}
            break
        ends += rules.ends
        starts += rules.starts
    else:
        candidates = _names_with(block, ends, starts)
        candidates.update(n for n in dirs if n.endswith(ends) or n.startswith(starts))
    candidates -= hidden
    if not candidates:
        return set()
    folders = set(dirs)
    return {n for n in candidates if _gitignored(prefix + n, n in folders, specs)}


def _names_with(block: str, ends: tuple[str, ...], starts: tuple[str, ...]) -> set[str]:
    """The names in `block` ("\0name\0name\0") that end with one of `ends` or start with one
    of `starts` (none of which holds a NUL), found by searching the block for them."""
    found = set()
    for end in ends:
        at = block.find(end + "\0")
        while at >= 0:
            stop = at + len(end)
            found.add(block[block.rfind("\0", 0, at + 1) + 1 : stop])
            at = block.find(end + "\0", stop)
    for start in starts:
        at = block.find("\0" + start)
        while at >= 0:
            stop = block.index("\0", at + 1)
            found.add(block[at + 1 : stop])
            at = block.find("\0" + start, stop)
    return found


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


# --------------------------------------------------------------------------------- ignoring
def _dir_stamp(st: os.stat_result) -> _Stamp:
    return (st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


def _file_stamp(st: os.stat_result) -> _Stamp:
    return (st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_size)


def _read_ignore_file(file: str, seen: bool) -> tuple[os.stat_result, tuple[str, ...]] | None:
    """The stat of an ignore file and its lines as git reads them (see _ignore_lines), capped;
    None when there is none. A regular file only, never read through a symlink (git does the
    same), so a FIFO or a device named .gitignore cannot block or flood the walk: unless a
    scan has `seen` it to be a regular file, it is checked before it is opened, and in any
    case after."""
    try:
        if not (seen or stat.S_ISREG(os.lstat(file).st_mode)):
            return None
    except OSError:
        return None
    opened = open_regular_fd(file, follow=False)  # None if swapped since it was seen or checked
    if opened is None:
        return None
    fd, size = opened
    try:
        st = os.fstat(fd)
        data = os.read(fd, min(size, IGNORE_FILE_MAX_BYTES) + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > IGNORE_FILE_MAX_BYTES:
        logger.warning("%s is over %d bytes; only its start is used", file, IGNORE_FILE_MAX_BYTES)
        data = data[:IGNORE_FILE_MAX_BYTES].rpartition(b"\n")[0]
    lines = _ignore_lines(data)
    if len(lines) > IGNORE_FILE_MAX_LINES:
        logger.warning("%s has over %d lines; the rest are not used", file, IGNORE_FILE_MAX_LINES)
    return st, tuple(lines[:IGNORE_FILE_MAX_LINES])


def _ignore_lines(data: bytes) -> list[str]:
    """An ignore file's patterns as git reads them: a UTF-8 byte-order mark skipped, lines
    split at "\n" only, a "\r" before it dropped, and unescaped trailing spaces (not tabs)
    removed. Bytes that are not UTF-8 decode as file names do (os.fsdecode)."""
    text = data.removeprefix(b"\xef\xbb\xbf").decode("utf-8", "surrogateescape")
    return [_trim_trailing_spaces(line.removesuffix("\r")) for line in text.split("\n")]


def _trim_trailing_spaces(line: str) -> str:
    """git's trim_trailing_spaces: drop the spaces at the end unless escaped ("a\\ " keeps one)."""
    end = len(line.rstrip(" "))
    if end == len(line):
        return line
    backslashes = len(line[:end]) - len(line[:end].rstrip("\\"))
    return line[: end + 1] if backslashes % 2 else line[:end]


@dataclass(frozen=True)
class _Rules:
    """One ignore file: its patterns as one regex, and what an entry's name must look like for
    any of its ignoring (not "!") patterns to match it: end with one of `ends` (a whole name
    counts as an end) or start with one of `starts`; `any_name` when some pattern says nothing
    of the name (`*`, `foo/**`). A pattern matches a path only if its last segment matches the
    last name, so the walk puts only such names to the regex (git narrows its matching the
    same way, by a pattern's literal prefix and suffix)."""

    regex: re.Pattern[str]
    ends: tuple[str, ...]
    starts: tuple[str, ...]
    any_name: bool


@functools.lru_cache(maxsize=64)
def _ignore_rules(lines: tuple[str, ...]) -> _Rules | None:
    """One ignore file as _Rules. The regex is matched at the start of the path below the
    file's folder (with "/" appended to folders). Its alternatives are the file's patterns,
    last first, so the one that matches is git's deciding pattern; its group is named "y<k>"
    when the pattern ignores, "n<k>" when it re-includes ("!"). Cached: the same file recurs in
    every walk and often in many folders. None when no line is a pattern."""
    alternatives = []
    ends: list[str] = []
    starts: list[str] = []
    any_name = False
    for k in reversed(range(len(lines))):
        line = lines[k]
        if len(line) > IGNORE_PATTERN_MAX_CHARS or line.count("*") > IGNORE_PATTERN_MAX_STARS:
            logger.warning("ignoring a .gitignore line too long or with too many *: %.80r", line)
            continue
        translated = _ignore_regex(line, f"p{k}")
        if translated is None:
            continue
        regex, include = translated
        alternatives.append(f"(?P<{'y' if include else 'n'}{k}>{regex})")
        if include:
            hint = _name_hint(line)
            if hint is None:
                any_name = True
            else:
                ends += hint[0]
                starts += hint[1]
    if not alternatives:
        return None
    return _Rules(  # a name holds no NUL: an end or start with one can match nothing
        re.compile("|".join(alternatives)),
        tuple(dict.fromkeys(end for end in ends if "\0" not in end)),
        tuple(dict.fromkeys(start for start in starts if "\0" not in start)),
        any_name,
    )


_GLOB_CHARS = "*?[]\\"


def _name_hint(line: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """What a name must end or start with for the ignoring pattern `line` to match it, from the
    pattern's last segment: (ends, starts). A segment without wildcards is its own end; "*.log"
    ends with ".log", "*.py[cod]" with ".pyc", ".pyo" or ".pyd"; ".coverage.*" starts with
    ".coverage.". None when it tells nothing (`*`, `x/**`, escapes)."""
    segment = line.rstrip("/").rpartition("/")[2]
    if not segment or "\\" in segment:
        return None
    ends = [segment]
    if segment.endswith("]") and (opening := segment.rfind("[")) >= 0:
        members = segment[opening + 1 : -1]
        if members.isalnum():  # a plain set: no range, no negation, no [:class:]
            ends = [segment[:opening] + member for member in members]
    tails = tuple(_literal_tail(end) for end in ends)
    if all(tails):
        return tails, ()
    head = segment[: min(i for i, char in enumerate(segment) if char in _GLOB_CHARS)]
    return ((), (head,)) if head else None


def _literal_tail(glob: str) -> str:
    """The end of `glob` after its last wildcard character."""
    cut = max(glob.rfind(char) for char in _GLOB_CHARS)
    return glob[cut + 1 :]


def _ignore_regex(line: str, tag: str = "") -> tuple[str, bool] | None:
    """One ignore-file line (as _ignore_lines gives it) as (regex, include); None for blank
    lines, comments and lines that can never match (an unclosed [...], a trailing backslash).
    The regex is matched at the start of one path below the ignore file's folder, with "/"
    appended to folders, and matches it when git's pattern matches that path itself: what is
    below an ignored folder is never walked, and a "!" line that matches a folder brings back
    the folder only, not the files in it (the tests hold walk against git itself).

    The regex is built so that Python's backtracking stays polynomial whatever the line: a
    plain translation of `*a*a*a*a*a*a*b` needs exponential time on a long name of a's. A
    glob's pieces between stars have fixed lengths, so placing each piece at its first fit
    never rules out a match that a later fit allows; the same holds for runs of whole path
    segments between `**`. Each such first fit is made atomic (never retried), which leaves one
    retried choice: where the last run starts.
    """
    if not line or line.startswith("#"):
        return None
    include = not line.startswith("!")
    segments = (line if include else line[1:]).split("/")
    is_dir = not segments[-1]  # "x/" matches folders only
    if is_dir:
        segments.pop()
    if segments and not segments[0]:
        del segments[0]  # "/x": only at the ignore file's own level
    elif len(segments) == 1:
        segments.insert(0, "**")  # "x" and "x/": at any depth
    if not segments:
        return None
    segments = [s for i, s in enumerate(segments) if s != "**" or segments[i - 1 : i] != ["**"]]
    if segments in (["**"], ["**", "*"]):
        return (r"(?s:.*)/\Z" if is_dir else ""), include  # every folder, or everything

    atomic = _atomic_maker(tag)
    lead = ""  # a condition on the whole path, checked once
    runs: list[str] = [""]  # regex pieces; a new run starts at each "**/"
    for i, segment in enumerate(segments):
        if segment == "**":
            if i == len(segments) - 1:  # "x/**": what is inside x; "x/**/": folders inside x
                runs[-1] += "/(?s:.)"
                lead = r"(?=(?s:.*)/\Z)" if is_dir else ""
                continue
            runs[-1] += "/" if i else ""
            runs.append("")
            continue
        glob = _segment_regex(segment, atomic)
        if glob is None:
            return None
        runs[-1] += ("/" if i and segments[i - 1] != "**" else "") + glob
    if segments[-1] != "**":
        runs[-1] += r"/\Z" if is_dir else r"/?\Z"  # a folder; a file or a folder
    first, middle, last = runs[0], runs[1:-1], (runs[-1] if len(runs) > 1 else None)
    regex = lead + first + "".join(atomic(r"(?:[^/]*/)*?" + run) for run in middle)
    if last is not None:
        regex += r"(?s:.*/)??" + last  # the one retried choice: here, then after each "/"
    return regex, include


def _atomic_maker(tag: str) -> Callable[[str], str]:
    """Wraps a regex so that its first match is kept and never retried. Python 3.10 has no
    (?>...), but a lookahead is atomic and the backreference then takes what it matched. The
    groups are named after `tag`, unique among the patterns joined in one regex."""
    names = itertools.count()

    def atomic(regex: str) -> str:
        name = f"{tag}a{next(names)}"
        return f"(?=(?P<{name}>{regex}))(?P={name})"

    return atomic


def _segment_regex(glob: str, atomic: Callable[[str], str]) -> str | None:
    """A glob for one path segment (no "/"), read as git's wildmatch does; None when it can
    never match."""
    if glob == "*":
        return "[^/]+"
    pieces, i, after_star = [""], 0, False  # the parts between stars
    while i < len(glob):
        char, i = glob[i], i + 1
        if char == "*":
            if not after_star:
                pieces.append("")
            after_star = True
            continue
        after_star = False
        if char == "\\":
            if i == len(glob):
                return None  # a trailing backslash
            char, i = glob[i], i + 1
            pieces[-1] += re.escape(char)
        elif char == "?":
            pieces[-1] += "[^/]"
        elif char == "[":
            bracket = _bracket_regex(glob, i)
            if bracket is None:
                return None
            pieces[-1] += bracket[0]
            i = bracket[1]
        else:
            pieces[-1] += re.escape(char)
    if len(pieces) == 1:
        return pieces[0]
    first, *middle, last = pieces
    return first + "".join(atomic("[^/]*?" + piece) for piece in middle) + "[^/]*" + last


_POSIX_CLASSES = {  # git's own ctype: ASCII only
    "alnum": "a-zA-Z0-9", "alpha": "a-zA-Z", "blank": " \\t", "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9", "graph": "!-~", "lower": "a-z", "print": " -~", "punct": "!-/:-@\\[-`{-~",
    "space": " \\t\\n\\r", "upper": "A-Z", "xdigit": "0-9A-Fa-f",
}  # fmt: skip


def _bracket_regex(glob: str, start: int) -> tuple[str, int] | None:
    """The [...] class whose "[" is just before `start`, read as git's wildmatch does: "!" or
    "^" first negates, a "]" first is a member, a backslash escapes the next character, a-z is
    a range (z-a only its z), [:alpha:] and the like are classes, and "/" never matches.
    Returns (regex, index past the "]"), or None when the class is not closed or names an
    unknown [:class:], which git reads as never matching."""
    i = start
    negated = glob[i : i + 1] in ("!", "^")
    i += negated
    members: list[str] = []
    previous = ""  # the last single character read, the start of a range after it
    first = True
    while True:
        if i >= len(glob):
            return None
        char = glob[i]
        if char == "]" and not first:
            break
        first = False
        if char == "\\":
            i += 1
            if i >= len(glob):
                return None
            char = glob[i]
            members.append(re.escape(char))
        elif char == "-" and previous and i + 1 < len(glob) and glob[i + 1] != "]":
            i += 1
            high = glob[i]
            if high == "\\":
                i += 1
                if i >= len(glob):
                    return None
                high = glob[i]
            if previous <= high:
                members.append(f"{re.escape(previous)}-{re.escape(high)}")
            i += 1
            previous = ""
            continue
        elif char == "[" and glob[i + 1 : i + 2] == ":":
            close = glob.find("]", i + 2)
            if close == -1:
                return None
            if glob[close - 1] == ":" and close - 1 > i + 1:
                named = _POSIX_CLASSES.get(glob[i + 2 : close - 1])
                if named is None:
                    return None
                members.append(named)
                i = close + 1
                previous = ""
                continue
            members.append(re.escape(char))  # no ":]": a plain "["
        else:
            members.append(re.escape(char))
        previous = char
        i += 1
    body = "".join(members)
    if negated:
        return f"[^/{body}]", i + 1
    return (f"(?!/)[{body}]" if body else "(?!)"), i + 1


def _gitignored(rel: str, is_dir: bool, specs: _Specs) -> bool:
    """Git's rule: the deepest ignore file with a matching pattern decides, and in it the last
    matching pattern. (Walks prune ignored folders, so only the path itself is matched here.)"""
    path = rel + "/" if is_dir else rel
    for base, rules in reversed(specs):
        found = rules.regex.match(path, len(base) + 1 if base else 0)
        if found:
            return (found.lastgroup or "y").startswith("y")
    return False


def _is_noise_dir(name: str, path: str) -> bool:
    return (
        name in NOISE_DIRS
        or name.endswith(".egg-info")
        or os.path.exists(os.path.join(path, "pyvenv.cfg"))  # a virtualenv, whatever its name
    )


def _glob_matcher(file_pattern: str) -> Callable[[str], bool]:
    """Globs like `*.py`, `*.{js,ts}`, `*.md, *.txt` or `src/**/*.py`, case-insensitive.

    A glob without "/" matches the file name; one with "/" matches the repository path.
    """
    parts = re.split(r",(?![^{]*\})", file_pattern)  # commas outside {a,b}
    globs = [g for part in parts for g in _expand_braces(part.strip()) if g]
    if not globs:
        raise SearchError("file_pattern is empty.")
    globs += [g.replace("**/", "") for g in globs if "**/" in g]
    by_name = [fnmatch.translate(g) for g in globs if "/" not in g]
    by_path = [fnmatch.translate(g.lstrip("./")) for g in globs if "/" in g]
    name_rx = re.compile("|".join(by_name) or "(?!)", re.IGNORECASE)
    path_rx = re.compile("|".join(by_path) or "(?!)", re.IGNORECASE)
    return lambda rel: bool(name_rx.match(rel.rsplit("/", 1)[-1]) or path_rx.match(rel))


def _expand_braces(glob: str) -> list[str]:
    """`{a,b}` alternatives expanded, innermost first; SearchError beyond
    FILE_PATTERN_MAX_GLOBS globs (they multiply: ten pairs make 1,024)."""
    done, todo = [], [glob]
    while todo:
        glob = todo.pop()
        match = re.search(r"\{([^{}]*)\}", glob)
        if not match:
            done.append(glob)
            continue
        head, tail = glob[: match.start()], glob[match.end() :]
        todo += [head + alt + tail for alt in reversed(match.group(1).split(","))]
        if len(done) + len(todo) > FILE_PATTERN_MAX_GLOBS:
            raise SearchError(
                f"file_pattern expands to over {FILE_PATTERN_MAX_GLOBS} globs; use fewer "
                "{a,b} alternatives."
            )
    return list(dict.fromkeys(done))  # x{a,{a,b}} names xa once


# --------------------------------------------------------------------------------- search
def search(
    root: Path,
    top: Path,
    pattern: str,
    *,
    literal: bool = False,
    file_pattern: str | None = None,
    backend: str = "auto",
    tree: Tree | None = None,
) -> SearchResult:
    """Case-insensitive, line-by-line search of the text files walk() yields under `top` (or
    of `top` itself, a file). A file with a NUL byte anywhere is binary, never matched: what
    grep -I and rg do, and how a search stops reading a binary at its first block instead of
    reading it whole (read_file judges by the first 8 KiB, as git does, to show what it can).
    `pattern` is a Python regex unless `literal`; the caller checks it compiles. `backend` is
    "auto" or one of SEARCH_BACKENDS; `tree` the walk to use (a new one if None). Raises
    SearchError."""
    kind = file_kind(top.stat().st_mode)
    if kind == "file":
        files = _Replayable(iter([_rel(root, top)]))
    elif kind == "dir":
        files = _Replayable(_candidates(tree or Tree(root), top, file_pattern))
    else:
        raise SearchError(
            f"{_rel(root, top)} is a {kind}, not a regular file; special files are never searched."
        )
    counts, shown, used = _run_search(root, backend, pattern, literal, files)
    return SearchResult(shown, sum(counts.values()), len(counts), len(files.all()), used)


def format_matches(
    what: str, where: str, result: SearchResult, redact: Callable[[str], str] = str
) -> str:
    """The observation: matches grouped by file, capped at SEARCH_MAX_MATCHES lines. Each line
    is redacted whole before it is cut, so a cut never leaves the head of a secret behind."""
    scope = f"{_count(result.n_files, 'file')} under {where}"
    if not result.n_matches:
        return f"No matches for {what} in {scope} (case-insensitive)."
    out = [
        f"{_count(result.n_matches, 'match', 'matches')} in "
        f"{_count(result.n_matched_files, 'file')} for {what} ({scope}):"
    ]
    current = None
    for rel, number, text in result.shown:
        if rel != current:
            out.append(shown_path(rel))
            current = rel
        text = redact(text)
        if len(text) > SEARCH_LINE_CHARS:
            text = text[:SEARCH_LINE_CHARS] + " …"
        out.append(f"  {number}: {text.rstrip()}")
    if result.n_matches > len(result.shown):
        rest = result.n_matches - len(result.shown)
        more_files = result.n_matched_files - len({rel for rel, _, _ in result.shown})
        out.append(
            f"[{_count(rest, 'more match', 'more matches')} not shown "
            f"({_count(more_files, 'more file')}). Narrow the search with path, file_pattern "
            "or a more specific pattern.]"
        )
    return "\n".join(out)


def _count(n: int, singular: str, plural: str | None = None) -> str:
    return f"{n} {singular if n == 1 else plural or singular + 's'}"


def _read_regular(path: Path | str, max_bytes: int | None = None) -> bytes | None:
    """The bytes of a regular file; None for anything else, on an error, or over `max_bytes`."""
    opened = open_regular_fd(path)
    if opened is None:
        return None
    fd, size = opened
    try:
        if max_bytes is not None and size > max_bytes:
            return None
        chunks, chunk_size = [], max(size + 1, 1 << 16)  # mostly one read, then EOF
        while chunk := os.read(fd, chunk_size):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _candidates(tree: Tree, top: Path, file_pattern: str | None) -> Iterator[str]:
    """The files Tree.files yields under the folder `top` that match `file_pattern`."""
    files = tree.files(top)
    return filter(_glob_matcher(file_pattern), files) if file_pattern else files


def _run_search(
    root: Path, forced: str, pattern: str, literal: bool, files: _Replayable
) -> tuple[dict[str, int], list[Match], str]:
    """Search with the forced backend, or the first that works: grep (not on Windows), rg,
    Python. Given a file list, grep beats rg (bench/bench_tools.py); both beat Python.

    Two passes: count the matching lines of every file, then read the lines of only the first
    files in path order, the ones the observation shows. Returns (counts, shown, backend)."""
    if forced != "auto":
        chain = [forced]
    else:
        chain = ["grep"] if platform.system() != "Windows" else []
        chain += ["rg"] if shutil.which("rg") else []
        chain.append("python")
    for attempt, backend in enumerate(chain):
        try:  # the first attempt searches while the walk is still going
            if backend == "python":
                counts, shown = _search_python_apart(root, _python_regex(pattern, literal), files)
            else:
                stream = files.all() if attempt else files
                counts = _count_with(root, backend, pattern, literal, stream)
                shown = _lines_with(root, backend, pattern, literal, _first_files(counts), counts)
        except subprocess.TimeoutExpired as exc:
            raise SearchError(
                f"The search took longer than {SEARCH_TIMEOUT}s; narrow it with path or "
                "file_pattern."
            ) from exc
        except (_BackendFailed, OSError, subprocess.SubprocessError) as exc:
            if "backtracking limit" in str(exc):  # grep -P: the pattern, not the backend
                raise SearchError(
                    "The pattern backtracks too much to search with (nested repetition such "
                    "as (a+)+ on a long line); make it simpler."
                ) from exc
            if forced != "auto" or backend == chain[-1]:
                raise SearchError(f"{backend} could not run this search: {exc}") from exc
            logger.warning("search backend %s failed (%s); trying the next one", backend, exc)
            continue
        return counts, shown, backend
    raise AssertionError("the last backend answers or raises")


def _first_files(counts: dict[str, int]) -> list[str]:
    """The files, in path order, whose lines fill the SEARCH_MAX_MATCHES shown."""
    first, left = [], SEARCH_MAX_MATCHES
    for rel in heapq.nsmallest(SEARCH_MAX_MATCHES, counts):  # each has a match at least
        if left <= 0:
            break
        first.append(rel)
        left -= counts[rel]
    return first


def _count_with(
    root: Path, backend: str, pattern: str, literal: bool, files: Iterable[str]
) -> dict[str, int]:
    """Matching lines per text file that has any (grep or rg), in no particular order."""
    cmd = [*_command(backend, pattern, literal, counting=True), "-c"]
    env = _child_env()
    from concurrent.futures import ThreadPoolExecutor  # not needed to start a run

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        runs = [
            pool.submit(_count_batch, backend, [*cmd, "--", *batch], root, env)
            for batch in _batches(files)
        ]
        return {rel: n for run in runs for rel, n in run.result()}


def _lines_with(
    root: Path, backend: str, pattern: str, literal: bool, files: list[str], counts: dict[str, int]
) -> list[Match]:
    """The first SEARCH_MAX_MATCHES matching lines of a few files, by path then line number.

    Lines are numbered as read_file numbers them, where a lone "\\r" (an old Mac line ending,
    or a stray one) ends a line too. grep and rg end lines at "\\n" only, so a file of these
    holding a lone "\\r" is searched again with each one turned into a "\\n", and its count in
    `counts` corrected."""
    if not files:
        return []
    lines = [*_command(backend, pattern, literal), "-nm", str(SEARCH_MAX_MATCHES)]
    command = [*lines, "--", *map(_argument, files)]
    matches = list(_parse_grep_output(_run_batch(command, root, _child_env())))
    for rel in files:
        data = _read_regular(root / rel, RESEARCH_MAX_BYTES)
        if data is None or not _LONE_CR.search(data):
            continue
        data = _LONE_CR.sub(b"\n", data)  # grep reads it from stdin, with its own timeout
        count = [*_command(backend, pattern, literal, counting=True), "-c", "-"]
        counts[rel] = int(_run_batch(count, root, _child_env(), data).rpartition(b"\0")[2] or 0)
        hits = _parse_grep_output(_run_batch([*lines, "-"], root, _child_env(), data))
        matches = [m for m in matches if m[0] != rel] + [(rel, n, text) for _, n, text in hits]
        if not counts[rel]:
            del counts[rel]
    return sorted(matches, key=lambda m: (m[0], m[1]))[:SEARCH_MAX_MATCHES]


def _child_env() -> dict[str, str]:
    """No keys, secrets or loader variables (LD_PRELOAD from a repository's .env) for grep/rg."""
    return child_environment({"LC_ALL": "C.UTF-8"})


def _command(backend: str, pattern: str, literal: bool, counting: bool = False) -> list[str]:
    """grep or rg, one record per line with the path before a NUL. A file with a NUL byte is
    binary and never matches (see search): grep's count skips it itself (-I: it stops reading
    at the NUL, and counts 0 even after matches); rg's are judged afterwards. Lines are then
    read as text (-a) from files known to have none, so a line that is not valid UTF-8 is
    shown too. -D skip: should a file turn into a FIFO or a device after the walk, grep passes
    it by (rg has no such option)."""
    if backend == "grep":
        text = "-I" if counting else "-a"
        return ["grep", "--null", "-D", "skip", text, "-Hsi", *_grep_syntax(pattern, literal)]
    cmd = ["rg", "--no-config", "--no-messages", "-Hai", "--null", "--no-heading"]
    cmd += ["--color", "never", "--encoding", "none", *(["-F"] if literal else [])]
    return [*cmd, "-e", pattern if literal else _to_ere(pattern) or pattern]  # e.g. \: -> :


def _python_regex(pattern: str, literal: bool) -> str:
    return re.escape(pattern) if literal else pattern


def _count_batch(
    backend: str, cmd: list[str], root: Path, env: dict[str, str]
) -> list[tuple[str, int]]:
    """One grep/rg -c run: `path NUL count` per file (grep lists files without a match too, rg
    does not). Output in any other shape means the tool is not the one we expect (a grep
    without --null), which must not pass silently. rg counts binary files too: they are
    dropped here, in the worker, so that this overlaps with the other runs."""
    counts = {}
    for path, n in _records(_run_batch(cmd, root, env)):
        if not (n.isascii() and n.isdigit()):
            raise _BackendFailed(f"unexpected output line: {path[:100]!r} {n[:100]!r}")
        if n != b"0":
            counts[os.fsdecode(path)] = int(n)
    if backend == "grep":  # -I: a binary file counted 0
        return list(counts.items())
    return [(rel, n) for rel, n in counts.items() if not _has_nul(root / rel)]


_LONE_CR = re.compile(rb"\r(?!\n)")


def _has_nul(path: Path) -> bool:
    """Whether a file holds a NUL byte, which makes it binary to search; True for anything but
    a regular file. Read a block at a time, up to the first NUL."""
    opened = open_regular_fd(path)
    if opened is None:
        return True
    fd = opened[0]
    try:
        while block := os.read(fd, 1 << 20):
            if b"\0" in block:
                return True
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


class _Replayable:
    """Yields a stream once while recording it, so a fallback backend can replay it whole."""

    def __init__(self, items: Iterator[str]):
        self._items: Iterator[str] = items
        self._seen: list[str] = []

    def __iter__(self) -> Iterator[str]:
        for item in self._items:
            self._seen.append(item)
            yield item

    def all(self) -> list[str]:
        self._seen.extend(self._items)
        return self._seen


def _search_python_apart(
    root: Path, regex: str, files: _Replayable
) -> tuple[dict[str, int], list[Match]]:
    """The Python backend's (counts, shown), worked out in a child interpreter that is killed
    after SEARCH_TIMEOUT (subprocess.TimeoutExpired): Python's re has no time limit, and a
    pattern can backtrack for hours. The child gets no secrets, like grep and rg."""
    request = json.dumps({"root": str(root), "regex": regex, "files": files.all()})
    source = str(Path(__file__).resolve().parent.parent)  # where toy_agent is
    env = child_environment({"PYTHONPATH": source})
    code = "from toy_agent.search import _search_python_child; _search_python_child()"
    done = subprocess.run([sys.executable, "-c", code], input=request.encode(), env=env,
                          capture_output=True, timeout=SEARCH_TIMEOUT, check=True)  # fmt: skip
    answer = json.loads(done.stdout)
    return answer["counts"], [(rel, number, text) for rel, number, text in answer["shown"]]


def _search_python_child() -> None:
    """_search_python_apart's other end: a request on stdin, the answer on stdout (JSON; a
    name that is not UTF-8 travels as its surrogate escapes)."""
    request = json.loads(sys.stdin.buffer.read())
    found = dict(_search_python(Path(request["root"]), request["regex"], request["files"]))
    counts = {rel: len(matches) for rel, matches in found.items()}
    shown = [m for rel in _first_files(counts) for m in found[rel]][:SEARCH_MAX_MATCHES]
    sys.stdout.write(json.dumps({"counts": counts, "shown": shown}))


def _search_python(
    repo: Path, regex: str, files: Iterable[str]
) -> Iterator[tuple[str, list[Match]]]:
    """The portable backend: a whole-file pre-check, then line by line like grep. Yields the
    matches of each text file that has any."""
    line_rx = re.compile(regex, re.IGNORECASE)
    # A line match is also a multiline match at the same place, except with \A and \Z.
    whole_rx = None if re.search(r"\\[AZ]", regex) else re.compile(regex, re.I | re.M)
    for rel in files:
        data = _read_regular(repo / rel)
        if data is None or b"\0" in data:
            continue
        text = data.decode("utf-8", "replace")
        if "\r" in text:  # a lone \r ends a line, as in read_file; \r\n stays as grep sees it
            text = re.sub(r"\r(?!\n)", "\n", text)
        if whole_rx is not None and not whole_rx.search(text):
            continue
        lines = text.split("\n")
        if text.endswith("\n"):
            lines.pop()
        found = [(rel, n, line) for n, line in enumerate(lines, 1) if line_rx.search(line)]
        if found:
            yield rel, found


def _batches(
    files: Iterable[str], size: int = 2000, max_bytes: int = 200_000
) -> Iterator[list[str]]:
    """Cut the stream into runs that start while the walk goes on and fit the OS argv limit."""
    batch: list[str] = []
    used = 0
    for rel in files:
        batch.append(_argument(rel))
        used += len(rel) + 1
        if len(batch) >= size or used >= max_bytes:
            yield batch
            batch, used = [], 0
    if batch:
        yield batch


def _argument(rel: str) -> str:
    """A path as grep's or rg's argument: "-" alone is standard input to both, even after
    "--", so a file of that name is "./-" (which _records reads back)."""
    return "./-" if rel == "-" else rel


def _grep_syntax(pattern: str, literal: bool) -> list[str]:
    """grep flags for a Python regex: -F for plain text and -E when the regex means the same in
    POSIX ERE (both much faster than -P); -P, close to Python's dialect, otherwise."""
    if literal or not any(c in _REGEX_SPECIAL for c in pattern):
        return ["-F", "-e", pattern]
    ere = _to_ere(pattern)
    return ["-E", "-e", ere] if ere is not None else ["-P", "-e", pattern]


_REGEX_SPECIAL = frozenset(".^$*+?()[]{}|\\")
_INTERVAL = re.compile(r"\{\d+(,\d*)?\}")


def _to_ere(regex: str) -> str | None:
    """The same regex in GNU ERE, or None if it uses anything without a sure equivalent
    (groups with ?, lazy quantifiers, backrefs, escapes inside [...], POSIX classes)."""
    out, i = [], 0
    while i < len(regex):
        char, nxt = regex[i], regex[i + 1 : i + 2]
        if char == "\\":
            if nxt in ("d", "D"):
                out.append("[0-9]" if nxt == "d" else "[^0-9]")
            elif nxt in _REGEX_SPECIAL or nxt in ("w", "W", "s", "S", "b", "B"):
                out.append(char + nxt)
            elif nxt.isalnum() or not nxt:
                return None
            else:
                out.append(nxt)  # escaped punctuation that ERE does not need escaped
            i += 2
            continue
        if char == "[":
            first = i + 1 + (nxt == "^")
            end = regex.find("]", first + (regex[first : first + 1] == "]"))  # []..] and [^]..]
            if end == -1 or "\\" in regex[i:end] or "[:" in regex[i + 1 : end]:
                return None
            out.append(regex[i : end + 1])
            i = end + 1
            continue
        if char == "{":
            interval = _INTERVAL.match(regex, i)
            if not interval:
                return None
            out.append(interval.group())
            i = interval.end()
            if regex[i : i + 1] in ("?", "+"):
                return None
            continue
        if (char == "(" and nxt == "?") or (char in "*+?" and nxt in ("?", "+")):
            return None
        out.append(char)
        i += 1
    return "".join(out)


def _run_batch(cmd: list[str], cwd: Path, env: dict[str, str], data: bytes = b"") -> bytes:
    """One grep/rg run (reading `data` on stdin, for a "-" among its files). Exit 1 is "no
    match"; with -s/--no-messages unreadable files are silent, so a message on stderr means
    the run itself failed (bad pattern or option)."""
    proc = subprocess.run(
        cmd, cwd=cwd, env=env, input=data, capture_output=True, timeout=SEARCH_TIMEOUT
    )
    if proc.returncode < 0 or (proc.returncode > 1 and proc.stderr.strip()):
        raise _BackendFailed(proc.stderr.decode("utf-8", "replace").strip()[:300])
    return proc.stdout


def _parse_grep_output(output: bytes) -> Iterator[Match]:
    """Lines are `path NUL lineno:text` (--null), robust to ':' in paths. Anything else means
    the tool is not the one we expect (a grep without --null), which must not pass silently."""
    for path, rest in _records(output):
        number, sep, text = rest.partition(b":")
        if not (sep and number.isdigit()):
            raise _BackendFailed(f"unexpected output line: {path[:100]!r} {rest[:100]!r}")
        yield os.fsdecode(path), int(number), text.decode("utf-8", "replace")


def _records(output: bytes) -> Iterator[tuple[bytes, bytes]]:
    """(path, what follows it up to the end of the line) for each record of grep or rg output
    with --null: `path NUL ... \\n`. A path may hold a newline (never a NUL), so each record
    is found from its NUL; the rest holds no newline (a line, or a count). Not split at
    "\\r" either: a line may hold one."""
    start = 0
    while start < len(output):
        nul = output.find(b"\0", start)
        end = output.find(b"\n", nul + 1) if nul >= 0 else -1
        if end < 0:
            raise _BackendFailed(f"unexpected output line: {output[start : start + 100]!r}")
        path = output[start:nul]
        yield b"-" if path == b"./-" else path, output[nul + 1 : end]
        start = end + 1
