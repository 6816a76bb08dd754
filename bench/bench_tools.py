"""Time search_in_files and list_files against rg -i, grep -r and git on one large tree.

    python bench/bench_tools.py            # generates ~22k files (node_modules, .git, build...)
    python bench/bench_tools.py PATH       # or measure an existing tree
    python bench/bench_tools.py --list     # the listing rows only (seconds, not a minute)

Each figure is the median of a few runs after a warm-up, so the page cache is hot for all;
the listings run 21 times, in turn, so that all see the same machine.
"first call" is a new CodeRepositoryTools each time, which walks the whole tree (the tools used
alone, from Python). "first call of a run" is what an agent run waits for: the run walks the
tree in the background while the model answers its first request. "later calls" reuse one
CodeRepositoryTools: the walk is remembered and only folders that changed are read again.
"""

from __future__ import annotations

import functools
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from toy_agent.tools import CodeRepositoryTools  # noqa: E402
from toy_agent.tree import NOISE_DIRS, walk  # noqa: E402

RUNS = 3
LIST_RUNS = 21
MODEL_SECONDS = 0.5  # how long the model takes over the first request, at least
WORDS = ("def", "return", "self", "value", "handler", "request", "result", "config", "import")


def generate(root: Path, packages: int = 200, per_package: int = 80) -> None:
    """Source files, a .gitignore per package, and the usual bulky noise around them."""
    rng = random.Random(7)

    def lines(n: int) -> str:
        return "".join(" ".join(rng.choices(WORDS, k=8)) + "\n" for _ in range(n))

    body = [lines(60) for _ in range(50)]
    (root / ".gitignore").write_text("*.log\n/build/\n")
    for p in range(packages):
        pkg = root / "src" / f"pkg{p:03d}"
        pkg.mkdir(parents=True)
        (pkg / ".gitignore").write_text("*.gen.py\n")
        for f in range(per_package):
            extra = "def needle_function():\n" if (p * per_package + f) % 997 == 0 else ""
            (pkg / f"mod{f:03d}.py").write_text(body[(p + f) % 50] + extra)
        (pkg / "schema.gen.py").write_text(body[0])
        (pkg / "debug.log").write_text(body[1])
    for noise, count in (("node_modules", 4_000), ("build", 1_000), (".git/objects", 1_000)):
        for i in range(count):
            folder = root / noise / f"d{i // 100:03d}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"f{i}.js").write_text(body[i % 50])
    subprocess.run(["git", "init", "-q", str(root)], check=True)


def timed(fn: Callable[[], object], runs: int = RUNS) -> float:
    """The median seconds of `fn`, or of what it returns when that is a time (a float)."""
    fn()  # warm-up
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        result = fn()
        samples.append(result if isinstance(result, float) else time.perf_counter() - started)
    return statistics.median(samples)


def timed_together(
    fns: dict[str, Callable[[], object]], runs: int
) -> dict[str, tuple[float, float]]:
    """The median and the fastest seconds of each of `fns`, run in turn `runs` times after a
    warm-up: they see the same machine, which on a shared VM can run a third slower from one
    second to the next. The fastest run is each one's cost with the least disturbance."""
    for fn in fns.values():
        fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(runs):
        for name, fn in fns.items():
            started = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - started)
    return {name: (statistics.median(values), min(values)) for name, values in samples.items()}


def shell(cmd: list[str], cwd: Path) -> Callable[[], object]:
    return lambda: subprocess.run(cmd, cwd=cwd, capture_output=True, check=False)


def table(title: str, rows: list[tuple[str, float]], baseline: float) -> None:
    print(f"\n{title}")
    print(f"  {'':44} {'seconds':>8} {'vs the first row':>20}")
    for name, seconds in rows:
        print(f"  {name:44} {seconds:8.3f} {seconds / baseline:19.2f}x")


