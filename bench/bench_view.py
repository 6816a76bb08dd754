"""Time the demo replay on a terminal (the live view draws) and piped (no view at all).

    python bench/bench_view.py            # 7 runs of each
    python bench/bench_view.py 15         # or as many as you like

Every run replays toy_agent/demo/trajectory.json on a fresh copy of toy_agent/demo/repo. "run" is
the run's own elapsed_seconds, read back from its --trajectory file: the agent loop with its
event subscribers, the terminal view included, interpreter start-up left out. "process" is
the whole command, start-up and imports (rich, on a terminal) included. Figures are medians
of runs taken in turn.

Piped, the log goes to stderr at INFO; on a terminal the view shows WARNING and up. The third
mode pipes with --log-level WARNING, so that it differs from the terminal by the view alone.
"""

from __future__ import annotations

import json
import os
import pty
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEMO_REPO = ROOT / "toy_agent" / "demo" / "repo"
DEMO_TRAJECTORY = ROOT / "toy_agent" / "demo" / "trajectory.json"
DEMO_TASK = "Fix median() in stats.py so that tests/test_stats.py passes"
TERMINAL_SIZE = (30, 100)  # rows, columns


MODES = {"terminal": [], "piped": [], "piped, WARNING log": ["--log-level", "WARNING"]}


def replay(mode: str, workdir: Path) -> tuple[float, float]:
    """One replay; returns (run seconds, process seconds)."""
    repo = workdir / "demo_repo"
    shutil.rmtree(repo, ignore_errors=True)
    shutil.copytree(DEMO_REPO, repo)
    trajectory = workdir / "run.json"
    argv = [
        sys.executable, str(ROOT / "main.py"), "--replay", str(DEMO_TRAJECTORY), "--repo",
        str(repo), "--task", DEMO_TASK, "--trajectory", str(trajectory), *MODES[mode],
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"} | {"TERM": "xterm"}
    started = time.perf_counter()
    if mode == "terminal":
        code = _run_in_pty(argv, env)
    else:
        code = subprocess.run(argv, env=env, capture_output=True).returncode
    process = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"the replay failed with exit code {code}")
    return json.loads(trajectory.read_text())["result"]["elapsed_seconds"], process


def _run_in_pty(argv: list[str], env: dict[str, str]) -> int:
    import fcntl
    import struct
    import termios

    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", *TERMINAL_SIZE, 0, 0))
    proc = subprocess.Popen(argv, stdin=terminal, stdout=terminal, stderr=terminal, env=env)
    os.close(terminal)
    while True:  # drain, or the child blocks on a full terminal buffer
        try:
            if not os.read(controller, 65536):
                break
        except OSError:  # the child closed the terminal
            break
    os.close(controller)
    return proc.wait(30)


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    steps = len(json.loads(DEMO_TRAJECTORY.read_text())["steps"])
    with tempfile.TemporaryDirectory() as tmp:
        replay("terminal", Path(tmp))  # warm-up: bytecode caches, page cache
        samples: dict[str, list[tuple[float, float]]] = {mode: [] for mode in MODES}
        for _ in range(runs):  # interleaved, so a busy moment of the machine hits every mode
            for mode in MODES:
                samples[mode].append(replay(mode, Path(tmp)))
    run = {mode: statistics.median(s[0] for s in samples[mode]) for mode in samples}
    process = {mode: statistics.median(s[1] for s in samples[mode]) for mode in samples}
    print(f"demo replay, {steps} steps, median of {runs} runs")
    for mode in MODES:
        print(f"  {mode:18}  run {run[mode] * 1000:7.1f} ms   "
              f"process {process[mode] * 1000:7.1f} ms")  # fmt: skip
    for base in ("piped", "piped, WARNING log"):
        extra = run["terminal"] - run[base]
        print(f"  terminal vs {base}: run x{run['terminal'] / run[base]:.2f} "
              f"({extra / steps * 1000:+.2f} ms a step), "
              f"process x{process['terminal'] / process[base]:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
