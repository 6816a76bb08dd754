"""Repository tools: every path is confined to the repository root.

Each tool method returns the observation text for the LLM or raises ToolError with a message the
LLM can act on. Which files count (the ignore rules) and how text is found in them live in
toy_agent.search; this module confines paths, checks parameters and words the observations.
"""

from __future__ import annotations

import codecs
import contextlib
import difflib
import errno
import inspect
import itertools
import logging
import os
import re
import secrets
import stat
import subprocess
import threading
import time
import typing
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from toy_agent.environment import child_environment
from toy_agent.redaction import Redactor
from toy_agent.sandbox import (
    bwrap_argv,
    owned_process_group,
    refusal_note,
    resolve_sandbox,
    sandbox_environment,
)
from toy_agent.search import (
    BINARY_SNIFF_BYTES,
    SEARCH_BACKENDS,
    SearchError,
    format_matches,
    is_ignored,
    search,
    walk,
)

logger = logging.getLogger(__name__)

LIST_LIMIT = 400
READ_MAX_LINES = 400
READ_MAX_CHARS = 40_000
READ_MAX_LINE_CHARS = 4_000
COMMAND_MAX_TIMEOUT = 600
OUTPUT_HEAD_BYTES = 8_000
OUTPUT_TAIL_BYTES = 8_000


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a FIFO never blocks
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_SWAPPED = "{} changed into a symlink while it was being opened; refused."
_SPECIAL_KINDS = (
    (stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "char device"),
    (stat.S_ISBLK, "block device"),
)  # fmt: skip


def special_kind(mode: int) -> str | None:
    """'fifo', 'socket', 'char device' or 'block device' for a special file, else None."""
    return next((word for test, word in _SPECIAL_KINDS if test(mode)), None)


def _special_message(rel: str, mode: int) -> str:
    kind = special_kind(mode) or "special file"
    return f"{rel} is a {kind}, not a regular file; special files are never opened."


class ToolError(Exception):
    """A tool could not do what was asked; the message becomes the LLM's observation."""


