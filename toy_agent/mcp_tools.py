"""MCP servers' tools through the official `mcp` SDK, behind a synchronous face."""

from __future__ import annotations

from typing import Any


class McpError(Exception):
    """A server could not be started or reached at launch (exit code 2)."""


class McpTools:
    def __init__(self, servers: Any, *, timeout: float = 30.0):
        raise NotImplementedError

    def get_mcp_tools(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def execute_mcp_tool(self, name: str, parameters: dict[str, Any]) -> str:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError
