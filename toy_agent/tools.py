"""Repository tools: every path is confined to the repository root."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class ToolError(Exception):
    """A tool could not do what was asked; the message becomes the LLM's observation."""


class CodeRepositoryTools:
    def __init__(self, repo_path: str | Path = ".", *, allow_commands: bool = False):
        self.repo_path = Path(repo_path).resolve()
        self.allow_commands = allow_commands

    def execute(self, name: str, parameters: dict[str, Any]) -> str:
        """Run local tool `name`; bad parameters and failures raise ToolError."""
        raise NotImplementedError

    def list_files(self, path: str = ".") -> str:
        raise NotImplementedError

    def read_file(self, path: str, start_line: int | None = None, end_line: int | None = None) -> str:
        raise NotImplementedError

    def write_file(self, path: str, content: str) -> str:
        raise NotImplementedError

    def edit_file(self, path: str, old_str: str, new_str: str) -> str:
        raise NotImplementedError

    def search_in_files(self, pattern: str, path: str = ".", file_pattern: str | None = None) -> str:
        raise NotImplementedError

    def get_file_info(self, path: str) -> str:
        raise NotImplementedError

    def run_command(self, command: str, timeout: int = 60) -> str:
        raise NotImplementedError


def get_available_tools(allow_commands: bool = False) -> list[dict[str, Any]]:
    """The local tools as {"name", "description", "parameters": JSON Schema}, task_complete last."""
    raise NotImplementedError