class CodeRepositoryTools:
    """The local tools the agent may call, all confined to `repo_path`."""

    def __init__(
        self,
        repo_path: str | Path = ".",
        *,
        allow_commands: bool = False,
        search_backend: str = "auto",
        redactor: Redactor | None = None,
        sandbox: str = "off",
        sandbox_network: bool = False,
    ):
        if search_backend not in ("auto", *SEARCH_BACKENDS):
            raise ValueError(f"search_backend must be auto, rg, grep or python: {search_backend}")
        self.repo_path = Path(repo_path).resolve()
        self.allow_commands = allow_commands
        self.search_backend = search_backend
        self.redactor = redactor or Redactor()  # applied before long lines are cut
        # run_command's sandbox: "auto" resolves to "bwrap" or "off" here (SandboxUnavailable
        # when "bwrap" is asked for and does not work); see toy_agent.sandbox.
        self.sandbox = resolve_sandbox(sandbox, warn=allow_commands)
        self.sandbox_network = sandbox_network
        self._sandbox_named = False  # the model is told about the sandbox once

    # ----------------------------------------------------------------------------- dispatch
    def specs(self) -> list[dict[str, Any]]:
        """The Toolbox face (see toy_agent.routes): the local tools, without task_complete."""
        return get_available_tools(self.allow_commands)[:-1]

    def call(self, name: str, parameters: dict[str, Any]) -> str:
        return self.execute(name, parameters)

    def relative(self, path: str) -> str:
        """The repository-relative form of a path the model gave ("./a.py" -> "a.py"): the one
        normaliser, so a file has one name in the change tracker, the preview and the tools.
        Raises ToolError for a path outside the repository."""
        return self._rel(self._resolve(path))

    def snapshot(self, path: str) -> str | None:
        """A file's text as it is now, or None when it is not a readable regular file (used to
        diff a run's changes; never follows a link out of the repository)."""
        try:
            target = self._resolve(path)
            with self._open_regular(target) as f:
                return f.read().decode("utf-8", "surrogateescape")
        except (ToolError, OSError, IndexError):
            return None

    def execute(self, name: str, parameters: dict[str, Any] | None) -> str:
        """Run local tool `name`; bad parameters and failures raise ToolError."""
        if name == "run_command" and not self.allow_commands:
            raise ToolError(_COMMANDS_DISABLED)
        if name not in _tool_names(self.allow_commands):
            names = ", ".join(_tool_names(self.allow_commands))
            raise ToolError(f"Unknown tool '{name}'. Local tools: {names}.")
        method = getattr(self, name)
        kwargs = _bind_parameters(name, method, parameters)
        logger.debug("tool %s %s", name, _preview(kwargs))
        try:
            result = method(**kwargs)
        except ToolError as exc:
            logger.debug("tool %s failed: %s", name, str(exc).partition("\n")[0])
            raise
        except OSError as exc:
            logger.debug("tool %s raised", name, exc_info=True)
            where = f" ({os.path.relpath(exc.filename, self.repo_path)})" if exc.filename else ""
            raise ToolError(f"{name} failed: {exc.strerror or exc}{where}") from exc
        logger.debug("tool %s succeeded (%d chars)", name, len(result))
        return result

    # ----------------------------------------------------------------------------- tools
    def list_files(self, path: str = ".") -> str:
        """List files and folders under `path`, summarised when too many to read."""
        top = self._resolve(path)
        if not top.exists():
            raise self._not_found(path, top)
        if not top.is_dir():
            raise ToolError(f"{self._rel(top)} is a file; use read_file or get_file_info on it.")
        explicit = is_ignored(self.repo_path, top)
        walked = sorted(walk(self.repo_path, top), key=lambda e: e[0].split("/"))
        entries = [  # a special file is shown with its kind: "pipe  (fifo)"
            (rel if kind in ("dir", "file") else f"{rel}  ({kind})", kind == "dir")
            for rel, kind in walked
        ]
        n_dirs = sum(is_dir for _, is_dir in entries)
        logger.info("listed %s: %d files, %d dirs", self._rel(top), len(entries) - n_dirs, n_dirs)
        where = "Repository root" if top == self.repo_path else self._rel(top)
        header = f"{where}: {len(entries) - n_dirs} files, {n_dirs} directories"
        if explicit:
            header += " (this folder is normally ignored; listed because it was asked for)"
        if not entries:
            return f"{header}. Nothing to list (empty, or everything in it is ignored)."
        if len(entries) <= LIST_LIMIT:
            return "\n".join([header + ":", *(rel + "/" * d for rel, d in entries)])
        return "\n".join([header + ".", *_summarise(entries, self._rel(top))])

    def read_file(
        self, path: str, start_line: int | None = None, end_line: int | None = None
    ) -> str:
        """Show numbered lines, capped per call, with a note saying where to continue."""
        start = 1 if start_line is None else start_line
        if start < 1:
            raise ToolError("start_line must be 1 or more (lines are numbered from 1).")
        if end_line is not None and end_line < start:
            raise ToolError(f"end_line ({end_line}) is before start_line ({start}).")
        target = self._existing_file(path)
        rel = self._rel(target)
        with self._open_regular(target) as f:
            shown, total, next_line, lossy = _read_window(f, rel, start, end_line)
        shown = [(n, self._cut_line(text)) for n, text in shown]
        logger.info("read %s: %d of %d lines from line %d", rel, len(shown), total, start)
        if total == 0:
            return f"{rel} is empty (0 lines)."
        if start > total:
            raise ToolError(f"start_line {start} is past the end of {rel} ({total} lines).")
        last = shown[-1][0]
        out = [f"{rel} (lines {start}-{last} of {total}):", *_number(shown)]
        if next_line is not None:
            out.append(
                f"[Shown lines {start}-{last} of {total} (a call returns at most "
                f"{READ_MAX_LINES} lines / {READ_MAX_CHARS:,} chars). To read on, call "
                f"read_file with start_line={next_line}.]"
            )
        elif end_line is not None and end_line > total:
            out.append(f"[end_line {end_line} is past the end: {rel} has {total} lines.]")
        if lossy:
            out.append("[Note: some bytes are not valid UTF-8; they are shown as \ufffd.]")
        return "\n".join(out)

    def write_file(self, path: str, content: str) -> str:
        """Create or replace a whole file, atomically."""
        target = self._writable(path)
        rel = self._rel(target)
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ToolError(f"content cannot be written as UTF-8: {exc.reason}") from exc
        old_size = self._atomic_write(target, data)
        lines = content.count("\n") + (1 if content and not content.endswith("\n") else 0)
        logger.info("wrote %s: %d bytes, %d lines", rel, len(data), lines)
        done = f"Wrote {rel}: {len(data):,} bytes, {lines} lines"
        if old_size is None:
            return f"{done} (created)."
        return f"{done} (overwrote the previous {old_size:,} bytes)."

    def edit_file(self, path: str, old_str: str, new_str: str) -> str:
        """Replace the one occurrence of old_str; anything else leaves the file untouched."""
        if not old_str:
            raise ToolError("old_str is empty; to write a whole file use write_file.")
        if old_str == new_str:
            raise ToolError("old_str and new_str are identical; nothing would change.")
        target = self._writable(path)
        rel = self._rel(target)
        self._existing_file(path)
        with self._open_regular(target) as f:
            data = f.read()
        if b"\0" in data[:BINARY_SNIFF_BYTES]:
            raise ToolError(f"{rel} is a binary file; edit_file only edits text.")
        text = data.decode("utf-8", "surrogateescape")  # undecodable bytes survive the round trip
        crlf = "\r\n" in text and "\r" not in old_str and text.count("\r\n") == text.count("\n")
        if crlf:  # the LLM sees and sends "\n"; keep the file's own line endings
            text, new_str = text.replace("\r\n", "\n"), new_str.replace("\r\n", "\n")
        positions = _find_all(text, old_str)
        if not positions:
            raise ToolError(_no_match_message(rel, text, old_str))
        if len(positions) > 1:
            lines = ", ".join(str(text.count("\n", 0, p) + 1) for p in positions[:20])
            raise ToolError(
                f"old_str occurs {len(positions)} times in {rel} (starting at lines {lines}); "
                "it must match exactly once. Add surrounding lines to old_str to make it unique."
            )
        pos = positions[0]
        new_text = text[:pos] + new_str + text[pos + len(old_str) :]
        disk_text = new_text.replace("\n", "\r\n") if crlf else new_text
        self._atomic_write(target, disk_text.encode("utf-8", "surrogateescape"))
        first = new_text.count("\n", 0, pos) + 1
        last = first + new_str.count("\n")
        logger.info("edited %s at line %d (%d bytes)", rel, first, len(disk_text))
        return f"Edited {rel} (line {first}). It now reads:\n" + _snippet(new_text, first, last)

    def search_in_files(
        self, pattern: str, path: str = ".", file_pattern: str | None = None
    ) -> str:
        """Case-insensitive regex search over the same files list_files shows."""
        if not pattern:
            raise ToolError("pattern is empty.")
        if "\n" in pattern or "\r" in pattern:
            raise ToolError("pattern must fit on one line: the search matches line by line.")
        literal, note = False, ""
        try:
            re.compile(pattern)
        except re.error as exc:
            literal = True
            note = f" (not a valid regex: {exc}; searched for the literal text instead)"
        top = self._resolve(path)
        if not top.exists():
            raise self._not_found(path, top)
        started = time.perf_counter()
        try:
            found = search(
                self.repo_path,
                top,
                pattern,
                literal=literal,
                file_pattern=file_pattern,
                backend=self.search_backend,
            )
        except SearchError as exc:
            raise ToolError(str(exc)) from exc
        logger.info(
            "searched %r in %s: %d files, %d matching lines, %s backend, %.3fs",
            *(pattern, self._rel(top), found.n_files, found.n_matches, found.backend),
            time.perf_counter() - started,
        )
        return format_matches(repr(pattern) + note, self._rel(top), found)

    def get_file_info(self, path: str) -> str:
        """Metadata to decide how to read a file: size, lines, kind, language, mtime, mode."""
        target = self._resolve(path)
        if not target.exists():
            raise self._not_found(path, target)
        st = target.lstat()
        mtime = datetime.fromtimestamp(st.st_mtime, tz=timezone.utc).isoformat(timespec="seconds")
        info = [f"path: {self._rel(target)}"]
        if target.is_dir():
            with os.scandir(target) as scan:
                children = list(scan)
            n_dirs = sum(e.is_dir(follow_symlinks=False) for e in children)
            info += [
                "type: directory",
                f"entries: {len(children)} ({len(children) - n_dirs} files, {n_dirs} "
                "directories, hidden and ignored ones included)",
            ]
        elif special_kind(st.st_mode):
            info.append(f"type: {special_kind(st.st_mode)} (a special file: never read or written)")
        elif self._links_inside(st) < st.st_nlink:
            info.append(f"type: file with {st.st_nlink} hard links, some outside the repository "
                        "(its content is not examined)")
            info.append(f"size: {st.st_size:,} bytes")
        else:
            with self._open_regular(target) as f:
                info += _file_kind(f, target.name)
            info.append(f"size: {st.st_size:,} bytes")
        info += [
            f"modified: {mtime}",
            f"permissions: {stat.filemode(st.st_mode)} ({stat.S_IMODE(st.st_mode):04o})",
        ]
        return "\n".join(info)

    def run_command(self, command: str, timeout: int = 60) -> str:
        """Run a shell command in the repo root, sandboxed when self.sandbox says so; every
        process it started dies with it."""
        if not self.allow_commands:
            raise ToolError(_COMMANDS_DISABLED)
        if not command.strip():
            raise ToolError("command is empty.")
        if not 1 <= timeout <= COMMAND_MAX_TIMEOUT:
            raise ToolError(f"timeout must be between 1 and {COMMAND_MAX_TIMEOUT} seconds.")
        started = time.perf_counter()
        code, output, timed_out = _run_shell(
            command, self.repo_path, timeout, sandbox=self.sandbox, network=self.sandbox_network
        )
        elapsed = time.perf_counter() - started
        logger.info("command %r: exit %s after %.1fs", command, code, elapsed)
        note = None
        if self.sandbox == "bwrap" and not self._sandbox_named:
            note = refusal_note(output, network=self.sandbox_network)
            self._sandbox_named = note is not None
        output = f"{output.rstrip()}\n{note}" if note else output
        if timed_out:
            raise ToolError(
                f"Command timed out after {timeout}s and was killed with its child processes. "
                "It cannot read input (stdin is closed); pass a larger timeout (max "
                f"{COMMAND_MAX_TIMEOUT}) if it just needs longer.\nOutput so far:\n{output}"
            )
        status = f"exit code {code}" if code >= 0 else f"killed by signal {-code}"
        return f"$ {command}\n[{status}, {elapsed:.1f}s]\n{output or '(no output)'}"

    # ----------------------------------------------------------------------------- paths
    def _resolve(self, path: str) -> Path:
        """The real path for `path`, refused unless it stays inside the repository."""
        if "\0" in path:
            raise ToolError("path contains a NUL character.")
        raw = Path(path.strip() or ".")
        candidate = raw if raw.is_absolute() else self.repo_path / raw
        try:
            resolved = candidate.resolve()
        except (OSError, RuntimeError) as exc:  # symlink loops
            raise ToolError(f"Cannot resolve {path}: {exc}") from exc
        if resolved.is_relative_to(self.repo_path):
            return resolved
        if not Path(os.path.normpath(candidate)).is_relative_to(self.repo_path):
            raise ToolError(
                f"{path} is outside the repository ({self.repo_path}); "
                "use a path relative to the repository root."
            )
        raise ToolError(f"{path} leads outside the repository through a symlink; refused.")

    def _rel(self, resolved: Path) -> str:
        return resolved.relative_to(self.repo_path).as_posix() or "."

    def _existing_file(self, path: str) -> Path:
        target = self._resolve(path)
        try:
            mode = target.stat().st_mode
        except FileNotFoundError:
            raise self._not_found(path, target) from None
        rel = self._rel(target)
        if stat.S_ISDIR(mode):
            raise ToolError(f"{rel} is a directory; use list_files(path={rel!r}) to see inside.")
        if not stat.S_ISREG(mode):
            raise ToolError(_special_message(rel, mode))
        return target

    # ----------------------------------------------------------------------------- file I/O
    # Files are opened relative to a descriptor of their folder, walked from the repository
    # root one component at a time with O_NOFOLLOW: a folder swapped for a symlink between
    # the path check and the open is refused, never followed.

    def _cut_line(self, text: str) -> str:
        """Redact, then cut: a cut must never leave the visible head of a secret behind."""
        text = self.redactor.redact(text)
        if len(text) <= READ_MAX_LINE_CHARS:
            return text
        return f"{text[:READ_MAX_LINE_CHARS]} … [line cut: it has {len(text):,} characters]"

    def _open_dir(self, parts: tuple[str, ...], *, create: bool = False) -> int:
        """A descriptor of the folder repo/parts, created if `create`; the caller closes it."""
        fd = os.open(self.repo_path, _DIR_FLAGS)
        try:
            for i, part in enumerate(parts):
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    os.mkdir(part, 0o777, dir_fd=fd)
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                        raise
                    where = "/".join(parts[: i + 1])
                    if stat.S_ISLNK(os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode):
                        raise ToolError(_SWAPPED.format(where)) from exc
                    raise ToolError(f"Cannot create folder {where}: a file is in the way.") from exc
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    @contextlib.contextmanager
    def _open_regular(self, target: Path) -> Iterator[typing.BinaryIO]:
        """The regular file at `target` (a resolved path inside the repository), for reading.
        Special files are refused unopened; see _check_links for hard links."""
        parts = target.relative_to(self.repo_path).parts
        rel = "/".join(parts)
        dir_fd = self._open_dir(parts[:-1])
        try:
            mode = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False).st_mode
            if stat.S_ISLNK(mode):
                raise ToolError(_SWAPPED.format(rel))
            if not stat.S_ISREG(mode):
                raise ToolError(_special_message(rel, mode))
            try:
                fd = os.open(parts[-1], _READ_FLAGS, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise ToolError(_SWAPPED.format(rel)) from exc
                raise
        finally:
            os.close(dir_fd)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):  # swapped between the stat and the open
                raise ToolError(_special_message(rel, st.st_mode))
            os.set_blocking(fd, True)
            inside = self._links_inside(st)
            if inside < st.st_nlink:
                raise ToolError(
                    f"{rel} has {st.st_nlink} hard links and only {inside} of them are inside "
                    "the repository, so it may be a file from outside; it is not read."
                )
            yield f

    def _links_inside(self, st: os.stat_result) -> int:
        """How many of a file's hard links are inside the repository (counting stops at all of
        them). A file is read only when every link is inside: otherwise it may be a file from
        outside (a key, a password store) linked in. Writes never reach another link: they
        replace the file with a new one."""
        if st.st_nlink <= 1:
            return st.st_nlink
        inside = 0
        for folder, dirs, files in os.walk(self.repo_path):
            for name in itertools.chain(files, dirs):
                with contextlib.suppress(OSError):
                    other = os.stat(os.path.join(folder, name), follow_symlinks=False)
                    inside += (other.st_ino, other.st_dev) == (st.st_ino, st.st_dev)
            if inside >= st.st_nlink:
                break
        return inside

    def _atomic_write(self, target: Path, data: bytes) -> int | None:
        """Temp file in the same folder + rename: the file is either old or new, never half
        written, and a failure leaves no temp file behind. An existing file keeps its mode.
        Returns the previous size, or None for a new file."""
        parts = target.relative_to(self.repo_path).parts
        rel, name = "/".join(parts), parts[-1]
        dir_fd = self._open_dir(parts[:-1], create=True)
        tmp = f".{name[:100]}.{secrets.token_hex(4)}.tmp"
        try:
            try:
                old = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                old = None
            if old is not None and stat.S_ISDIR(old.st_mode):
                raise ToolError(f"{rel} is a directory; give a file path.")
            if old is not None and stat.S_ISLNK(old.st_mode):
                raise ToolError(_SWAPPED.format(rel))
            if old is not None and not stat.S_ISREG(old.st_mode):
                raise ToolError(_special_message(rel, old.st_mode))
            fd = os.open(tmp, _CREATE_FLAGS, 0o666, dir_fd=dir_fd)  # umask applies
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
                if old is not None:
                    os.fchmod(fd, stat.S_IMODE(old.st_mode))
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            return None if old is None else old.st_size
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            if isinstance(exc, OSError):
                reason = exc.strerror or str(exc)
                raise ToolError(f"Could not write {rel}: {reason}; it is unchanged.") from exc
            raise
        finally:
            os.close(dir_fd)

    def _writable(self, path: str) -> Path:
        target = self._resolve(path)
        if ".git" in target.relative_to(self.repo_path).parts:
            raise ToolError("Refusing to write inside .git/; git's own files are off limits.")
        if target.is_dir():
            raise ToolError(f"{self._rel(target)} is a directory; give a file path.")
        return target

    def _not_found(self, path: str, target: Path) -> ToolError:
        """A not-found error naming the closest existing paths, since LLMs often guess paths."""
        wanted = self._rel(target)
        walked = itertools.islice(walk(self.repo_path, self.repo_path), 20_000)
        known = [rel for rel, kind in walked if kind == "file"]
        same_name = [rel for rel in known if rel.rsplit("/", 1)[-1] == target.name]
        close = same_name[:5] or difflib.get_close_matches(wanted, known, n=3, cutoff=0.6)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        return ToolError(f"No such file or directory: {path}.{hint} Use list_files to look around.")


