"""Which files of a repository count, and finding text in them.

list_files and search_in_files must agree on what the repository holds, and every search backend
(grep, rg, Python) must give the same answer, so the ignore rules, the walk and the backends live
here together, apart from the tools' own job of confining paths and wording observations. Callers
pass paths already resolved and confined to the repository root; nothing here checks that.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import platform
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pathspec

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
SEARCH_BACKENDS = ("rg", "grep", "python")
BINARY_SNIFF_BYTES = 8192

_Specs = tuple[tuple[str, tuple[tuple[re.Pattern[str], bool], ...]], ...]  # (folder, patterns)
Match = tuple[str, int, str]  # (repo-relative path, line number, line text)


class SearchError(Exception):
    """The search cannot be done as asked; the message is meant for the LLM."""


class _BackendFailed(Exception):
    """A search backend could not run this search; the next one may."""


@dataclass(frozen=True)
class SearchResult:
    """What one search found, with enough to word the observation and the log line."""

    matches: list[Match]  # sorted by path, then line number
    n_files: int  # files searched
    backend: str  # the backend that answered


# --------------------------------------------------------------------------------- walking
def walk(root: Path, top: Path) -> Iterator[tuple[str, bool]]:
    """Yield (repo-relative path, is_dir) under `top`, skipping what git and humans ignore.

    Directory symlinks are never followed; file symlinks are kept only when they resolve
    inside the repository, so nothing outside is ever listed or searched.
    """
    specs, explicit = _ancestor_rules(root, top)
    stack = [(str(top), "" if top == root else _rel(root, top), specs)]
    while stack:
        directory, rel_dir, specs = stack.pop()
        try:
            with os.scandir(directory) as scan:
                entries = list(scan)
        except OSError as exc:
            logger.debug("cannot scan %s: %s", directory, exc)
            continue
        if not explicit and any(e.name == ".gitignore" for e in entries):
            specs = _with_gitignore(specs, rel_dir, Path(directory, ".gitignore"))
        for entry in entries:
            name = entry.name
            if name.startswith("."):
                continue
            is_dir = entry.is_dir(follow_symlinks=False)
            if entry.is_symlink():
                if not _is_inner_file_link(root, entry.path):
                    continue
                is_dir = False
            if (is_dir and _is_noise_dir(name, entry.path)) or name.endswith((".pyc", ".pyo")):
                continue
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if specs and _gitignored(rel, is_dir, specs):
                continue
            yield rel, is_dir
            if is_dir:
                stack.append((entry.path, rel, specs))


def is_ignored(root: Path, top: Path) -> bool:
    """Whether `top` itself is normally ignored (hidden, noise or gitignored). walk still lists
    such a folder when asked for it explicitly, without gitignore filtering below it."""
    return _ancestor_rules(root, top)[1]


def _ancestor_rules(root: Path, top: Path) -> tuple[_Specs, bool]:
    """Ignore rules in force at `top`, and whether `top` itself is ignored (asked for
    explicitly, in which case nothing below it is filtered by gitignore)."""
    specs: _Specs = _with_gitignore((), "", root / ".git" / "info" / "exclude")
    directory, rel_dir = root, ""
    for part in top.relative_to(root).parts:
        specs = _with_gitignore(specs, rel_dir, directory / ".gitignore")
        directory, rel_dir = directory / part, f"{rel_dir}/{part}" if rel_dir else part
        if (
            part.startswith(".")
            or _is_noise_dir(part, str(directory))
            or _gitignored(rel_dir, True, specs)
        ):
            return (), True
    return specs, False


def _is_inner_file_link(root: Path, link: str) -> bool:
    try:
        target = Path(link).resolve()
    except (OSError, RuntimeError):
        return False
    return target.is_relative_to(root) and target.is_file()


def _rel(root: Path, resolved: Path) -> str:
    return resolved.relative_to(root).as_posix() or "."


# --------------------------------------------------------------------------------- ignoring
def _with_gitignore(specs: _Specs, rel_dir: str, file: Path) -> _Specs:
    """Add one ignore file's patterns (compiled by pathspec), last pattern first."""
    try:
        lines = file.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return specs
    spec = pathspec.GitIgnoreSpec.from_lines(lines)
    patterns = tuple((p.regex, p.include) for p in reversed(spec.patterns) if p.include is not None)
    return (*specs, (rel_dir, patterns)) if patterns else specs


