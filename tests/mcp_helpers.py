"""The demo MCP server (tests/mcp_servers/demo_server.py) as the tests start it: inside this
process (`demo_in_process`, milliseconds) for the tests of what the client and the agent do
with a server's tools, or as a process of its own over stdio (`demo_stdio`, `DEMO_COMMAND`:
the SDK's import alone takes about half a second of CPU) for the tests of start-up,
transports, crashes, closing and the CLI's server flags.

One copy of each, so every module's servers are the same server.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from toy_agent.mcp_tools import McpServerConfig

DEMO = Path(__file__).parent / "mcp_servers" / "demo_server.py"
DEMO_COMMAND = shlex.join([sys.executable, str(DEMO)])  # its server is named "demo_server"


def demo_command(*args: str) -> tuple[str, ...]:
    """The argv that starts the demo server over stdio with `args`."""
    return (sys.executable, str(DEMO), *args)


def demo_stdio(name: str = "demo", *args: str, env: dict[str, str] | None = None):
    """The demo server as a process of its own, over stdio, named `name`."""
    return McpServerConfig(name, command=demo_command(*args), env=env or {})


def demo_in_process(name: str = "demo", only: str | None = None, many: int = 0) -> McpServerConfig:
    """The demo server run inside this process by the SDK's Client, as `--only ONLY --many
    MANY` would start it: the same tools, schemas, errors, progress and log records as over
    stdio, without a process's start-up. For tests of what the client and the agent do with
    a server's tools; tests of the server's process keep `demo_stdio`."""
    from mcp_servers.demo_server import build_server

    return McpServerConfig(name, server=build_server(set(only.split(",")) if only else None, many))
