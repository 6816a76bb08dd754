"""Checkpoints: the work tree snapshotted into a private git object store, so that undo and
/rewind can take back what any step changed, commands included.

Each session has its own store, `checkpoints/ID/` beside the session files. Real `git` runs
with `GIT_DIR` pointing there, `GIT_WORK_TREE` at the repository and `GIT_INDEX_FILE` in the
store: the user's own `.git` (its index, refs, objects, hooks, config) is never read or
written. No user or system git config is read (`GIT_CONFIG_NOSYSTEM`, `GIT_CONFIG_GLOBAL`),
so no filter, hook or fsmonitor is defined; and the store's `info/attributes` unsets `text`,
`eol`, `filter`, `ident` and `working-tree-encoding` for every path, which takes precedence
over the repository's `.gitattributes`: the bytes stored are the bytes on disk.

A snapshot is `git ls-files` of what changed since the store's index last saw the tree (the
index's stat cache: an unchanged file is not read again), `git update-index` of those paths,
then `git write-tree`. `core.bigFileThreshold=1` sends every new blob into one pack per
snapshot (git's bulk check-in) instead of a loose file each: the first snapshot of 10,000
files takes about a second instead of many (see bench/bench_checkpoints.py). A new session's
store starts from the latest store of the same repository (its packs hard-linked, its index
copied), so its first snapshot too reads only what changed.

What is left out: files the repository's `.gitignore` files ignore, files over
MAX_SNAPSHOT_BYTES (their size and time are kept, so undo can say it cannot restore them),
nested git repositories and empty folders. Restoring writes the bytes back
itself (fd-relative, as write_file does) with the permission bits the snapshot kept beside its
tree (git keeps only 644 and 755; see Snapshot.extra), and removes only the folders that were
not there in the snapshot (empty ones included).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toy_agent.files import DIFF_MAX_BYTES, ToolError, _replace_in, open_dir, write_at

MAX_SNAPSHOT_BYTES = DIFF_MAX_BYTES  # a larger file is not snapshotted (8 MB)
_NO_CONVERSION = "* -text -eol -filter -ident -working-tree-encoding\n"
_ZERO = "0" * 40
REPO_FILE = "toy-agent-repo"  # in a store: the repository it snapshots
MODES_FILE = "toy-agent-modes"  # in a store: permission bits git does not keep (see Snapshot)
MAX_EMPTY_FOLDERS = 10_000  # kept per snapshot; beyond them, a folder left empty may go


class CheckpointError(Exception):
    """git is missing or failed, or a restore would overwrite something (one line)."""


@dataclass(frozen=True)
class Snapshot:
    """The work tree at one moment: a git tree in the private store, the files too large to
    keep (path -> [size, mtime_ns]), and `extra`: a blob in the store with what a git tree does
    not keep, JSON {"modes": path -> the permission bits of each file whose bits are not 644 or
    755 (a private key's 600), "folders": the folders that hold no file (they are not in the
    tree)}. None for a snapshot taken before they were kept."""

    tree: str
    skipped: dict[str, list[int]] = field(default_factory=dict)
    extra: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"tree": self.tree, "skipped": self.skipped, "extra": self.extra}

    @classmethod
    def from_dict(cls, data: Any) -> Snapshot | None:
        if not isinstance(data, dict) or not isinstance(data.get("tree"), str):
            return None
        skipped, extra = data.get("skipped"), data.get("extra")
        return cls(data["tree"], dict(skipped) if isinstance(skipped, dict) else {},
                   extra if isinstance(extra, str) else None)  # fmt: skip


@dataclass(frozen=True)
class Change:
    """One path that differs between two snapshots; sha `_ZERO` means absent."""

    path: str
    mode: str  # in the target ("000000": absent there)
    sha: str


@dataclass(frozen=True)
class Restored:
    written: list[str]
    removed: list[str]


def git_available() -> bool:
    return shutil.which("git") is not None


class Checkpoints:
    """The private store of one session for one repository."""

    def __init__(self, store: Path, repo: Path, seed: Path | None = None):
        """`seed`: another session's store of the same repository, whose objects (hard
        links: they never change) and index (the stat cache) a new store starts from, so its
        first snapshot reads only what changed since."""
        self.store, self.repo, self.seed = store, repo, seed

    def _env(self) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.store),  # no ~/.gitconfig, no ~/.config/git/ignore
            "XDG_CONFIG_HOME": str(self.store),
            "GIT_DIR": str(self.store),
            "GIT_WORK_TREE": str(self.repo),
            "GIT_INDEX_FILE": str(self.store / "index"),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0",
            "LC_ALL": "C",
        }

    def _git(self, *args: str, stdin: bytes | None = None, tree: bool = True) -> bytes:
        env = self._env()
        if not tree:
            del env["GIT_WORK_TREE"]
        try:
            done = subprocess.run(
                ["git", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null",
                 "-c", "core.autocrlf=false", "-c", "core.safecrlf=false",
                 "-c", "core.bigFileThreshold=1", *args],
                input=stdin, capture_output=True, env=env, cwd=self.store, check=False,
            )  # fmt: skip
        except OSError as exc:
            raise CheckpointError(f"cannot run git: {exc.strerror or exc}") from None
        if done.returncode != 0:
            reason = done.stderr.decode("utf-8", "replace").strip().splitlines()
            raise CheckpointError(f"git {args[0]} failed: {reason[-1] if reason else '?'}")
        return done.stdout

    def _init(self) -> None:
        if (self.store / "HEAD").is_file():
            return
        self.store.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._git("init", "-q", "--bare", str(self.store), tree=False)
        (self.store / "info").mkdir(exist_ok=True)
        (self.store / "info" / "attributes").write_text(_NO_CONVERSION)
        for key, value in (("core.bare", "false"), ("gc.auto", "0")):
            self._git("config", key, value)
        (self.store / REPO_FILE).write_text(str(self.repo))
        if self.seed is not None:
            self._seeded(self.seed)

    def _seeded(self, seed: Path) -> None:
        """Start from `seed`'s objects and index; on any failure, from nothing."""
        try:
            for folder, _, files in os.walk(seed / "objects"):
                inside = Path(folder).relative_to(seed)
                (self.store / inside).mkdir(parents=True, exist_ok=True)
                for name in files:
                    with contextlib.suppress(FileExistsError):
                        os.link(Path(folder) / name, self.store / inside / name)
            shutil.copy2(seed / "index", self.store / "index")  # its time: racy entries stay
            with contextlib.suppress(FileNotFoundError):  # a seed from before modes were kept
                shutil.copy2(seed / MODES_FILE, self.store / MODES_FILE)
        except OSError:
            with contextlib.suppress(OSError):
                (self.store / "index").unlink()

    def snapshot(self) -> Snapshot:
        """The work tree now. Raises CheckpointError."""
        self._init()
        listed = self._git("ls-files", "-z", "--modified", "--deleted", "--others",
                           "--exclude-standard")  # fmt: skip
        paths = sorted({p for p in listed.decode("utf-8", "surrogateescape").split("\0") if p})
        folders = self._empty_folders(paths)
        modes = self._modes()
        update, skipped = [], {}
        for rel in paths:
            if rel.endswith("/"):  # a nested repository: not ours to keep
                continue
            try:
                st = os.lstat(self.repo / rel)
            except OSError:
                update.append(rel)  # gone: update-index --remove drops it
                modes.pop(rel, None)
                continue
            _note_mode(modes, rel, st)
            if stat.S_ISREG(st.st_mode) and st.st_size > MAX_SNAPSHOT_BYTES:
                skipped[rel] = [st.st_size, st.st_mtime_ns]
                self._git("rm", "-q", "--cached", "--ignore-unmatch", "--", rel)
            elif stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                update.append(rel)
        if update:
            data = "\0".join(update).encode("utf-8", "surrogateescape") + b"\0"
            self._git("update-index", "--add", "--remove", "-z", "--stdin", stdin=data)
        # what the ignore rules cover now leaves the index (a .gitignore may have changed)
        ignored = self._git("ls-files", "-z", "--cached", "--ignored", "--exclude-standard")
        if ignored.strip(b"\0"):
            self._git("update-index", "--force-remove", "-z", "--stdin", stdin=ignored)
            for rel in ignored.decode("utf-8", "surrogateescape").split("\0"):
                modes.pop(rel, None)
        tree = self._git("write-tree").decode().strip()
        (self.store / MODES_FILE).write_text(json.dumps(modes))
        extra = json.dumps({"modes": modes, "folders": folders}, sort_keys=True).encode()
        blob = self._git("hash-object", "-w", "--stdin", stdin=extra).decode().strip()
        return Snapshot(tree, skipped, blob)

    def _empty_folders(self, paths: Sequence[str]) -> list[str]:
        """The folders that hold no file a snapshot keeps: git lists each such tree once
        among the untracked folders (`paths`, what changed, has any that hold new files)."""
        listed = self._git("ls-files", "-z", "--others", "--directory", "--exclude-standard")
        holding = set(paths)  # and every folder above them (string cuts: 10,000 paths or more)
        for rel in paths:
            cut = rel.rfind("/")
            while cut > 0 and rel[:cut] not in holding:
                holding.add(rel[:cut])
                cut = rel.rfind("/", 0, cut)
        found: list[str] = []
        for entry in listed.decode("utf-8", "surrogateescape").split("\0"):
            top = entry.rstrip("/")
            if not entry.endswith("/") or top in holding or entry in holding:  # nested repo
                continue
            for folder, _, _ in os.walk(self.repo / top):
                found.append(Path(folder).relative_to(self.repo).as_posix())
                if len(found) >= MAX_EMPTY_FOLDERS:
                    return found
        return found

    def _modes(self) -> dict[str, int]:
        """The files' permission bits that git does not keep, as the last snapshot left them;
        for a store from before they were kept, read once from every file the index holds."""
        with contextlib.suppress(FileNotFoundError, ValueError):
            found = json.loads((self.store / MODES_FILE).read_bytes())
            if isinstance(found, dict):
                return found
        modes: dict[str, int] = {}
        if (self.store / "index").is_file():
            listed = self._git("ls-files", "-z", "--cached").decode("utf-8", "surrogateescape")
            for rel in filter(None, listed.split("\0")):
                with contextlib.suppress(OSError):
                    _note_mode(modes, rel, os.lstat(self.repo / rel))
        return modes

    def _extra(self, snapshot: Snapshot) -> tuple[dict[str, int] | None, set[str] | None]:
        """The permission bits and empty folders `snapshot` kept beside its tree; None for
        each it did not keep (a snapshot taken before they were)."""
        if snapshot.extra is None:
            return None, None
        try:
            found = json.loads(self._blobs([snapshot.extra])[snapshot.extra])
        except (CheckpointError, ValueError, LookupError):  # a blob gone or not JSON
            return None, None
        modes = found.get("modes") if isinstance(found, dict) else None
        folders = found.get("folders") if isinstance(found, dict) else None
        return (modes if isinstance(modes, dict) else None,
                set(folders) if isinstance(folders, list) else None)  # fmt: skip

    def changes(self, old: Snapshot, new: Snapshot) -> list[Change]:
        """What differs from `old` to `new`, as what `new` holds."""
        if old.tree == new.tree:
            return []
        raw = self._git("diff-tree", "-r", "-z", "--no-renames", old.tree, new.tree)
        fields = raw.decode("utf-8", "surrogateescape").split("\0")
        out = []
        for meta, path in zip(fields[0::2], fields[1::2], strict=False):
            if meta.startswith(":"):
                _, mode, _, sha, _ = meta[1:].split(" ", 4)
                out.append(Change(path, mode, sha))
        return out

    @staticmethod
    def big_changes(old: Snapshot, new: Snapshot) -> list[str]:
        """Files over the size limit that differ between the two (they cannot be restored)."""
        paths = set(old.skipped) | set(new.skipped)
        return sorted(p for p in paths if old.skipped.get(p) != new.skipped.get(p))

    def restore(self, target: Snapshot, expected: Snapshot, what: str = "undo") -> Restored:
        """Put back the files that differ from `expected` (how the steps left them) to
        `target`, after checking that none of them changed since `expected` was taken;
        refused (CheckpointError, nothing written) when one did, or when a file too large
        to keep differs."""
        wanted = self.changes(expected, target)
        now = self.snapshot()
        moved = {c.path for c in self.changes(expected, now)}
        moved |= set(self.big_changes(expected, now))
        touched = {c.path for c in wanted} | set(self.big_changes(expected, target))
        clash = sorted(touched & moved)
        if clash:
            raise CheckpointError(f"cannot {what}: changed since: {', '.join(clash)}")
        big = self.big_changes(expected, target)
        if big:
            limit = f"larger than {MAX_SNAPSHOT_BYTES >> 20} MB"
            raise CheckpointError(
                f"cannot {what}: no copy was kept of " + ", ".join(f"{p} ({limit})" for p in big)
            )
        blobs = self._blobs([c.sha for c in wanted if c.sha != _ZERO])
        perms, folders = self._extra(target)
        if folders is not None:  # a folder a file comes back to was there too
            folders |= {str(f) for c in wanted if c.sha != _ZERO for f in Path(c.path).parents}
        done: dict[str, list[str]] = {"written": [], "removed": []}
        # The ignore rules go back first: a file absent from `target` because it was ignored
        # then (a .gitignore the steps changed) is kept, not removed. Then removals, deepest
        # first (a file may come back where the steps made a folder), then the rest.
        rules = [c for c in wanted if c.sha != _ZERO and Path(c.path).name == ".gitignore"]
        for change in rules:
            self._apply(change, blobs, perms, folders, done, what)
        gone = [c for c in wanted if c.sha == _ZERO]
        kept = self._ignored([c.path for c in gone]) if gone else set()
        for change in sorted(gone, key=lambda c: -c.path.count("/")):
            if change.path not in kept:
                self._apply(change, blobs, perms, folders, done, what)
        for change in wanted:
            if change.sha != _ZERO and change not in rules:
                self._apply(change, blobs, perms, folders, done, what)
        return Restored(sorted(done["written"]), sorted(done["removed"]))

    def _apply(self, change: Change, blobs: dict[str, bytes], perms: dict[str, int] | None,
               folders: set[str] | None, done: dict[str, list[str]], what: str
               ) -> None:  # fmt: skip
        try:
            if change.sha == _ZERO:
                self._remove(change.path, folders)
                done["removed"].append(change.path)
            else:
                self._write(change, blobs[change.sha], perms)
                done["written"].append(change.path)
        except (OSError, ToolError) as exc:
            so_far = ", ".join(done["written"] + done["removed"]) or "nothing"
            reason = getattr(exc, "strerror", None) or exc
            raise CheckpointError(f"{what} stopped at {change.path}: {reason} "
                                  f"(put back so far: {so_far})") from exc  # fmt: skip

    def _ignored(self, paths: Sequence[str]) -> set[str]:
        """Which of `paths` the work tree's ignore rules ignore now."""
        data = "\0".join(paths).encode("utf-8", "surrogateescape") + b"\0"
        try:
            out = self._git("check-ignore", "-z", "--no-index", "--stdin", stdin=data)
        except CheckpointError:  # exit 1: none is ignored
            return set()
        return {p for p in out.decode("utf-8", "surrogateescape").split("\0") if p}

    def _blobs(self, shas: Sequence[str]) -> dict[str, bytes]:
        if not shas:
            return {}
        unique = list(dict.fromkeys(shas))
        raw = self._git("cat-file", "--batch", stdin="".join(s + "\n" for s in unique).encode())
        out, at = {}, 0
        for sha in unique:
            end = raw.index(b"\n", at)
            header = raw[at:end].split()
            size = int(header[2])
            out[sha] = raw[end + 1 : end + 1 + size]
            at = end + 1 + size + 1
        return out

    def _remove(self, rel: str, kept: set[str] | None) -> None:
        """Remove the file, and the folders above it left empty that are not in `kept` (those
        of the snapshot restored; None: it did not say, and every folder left empty goes)."""
        path = self._inside(rel)
        if path.is_dir() and not path.is_symlink():
            return  # a folder now stands there: it is someone's, leave it
        path.unlink(missing_ok=True)
        for folder in Path(rel).parents:
            if str(folder) == "." or (kept is not None and str(folder) in kept):
                break
            try:
                (self.repo / folder).rmdir()  # only when now empty
            except OSError:
                break

    def _write(self, change: Change, data: bytes, perms: dict[str, int] | None) -> None:
        """Write the file back with its permission bits as the snapshot kept them (`perms`,
        else git's 644/755 for a file not in it), never wider than they were while it is
        written. Without `perms` (an older snapshot), an existing file keeps its bits but for
        the executable one, and a file made anew is 600 (700 when executable)."""
        path = self._inside(change.path)
        if change.mode == "120000":
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            path.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.fsdecode(data), path)
            return
        if path.is_symlink():
            path.unlink()
        path.parent.mkdir(parents=True, exist_ok=True)
        executable = change.mode == "100755"
        perm = None if perms is None else perms.get(change.path, 0o755 if executable else 0o644)
        if not path.exists():
            perm = (0o700 if executable else 0o600) if perm is None else perm
            folder = open_dir(self.repo, tuple(change.path.split("/")[:-1]))
            try:
                _replace_in(folder, path.name, data, mode=perm)  # made with it (the umask too)
            finally:
                os.close(folder)
            os.chmod(path, perm)
            return
        if perm is not None:
            os.chmod(
                path, stat.S_IMODE(os.lstat(path).st_mode) & perm
            )  # the run's bytes no more exposed
            write_at(self.repo, change.path, data)
            os.chmod(path, perm)
            return
        write_at(self.repo, change.path, data)
        mode = os.lstat(path).st_mode & 0o7777
        if executable and not mode & 0o100:
            os.chmod(path, mode | ((mode & 0o444) >> 2))
        elif not executable and mode & 0o111:
            os.chmod(path, mode & ~0o111)

    def _inside(self, rel: str) -> Path:
        """repo/rel, refused when a folder on its way is a link (or leaves the repository)."""
        path = self.repo / rel
        parent = path.parent
        while not parent.exists() and parent != self.repo:
            parent = parent.parent
        if parent.resolve() != parent or not parent.is_relative_to(self.repo):
            raise ToolError(f"the folder of {rel} is now a link")
        return path


def _note_mode(modes: dict[str, int], rel: str, st: os.stat_result) -> None:
    """Keep a regular file's permission bits in `modes` when git would not: not 644 or 755."""
    perm = stat.S_IMODE(st.st_mode) & 0o777
    if stat.S_ISREG(st.st_mode) and perm != (0o755 if perm & 0o100 else 0o644):
        modes[rel] = perm
    else:
        modes.pop(rel, None)
