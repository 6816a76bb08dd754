"""LLM clients: one small seam (`LlmClient.call_llm`) between the agent and each provider.

Provider SDKs are imported inside the client constructors, never at module import, so
`--help` and the replay provider stay instant.
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Usage:
    """Tokens one call (or a whole run, once summed) consumed."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cached_tokens + other.cached_tokens,
        )

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class ToolCall:
    """A native tool call requested by the model (`--tool-format native`)."""

    name: str
    arguments: dict[str, Any]
    id: str = ""


@dataclass(frozen=True)
class ToolResult:
    """The answer to one native `ToolCall`, sent back in the next user message."""

    call_id: str
    name: str
    content: str
    is_error: bool = False


@dataclass(frozen=True)
class Message:
    """One conversation turn in a provider-neutral shape.

    `tool_calls` only appear on assistant turns and `tool_results` only on user turns, and
    only in native tool-calling mode; in the text formats both stay empty.
    """

    role: Literal["user", "assistant"]
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_results: tuple[ToolResult, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            data["tool_calls"] = [asdict(c) for c in self.tool_calls]
        if self.tool_results:
            data["tool_results"] = [asdict(r) for r in self.tool_results]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Message:
        return cls(
            role=data["role"],
            content=data.get("content", ""),
            tool_calls=tuple(ToolCall(**c) for c in data.get("tool_calls", ())),
            tool_results=tuple(ToolResult(**r) for r in data.get("tool_results", ())),
        )


# Why a response ended, normalised across providers.
StopReason = Literal["end", "tool_use", "max_tokens", "safety", "other"]


@dataclass(frozen=True)
class LlmResponse:
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    stop_reason: StopReason = "end"
    model: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "tool_calls": [asdict(c) for c in self.tool_calls],
            "usage": self.usage.to_dict(),
            "stop_reason": self.stop_reason,
            "model": self.model,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LlmResponse:
        return cls(
            text=data.get("text", ""),
            tool_calls=tuple(ToolCall(**c) for c in data.get("tool_calls", ())),
            usage=Usage(**data.get("usage", {})),
            stop_reason=data.get("stop_reason", "end"),
            model=data.get("model", ""),
        )


class LlmError(Exception):
    """The provider failed in a way the agent cannot recover from (exit code 3).

    `status` is the HTTP status when there was one; the message names the fix.
    """

    def __init__(self, provider: str, message: str, status: int | None = None):
        self.provider = provider
        self.status = status
        prefix = f"{provider} API error" + (f" {status}" if status else "")
        super().__init__(f"{prefix}: {message}")


class LlmConfigError(Exception):
    """A user configuration mistake found while building a client (exit code 2)."""


# A tool as offered to the model: {"name": str, "description": str, "parameters": JSON Schema}.
ToolSpec = dict[str, Any]
TextCallback = Callable[[str], None]


class LlmClient(ABC):
    """The seam between the agent and a model.

    Implementations convert `messages` to their provider's wire format, call it (retrying
    transient failures), and return the text, any native tool calls, usage and stop reason.
    `tools` is given only in native tool-calling mode. `on_text` receives text deltas when
    the caller wants streaming; clients that cannot stream may ignore it.
    """

    provider: str = "llm"
    model: str = ""

    @abstractmethod
    def call_llm(
        self,
        system_prompt: str,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] | None = None,
        on_text: TextCallback | None = None,
    ) -> LlmResponse: ...


class ReplayLlmClient(LlmClient):
    """Replays the LLM responses recorded in a trajectory file: no key, no network.

    It answers in order, whatever it is sent, so a recorded run re-runs step for step.
    """

    provider = "replay"

    def __init__(self, trajectory_path: str | Path):
        path = Path(trajectory_path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            steps = data["steps"]
            self._responses = [LlmResponse.from_dict(s["response"]) for s in steps]
        except FileNotFoundError:
            raise LlmConfigError(f"replay file not found: {path}") from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise LlmConfigError(
                f"{path} is not a toy_agent trajectory ({type(exc).__name__}: {exc}); "
                "record one with --trajectory FILE"
            ) from None
        self.model = data.get("settings", {}).get("model") or "replay"
        self._next = 0

    def call_llm(self, system_prompt, messages, *, tools=None, on_text=None) -> LlmResponse:
        if self._next >= len(self._responses):
            raise LlmError(
                "replay", f"the recording has only {len(self._responses)} responses; run is longer"
            )
        response = self._responses[self._next]
        self._next += 1
        if on_text and response.text:
            on_text(response.text)
        return response