def _gitignored(rel: str, is_dir: bool, specs: _Specs) -> bool:
    """Git's rule: the deepest ignore file with a matching pattern decides, and in it the last
    matching pattern. (Walks prune ignored folders, so only the path itself is matched here.)"""
    for base, patterns in reversed(specs):
        sub = rel[len(base) + 1 :] if base else rel
        if is_dir:
            sub += "/"
        for regex, include in patterns:
            if regex.match(sub):
                return include
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
    match = re.search(r"\{([^{}]*)\}", glob)
    if not match:
        return [glob]
    head, tail = glob[: match.start()], glob[match.end() :]
    return [g for alt in match.group(1).split(",") for g in _expand_braces(head + alt + tail)]


# --------------------------------------------------------------------------------- search
def search(
    root: Path,
    top: Path,
    pattern: str,
    *,
    literal: bool = False,
    file_pattern: str | None = None,
    backend: str = "auto",
) -> SearchResult:
    """Case-insensitive, line-by-line search of the files walk() yields under `top` (or of
    `top` itself, a file). `pattern` is a Python regex unless `literal`; the caller checks it
    compiles. `backend` is "auto" or one of SEARCH_BACKENDS; raises SearchError."""
    files = _Replayable(_candidates(root, top, file_pattern))
    matches, used = _run_search(root, backend, pattern, literal, files)
    return SearchResult(matches, len(files.all()), used)


def format_matches(what: str, where: str, result: SearchResult) -> str:
    """The observation: matches grouped by file, capped at SEARCH_MAX_MATCHES lines."""
    matches = result.matches
    scope = f"{result.n_files} files under {where}"
    if not matches:
        return f"No matches for {what} in {scope} (case-insensitive)."
    n_matched_files = len({rel for rel, _, _ in matches})
    out = [f"{len(matches)} matches in {n_matched_files} files for {what} ({scope}):"]
    current = None
    for rel, number, text in matches[:SEARCH_MAX_MATCHES]:
        if rel != current:
            out.append(rel)
            current = rel
        if len(text) > SEARCH_LINE_CHARS:
            text = text[:SEARCH_LINE_CHARS] + " …"
        out.append(f"  {number}: {text.rstrip()}")
    if len(matches) > SEARCH_MAX_MATCHES:
        rest = matches[SEARCH_MAX_MATCHES:]
        more_files = len({rel for rel, _, _ in rest} - {current})
        out.append(
            f"[{len(rest)} more matches not shown ({more_files} more files). Narrow the search "
            "with path, file_pattern or a more specific pattern.]"
        )
    return "\n".join(out)


def is_binary(path: Path | str) -> bool:
    """NUL in the first 8 KiB, git's own test. Unbuffered: this runs for every matched file."""
    try:
        with open(path, "rb", buffering=0) as f:
            return b"\0" in f.read(BINARY_SNIFF_BYTES)
    except OSError:
        return True


def _candidates(root: Path, top: Path, file_pattern: str | None) -> Iterator[str]:
    if top.is_file():
        yield _rel(root, top)
        return
    wanted = _glob_matcher(file_pattern) if file_pattern else None
    for rel, is_dir in walk(root, top):
        if not is_dir and (wanted is None or wanted(rel)):
            yield rel


def _run_search(
    root: Path, forced: str, pattern: str, literal: bool, files: _Replayable
) -> tuple[list[Match], str]:
    """Search with the forced backend, or the first that works: grep (not on Windows), rg,
    Python. Given a file list, grep beats rg (bench/bench_tools.py); both beat Python."""
    if forced != "auto":
        chain = [forced]
    else:
        chain = ["grep"] if platform.system() != "Windows" else []
        chain += ["rg"] if shutil.which("rg") else []
        chain.append("python")
    for attempt, backend in enumerate(chain):
        try:  # the first attempt searches while the walk is still going
            found = _search_with(root, backend, pattern, literal, files.all() if attempt else files)
        except subprocess.TimeoutExpired as exc:
            raise SearchError(
                f"The search took longer than {SEARCH_TIMEOUT}s; narrow it with path or "
                "file_pattern."
            ) from exc
        except (_BackendFailed, OSError, subprocess.SubprocessError) as exc:
            if forced != "auto":
                raise SearchError(f"{backend} could not run this search: {exc}") from exc
            logger.warning("search backend %s failed (%s); trying the next one", backend, exc)
            continue
        if backend != "python":  # which skipped binary files already
            found = _drop_binary(root, found)
        return sorted(found, key=lambda m: (m[0], m[1])), backend
    raise AssertionError("the python backend never fails")


