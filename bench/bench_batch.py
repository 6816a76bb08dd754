"""How batch runs scale with workers: tasks wait on the LLM, so threads overlap the waits.

    python bench/bench_batch.py                  # 8 tasks x 4 steps, 300 ms per LLM reply
    python bench/bench_batch.py --ray            # the same through a local Ray instance too
    python bench/bench_batch.py --tasks 16 --latency 0.5 --workers 1 4 8

The provider is a loopback server speaking the Anthropic wire format (the real SDK talks to
it); every reply takes `--latency` seconds. Each task works in its own worktree of one git
repository: three tool calls, then task_complete.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fake_providers import FakeProvider, RecordedRequest, Reply, anthropic_reply  # noqa: E402

from toy_agent.batch.driver import RunSettings, run_batch  # noqa: E402

STEPS = (
    "<THOUGHT>Look.</THOUGHT><ACTION><tool_name>list_files</tool_name><parameters>{}"
    "</parameters></ACTION>",
    '<THOUGHT>Read.</THOUGHT><ACTION><tool_name>read_file</tool_name><parameters>{"path": '
    '"app.py"}</parameters></ACTION>',
    '<THOUGHT>Fix.</THOUGHT><ACTION><tool_name>edit_file</tool_name><parameters>{"path": '
    '"app.py", "old_str": "x = 1", "new_str": "x = 2"}</parameters></ACTION>',
    '<THOUGHT>Done.</THOUGHT><ACTION><tool_name>task_complete</tool_name><parameters>{"result":'
    ' "done"}</parameters></ACTION>',
)


class SlowProvider(FakeProvider):
    """Answers step N of any conversation with STEPS[N], after `latency` seconds."""

    def __init__(self, latency: float):
        super().__init__()
        self.latency = latency

    def reply_to(self, request: RecordedRequest) -> Reply:
        self.record(request)
        step = sum(1 for m in request.body["messages"] if m["role"] == "assistant")
        reply = anthropic_reply(STEPS[min(step, len(STEPS) - 1)])
        return dataclasses.replace(reply, delay=self.latency)


def make_repo(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    (repo / "app.py").write_text("x = 1\n")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run(["git", "-c", "user.name=b", "-c", "user.email=b@b", *args], cwd=repo,
                       check=True)  # fmt: skip
    return repo


def timed_batch(tasks: Path, out: Path, workers: int, executor: str) -> float:
    started = time.perf_counter()
    summary = run_batch(tasks, out, RunSettings(sandbox="off"), workers=workers,
                        executor=executor)  # fmt: skip
    elapsed = time.perf_counter() - started
    assert summary.passed == summary.total, summary.to_dict()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--latency", type=float, default=0.3, help="seconds per LLM reply")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--ray", action="store_true", help="also run through a local Ray")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp, SlowProvider(args.latency) as provider:
        root = Path(tmp)
        os.environ.update(provider.env("claude"))
        repo = make_repo(root)
        tasks = root / "tasks.jsonl"
        tasks.write_text("".join(
            json.dumps({"id": f"t{i}", "repo": str(repo), "task": f"task {i}"}) + "\n"
            for i in range(args.tasks)))  # fmt: skip
        ideal = args.tasks * len(STEPS) * args.latency
        print(f"{args.tasks} tasks x {len(STEPS)} steps, {args.latency * 1000:.0f} ms per reply "
              f"({ideal:.1f}s of waiting in all), {os.cpu_count()} CPUs")  # fmt: skip
        warm_up = root / "warm-up.jsonl"  # the SDK import (seconds) must not count
        warm_up.write_text(tasks.read_text().splitlines()[0] + "\n")
        timed_batch(warm_up, root / "out-warm-up", 1, "local")
        print(f"{'executor':<9} {'workers':>7} {'seconds':>8} {'speedup':>8}")
        engines = ["local", "ray"] if args.ray else ["local"]
        for executor in engines:
            if executor == "ray":  # one Ray instance, its workers warm: start-up not counted
                import ray

                ray.init(address="local", num_cpus=max(args.workers), include_dashboard=False,
                         logging_level="WARNING")  # fmt: skip
                timed_batch(tasks, root / "out-ray-warm-up", max(args.workers), executor)
            baseline = None
            for workers in args.workers:
                out = root / f"out-{executor}-{workers}"
                seconds = timed_batch(tasks, out, workers, executor)
                baseline = baseline or seconds
                print(f"{executor:<9} {workers:>7} {seconds:>8.2f} {baseline / seconds:>7.1f}x",
                      flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
