"""Time one run_command of `true`, unsandboxed and in bubblewrap, and the part of it that makes
sure nothing of the command is left: the walk of /proc after an unsandboxed command.

    python bench/bench_commands.py            # 40 commands each
    python bench/bench_commands.py --runs 5

Each figure is the median over the runs, the modes taking turns so that both see the same
machine. The walk reads every process's /proc/PID/stat (and the environment of those started
since the command), so it grows with the number of processes: that number is printed too.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from toy_agent.sandbox import _Command, _start_time, bwrap_problem, kill_command  # noqa: E402
from toy_agent.tools import CodeRepositoryTools  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    runs = parser.parse_args().runs
    modes = ["off"] + (["bwrap"] if bwrap_problem() is None else [])
    times: dict[str, list[float]] = {mode: [] for mode in [*modes, "walk"]}
    with tempfile.TemporaryDirectory() as repo:
        tools = {mode: CodeRepositoryTools(repo, allow_commands=True, sandbox=mode)
                 for mode in modes}  # fmt: skip
        for mode in modes:
            tools[mode].run_command("true")  # warm-up: the probe, the first fork
        for _ in range(runs):
            for mode in modes:
                started = time.perf_counter()
                tools[mode].run_command("true")
                times[mode].append(time.perf_counter() - started)
            since = _start_time(os.getpid())  # as if the command had started with the bench
            finished = _Command(leader=2**22 + 1, marker="bench", since=since)  # nothing left
            started = time.perf_counter()
            kill_command(finished)
            times["walk"].append(time.perf_counter() - started)
    processes = sum(name.isdigit() for name in os.listdir("/proc"))
    print(f"{'what':<36}{'median ms':>10}")
    labels = {"off": "run_command true, --sandbox off", "bwrap": "run_command true, bwrap",
              "walk": f"/proc walk alone ({processes} processes)"}  # fmt: skip
    for key, values in times.items():
        print(f"{labels[key]:<36}{statistics.median(values) * 1000:>10.1f}")
    if "bwrap" not in modes:
        print(f"(no bwrap row: {bwrap_problem()})")


if __name__ == "__main__":
    main()