def _search_with(
    root: Path, backend: str, pattern: str, literal: bool, files: Iterable[str]
) -> list[Match]:
    if backend == "python":
        return _search_python(root, re.escape(pattern) if literal else pattern, files)
    # -a: binary files are judged afterwards, the same way for every backend.
    if backend == "grep":
        cmd = ["grep", "--null", "-Hnasi", *_grep_syntax(pattern, literal)]
    else:
        cmd = ["rg", "--no-config", "--no-messages", "-Hnai", "--null", "--no-heading"]
        cmd += ["--color", "never", "--encoding", "none", *(["-F"] if literal else [])]
        cmd += ["-e", pattern if literal else _to_ere(pattern) or pattern]  # e.g. \: -> :
    env = {**os.environ, "LC_ALL": "C.UTF-8"}
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        runs = [
            pool.submit(_run_batch, [*cmd, "--", *batch], root, env) for batch in _batches(files)
        ]
        return [m for run in runs for m in _parse_grep_output(run.result())]


def _drop_binary(root: Path, matches: list[Match]) -> list[Match]:
    binary: dict[str, bool] = {}
    for rel, _, _ in matches:
        if rel not in binary:
            binary[rel] = is_binary(os.path.join(root, rel))
    return [m for m in matches if not binary[m[0]]]


class _Replayable:
    """Yields a stream once while recording it, so a fallback backend can replay it whole."""

    def __init__(self, items: Iterator[str]):
        self._items, self._seen = items, []

    def __iter__(self) -> Iterator[str]:
        for item in self._items:
            self._seen.append(item)
            yield item

    def all(self) -> list[str]:
        self._seen.extend(self._items)
        return self._seen


def _search_python(repo: Path, regex: str, files: Iterable[str]) -> list[Match]:
    """The portable backend: a whole-file pre-check, then line by line like grep."""
    line_rx = re.compile(regex, re.IGNORECASE)
    # A line match is also a multiline match at the same place, except with \A and \Z.
    whole_rx = None if re.search(r"\\[AZ]", regex) else re.compile(regex, re.I | re.M)
    found: list[Match] = []
    for rel in files:
        try:
            data = (repo / rel).read_bytes()
        except OSError:
            continue
        if b"\0" in data[:BINARY_SNIFF_BYTES]:
            continue
        text = data.decode("utf-8", "replace")
        if whole_rx is not None and not whole_rx.search(text):
            continue
        lines = text.split("\n")
        if text.endswith("\n"):
            lines.pop()
        found += [(rel, n, line) for n, line in enumerate(lines, 1) if line_rx.search(line)]
    return found


def _batches(files: Iterable[str], size: int = 2000, max_bytes: int = 200_000):
    """Cut the stream into runs that start while the walk goes on and fit the OS argv limit."""
    batch: list[str] = []
    used = 0
    for rel in files:
        batch.append(rel)
        used += len(rel) + 1
        if len(batch) >= size or used >= max_bytes:
            yield batch
            batch, used = [], 0
    if batch:
        yield batch


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


def _run_batch(cmd: list[str], cwd: Path, env: dict[str, str]) -> bytes:
    """One grep/rg run. Exit 1 is "no match"; with -s/--no-messages unreadable files are
    silent, so a message on stderr means the run itself failed (bad pattern or option)."""
    proc = subprocess.run(
        cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=SEARCH_TIMEOUT
    )
    if proc.returncode < 0 or (proc.returncode > 1 and proc.stderr.strip()):
        raise _BackendFailed(proc.stderr.decode("utf-8", "replace").strip()[:300])
    return proc.stdout


def _parse_grep_output(output: bytes) -> Iterator[Match]:
    """Lines are `path NUL lineno:text` (--null), robust to ':' in paths. Anything else means
    the tool is not the one we expect (a grep without --null), which must not pass silently."""
    for record in output.split(b"\n")[:-1]:  # not splitlines(): a line may hold a \r
        path, _, rest = record.partition(b"\0")
        number, sep, text = rest.partition(b":")
        if not (sep and number.isdigit()):
            raise _BackendFailed(f"unexpected output line: {record[:100]!r}")
        yield os.fsdecode(path), int(number), text.decode("utf-8", "replace")
