"""How long `toy-agent report` takes on a big batch, and how long a browser takes to open it.

    python bench/bench_report.py                    # 1,000 tasks x 30 steps
    python bench/bench_report.py --tasks 200 --steps 10 --keep /tmp/big

The batch folder is written by the batch's own writers (`ResultsFolder.write`, `Step.to_dict`,
`RunResult.to_dict`), with observations of realistic sizes (listings, 3-8 KB file reads that
the report cuts, searches, edits), a patch per task, a fifth of the tasks failing. Then:

- render: `toy_agent.report.write_report` on the folder (load, redact, cut, template), in
  this process, best of --repeat;
- browser: headless chromium opening the file and taking a screenshot (so it parses, runs
  the page's script, lays out and paints), wall clock minus the same on an empty page
  (chromium's own start-up), best of --repeat; and the page's own `data-ready-ms` (from
  navigation start to the end of its script: parsing included, painting not), read from a
  --dump-dom run (not timed: dumping a big DOM takes longer than opening it).

Targets (issue 27): render under 10 s, browser under 3 s, for 1,000 tasks x 30 steps.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from toy_agent.agent import RunResult  # noqa: E402
from toy_agent.batch.driver import ResultsFolder  # noqa: E402
from toy_agent.events import TRAJECTORY_FORMAT, Step  # noqa: E402
from toy_agent.messages import LlmResponse, Usage  # noqa: E402
from toy_agent.parsing import Action, Observation  # noqa: E402
from toy_agent.report import write_report  # noqa: E402

CODE_LINE = "    result = compute(values[index], weights.get(name, 1.0)) + offset  # keep\n"
WORDS = ("the", "function", "returns", "a", "wrong", "value", "when", "list", "is", "empty",
         "so", "I", "will", "check", "it")  # fmt: skip


def observation(rng: random.Random, tool: str) -> str:
    if tool == "list_files":
        return "\n".join(f"src/module_{i}/file_{j}.py" for i in range(6) for j in range(5))
    if tool == "read_file":
        lines = rng.randint(40, 110)  # 3-8 KB: the report keeps 2,000 characters of each
        return "".join(f"{n:>5} | {CODE_LINE}" for n in range(1, lines + 1))
    if tool == "search_in_files":
        return "\n".join(f"src/module_{i}/file.py:{i * 7}: value = compute(x)" for i in range(30))
    return "Edited src/app.py (line 12). It now reads:\n" + CODE_LINE * 8


def trajectory(rng: random.Random, task_id: str, steps: int, failed: bool) -> dict:
    tools = ["list_files", "read_file", "search_in_files", "read_file", "edit_file"]
    recorded = []
    for n in range(1, steps + 1):
        tool = tools[n % len(tools)]
        params = {"path": f"src/module_{n % 6}/file_{n % 5}.py"}
        if tool == "edit_file":
            params |= {"old_str": CODE_LINE * 3, "new_str": CODE_LINE.replace("keep", "fix") * 3}
        action = Action(tool, params)
        thought = " ".join(rng.choice(WORDS) for _ in range(rng.randint(15, 45)))
        text = f"<THOUGHT>{thought}</THOUGHT><ACTION>...</ACTION>"
        usage = Usage(2_000 + n * 900, rng.randint(80, 400))
        content = observation(rng, tool)
        recorded.append(Step(n, LlmResponse(text, usage=usage), thought, (action,),
                             (Observation(action, content, n % 17 == 0),),
                             llm_seconds=rng.uniform(1, 6),
                             tool_seconds=rng.uniform(0.001, 0.4)).to_dict())  # fmt: skip
    result = RunResult(
        "max_iterations" if failed else "completed", steps, 2 * steps + 1,
        "" if failed else "Fixed it.", "reached the iteration limit" if failed else None,
        Usage(sum(2_000 + n * 900 for n in range(1, steps + 1)), 250 * steps),
        rng.uniform(60, 240), ({"path": "src/app.py", "added": 3, "removed": 3},),
    )  # fmt: skip
    return {
        "format": TRAJECTORY_FORMAT, "task": f"[{task_id}] fix the bug in compute()",
        "settings": {"provider": "claude", "model": "claude-sonnet-4-5", "max_iterations": steps},
        "system_prompt": "(left out)", "started_at": "2026-01-01T00:00:00+0000",
        "steps": recorded, "result": result.to_dict(),
        "diffs": {"src/app.py": PATCH.split("\n", 2)[2]},
    }  # fmt: skip


PATCH = (
    "diff --git a/src/app.py b/src/app.py\nindex 1111111..2222222 100644\n"
    "--- a/src/app.py\n+++ b/src/app.py\n@@ -10,6 +10,6 @@\n"
    + "".join(f" {CODE_LINE}" for _ in range(3))
    + "".join(f"-{CODE_LINE}" for _ in range(3))
    + "".join(f"+{CODE_LINE.replace('keep', 'fix')}" for _ in range(3))
)


def make_batch(out: Path, tasks: int, steps: int) -> None:
    rng = random.Random(27)
    folder = ResultsFolder(out)
    for i in range(tasks):
        task_id = f"task-{i:04d}"
        failed = i % 5 == 0
        data = trajectory(rng, task_id, steps, failed)
        result = data["result"]
        folder.write({
            "id": task_id, "outcome": result["outcome"], "success": not failed,
            "check": {"passed": not failed, "exit_code": int(failed), "output_tail": "1 passed"},
            "iterations": steps, "usage": result["usage"],
            "cost_usd": round(result["usage"]["input_tokens"] * 3e-6
                              + result["usage"]["output_tokens"] * 15e-6, 6),
            "elapsed_seconds": round(result["elapsed_seconds"] + rng.uniform(1, 5), 3),
            "files_changed": result["files_changed"], "error": result["error"],
            "base_commit": "0" * 40, "patch_data": PATCH.encode(), "trajectory_data": data,
        })  # fmt: skip


def chromium(browser: str, page: Path, work: Path, *, dump: bool) -> tuple[float, str]:
    """Wall seconds for chromium to open `page` and take a screenshot (`dump`: the DOM is
    dumped too, which costs more than the opening on a big page); and the dumped DOM."""
    profile = Path(tempfile.mkdtemp(dir=work))
    argv = [browser, "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--no-first-run", f"--user-data-dir={profile}", "--window-size=1280,2000",
            f"--screenshot={work / 'shot.png'}", *(["--dump-dom"] if dump else []),
            page.resolve().as_uri()]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    elapsed = time.perf_counter() - started
    shutil.rmtree(profile, ignore_errors=True)
    if done.returncode != 0:
        raise SystemExit(f"chromium failed: {done.stderr[-500:]}")
    return elapsed, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", metavar="DIR", help="write the batch and report here")
    args = parser.parse_args()

    work = Path(args.keep or tempfile.mkdtemp(prefix="bench-report-"))
    work.mkdir(parents=True, exist_ok=True)
    out, page = work / "out", work / "report.html"
    started = time.perf_counter()
    if not (out / "results.jsonl").exists():
        make_batch(out, args.tasks, args.steps)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"batch: {args.tasks} tasks x {args.steps} steps, {size / 1e6:.0f} MB on disk "
          f"(written in {time.perf_counter() - started:.1f}s)")  # fmt: skip

    renders, cpus = [], []
    for _ in range(args.repeat):
        started, cpu = time.perf_counter(), time.process_time()
        write_report([out], page)
        renders.append(time.perf_counter() - started)
        cpus.append(time.process_time() - cpu)
    all_renders = ", ".join(f"{s:.2f}" for s in renders)
    print(
        f"render: {min(renders):.2f}s (best of {args.repeat}; all: {all_renders}; CPU "
        f"{min(cpus):.2f}s), page {page.stat().st_size / 1e6:.1f} MB"
    )

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("browser: skipped (no chromium on PATH)")
    else:
        empty = work / "empty.html"
        empty.write_text("<!DOCTYPE html><title>empty</title><p>empty")
        base = [chromium(browser, empty, work, dump=False) for _ in range(args.repeat)]
        runs = [chromium(browser, page, work, dump=False) for _ in range(args.repeat)]
        wall = [r[0] - min(b[0] for b in base) for r in runs]
        found = re.search(r'data-ready-ms="(\d+)"', chromium(browser, page, work, dump=True)[1])
        ready = f"{int(found[1]) / 1000:.2f}s" if found else "never (a script error?)"
        print(
            f"browser: {min(wall):.2f}s to open and paint (best of {args.repeat}; all: "
            f"{', '.join(f'{s:.2f}' for s in wall)}; "
            f"chromium's own start-up taken off); the page's script done {ready} after "
            "navigation start"
        )
        print(
            f"load average: {', '.join(f'{x:.1f}' for x in os.getloadavg())} on "
            f"{os.cpu_count()} CPUs"
        )
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
