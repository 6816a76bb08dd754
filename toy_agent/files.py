"""Safe file access inside the repository: the one way toy_agent opens, reads and writes files.

Files are opened relative to a descriptor of their folder, walked from the repository root one
component at a time with O_NOFOLLOW: a folder swapped for a symlink between the path check and
the open is refused, never followed. Special files are refused with their kind, reads stop at
the size caps, writes are atomic (temp file + rename, one core for repository files and for
toy_agent's own files: trajectories, sessions, batch results), text is read and written back in
its own encoding and line endings, and a file's state before a change is read once for both the
run's diff and undo (FileState). LinkIndex answers, in O(1) per file, whether every hard link
of a file is inside the repository.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import fcntl
import hashlib
import itertools
import os
import re
import secrets
import stat
import threading
import time
import typing
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

BINARY_SNIFF_BYTES = 8192  # a NUL in this much of a file's start makes it binary

SCAN_MAX_BYTES = 256 << 20  # read_file and get_file_info read no further into a file
EDIT_MAX_BYTES = 64 << 20  # edit_file holds the whole file in memory
DIFF_MAX_BYTES = 8 << 20  # a run's diff shows a bigger file's size, not its lines
STALE_TEMP_SECONDS = 600  # a temp file untouched this long was left by a killed write
LOCK_WAIT_SECONDS = 30  # how long a write waits for another write in the same folder


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


def special_message(rel: str, mode: int) -> str:
    kind = special_kind(mode) or "special file"
    return f"{rel} is a {kind}, not a regular file; special files are never opened."


class ToolError(Exception):
    """A tool could not do what was asked; the message becomes the LLM's observation. It is
    defined here, below the tools, because the file layer's refusals are such messages."""


class ToolRefusal(ToolError):
    """A tool refused on principle (a path outside the repository, a symlink escape, git's
    own files): the agent marks the observation `refused` rather than a plain error."""


def invalid_text(what: str, value: str) -> str | None:
    """Why `value` (a path or pattern the model gave) is not valid text, or None. A lone
    surrogate (JSON's "\\ud800") names no file and no file holds it: the file system and a
    child's argv cannot even encode it. The surrogate escapes of undecodable name bytes
    (U+DC80-U+DCFF, as os.listdir gives them) are encodable and pass."""
    try:
        os.fsencode(value)
    except UnicodeEncodeError as exc:
        bad = value[exc.start]
        return (f"{what} is not valid text: it holds a lone surrogate ({ascii(bad)[1:-1]}, "
                f"at character {exc.start + 1}), half of a pair that no file name or file "
                "holds; write the character itself.")  # fmt: skip
    return None


