"""toy_agent: a small, honest ReAct coding agent.

Public names are loaded on first use, so `import toy_agent` (and the CLI's --help) stays
instant and no provider SDK is imported until a client is built.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "ReactAgent": "toy_agent.agent",
    "CodeRepositoryTools": "toy_agent.tools",
    "ToolError": "toy_agent.tools",
    "get_available_tools": "toy_agent.tools",
    "LlmClient": "toy_agent.llm",
    "LlmResponse": "toy_agent.llm",
    "LlmError": "toy_agent.llm",
    "Message": "toy_agent.llm",
    "ToolCall": "toy_agent.llm",
    "Usage": "toy_agent.llm",
    "ClaudeLlmClient": "toy_agent.llm",
    "GeminiLlmClient": "toy_agent.llm",
    "OpenAICompatibleLlmClient": "toy_agent.llm",
    "ReplayLlmClient": "toy_agent.llm",
    "create_llm_client": "toy_agent.llm",
    "McpTools": "toy_agent.mcp_tools",
    "Redactor": "toy_agent.redaction",
    "Action": "toy_agent.parsing",
    "Observation": "toy_agent.parsing",
}
__all__ = [
    "__version__",
    "ReactAgent",
    "CodeRepositoryTools",
    "ToolError",
    "get_available_tools",
    "LlmClient",
    "LlmResponse",
    "LlmError",
    "Message",
    "ToolCall",
    "Usage",
    "ClaudeLlmClient",
    "GeminiLlmClient",
    "OpenAICompatibleLlmClient",
    "ReplayLlmClient",
    "create_llm_client",
    "McpTools",
    "Redactor",
    "Action",
    "Observation",
]

if TYPE_CHECKING:
    from toy_agent.agent import ReactAgent
    from toy_agent.llm import (
        ClaudeLlmClient,
        GeminiLlmClient,
        LlmClient,
        LlmError,
        LlmResponse,
        Message,
        OpenAICompatibleLlmClient,
        ReplayLlmClient,
        ToolCall,
        Usage,
        create_llm_client,
    )
    from toy_agent.mcp_tools import McpTools
    from toy_agent.parsing import Action, Observation
    from toy_agent.redaction import Redactor
    from toy_agent.tools import CodeRepositoryTools, ToolError, get_available_tools


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'toy_agent' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
