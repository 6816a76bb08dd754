"""Finding text in a repository's files: grep, rg or a Python child, with one answer.

Every backend must give the same answer over the same files (the ones tree.py's walk yields),
apart from the tools' own job of confining paths and wording observations. Callers pass paths
already resolved and confined to the repository root; nothing here checks that.
"""

from __future__ import annotations

import fnmatch
import heapq
import json
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from toy_agent import cuts
from toy_agent.files import invalid_text, open_regular_fd
from toy_agent.messages import shown_path
from toy_agent.tree import NOISE_DIRS as NOISE_DIRS
from toy_agent.tree import Listing as Listing
from toy_agent.tree import Tree, _rel, file_kind
from toy_agent.tree import walk as walk
from toy_agent.variables import child_environment

# NOISE_DIRS, Listing and walk are importable from here as before the walk moved to tree.py.
logger = logging.getLogger(__name__)

SEARCH_MAX_MATCHES = 100
SEARCH_LINE_CHARS = 200
SEARCH_TIMEOUT = 60
FILE_PATTERN_MAX_GLOBS = 256  # what a file_pattern's {a,b} may expand to
RESEARCH_MAX_BYTES = 64 << 20  # a shown file with lone CRs is searched again up to this size
SEARCH_BACKENDS = ("rg", "grep", "python")

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
    # "./src/*.py" is "src/*.py"; only whole "./" go: ".github/*" keeps its dot
    by_path = [fnmatch.translate(re.sub(r"^(\./)+", "", g)) for g in globs if "/" in g]
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
    for what, text in (("pattern", pattern), ("file_pattern", file_pattern or "")):
        if why := invalid_text(what, text):  # grep and rg could not even be given it
            raise SearchError(why)
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
        text = cuts.cut(redact(text), SEARCH_LINE_CHARS, "read_file shows the line", sep=" ")
        out.append(f"  {number}: {text.rstrip()}")
    if result.n_matches > len(result.shown):
        rest = result.n_matches - len(result.shown)
        more_files = result.n_matched_files - len({rel for rel, _, _ in result.shown})
        what = f"{cuts.amount(rest, 'match')} ({_count(more_files, 'more file')})"
        out.append(cuts.note(what, cuts.how_to_see_more("search_in_files")))
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
    """grep's and rg's environment: the allow-listed one (see child_environment), in UTF-8."""
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
    counts: dict[str, int] = {}
    found: dict[str, list[Match]] = {}
    for rel, count, first in _search_python(Path(request["root"]), request["regex"],
                                            request["files"]):  # fmt: skip
        counts[rel], found[rel] = count, first
        if len(found) > 2 * SEARCH_MAX_MATCHES:  # keep the lines only of files still first
            found = {rel: found[rel] for rel in _first_files(counts)}
    shown = [m for rel in _first_files(counts) for m in found[rel]][:SEARCH_MAX_MATCHES]
    sys.stdout.write(json.dumps({"counts": counts, "shown": shown}))


def _search_python(
    repo: Path, regex: str, files: Iterable[str]
) -> Iterator[tuple[str, int, list[Match]]]:
    """The portable backend, line by line like grep, a block of lines at a time (a block
    without a match as a whole is not split into lines). Yields, for each text file with a
    match, its matching lines' count and the first SEARCH_MAX_MATCHES of them; memory stays
    bounded whatever the files' sizes."""
    line_rx = re.compile(regex, re.IGNORECASE)
    # A line match is also a multiline match at the same place, except with \A and \Z.
    whole_rx = None if re.search(r"\\[AZ]", regex) else re.compile(regex, re.I | re.M)
    for rel in files:
        opened = open_regular_fd(repo / rel)
        if opened is None:
            continue
        count, number, first = 0, 0, list[Match]()
        try:
            for block in _line_blocks(opened[0]):
                text = block.decode("utf-8", "replace")
                if "\r" in text:  # a lone \r ends a line, as in read_file; \r\n stays as grep sees
                    text = re.sub(r"\r(?!\n)", "\n", text)
                lines = text.split("\n")
                if text.endswith("\n"):
                    lines.pop()
                if whole_rx is None or whole_rx.search(text):
                    for n, line in enumerate(lines, number + 1):
                        if line_rx.search(line):
                            count += 1
                            if len(first) < SEARCH_MAX_MATCHES:
                                first.append((rel, n, line))
                number += len(lines)
        except (_Binary, OSError):
            continue
        finally:
            os.close(opened[0])
        if count:
            yield rel, count, first


class _Binary(Exception):
    """The file holds a NUL byte: binary, never matched (as grep -I and rg judge)."""


PYTHON_BLOCK_BYTES = 1 << 20
PYTHON_LINE_MAX_BYTES = 16 << 20  # the Python backend matches a longer line by its head


def _line_blocks(fd: int) -> Iterator[bytes]:
    """A file's bytes in blocks of whole lines (a line ends at LF, CRLF or a lone CR), read
    PYTHON_BLOCK_BYTES at a time, so that a huge file costs no more memory than a block and a
    line. A line over PYTHON_LINE_MAX_BYTES comes as its head and a LF, the rest unread by
    the match: a line that long is data, and holding it whole is what must not happen.
    Raises _Binary at the first block holding a NUL, before the file is read further."""
    buf, skipping = b"", False
    while True:
        chunk = os.read(fd, PYTHON_BLOCK_BYTES)
        if b"\0" in chunk:
            raise _Binary
        eof = not chunk
        buf += chunk
        if skipping:  # the rest of a line whose head was given: drop it, up to its end
            end = _first_line_end(buf, eof)
            if end is None:
                buf = buf[-1:] if buf.endswith(b"\r") else b""  # a CR that may precede a LF
                if eof:
                    return
                continue
            buf, skipping = buf[end + 1 :], False
        # the last line end; a CR at the very end may be the first half of a CRLF
        cut = len(buf) - 1 if eof else max(buf.rfind(b"\n"), buf.rfind(b"\r", 0, len(buf) - 1))
        if cut >= 0:
            yield buf[: cut + 1]
            buf = buf[cut + 1 :]
        elif len(buf) > PYTHON_LINE_MAX_BYTES:
            yield buf[:PYTHON_LINE_MAX_BYTES] + b"\n"
            buf, skipping = buf[-1:] if buf.endswith(b"\r") else b"", True
        if eof:
            return


def _first_line_end(buf: bytes, eof: bool) -> int | None:
    """Where the first line of `buf` ends (its LF, or its lone CR); None when no line end is
    known yet (none, or a CR last whose next byte is unread)."""
    lf, cr = buf.find(b"\n"), buf.find(b"\r")
    if cr < 0 or 0 <= lf < cr:
        return lf if lf >= 0 else (len(buf) - 1 if eof and buf else None)
    if cr == len(buf) - 1 and not eof:
        return None
    return cr + 1 if buf[cr + 1 : cr + 2] == b"\n" else cr


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
