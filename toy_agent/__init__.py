"""toy_agent: a small, honest ReAct coding agent.

Public names are loaded on first use, so `import toy_agent` (and the CLI's --help) stays
instant and no provider SDK is imported until a client first calls its model.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.2.0"

# public name -> the module that defines it
_EXPORTS = {
    "ReactAgent": "toy_agent.agent",
    "RunResult": "toy_agent.agent",
    "CodeRepositoryTools": "toy_agent.tools",
    "ToolError": "toy_agent.tools",
    "get_available_tools": "toy_agent.tools",
    "Tool": "toy_agent.tools",
    "tool": "toy_agent.tools",
    "LlmClient": "toy_agent.llm",
    "LlmError": "toy_agent.llm",
    "ClaudeLlmClient": "toy_agent.llm",
    "GeminiLlmClient": "toy_agent.llm",
    "OpenAICompatibleLlmClient": "toy_agent.llm",
    "ReplayLlmClient": "toy_agent.llm",
    "create_llm_client": "toy_agent.llm",
    "LlmResponse": "toy_agent.messages",
    "Message": "toy_agent.messages",
    "ToolCall": "toy_agent.messages",
    "Usage": "toy_agent.messages",
    "McpTools": "toy_agent.mcp_tools",
    "RouteTable": "toy_agent.routes",
    "Redactor": "toy_agent.redaction",
    "Action": "toy_agent.parsing",
    "Observation": "toy_agent.parsing",
    "run_batch": "toy_agent.batch",
    "Permissions": "toy_agent.permissions",
    "CommandRules": "toy_agent.permissions",
    "Answer": "toy_agent.permissions",
    "Hooks": "toy_agent.hooks",
}
__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'toy_agent' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
