"""Time from starting the process to the first LLM request, toy_agent against a bare SDK script.

    python bench/bench_startup.py [RUNS] [REPO]    # REPO: an empty folder unless given

Both talk to the same loopback server, which notes when each first request arrives. The bare
script is the least any tool built on the anthropic SDK can do: import it, build a client,
send one message. toy_agent also parses flags, reads .env, sets up logging, builds its tools
and the prompt; it imports the SDK in the background meanwhile (llm.preload_sdk), and walks
the repository in the background as the first request goes out (Tree.warm_up).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fake_providers import FakeProvider, anthropic_reply  # noqa: E402
from fakes import xml_action  # noqa: E402

BARE = """
import sys, anthropic
client = anthropic.Anthropic(api_key="key", base_url=sys.argv[1], max_retries=0)
client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}])
"""
# The same script with toy_agent's one trick for its own startup (cli._collector_paused): the
# floor for any tool on this SDK, so the gap to it is toy_agent's own work.
BARE_PAUSED = "import gc\ngc.disable()" + BARE


def first_request_after(argv: list[str], env: dict[str, str]) -> float:
    with FakeProvider() as server:
        server.enqueue(anthropic_reply(xml_action("task_complete", result="ok")))
        started = time.monotonic()
        proc = subprocess.Popen([*argv, server.url] if argv[1] == "-c" else argv,
                                env={**env, **server.env("claude")},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        while not server.requests and proc.poll() is None:
            time.sleep(0.001)
        arrived = time.monotonic() - started
        proc.wait(30)
    return arrived


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    env = {"PATH": "/usr/bin:/bin", "HOME": tempfile.mkdtemp()}
    repo = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp()
    toy = [sys.executable, str(ROOT / "main.py"), "--task", "x", "--repo", repo, "--quiet"]
    commands = {
        "bare anthropic script": [sys.executable, "-c", BARE],
        "the same, gc paused": [sys.executable, "-c", BARE_PAUSED],
        "toy_agent": toy,
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):  # interleaved, so all see the same machine
        for name, argv in commands.items():
            times[name].append(first_request_after(argv, env))
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, value in medians.items():
        print(f"{name:24} first request after {value * 1000:6.0f} ms (median of {runs})")
    print(f"toy_agent / bare: {medians['toy_agent'] / medians['bare anthropic script']:.2f}x")
    print(f"toy_agent / bare with gc paused: "
          f"{medians['toy_agent'] / medians['the same, gc paused']:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