# --------------------------------------------------------------------------------- descriptors
def open_dir(
    root: Path, parts: tuple[str, ...], *, created: list[tuple[str, ...]] | None = None
) -> int:
    """A descriptor of the folder root/parts; the caller closes it. Missing folders are made
    when `created` is a list, and the parts of each one made are appended to it."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for i, part in enumerate(parts):
            where = "/".join(parts[: i + 1])
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if created is None:
                    raise ToolError(f"No such folder: {where}.") from None
                with contextlib.suppress(FileExistsError):  # or a concurrent write made it
                    os.mkdir(part, 0o777, dir_fd=fd)
                    created.append(parts[: i + 1])
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                    raise ToolError(f"Cannot open folder {where}: {exc.strerror}.") from exc
                if stat.S_ISLNK(os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode):
                    raise ToolRefusal(_SWAPPED.format(where)) from exc
                raise ToolError(f"Cannot create folder {where}: a file is in the way.") from exc
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def open_regular(
    root: Path, parts: tuple[str, ...], check: Callable[[os.stat_result, str], None]
) -> Iterator[typing.BinaryIO]:
    """The regular file root/parts, for reading. Special files are refused unopened; `check`
    sees the open file's stat first (the tools refuse hard links from outside there). An
    error while opening or reading says so ("Cannot read x: Permission denied"), never
    "binary"."""
    rel = "/".join(parts)
    dir_fd = open_dir(root, parts[:-1])
    try:
        with reading(rel):
            f = open_file_at(dir_fd, parts[-1], rel)
    finally:
        os.close(dir_fd)
    with f, reading(rel):
        check(os.fstat(f.fileno()), rel)
        yield f


@contextlib.contextmanager
def rewrite(root: Path, parts: tuple[str, ...]) -> Iterator[Rewrite]:
    """A read-modify-write of root/parts that no other toy_agent write in its folder can
    interleave with (see _lock_folder). Folders made for it are removed again unless it
    is written, and temp files that killed writes left in the folder are cleared."""
    rel = "/".join(parts)
    created: list[tuple[str, ...]] = []
    file = None
    try:
        dir_fd = open_dir(root, parts[:-1], created=created)
        try:
            _lock_folder(dir_fd, rel)
            _remove_stale_temps(dir_fd)
            file = Rewrite(dir_fd, parts[-1], rel)
            yield file
        finally:
            os.close(dir_fd)  # releases the lock
    except OSError as exc:  # making a folder; reading and writing raise ToolError
        reason = exc.strerror or str(exc)
        raise ToolError(f"Could not write {rel}: {reason}; nothing changed.") from exc
    finally:
        if file is None or not file.written:
            _remove_folders(root, created)


def _remove_folders(root: Path, created: list[tuple[str, ...]]) -> None:
    """Undo the folders a failed write made, deepest first; one no longer empty stays."""
    for parts in reversed(created):
        with contextlib.suppress(OSError, ToolError):
            parent = open_dir(root, parts[:-1])
            try:
                os.rmdir(parts[-1], dir_fd=parent)
            finally:
                os.close(parent)


# --------------------------------------------------------------------------------- writes
_CHANGED = (
    "{} was changed by another program while this call was working on it, so it was not "
    "written (that change would have been lost). Read it again and redo the change."
)
_TEMP_STEM_BYTES = 100  # ".{stem}.{8 hex}.tmp" stays within NAME_MAX (255 bytes)
_TEMP_NAME = re.compile(r"\.(.+)\.[0-9a-f]{8}\.tmp", re.DOTALL)


class Rewrite:
    """A file being rewritten in a locked folder: look at what is there (`seen`, `open`),
    then `replace` it. The replacement is refused if the file changed since it was looked at,
    which only a writer that does not take the lock can do (an editor, a formatter)."""

    def __init__(self, dir_fd: int, name: str, rel: str):
        self.dir_fd, self.name, self.rel = dir_fd, name, rel
        self.seen = stat_entry(dir_fd, name, rel)  # None for a new file
        self.written = False

    def open(self) -> typing.BinaryIO:
        """The file as it is now, for reading; `replace` then expects this version of it."""
        f = open_file_at(self.dir_fd, self.name, self.rel)
        self.seen = os.fstat(f.fileno())
        return f

    def replace(self, data: bytes) -> None:
        """The file is either old or new, never half written (see _replace_in), and an
        existing file keeps its mode."""

        def unchanged() -> None:
            if _version(stat_entry(self.dir_fd, self.name, self.rel)) != _version(self.seen):
                raise ToolError(_CHANGED.format(self.rel))

        try:
            _replace_in(self.dir_fd, self.name, data, keep=self.seen, check=unchanged)
        except OSError as exc:
            outcome = "nothing was created" if self.seen is None else "it is unchanged"
            reason = exc.strerror or str(exc)
            raise ToolError(f"Could not write {self.rel}: {reason}; {outcome}.") from exc
        self.written = True


def _replace_in(
    dir_fd: int,
    name: str,
    data: bytes,
    *,
    mode: int = 0o666,
    keep: os.stat_result | None = None,
    check: Callable[[], None] | None = None,
) -> None:
    """The one atomic write: a temp file beside `name` in folder dir_fd, written and synced,
    then renamed over it, so `name` is either old or new, never half written, and a failure
    leaves no temp file behind. The new file is made with `mode` (the umask applies), or gets
    the mode of `keep`, the file it replaces. `check` may refuse the rename by raising."""
    tmp = _temp_name(name)
    try:
        fd = os.open(tmp, _CREATE_FLAGS, mode, dir_fd=dir_fd)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(fd)
            if keep is not None:
                os.fchmod(fd, stat.S_IMODE(keep.st_mode))
        if check is not None:
            check()
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def atomic_write(path: Path, data: bytes | str, *, mode: int | None = None) -> None:
    """Replace `path`, a file of toy_agent's own outside the repository (a trajectory, a
    session, a batch's results), with `data` (str is written as UTF-8), atomically. `mode`
    is the new file's (0o600 for a private one); without it a replaced file keeps its mode."""
    data = data.encode("utf-8") if isinstance(data, str) else data
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        keep = None
        if mode is None:
            with contextlib.suppress(FileNotFoundError):
                st = os.stat(path.name, dir_fd=dir_fd, follow_symlinks=False)
                keep = st if stat.S_ISREG(st.st_mode) else None
        _replace_in(dir_fd, path.name, data, mode=0o666 if mode is None else mode, keep=keep)
    finally:
        os.close(dir_fd)