# --------------------------------------------------------------------------------- files
def _read_window(
    f: typing.BinaryIO, rel: str, start: int, end: int | None
) -> tuple[list[tuple[int, str]], int, int | None, bool]:
    """Lines start..end within the caps, the file's line count, the first line not shown
    because of the caps, and whether any shown byte was not UTF-8. Streams: big files are fine."""
    shown: list[tuple[int, str]] = []
    chars, total, next_line, lossy = 0, 0, None, False
    if b"\0" in f.read(BINARY_SNIFF_BYTES):
        size = os.fstat(f.fileno()).st_size
        raise ToolError(
            f"{rel} is a binary file ({size:,} bytes); read_file shows text only. "
            "get_file_info gives its metadata."
        )
    f.seek(0)
    for total, raw in enumerate(f, 1):
        if total < start:
            continue
        if end is not None and total > end:
            break
        if len(shown) >= READ_MAX_LINES or (shown and chars + len(raw) > READ_MAX_CHARS):
            next_line = total
            break
        text, bad = _decode_line(raw)
        shown.append((total, text))
        chars, lossy = chars + min(len(text), READ_MAX_LINE_CHARS), lossy or bad
    else:
        return shown, total, None, lossy
    return shown, total + _count_lines(f), next_line, lossy


def _decode_line(raw: bytes) -> tuple[str, bool]:
    raw = raw.rstrip(b"\n").rstrip(b"\r")
    try:
        return raw.decode("utf-8"), False
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace"), True


