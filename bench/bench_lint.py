"""What checking an edit costs: the per-edit time of toy_agent.lint on a big file.

    python bench/bench_lint.py [--lines 5000] [--edits 50]

A Python file of `--lines` lines (classes of small methods) is edited `--edits` times with
edit_file, each edit checked as the agent checks it (the file read before and after, both
parsed with tree-sitter, the errors compared), half of the edits breaking the file and the
next one mending it. Printed: the edit alone, the edit with its check, and the check's share;
an LLM call takes seconds, so a check of a few milliseconds is noise beside it. The first
parse (importing the grammar) is timed apart.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from toy_agent.lint import edit_checker, syntax_errors  # noqa: E402
from toy_agent.tools import CodeRepositoryTools  # noqa: E402


def source(lines: int) -> str:
    out: list[str] = []
    n = 0
    while len(out) < lines:
        out += [f"class Thing{n}:", f"    def value_{n}(self, x):", f"        return x + {n}", ""]
        n += 1
    return "\n".join(out[:lines]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=5000)
    parser.add_argument("--edits", type=int, default=50)
    args = parser.parse_args()
    repo = Path(tempfile.mkdtemp())
    text = source(args.lines)
    (repo / "big.py").write_text(text)
    started = time.perf_counter()
    syntax_errors("warm.py", b"x = 1\n")
    first = time.perf_counter() - started
    tools = CodeRepositoryTools(repo)
    checker = edit_checker(tools)
    plain, checked = [], []
    for i in range(args.edits):
        n = (i // 2) * 7 % max(1, args.lines // 4 - 1)
        old, new = (f"return x + {n}\n", f"return (x + {n}\n")
        for timings, check in ((plain, False), (checked, True)):
            for a, b in ((old, new), (new, old)):  # break it, then mend it
                began = time.perf_counter()
                before = checker.before("big.py") if check else None
                tools.edit_file("big.py", a, b)
                if check:
                    checker.after("big.py", before)
                timings.append(time.perf_counter() - began)
    ms = [statistics.median(t) * 1000 for t in (plain, checked)]
    print(f"file: {args.lines:,} lines, {len(text):,} bytes; {len(checked)} edits each way")
    print(f"first parse (imports tree-sitter and the grammar): {first * 1000:.1f} ms")
    print(f"{'':<22}{'median ms':>10}{'p90 ms':>10}")
    for name, timings in (("edit_file alone", plain), ("edit_file + check", checked)):
        p90 = sorted(timings)[int(len(timings) * 0.9) - 1] * 1000
        print(f"{name:<22}{statistics.median(timings) * 1000:>10.2f}{p90:>10.2f}")
    print(f"the check adds {ms[1] - ms[0]:.2f} ms per edit (median)")


if __name__ == "__main__":
    main()