def _version(st: os.stat_result | None) -> tuple[int, ...] | None:
    """What changes whenever a file is written, in place or by replacing it."""
    if st is None:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def stat_entry(dir_fd: int, name: str, rel: str) -> os.stat_result | None:
    """The regular file `name` in folder dir_fd, not followed if a symlink; None if missing."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(st.st_mode):
        raise ToolError(f"{rel} is a directory; give a file path.")
    if stat.S_ISLNK(st.st_mode):
        raise ToolRefusal(_SWAPPED.format(rel))
    if not stat.S_ISREG(st.st_mode):
        raise ToolError(special_message(rel, st.st_mode))
    return st


def open_file_at(dir_fd: int, name: str, rel: str) -> typing.BinaryIO:
    """The regular file `name` in folder dir_fd, for reading: never through a symlink, and
    never blocking on a FIFO swapped in. Other failures raise OSError (see reading)."""
    if stat_entry(dir_fd, name, rel) is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), rel)
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ToolRefusal(_SWAPPED.format(rel)) from exc
        raise
    f = os.fdopen(fd, "rb")
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):  # swapped between the stat and the open
        f.close()
        raise ToolError(special_message(rel, mode))
    os.set_blocking(fd, True)
    return f


@contextlib.contextmanager
def reading(rel: str) -> Iterator[None]:
    """OSError while opening or reading `rel` becomes "Cannot read rel: <reason>."."""
    try:
        yield
    except OSError as exc:
        raise ToolError(f"Cannot read {rel}: {exc.strerror or exc}.") from exc


def _lock_folder(dir_fd: int, rel: str) -> None:
    """Take the folder's exclusive flock, released when dir_fd is closed: toy_agent writes in
    one folder (from threads or processes) take turns, so none is lost to another."""
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while True:
        try:
            fcntl.flock(dir_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise ToolError(
                    f"{rel} was not written: another write in its folder has held the folder "
                    f"lock for over {LOCK_WAIT_SECONDS}s. Try again later."
                ) from None
            time.sleep(0.002)
        except OSError:  # no flock here (some network filesystems): Rewrite still checks
            return


def _temp_name(name: str) -> str:
    stem = os.fsencode(name)[:_TEMP_STEM_BYTES].decode("utf-8", "ignore") or "_"
    return f".{stem}.{secrets.token_hex(4)}.tmp"


def _remove_stale_temps(dir_fd: int) -> None:
    """Delete what writes killed midway (kill -9, a crash) left in the folder: regular files
    named like _temp_name's, untouched for STALE_TEMP_SECONDS."""
    cutoff = time.time() - STALE_TEMP_SECONDS
    with contextlib.suppress(OSError), os.scandir(dir_fd) as entries:  # never fails a write
        for entry in entries:
            match = _TEMP_NAME.fullmatch(entry.name)
            if not match or len(os.fsencode(match[1])) > _TEMP_STEM_BYTES:
                continue
            with contextlib.suppress(OSError):
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(st.st_mode) and st.st_mtime < cutoff:
                    os.unlink(entry.name, dir_fd=dir_fd)


# --------------------------------------------------------------------------------- text
ENDING = re.compile(r"\r\n|\r|\n")
ENDING_NAMES = {"\r\n": "CRLF", "\n": "LF", "\r": "CR"}
UNDECODABLE = re.compile("[\udc80-\udcff]")  # UTF-8 bytes kept as surrogate escapes
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Encoding:
    codec: str  # a Python codec that writes no byte-order mark itself
    bom: bytes
    name: str


UTF8 = Encoding("utf-8", b"", "UTF-8")
_BOMS = (  # UTF-32 LE first: its mark starts with UTF-16 LE's
    Encoding("utf-32-le", codecs.BOM_UTF32_LE, "UTF-32 LE"),
    Encoding("utf-32-be", codecs.BOM_UTF32_BE, "UTF-32 BE"),
    Encoding("utf-16-le", codecs.BOM_UTF16_LE, "UTF-16 LE"),
    Encoding("utf-16-be", codecs.BOM_UTF16_BE, "UTF-16 BE"),
    Encoding("utf-8", codecs.BOM_UTF8, "UTF-8"),
)


