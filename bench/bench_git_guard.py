"""What watching git's paths costs: deciding them once, and the sweep after each command.

    python bench/bench_git_guard.py [FOLDERS] [FILES_PER_FOLDER]    # 7500 and 10 by default

Builds a work tree of FOLDERS folders (ten to a parent) with FILES_PER_FOLDER files each, a
git repository at its top, and times GitGuard: its construction (one walk of the whole tree,
`git rev-parse` and `git config`), a sweep when nothing changed (every folder lstat'ed, none
read again: their ctimes are old), and a sweep after a folder gained a `.git` (that folder is
read again and the `.git` removed). Sweeps are the median of 5. Then unsandboxed
CodeRepositoryTools on the same tree, side by side: built now (the guard waits for the
first command, write or run) and as built until 66ceecb (the guard decided in the
constructor, which tools that only read paid too).
"""

from __future__ import annotations

import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from toy_agent import sandbox  # noqa: E402
from toy_agent.sandbox import GitGuard  # noqa: E402
from toy_agent.tools import CodeRepositoryTools  # noqa: E402


def build(root: Path, folders: int, files: int) -> None:
    made = [root]
    for i in range(1, folders):
        folder = made[(i - 1) // 10] / f"d{i}"
        folder.mkdir()
        made.append(folder)
    for folder in made:
        for j in range(files):
            (folder / f"f{j}.txt").write_text("x\n")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)


def timed(call) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def main() -> None:
    folders = int(sys.argv[1]) if len(sys.argv) > 1 else 7_500
    files = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "repo"
        root.mkdir()
        build(root, folders, files)
        logging.disable(logging.WARNING)  # "removed ...": the bench plants them itself
        sandbox._RACY_NS = 0  # the tree is seconds old: trust its ctimes as a real one's
        guard: list[GitGuard] = []
        built = timed(lambda: guard.append(GitGuard(root)))
        quiet = statistics.median(timed(guard[0].sweep) for _ in range(5))
        planted = []
        for i in range(5):
            (root / "d1" / "d11" / f"p{i}" / ".git").mkdir(parents=True)
            planted.append(timed(guard[0].sweep))
        entries = sum(len(d) + len(f) for _, d, f in os.walk(root))
        print(f"{folders:,} folders, {entries:,} entries (load {os.getloadavg()[0]:.1f}):")
        print(f"  decided once:            {built:7.1f} ms")
        print(f"  sweep, nothing changed:  {quiet:7.1f} ms")
        print(f"  sweep, one .git planted: {statistics.median(planted):7.1f} ms")
        lazy = statistics.median(timed(lambda: CodeRepositoryTools(root)) for _ in range(5))
        eager = statistics.median(
            timed(lambda: CodeRepositoryTools(root).decide_git()) for _ in range(5)
        )
        print("CodeRepositoryTools, unsandboxed, built:")
        print(f"  now (guard when needed): {lazy:7.1f} ms")
        print(f"  with it (as until now):  {eager:7.1f} ms")


if __name__ == "__main__":
    main()
