"""What a person waits for around a session, side by side with another version of toy_agent.

    python bench/bench_session_start.py --against OLD_TREE [--provider NAME] [RUNS]

OLD_TREE is a source tree of another version (`git worktree add /tmp/old COMMIT`, or `git
archive COMMIT | tar -x -C /tmp/old`); each version runs from its own tree. Three times, each
against the loopback provider of bench_startup.py (openai unless told; claude's SDK loads
slowest):

- prompt: from starting `toy-agent` on a terminal to its interactive prompt;
- first answer: to the answer of a task typed as soon as the prompt shows;
- MCP run: a one-shot `--task` run with one stdio MCP server (the test demo server), from
  start to the process's exit; its first request is printed too.
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import shlex
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

from bench_startup import REPLY  # noqa: E402
from cli_helpers import cli_environment  # noqa: E402
from fake_providers import FakeProvider  # noqa: E402
from fakes import xml_action  # noqa: E402

SERVER = ROOT / "tests" / "mcp_servers" / "demo_server.py"


def environment(tree: Path, server: FakeProvider, provider: str) -> dict[str, str]:
    """This environment without provider keys and URLs, a home of its own, `tree` first."""
    home = tempfile.mkdtemp()
    return cli_environment(
        {
            "HOME": home,
            "XDG_STATE_HOME": home,
            "XDG_CONFIG_HOME": home,
            "TERM": "xterm",
            "PYTHONPATH": str(tree),
            **server.env(provider),
        }
    )


def session(tree: Path, provider: str, repo: str) -> tuple[float, float]:
    """Seconds to the prompt, and to the answer of a task typed at once."""
    with FakeProvider() as server:
        server.enqueue(REPLY[provider](xml_action("task_complete", result="Answered.")))
        controller, terminal = pty.openpty()
        fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
        started = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, str(tree / "main.py"), "--repo", repo, "--llm-provider", provider],
            stdin=terminal, stdout=terminal, stderr=terminal,
            env=environment(tree, server, provider),
        )  # fmt: skip
        os.close(terminal)
        output, prompt, answer = b"", 0.0, 0.0
        while not answer and select.select([controller], [], [], 60)[0]:
            output += os.read(controller, 65536)
            if not prompt and b"Ctrl-D to leave" in output and b">" in output.split(b"leave")[1]:
                prompt = time.monotonic() - started
                os.write(controller, b"say hello\r")
            if b"Answered." in output:
                answer = time.monotonic() - started
        os.write(controller, b"/exit\r")
        proc.wait(30)
        os.close(controller)
    return prompt, answer


def mcp_run(tree: Path, provider: str, repo: str) -> tuple[float, float]:
    """Seconds to the first request and to the exit of a one-shot run with an MCP server."""
    with FakeProvider() as server:
        server.enqueue(REPLY[provider](xml_action("task_complete", result="ok")))
        mcp = shlex.join([sys.executable, str(SERVER), "--only", "echo"])
        started = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, str(tree / "main.py"), "--task", "x", "--repo", repo, "--quiet",
             "--llm-provider", provider, "--mcp-server", mcp],
            env=environment(tree, server, provider), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        while not server.requests and proc.poll() is None:
            time.sleep(0.001)
        request = time.monotonic() - started
        proc.wait(60)
    return request, time.monotonic() - started


def main(argv: list[str]) -> None:
    if argv[:1] != ["--against"] or len(argv) < 2:
        raise SystemExit(__doc__)
    trees = {"this": ROOT, "other": Path(argv[1]).resolve()}
    argv = argv[2:]
    provider = "openai"
    if argv[:1] == ["--provider"]:
        provider, argv = argv[1], argv[2:]
    runs = int(argv[0]) if argv else 5
    repo = tempfile.mkdtemp()
    times: dict[str, list[tuple[float, ...]]] = {name: [] for name in trees}
    for _ in range(runs):  # interleaved, so both see the same machine
        for name, tree in trees.items():
            times[name].append((*session(tree, provider, repo), *mcp_run(tree, provider, repo)))
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{provider}; {os.cpu_count()} cores, load average {load}; medians of {runs} runs")
    labels = ("prompt", "first answer", "MCP run: first request", "MCP run: exit")
    for i, label in enumerate(labels):
        this, other = (statistics.median(run[i] for run in times[n]) for n in trees)
        print(f"{label:24} this {this * 1000:6.0f} ms   other {other * 1000:6.0f} ms   "
              f"this/other {this / other:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