def text_encoding(head: bytes) -> Encoding | None:
    """How a file starting with `head` is decoded, or None for binary: UTF-8 unless a byte-
    order mark names another Unicode encoding; binary when the decoded head has a NUL."""
    encoding = next((e for e in _BOMS if head.startswith(e.bom)), UTF8)
    if encoding.codec == "utf-8":
        return None if b"\0" in head else encoding
    decoder = codecs.getincrementaldecoder(encoding.codec)("replace")  # holds back a cut char
    return None if "\0" in decoder.decode(head[len(encoding.bom) :]) else encoding


class Scan:
    """How far one pass over a file may read: a file can be far bigger than anything worth
    reading whole, and a sparse one claims terabytes it does not hold. `cut` once the pass
    stopped before the end."""

    __slots__ = ("cut", "left")

    def __init__(self, limit: int = SCAN_MAX_BYTES):
        self.left, self.cut = limit, False

    def read(self, f: typing.BinaryIO) -> bytes:
        if self.left <= 0:
            self.cut = self.cut or bool(f.read(1))
            return b""
        chunk = f.read(min(_CHUNK, self.left))
        self.left -= len(chunk)
        return chunk


def pieces(f: typing.BinaryIO, encoding: Encoding, scan: Scan) -> Iterator[tuple[str, str]]:
    """The text after the byte-order mark as (piece, line ending) pairs, split after "\\n",
    "\\r\\n" and a lone "\\r"; the ending is "" when the line goes on in the next piece (or the
    file ends). Read in chunks, so no line is ever held whole, and no further than `scan`
    allows (the text ends there). Undecodable UTF-8 bytes come as surrogate escapes, other
    undecodable bytes as \\ufffd."""
    errors = "surrogateescape" if encoding.codec == "utf-8" else "replace"
    decoder = codecs.getincrementaldecoder(encoding.codec)(errors)
    f.seek(len(encoding.bom))
    held = ""
    while True:
        chunk = scan.read(f)
        text = held + decoder.decode(chunk, final=not chunk)
        held = "\r" if chunk and text.endswith("\r") else ""  # maybe half of a "\r\n"
        text = text[: len(text) - len(held)]
        start = 0
        if "\n" in text or "\r" in text:
            for match in ENDING.finditer(text):
                yield text[start : match.start()], match.group()
                start = match.end()
        if start < len(text):
            yield text[start:], ""
        if not chunk:
            return


def undecoded(text: str, encoding: Encoding) -> bool:
    if encoding.codec == "utf-8":
        return not text.isascii() and UNDECODABLE.search(text) is not None
    return "\ufffd" in text


@dataclass(frozen=True)
class Text:
    """A text file as edit_file matches it, every line ending as "\\n", with what writing it
    back byte for byte takes: the original ending of each "\\n", and the encoding."""

    text: str
    endings: list[str]
    encoding: Encoding

    @classmethod
    def parse(cls, data: bytes, rel: str) -> Text:
        encoding = text_encoding(data[:BINARY_SNIFF_BYTES])
        if encoding is None:
            raise ToolError(f"{rel} is a binary file; edit_file only edits text.")
        # undecodable UTF-8 bytes survive the round trip as surrogate escapes
        errors = "surrogateescape" if encoding.codec == "utf-8" else "strict"
        try:
            raw = data[len(encoding.bom) :].decode(encoding.codec, errors)
        except UnicodeDecodeError as exc:
            raise ToolError(
                f"{rel} has bytes that are not valid {encoding.name} (at byte "
                f"{exc.start + len(encoding.bom):,}); edit_file would lose them, so it does "
                "not edit this file."
            ) from exc
        parts = re.split(r"(\r\n|\r|\n)", raw)
        return cls("\n".join(parts[::2]), parts[1::2], encoding)

    def dominant(self) -> str:
        """The most common line ending; "\\n" on a tie with it or when there is none."""
        counts = Counter(self.endings)
        return max(ENDING_NAMES, key=lambda ending: (counts[ending], ending == "\n"))

    def encode(self, text: str, endings: list[str]) -> bytes:
        lines = text.split("\n")
        endings = _kept_apart(lines, endings)
        body = "".join(itertools.chain.from_iterable(zip(lines, [*endings, ""], strict=True)))
        errors = "surrogateescape" if self.encoding.codec == "utf-8" else "strict"
        return encode_text(body, self.encoding, "new_str", errors)