def table_with_best(title: str, rows: list[tuple[str, tuple[float, float]]]) -> None:
    """`table` for (median, fastest) pairs: each ratio is to the first row's same figure."""
    print(f"\n{title}")
    print(
        f"  {'':44} {'median s':>8} {'vs the first row':>17} {'fastest s':>10} {'vs the first':>13}"
    )
    (median0, best0) = rows[0][1]
    for name, (median, best) in rows:
        ratios = f"{median / median0:16.2f}x {best:10.3f} {best / best0:12.2f}x"
        print(f"  {name:44} {median:8.3f} {ratios}")


def main(argv: list[str]) -> int:
    list_only = "--list" in argv
    argv = [arg for arg in argv if arg != "--list"]
    ram = (
        "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    )  # creating 20k files on disk is slow
    with tempfile.TemporaryDirectory(dir=ram) as tmp:
        if argv:
            root = Path(argv[0]).resolve()
        else:
            root = Path(tmp) / "tree"
            root.mkdir()
            started = time.perf_counter()
            generate(root)
            print(f"generated a tree in {time.perf_counter() - started:.1f}s")
            time.sleep(2.1)  # a folder changed in the last 2 s is read again on every walk
        total = sum(1 for p in root.rglob("*") if p.is_file())
        tools = CodeRepositoryTools(root)
        kept = len(list(walk(root, root)))
        print(f"{root}: {total:,} files on disk, {kept:,} entries after ignore rules")
        has_rg = shutil.which("rg") is not None
        if not has_rg:
            print("rg is not installed: the search baseline is grep -r")
        excludes = [f"--exclude-dir={d}" for d in sorted(NOISE_DIRS)] + ["--exclude-dir=*.egg-info"]
        searches = (
            () if list_only else (("selective", "needle_\\w+"), ("many matches", "def handler"))
        )
        for case, pattern in searches:
            found = tools.search_in_files(pattern).split(" for ", 1)[0]  # "N matches in M files"
            rows = []
            if has_rg:
                rows.append(
                    ("rg -i (own walk, gitignore)", timed(shell(["rg", "-i", pattern], root)))
                )
            grep_r = timed(shell(["grep", "-rIi", *excludes, "-E", pattern, "."], root))
            rows.append(("grep -rIi --exclude-dir=...", grep_r))
            rows.append(
                ("search_in_files, first call", timed(functools.partial(first_call, root, pattern)))
            )
            for backend in (
                ("auto", "grep", "rg", "python") if has_rg else ("auto", "grep", "python")
            ):
                searcher = CodeRepositoryTools(root, search_backend=backend)
                run = functools.partial(searcher.search_in_files, pattern)
                runs = 1 if backend == "python" else RUNS  # the slow one: keep the run short
                rows.append((f"search_in_files, later calls, {backend}", timed(run, runs)))
            table(f"search {pattern!r}, {case}: {found}", rows, rows[0][1])
        listings = {
            "git ls-files -co --exclude-standard": shell(
                ["git", "ls-files", "-co", "--exclude-standard"], root
            )
        }
        if has_rg:
            listings["rg --files"] = shell(["rg", "--files"], root)
        listings["list_files, first call"] = lambda: CodeRepositoryTools(root).list_files()
        listings["list_files, later calls"] = tools.list_files
        rows = list(timed_together(listings, LIST_RUNS).items())
        run = [in_a_run(root) for _ in range(RUNS)]
        rows.insert(-1, ("list_files, first call of a run", (statistics.median(run), min(run))))
        table_with_best(f"list ({LIST_RUNS} runs in turn; a run's first call: {RUNS})", rows)
    return 0


def in_a_run(root: Path) -> float:
    """The first list_files of an agent run: the run starts walking the tree in the background
    as its first LLM call goes out (Tree.warm_up); the model answers 0.5 s later (most answer
    later still). Returns the seconds list_files itself takes, which is what the run waits."""
    tools = CodeRepositoryTools(root)
    tools.tree.warm_up()
    time.sleep(MODEL_SECONDS)
    started = time.perf_counter()
    tools.list_files()
    return time.perf_counter() - started


def first_call(root: Path, pattern: str) -> str:
    return CodeRepositoryTools(root).search_in_files(pattern)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
