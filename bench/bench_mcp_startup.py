"""What MCP servers add to start-up: time to the first LLM request with no server, one and
three stdio servers, against the slowest server's own start.

    python bench/bench_mcp_startup.py [RUNS]

The servers are tests/mcp_servers/demo_server.py, made slow to start on purpose (it sleeps
before serving): the slowest takes SLOWEST seconds more, the others less. A server's own
start is the time from spawning it to its tool list, through the bare `mcp` SDK in this
(warm) process. toy_agent runs against the loopback provider of bench_startup.py, which
notes when the first request arrives. Started concurrently, three servers cost what the
slowest costs alone when the machine has a core for each; started one after another they
would cost the sum of their own starts. Most of a Python server's start is CPU (importing
the SDK), so on a machine with fewer free cores the three overlap only partly: the bench
prints the load and the core count next to the ratios.
"""

from __future__ import annotations

import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

from bench_startup import first_request_after  # noqa: E402

SERVER = ROOT / "tests" / "mcp_servers" / "demo_server.py"
SLOWEST = 1.0  # seconds the slowest server sleeps before serving
DELAYS = (SLOWEST, SLOWEST / 2, 0.0)  # the three servers; the first alone is the one-server run


def server_command(delay: float) -> list[str]:
    return [sys.executable, str(SERVER), "--only", "echo", "--startup-delay", str(delay)]


def own_start(command: list[str]) -> float:
    """Spawn to tool list for one server, with the SDK already imported."""
    import anyio
    from mcp import Client, StdioServerParameters

    async def connect() -> float:
        started = time.monotonic()
        params = StdioServerParameters(command=command[0], args=command[1:])
        async with Client(params) as client:
            await client.list_tools()
            return time.monotonic() - started

    return anyio.run(connect)


def main(argv: list[str]) -> None:
    runs = int(argv[0]) if argv else 5
    env = {"PATH": "/usr/bin:/bin", "HOME": tempfile.mkdtemp()}
    repo = tempfile.mkdtemp()
    toy = [sys.executable, str(ROOT / "main.py"), "--task", "x", "--repo", repo, "--quiet"]
    servers = [["--mcp-server", shlex.join(server_command(delay))] for delay in DELAYS]
    commands = {
        "no MCP server": toy,
        "1 stdio server": toy + servers[0],
        "3 stdio servers": toy + [arg for server in servers for arg in server],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    alone: dict[float, list[float]] = {delay: [] for delay in DELAYS}
    for _ in range(runs):  # interleaved, so all see the same machine
        for delay in DELAYS:
            alone[delay].append(own_start(server_command(delay)))
        for name, command in commands.items():
            times[name].append(first_request_after(command, env, "claude"))
    med = {name: statistics.median(values) for name, values in times.items()}
    own = {delay: statistics.median(values) for delay, values in alone.items()}
    slowest, total = own[SLOWEST], sum(own.values())
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{os.cpu_count()} cores, load average {load}; medians of {runs} runs")
    for delay, value in own.items():
        print(f"server sleeping {delay * 1000:4.0f} ms   alone ready after {value * 1000:6.0f} ms")
    for name, value in med.items():
        print(f"{name:24} first request after {value * 1000:6.0f} ms")
    none = med["no MCP server"]
    for name in ("1 stdio server", "3 stdio servers"):
        added = med[name] - none
        print(f"{name}: adds {added * 1000:.0f} ms = {added / slowest:.2f}x the slowest "
              "server's own start")  # fmt: skip
    added = med["3 stdio servers"] - none
    three_to_one = med["3 stdio servers"] / med["1 stdio server"]
    print(f"3 servers add {added / total:.2f}x the sum of their own starts (one after another: "
          f"about 1x); 3 servers / 1 server: {three_to_one:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