def _kept_apart(lines: list[str], endings: list[str]) -> list[str]:
    """`endings` with every empty line that follows a lone "\\r" and ends in "\\n" ending in
    "\\r" instead: written as is, the two would read back as one "\\r\\n" and the line would
    be gone from the file."""
    kept = list(endings)
    for i in range(1, len(kept)):
        if kept[i - 1] == "\r" and not lines[i] and kept[i] == "\n":
            kept[i] = "\r"
    return kept


def encode_text(text: str, encoding: Encoding, what: str, errors: str = "strict") -> bytes:
    try:
        return encoding.bom + text.encode(encoding.codec, errors)
    except UnicodeEncodeError as exc:
        raise ToolError(f"{what} cannot be written as {encoding.name}: {exc.reason}.") from exc


def existing_format(file: Rewrite) -> tuple[Encoding, str | None]:
    """The encoding of the file being replaced, and its line ending when it uses one other
    than "\\n" throughout; UTF-8 and None for a new, binary, empty or unreadable file."""
    if file.seen is None:
        return UTF8, None
    try:
        f = file.open()
    except PermissionError:  # not readable, yet replaceable: written as given
        return UTF8, None
    with f, reading(file.rel):
        encoding = text_encoding(f.read(BINARY_SNIFF_BYTES))
        if encoding is None:
            return UTF8, None
        endings: set[str] = set()
        scan = Scan()
        for _, ending in pieces(f, encoding, scan):
            endings.update((ending,) if ending else ())
            if len(endings) > 1 or "\n" in endings:
                return encoding, None
    return encoding, None if scan.cut else next(iter(endings), None)


_PORTABLE_READ = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)


def open_regular_fd(path: Path | str, *, follow: bool = True) -> tuple[int, int] | None:
    """(descriptor, size) of a regular file the tree walk found, for the caller to close; None
    for anything else or on an error. Opened without waiting, so a file swapped for a FIFO
    after the walk cannot block (search reads files and ignore files this way); with `follow`
    false never through a symlink."""
    flags = _PORTABLE_READ | (0 if follow else getattr(os, "O_NOFOLLOW", 0))
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
    except OSError:
        st = None
    if st is None or not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return None
    return fd, st.st_size


def write_at(root: Path, rel: str, data: bytes) -> None:
    """Write `data` over the repository file root/rel the way write_file does (fd-relative,
    locked, atomic, keeping its mode): how undo puts a file back."""
    with rewrite(root, tuple(rel.split("/"))) as file:
        file.replace(data)


# --------------------------------------------------------------------------------- changes
@dataclass(frozen=True)
class FileState:
    """A repository file as the change tracker read it, once, before a change (and again
    after): its bytes for the run's diff and for undo, and a digest to tell whether it changed.
    A file over DIFF_MAX_BYTES is not read at all (it may be a sparse terabyte): its size and
    times stand for its digest, and it cannot be restored."""

    data: bytes | None  # None: missing, too big, not readable (or not kept)
    digest: str | None  # sha256; "N bytes, modified M, C" when too big; "<why>"; None: missing
    size: int = 0
    mtime_ns: int = 0
    linked_outside: bool = False  # some hard link is outside the repository: never shown

    @property
    def too_big(self) -> bool:
        return self.data is None and self.digest is not None and not self.digest.startswith("<")

    def text(self) -> str | None:
        """The content as the run's diff shows it: decoded in the file's encoding, a line with
        its size and time when too big, None when missing or not readable."""
        if self.too_big:
            return f"({self.size:,} bytes, too big to diff; modified {self.mtime_ns})\n"
        if self.data is None or self.linked_outside:
            return None
        return diff_text(self.data)


def diff_text(data: bytes) -> str:
    """A file's bytes as a diff shows them: decoded in the file's encoding, undecodable bytes
    kept as surrogate escapes (`visible` shows them as `\\xNN`)."""
    encoding = text_encoding(data[:BINARY_SNIFF_BYTES])
    if encoding is not None and encoding.codec != "utf-8":  # UTF-16/32 with its mark
        return data[len(encoding.bom) :].decode(encoding.codec, "replace")
    return data.decode("utf-8", "surrogateescape")


