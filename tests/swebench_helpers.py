"""A SWE-bench-style instance made from a real project nobody here wrote: the pinned sdist of
`six` from PyPI (one module and its own test suite), with one injected bug.

    python tests/swebench_helpers.py    # download the sdist into the cache now

The sdist is downloaded once with pip into pytest's cache folder; without pip access the
fixtures skip saying why, except under CI=true, where they fail.
"""

from __future__ import annotations

import fcntl
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

PINNED = ("six", "1.17.0")
DEFAULT_CACHE = Path(__file__).resolve().parent.parent / ".pytest_cache" / "d"
BUG = (
    '    int2byte = struct.Struct(">B").pack\n',
    "    int2byte = lambda i: bytes((i % 256,))  # noqa\n",
)  # 256 wraps round to 0
BUGGY = "bytes((i % 256,))"  # what a fix replaces
WRONG_FIX = "bytes((min(i, 255),))"  # still no error for 256
RIGHT_FIX = "bytes((i,))"  # bytes() raises ValueError past 255
F2P = ("test_six.py::test_int2byte",)
P2P = ("test_six.py::test_byte2int", "test_six.py::test_bytesindex", "test_six.py::test_b",
       "test_six.py::TestCustomizedMoves::test_moved_attribute")  # fmt: skip


class Unavailable(Exception):
    """The sdist cannot be had here; the message says why."""


def sdist(cache_root: Path = DEFAULT_CACHE) -> Path:
    """The unpacked pinned sdist (downloaded once; a file lock keeps xdist workers apart)."""
    name, version = PINNED
    folder = cache_root / f"swebench-{name}-{version}"
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        tree = folder / f"{name}-{version}"
        if not (tree / "test_six.py").exists():
            done = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                 "-d", str(folder), f"{name}=={version}"],
                capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            if done.returncode != 0:
                lines = done.stderr.strip().splitlines()
                raise Unavailable(f"pip download {name}=={version} failed: {lines[-1:]}")
            with tarfile.open(folder / f"{name}-{version}.tar.gz") as archive:
                archive.extractall(folder, filter="data")
    return tree


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout.strip()  # fmt: skip


def make_instance(tree: Path, root: Path, *, src_layout: bool = False) -> dict[str, Any]:
    """A git repository of six at the bug (the instance's base_commit), a later commit with
    the fix on top (as upstream's HEAD would have), and the instance's fields: the test the
    bug fails (test_patch, FAIL_TO_PASS), tests that pass before and after (PASS_TO_PASS)."""
    repo = root / "six"
    repo.mkdir()
    module = "src/six.py" if src_layout else "six.py"
    source = (tree / "six.py").read_text(encoding="utf-8")
    tests = (tree / "test_six.py").read_text(encoding="utf-8")
    start = tests.index("def test_int2byte():")
    end = tests.index("def test_byte2int():")
    assert BUG[0] in source
    (repo / module).parent.mkdir(parents=True, exist_ok=True)
    (repo / module).write_text(source.replace(BUG[0], BUG[1]), encoding="utf-8")
    (repo / "test_six.py").write_text(tests[:start] + tests[end:], encoding="utf-8")
    (repo / "setup.cfg").write_text("[tool:pytest]\n", encoding="utf-8")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "six, with a bug")
    base = _git(repo, "rev-parse", "HEAD")
    (repo / "test_six.py").write_text(tests, encoding="utf-8")
    test_patch = _git(repo, "diff") + "\n"
    _git(repo, "checkout", "-q", "--", "test_six.py")
    (repo / module).write_text(source, encoding="utf-8")
    patch = _git(repo, "diff") + "\n"
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "fix ensure_str")
    return {
        "repo": "benjaminp/six", "instance_id": "benjaminp__six-1", "base_commit": base,
        "patch": patch, "test_patch": test_patch,
        "problem_statement": "six.int2byte(256) returns b'\\x00' on Python 3 instead of "
        "raising an error: only 0 to 255 fit in a byte.",
        "hints_text": "Look at int2byte in six.py.", "created_at": "2024-01-01T00:00:00Z",
        "version": "1.17", "environment_setup_commit": base,
        "FAIL_TO_PASS": list(F2P), "PASS_TO_PASS": list(P2P),
    }  # fmt: skip


def module_path(src_layout: bool = False) -> str:
    return "src/six.py" if src_layout else "six.py"


if __name__ == "__main__":
    print(sdist())