def _count_lines(f: typing.BinaryIO) -> int:
    count, last = 0, b"\n"
    while chunk := f.read(1 << 20):
        count, last = count + chunk.count(b"\n"), chunk[-1:]
    return count + (last != b"\n")


def _number(lines: list[tuple[int, str]]) -> list[str]:
    width = max(4, len(str(lines[-1][0])))
    return [f"{n:>{width}} | {text}" for n, text in lines]


def _snippet(text: str, first: int, last: int, context: int = 3, cap: int = 40) -> str:
    lines = text.split("\n")
    lo, hi = max(1, first - context), min(len(lines), last + context)
    numbered = _number([(n, lines[n - 1]) for n in range(lo, hi + 1)])
    if len(numbered) > cap:
        gap = len(numbered) - cap
        numbered = [*numbered[: cap // 2], f"     ... ({gap} lines)", *numbered[-cap // 2 :]]
    return "\n".join(numbered)


def _find_all(text: str, needle: str) -> list[int]:
    positions, pos = [], text.find(needle)
    while pos != -1:
        positions.append(pos)
        pos = text.find(needle, pos + 1)
    return positions


def _no_match_message(rel: str, text: str, old_str: str) -> str:
    """Point at a match that differs only in whitespace, the usual reason an edit misses."""
    lines = text.split("\n")
    wanted = [" ".join(line.split()) for line in old_str.strip("\n").split("\n")]
    squashed = [" ".join(line.split()) for line in lines]
    for i in range(len(lines) - len(wanted) + 1):
        if any(wanted) and squashed[i : i + len(wanted)] == wanted:
            near = _number([(n + 1, lines[n]) for n in range(i, i + len(wanted))][:20])
            return (
                f"old_str was not found exactly in {rel}, but lines {i + 1}-{i + len(wanted)} "
                "match it if whitespace is ignored (indentation, tabs or trailing spaces "
                "differ):\n" + "\n".join(near) + "\nCopy those lines exactly into old_str."
            )
    return (
        f"old_str was not found in {rel}. Use read_file to see the current text and copy "
        "old_str from it exactly, including indentation."
    )


_LANGUAGES = {
    ".py": "Python", ".pyi": "Python", ".js": "JavaScript", ".mjs": "JavaScript",
    ".cjs": "JavaScript", ".jsx": "JavaScript (JSX)", ".ts": "TypeScript",
    ".tsx": "TypeScript (TSX)", ".java": "Java", ".kt": "Kotlin", ".go": "Go", ".rs": "Rust",
    ".c": "C", ".h": "C/C++ header", ".cc": "C++", ".cpp": "C++", ".hpp": "C++", ".cs": "C#",
    ".rb": "Ruby", ".php": "PHP", ".swift": "Swift", ".scala": "Scala", ".sh": "Shell",
    ".bash": "Shell", ".zsh": "Shell", ".ps1": "PowerShell", ".sql": "SQL", ".html": "HTML",
    ".css": "CSS", ".scss": "SCSS", ".json": "JSON", ".yaml": "YAML", ".yml": "YAML",
    ".toml": "TOML", ".ini": "INI", ".cfg": "INI", ".xml": "XML", ".md": "Markdown",
    ".rst": "reStructuredText", ".txt": "plain text", ".csv": "CSV", ".lua": "Lua", ".r": "R",
    ".dart": "Dart", ".ex": "Elixir", ".exs": "Elixir", ".hs": "Haskell", ".vue": "Vue",
    ".tf": "Terraform", ".proto": "Protocol Buffers",
    "Dockerfile": "Dockerfile", "Makefile": "Makefile", "CMakeLists.txt": "CMake",
}  # fmt: skip


def _file_kind(f: typing.BinaryIO, name: str) -> list[str]:
    """type/language/lines for an open file, read in chunks so huge files cost no memory."""
    suffix = os.path.splitext(name)[1].lower()
    language = _LANGUAGES.get(name) or _LANGUAGES.get(suffix, "unknown")
    if b"\0" in f.read(BINARY_SNIFF_BYTES):
        return ["type: file (binary)"]
    f.seek(0)
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        while chunk := f.read(1 << 20):
            decoder.decode(chunk)
        decoder.decode(b"", final=True)
        utf8 = True
    except UnicodeDecodeError:
        utf8 = False
    f.seek(0)
    lines = _count_lines(f)
    encoding = "UTF-8" if utf8 else "not valid UTF-8 (read_file shows bad bytes as \ufffd)"
    return [f"type: file (text, {encoding})", f"language: {language}", f"lines: {lines:,}"]


def _summarise(entries: list[tuple[str, bool]], top: str) -> list[str]:
    """Too many entries: show the deepest levels that fit, folders below with file counts."""
    base = 0 if top == "." else top.count("/") + 1
    depth_of = {rel: rel.count("/") + 1 - base for rel, _ in entries}
    depth = 1
    while sum(d <= depth + 1 for d in depth_of.values()) <= LIST_LIMIT:
        depth += 1
    files_below: dict[str, int] = {}
    for rel, is_dir in entries:
        if not is_dir and depth_of[rel] > depth:
            folder = "/".join(rel.split("/")[: base + depth])
            files_below[folder] = files_below.get(folder, 0) + 1
    shown = [(rel, d) for rel, d in entries if depth_of[rel] <= depth]
    lines = [
        f"{rel}/  ({files_below.get(rel, 0)} files inside)"
        if d and depth_of[rel] == depth
        else rel + "/" * d
        for rel, d in shown[:LIST_LIMIT]
    ]
    if len(shown) > LIST_LIMIT:
        lines.append(f"... and {len(shown) - LIST_LIMIT} more entries at this level")
    example = next((rel for rel, d in shown if d), top)
    lines.append(
        f"[Too many entries to list ({len(entries):,}); showing {depth} level(s) with file "
        f"counts per folder. List a folder to see inside, e.g. list_files(path={example!r}).]"
    )
    return lines


# --------------------------------------------------------------------------------- commands
_COMMAND_ENV = {
    "PAGER": "cat", "GIT_PAGER": "cat", "TERM": "dumb", "NO_COLOR": "1", "CLICOLOR": "0",
    "GIT_TERMINAL_PROMPT": "0", "DEBIAN_FRONTEND": "noninteractive",
}  # fmt: skip


def _run_shell(
    command: str, cwd: Path, timeout: int, *, sandbox: str = "off", network: bool = False
) -> tuple[int, str, bool]:
    """(exit code, head+tail of the output, timed out). No stdin, no pager, no colour, no
    secrets in the environment. The command leads its own session, and the whole group is
    killed when it ends, times out or is interrupted (KeyboardInterrupt: Ctrl-C, or SIGTERM
    through the CLI); in bwrap's PID namespace that includes what escaped the group."""
    argv, env = ["/bin/sh", "-c", command], child_environment(_COMMAND_ENV)
    if sandbox == "bwrap":
        argv, env = bwrap_argv(cwd, network=network) + argv, sandbox_environment(env)
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    timed_out = False
    with owned_process_group(proc):
        capture = _OutputCapture(proc.stdout)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
    capture.join(timeout=2)  # a process that left the group (setsid) may still hold the pipe
    return proc.returncode, capture.text(), timed_out


class _OutputCapture(threading.Thread):
    """Reads a pipe to the end keeping only its head and tail, so endless output is cheap."""

    def __init__(self, stream: typing.BinaryIO):
        super().__init__(daemon=True)
        self.stream = stream
        self.head, self.tail = bytearray(), bytearray()
        self.total_bytes = self.total_lines = 0
        self.start()

    def run(self) -> None:
        fd = self.stream.fileno()
        while chunk := os.read(fd, 65536):
            self.total_bytes += len(chunk)
            self.total_lines += chunk.count(b"\n")
            room = OUTPUT_HEAD_BYTES - len(self.head)
            self.head += chunk[:room]
            self.tail += chunk[room:] if room > 0 else chunk
            del self.tail[:-OUTPUT_TAIL_BYTES]
        self.stream.close()

    def text(self) -> str:
        head, tail = bytes(self.head), bytes(self.tail)
        dropped = self.total_bytes - len(head) - len(tail)
        if dropped <= 0:
            return (head + tail).decode("utf-8", "replace")
        dropped_lines = self.total_lines - head.count(b"\n") - tail.count(b"\n")
        return (
            head.decode("utf-8", "replace")
            + f"\n[... {dropped:,} bytes ({dropped_lines:,} lines) of output cut ...]\n"
            + tail.decode("utf-8", "replace")
        )


# --------------------------------------------------------------------------------- schemas
_COMMANDS_DISABLED = (
    "run_command is disabled: shell commands are off unless the user starts the agent with "
    "--allow-commands. Use the file tools instead."
)
_LOCAL_TOOLS = (
    "list_files", "read_file", "write_file", "edit_file", "search_in_files", "get_file_info",
    "run_command",
)  # fmt: skip
_DESCRIPTIONS = {
    "list_files": "List files and folders under a folder, recursively (folders end with '/'). "
    "Skips .git, hidden files, dependency/build folders and whatever .gitignore ignores. "
    "Large trees are summarised with file counts per folder; then list a subfolder.",
    "read_file": "Read a text file with line numbers ('  12 | code'). Returns at most "
    f"{READ_MAX_LINES} lines per call; use start_line/end_line for other parts.",
    "write_file": "Create a file or replace its whole content (parent folders are created). "
    "To change part of a file, prefer edit_file.",
    "edit_file": "Replace exactly one occurrence of old_str with new_str in a file. old_str must "
    "match the file exactly (whitespace included) and be unique; add context lines if needed.",
    "search_in_files": "Search file contents with a case-insensitive regular expression, "
    "line by line, skipping ignored and binary files. Returns matching lines with line numbers.",
    "get_file_info": "Size, line count, text/binary, language, modification time and "
    "permissions of a file, or the number of entries in a folder.",
    "run_command": "Run a shell command in the repository root and return its exit code and "
    "output (stdout and stderr). No input can be given; it is killed after `timeout` seconds.",
}
_PARAMETERS = {
    "path": "Path relative to the repository root.",
    "start_line": "First line to show, counting from 1 (default 1).",
    "end_line": "Last line to show, inclusive (default: as many as fit).",
    "content": "The complete new content of the file.",
    "old_str": "The exact text to replace; must occur exactly once in the file.",
    "new_str": "The text to put in its place.",
    "pattern": "Regular expression (Python/PCRE syntax); invalid ones are searched literally.",
    "file_pattern": "Only search files whose name matches this glob, e.g. '*.py' or '*.{js,ts}'.",
    "command": "The shell command line.",
    "timeout": f"Seconds before the command is killed (1-{COMMAND_MAX_TIMEOUT}).",
}
_JSON_TYPES = {str: "string", int: "integer"}


def _tool_names(allow_commands: bool) -> tuple[str, ...]:
    return _LOCAL_TOOLS if allow_commands else _LOCAL_TOOLS[:-1]


def _parameter_types(method: Callable[..., str]) -> dict[str, tuple[type, inspect.Parameter]]:
    """name -> (base type, parameter), read from the signature so schema and checks agree."""
    hints = typing.get_type_hints(method)
    params = inspect.signature(method).parameters
    out = {}
    for name, param in params.items():
        if name == "self":
            continue
        kinds = [a for a in typing.get_args(hints[name]) or (hints[name],) if a is not type(None)]
        out[name] = (kinds[0], param)
    return out


def get_available_tools(allow_commands: bool = False) -> list[dict[str, Any]]:
    """The local tools as {"name", "description", "parameters": JSON Schema}, task_complete last."""
    tools = []
    for name in _tool_names(allow_commands):
        properties, required = {}, []
        for pname, (kind, param) in _parameter_types(getattr(CodeRepositoryTools, name)).items():
            properties[pname] = {"type": _JSON_TYPES[kind], "description": _PARAMETERS[pname]}
            if param.default is inspect.Parameter.empty:
                required.append(pname)
            elif param.default is not None:
                properties[pname]["default"] = param.default
        schema = {"type": "object", "properties": properties, "required": required}
        tools.append({"name": name, "description": _DESCRIPTIONS[name], "parameters": schema})
    return [*tools, {**TASK_COMPLETE_SPEC}]


TASK_COMPLETE_SPEC: dict[str, Any] = {
    "name": "task_complete",
    "description": "Finish: call this once the task is done (or cannot be done), "
    "with a summary of what was done and the answer.",
    "parameters": {
        "type": "object",
        "properties": {"result": {"type": "string", "description": "The final answer."}},
        "required": ["result"],
    },
}
# Names no other toolbox may take, whether or not run_command is on for this run.
RESERVED_TOOL_NAMES = frozenset((*_LOCAL_TOOLS, "task_complete"))


def _bind_parameters(name: str, method: Callable[..., str], given: Any) -> dict[str, Any]:
    """Check the LLM's parameters against the tool signature; JSON null means the default."""
    given = {} if given is None else given
    if not isinstance(given, dict):
        raise ToolError(f"Parameters for {name} must be a JSON object, got {_json_type(given)}.")
    expected = _parameter_types(method)
    accepted = ", ".join(
        p + ("" if param.default is inspect.Parameter.empty else " (optional)")
        for p, (_, param) in expected.items()
    )
    unknown = sorted(set(given) - set(expected))
    if unknown:
        raise ToolError(
            f"Unknown parameter(s) for {name}: {', '.join(unknown)}. Accepted: {accepted}."
        )
    kwargs = {}
    for pname, (kind, param) in expected.items():
        value = given.get(pname)
        if value is None:
            if param.default is inspect.Parameter.empty:
                raise ToolError(
                    f"Missing required parameter '{pname}' for {name}. Parameters: {accepted}."
                )
            continue
        kwargs[pname] = _coerce(name, pname, value, kind)
    return kwargs


def _coerce(tool: str, pname: str, value: Any, kind: type) -> Any:
    if kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
            return int(value)
        raise ToolError(f"Parameter '{pname}' of {tool} must be an integer, got {_short(value)}.")
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise ToolError(
        f"Parameter '{pname}' of {tool} must be a string, got {_json_type(value)} {_short(value)}."
    )


def _json_type(value: Any) -> str:
    kinds = {dict: "an object", list: "an array", bool: "a boolean", str: "a string"}
    return kinds.get(type(value), "a number" if isinstance(value, (int, float)) else "a value")


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def _preview(kwargs: dict[str, Any]) -> str:
    """Parameters for the log, with long values (file contents) cut to their size."""
    return ", ".join(
        f"{k}={_short(v)}" + (f" ({len(v):,} chars)" if isinstance(v, str) and len(v) > 80 else "")
        for k, v in kwargs.items()
    )
