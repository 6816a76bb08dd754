"""Time from starting the process to the first LLM request, toy_agent against a bare SDK script.

    python bench/bench_startup.py [RUNS] [REPO]    # REPO: an empty folder unless given
    python bench/bench_startup.py --provider openai [RUNS] [REPO]    # or gemini; claude default

Both talk to the same loopback server, which notes when each first request arrives. The bare
script is the least any tool built on the provider's SDK can do: import it, build a client,
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

from fake_providers import FakeProvider, Reply, anthropic_reply, gemini_reply, openai_reply  # noqa: E402
from fakes import xml_action  # noqa: E402

# Per provider: the bare script (the server's URL is its argument) and the fake's reply.
BARE = {
    "claude": """
import sys, anthropic
client = anthropic.Anthropic(api_key="key", base_url=sys.argv[1], max_retries=0)
client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}])
""",
    "openai": """
import sys, openai
client = openai.OpenAI(api_key="key", base_url=sys.argv[1] + "/v1", max_retries=0)
client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
""",
    "gemini": """
import sys
from google import genai
client = genai.Client(api_key="key", http_options=genai.types.HttpOptions(base_url=sys.argv[1]))
client.models.generate_content(model="m", contents="x")
""",
}
REPLY = {"claude": anthropic_reply, "openai": openai_reply, "gemini": gemini_reply}


def first_request_after(argv: list[str], env: dict[str, str], provider: str) -> float:
    reply: Reply = REPLY[provider](xml_action("task_complete", result="ok"))
    with FakeProvider() as server:
        server.enqueue(reply)
        started = time.monotonic()
        proc = subprocess.Popen([*argv, server.url] if argv[1] == "-c" else argv,
                                env={**env, **server.env(provider)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        while not server.requests and proc.poll() is None:
            time.sleep(0.001)
        arrived = time.monotonic() - started
        proc.wait(30)
    return arrived


def main(argv: list[str]) -> None:
    provider = "claude"
    if argv[:1] == ["--provider"]:
        if len(argv) < 2 or argv[1] not in BARE:
            raise SystemExit(f"--provider: one of {', '.join(BARE)}")
        provider, argv = argv[1], argv[2:]
    runs = int(argv[0]) if argv else 5
    env = {"PATH": "/usr/bin:/bin", "HOME": tempfile.mkdtemp()}
    repo = argv[1] if len(argv) > 1 else tempfile.mkdtemp()
    toy = [sys.executable, str(ROOT / "main.py"), "--task", "x", "--repo", repo, "--quiet",
           "--llm-provider", provider]  # fmt: skip
    # The bare script with toy_agent's one trick for its own startup (cli._collector_paused):
    # the floor for any tool on this SDK, so the gap to it is toy_agent's own work.
    commands = {
        f"bare {provider} script": [sys.executable, "-c", BARE[provider]],
        "the same, gc paused": [sys.executable, "-c", "import gc\ngc.disable()" + BARE[provider]],
        "toy_agent": toy,
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):  # interleaved, so all see the same machine
        for name, command in commands.items():
            times[name].append(first_request_after(command, env, provider))
    medians = {name: statistics.median(values) for name, values in times.items()}
    fastest = {name: min(values) for name, values in times.items()}
    for name, value in medians.items():
        print(f"{name:24} first request after {value * 1000:6.0f} ms (median of {runs}), "
              f"{fastest[name] * 1000:6.0f} ms at the fastest")  # fmt: skip
    for baseline in (f"bare {provider} script", "the same, gc paused"):
        print(f"toy_agent / {baseline}: {medians['toy_agent'] / medians[baseline]:.2f}x "
              f"(fastest: {fastest['toy_agent'] / fastest[baseline]:.2f}x)")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
