"""Time the snapshot taken before each step that may change files (toy_agent.checkpoints) on a
repository of many files: the first one (every file hashed into the private store), one of an
unchanged tree (the index's stat cache: nothing is read again), one after a step changed a few
files, a restore of those files, and the first snapshot of a new session of the same repository
(seeded from the last store).

    python bench/bench_checkpoints.py                 # 10,000 files, 20 snapshots each
    python bench/bench_checkpoints.py --files 1000 --runs 3

Each figure after the first is the median over the runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from toy_agent.checkpoints import Checkpoints  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        for n in range(args.files):  # 100 folders of files of about 1 KB
            path = repo / f"pkg{n % 100}" / f"module_{n}.py"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"# module {n}\n" + "x = 1\n" * 170)
        (repo / ".gitignore").write_text("build/\n")
        store = Checkpoints(Path(tmp) / "store", repo)
        start = time.perf_counter()
        first = store.snapshot()
        first_seconds = time.perf_counter() - start
        unchanged, changed, restored = [], [], []
        for run in range(args.runs):
            start = time.perf_counter()
            store.snapshot()
            unchanged.append(time.perf_counter() - start)
            for n in range(3):
                (repo / f"pkg{n}" / f"module_{n}.py").write_text(f"# step {run}\n")
            start = time.perf_counter()
            after = store.snapshot()
            changed.append(time.perf_counter() - start)
            start = time.perf_counter()
            store.restore(first, after)
            restored.append(time.perf_counter() - start)
        start = time.perf_counter()
        Checkpoints(Path(tmp) / "next", repo, seed=Path(tmp) / "store").snapshot()
        seeded_seconds = time.perf_counter() - start
    print(f"files:                          {args.files:,}")
    print(f"first snapshot:                 {first_seconds * 1000:8.1f} ms")
    print(f"first, a new session (seeded):  {seeded_seconds * 1000:8.1f} ms")
    print(f"snapshot, tree unchanged:       {statistics.median(unchanged) * 1000:8.1f} ms")
    print(f"snapshot, 3 files changed:      {statistics.median(changed) * 1000:8.1f} ms")
    print(f"restore of those 3 files:       {statistics.median(restored) * 1000:8.1f} ms")


if __name__ == "__main__":
    main()