def file_state(
    root: Path, rel: str, links: LinkIndex | None = None, *, keep: bool = True
) -> FileState:
    """The state of root/rel, opened the safe way (no link followed anywhere on the path);
    with `keep` false only its digest is kept. `links` marks a file hard-linked from outside."""
    parts = tuple(rel.split("/"))
    try:
        os.lstat(root / rel)
    except FileNotFoundError:
        return FileState(None, None)
    except OSError as exc:
        return FileState(None, f"<{exc.strerror or exc}>")
    try:
        dir_fd = open_dir(root, parts[:-1])
        try:
            f = open_file_at(dir_fd, parts[-1], rel)
        finally:
            os.close(dir_fd)
    except FileNotFoundError:
        return FileState(None, None)
    except ToolError:
        return FileState(None, "<not a regular file>")
    except OSError as exc:
        return FileState(None, f"<{exc.strerror or exc}>")
    with f:
        st = os.fstat(f.fileno())
        outside = links is not None and links.inside(st) < st.st_nlink
        if st.st_size > DIFF_MAX_BYTES:
            digest = f"{st.st_size} bytes, modified {st.st_mtime_ns}, {st.st_ctime_ns}"
            return FileState(None, digest, st.st_size, st.st_mtime_ns, outside)
        hashed, chunks = hashlib.sha256(), []
        try:
            for chunk in iter(lambda: f.read(_CHUNK), b""):
                hashed.update(chunk)
                if keep:
                    chunks.append(chunk)
        except OSError as exc:
            return FileState(None, f"<{exc.strerror or exc}>")
    data = b"".join(chunks) if keep else None
    return FileState(data, hashed.hexdigest(), st.st_size, st.st_mtime_ns, outside)


# --------------------------------------------------------------------------------- hard links
class LinkIndex:
    """How many of a file's hard links are inside the repository, in O(1) per file.

    A file is read only when every link is inside: otherwise it may be a file from outside (a
    key, a password store) linked in. Writes never reach another link: they replace the file.
    One walk of the whole repository (hidden and ignored folders too) counts the links of
    every multiply-linked file, with the file's ctime; the count stands while the ctime does,
    because making or removing a link (or writing the file) changes it. Only a file the walk
    did not see as it is now starts a new walk, once per change of it; a lookup is a dict
    access."""

    def __init__(self, root: Path):
        self.root = root
        self.walks = 0
        self._counts: dict[tuple[int, int], tuple[int, int]] = {}  # (dev, ino) -> (n, ctime)
        self._lock = threading.Lock()

    def inside(self, st: os.stat_result) -> int:
        """How many of the links of the file `st` describes are inside (all when 1)."""
        if st.st_nlink <= 1:
            return st.st_nlink
        key = (st.st_dev, st.st_ino)
        with self._lock:
            known = self._counts.get(key)
            if known is None or known[1] != st.st_ctime_ns:  # not seen as it is now
                self._walk()
                known = self._counts.setdefault(key, (0, st.st_ctime_ns))  # still unseen: 0
        return known[0] if known[1] == st.st_ctime_ns else 0

    def check(self, st: os.stat_result, rel: str) -> None:
        """Refuse to read the file `st` describes unless all its links are inside."""
        inside = self.inside(st)
        if inside < st.st_nlink:
            raise ToolError(
                f"{rel} has {st.st_nlink} hard links and only {inside} of them are inside "
                "the repository, so it may be a file from outside; it is not read."
            )

    def _walk(self) -> None:
        self.walks += 1
        counts: Counter[tuple[int, int]] = Counter()
        ctimes: dict[tuple[int, int], int] = {}
        folders = [str(self.root)]
        while folders:
            with contextlib.suppress(OSError), os.scandir(folders.pop()) as entries:
                for entry in entries:
                    with contextlib.suppress(OSError):
                        if entry.is_dir(follow_symlinks=False):
                            folders.append(entry.path)
                            continue
                        st = entry.stat(follow_symlinks=False)
                        if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
                            key = (st.st_dev, st.st_ino)
                            counts[key] += 1
                            ctimes[key] = st.st_ctime_ns
        self._counts = {key: (n, ctimes[key]) for key, n in counts.items()}
