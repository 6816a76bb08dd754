"""Time checking a run_command line against command rules: the tree-sitter parser against the
hand-written scanner it replaced (or any earlier version of toy_agent/permissions.py).

    python bench/bench_rules.py                  # against 30f497c, the last scanner
    python bench/bench_rules.py --against REV    # permissions.py as it was at git REV
    python bench/bench_rules.py --rounds 5       # fewer timings a line (200 by default)

"per line" is the median time of `CommandRules.check` on each of a set of lines a model
writes (short and long, pipes, quotes, a here-document), in this process, after a warm-up.
"first check" is the first check in a fresh process that has imported toy_agent.permissions:
what the parser's lazy import (tree_sitter and the bash grammar) adds to a run's first command
(toy_agent.permissions itself no longer imports anything new, so `--help` is not slower).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from toy_agent import permissions  # noqa: E402

LINES = [
    "ls -la",
    "pytest -q tests/test_app.py 2>&1 | tail -20",
    "python -m pytest -x -q && git diff --stat",
    "grep -rn 'def main' src/ | head -50",
    "find . -name '*.py' -not -path './.venv/*' | xargs wc -l | sort -n | tail",
    'git log --oneline -10 && git status --short && echo "done: $(date)"',
    "cat > notes.txt <<'EOF'\nfirst line\nsecond line\nEOF",
    'for f in src/*.py; do python -m py_compile "$f" || echo "bad $f"; done',
    "cd frontend && npm ci && npm test -- --watchAll=false 2>&1 | tail -40",
    " && ".join(f"echo step{i} 'a b' \"c $i\"" for i in range(40)),  # a long line
]
RULES = {"allow": ("pytest", "git diff", "npm test", "ls"), "deny": ("curl", "rm -rf", "touch")}


def module_at(rev: str) -> types.ModuleType:
    """toy_agent/permissions.py as it was at git `rev`, loaded as a module of its own."""
    source = subprocess.run(["git", "show", f"{rev}:toy_agent/permissions.py"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout  # fmt: skip
    module = types.ModuleType(f"permissions_{rev}")
    module.__dict__["__name__"] = module.__name__
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, f"{rev}:permissions.py", "exec"), module.__dict__)
    return module


def per_line(module: types.ModuleType, rounds: int) -> list[float]:
    rules = module.CommandRules(**RULES)
    medians = []
    for line in LINES:
        rules.check(line)  # warm-up (and the parser's import)
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            rules.check(line)
            times.append(time.perf_counter() - start)
        medians.append(statistics.median(times))
    return medians


def first_check() -> float:
    code = (
        "import time\nfrom toy_agent.permissions import CommandRules\n"
        "start = time.perf_counter()\n"
        "CommandRules(deny=('curl',)).check('pytest -q | tail')\n"
        "print(time.perf_counter() - start)"
    )
    runs = [
        float(
            subprocess.run(
                [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
            ).stdout
        )  # fmt: skip
        for _ in range(5)
    ]
    return statistics.median(runs)


def main(argv: list[str]) -> None:
    rev = argv[argv.index("--against") + 1] if "--against" in argv else "30f497c"
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 200
    new, old = per_line(permissions, rounds), per_line(module_at(rev), rounds)
    print(f"{'line':<60} {'parser':>10} {rev + ' scanner':>16}")
    for line, n, o in zip(LINES, new, old, strict=True):
        shown = line.replace("\n", "\\n")
        shown = shown if len(shown) <= 58 else shown[:57] + "…"
        print(f"{shown:<60} {n * 1e6:>8.0f}µs {o * 1e6:>14.0f}µs")
    print(f"{'median':<60} {statistics.median(new) * 1e6:>8.0f}µs "
          f"{statistics.median(old) * 1e6:>14.0f}µs")  # fmt: skip
    print(f"first check in a fresh process (the parser's import): {first_check() * 1e3:.1f} ms")


if __name__ == "__main__":
    main(sys.argv[1:])
