"""The vocabulary shared by the agent, the action formats and the LLM clients: messages, tool
calls, responses and token usage, as small frozen dataclasses with their JSON forms."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal


# Text reaching the model, a terminal or a listing, with the characters each cannot take as
# escapes: an undecodable byte of a file name (a lone surrogate, kept by surrogateescape) is
# \xNN, another control character \xNN or \uNNNN.
def wire_text(text: str) -> str:
    """Text every provider's JSON encoder accepts: lone surrogates become escapes."""
    return _SURROGATE.sub(_escape, text)


def visible(text: str) -> str:
    """Text from the model, a tool or a file, safe to print: control characters become escapes
    (`\\x1b`), so an ESC sequence can neither hide a command nor write to the clipboard."""
    return _CONTROLS.sub(_escape, text)


def shown_path(path: str) -> str:
    """A file name as a tool shows it to the model: control characters, which would split a
    listing into lines of the repository's choosing, and undecodable bytes become escapes
    (\\n, \\t, \\r, \\xNN, \\u0085); `path_from_shown` reads them back."""
    return _UNSHOWABLE.sub(_escape, path)


def path_from_shown(text: str) -> str:
    """The file name `shown_path` showed as `text`."""
    return _SHOWN_ESCAPE.sub(_unescape, text)


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if char in _NAMED_ESCAPES:
        return _NAMED_ESCAPES[char]
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape: the original byte
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}"


def _unescape(match: re.Match[str]) -> str:
    byte, code, named = match.groups()
    if named:
        return {"n": "\n", "r": "\r", "t": "\t"}[named]
    if byte:  # \x80-\xff: an undecodable byte, kept as a surrogate escape (os.fsdecode)
        value = int(byte, 16)
        return chr(value if value < 0x80 else 0xDC00 + value)
    return chr(int(code, 16))


_SURROGATE = re.compile("[\ud800-\udfff]")
# C0 controls but tab and newline, DEL, C1 controls, bidi overrides, and lone surrogates: what
# could move the cursor, hide text or crash print.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_UNSHOWABLE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")  # in a file name, tabs too
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}  # only _UNSHOWABLE matches these
_SHOWN_ESCAPE = re.compile(r"\\(?:x([0-9a-fA-F]{2})|u([0-9a-fA-F]{4})|([nrt]))")

# A tool as offered to the model: {"name": str, "description": str, "parameters": JSON Schema}.
ToolSpec = dict[str, Any]
TextCallback = Callable[[str], None]


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
    arguments_error: str = ""  # the raw text, when the arguments were not a JSON object

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolCall:
        return cls(data["name"], dict(data.get("arguments") or {}), data.get("id") or "",
                   data.get("arguments_error") or "")  # fmt: skip


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
            tool_calls=tuple(ToolCall.from_dict(c) for c in data.get("tool_calls", ())),
            tool_results=tuple(ToolResult(**r) for r in data.get("tool_results", ())),
        )


@dataclass(frozen=True)
class FailedAttempt:
    """An attempt at one LLM call that failed and was retried: why, and the text it had
    streamed before it failed (void: the retry starts the reply again)."""

    error: str
    partial_text: str = ""


RetryCallback = Callable[[FailedAttempt], None]

# Why a response ended, normalised across providers.
StopReason = Literal["end", "tool_use", "max_tokens", "safety", "other"]


@dataclass(frozen=True)
class LlmResponse:
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    stop_reason: StopReason = "end"
    model: str = ""
    seconds: float = 0.0  # how long the call took; set by the agent, not recorded
    attempts: tuple[FailedAttempt, ...] = ()  # the failed attempts before this reply

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
        usage = data.get("usage") or {}
        return cls(
            text=data.get("text") or "",
            tool_calls=tuple(ToolCall.from_dict(c) for c in data.get("tool_calls") or ()),
            usage=Usage(
                *(usage.get(k, 0) for k in ("input_tokens", "output_tokens", "cached_tokens"))
            ),  # fmt: skip
            stop_reason=data.get("stop_reason") or "end",
            model=data.get("model") or "",
        )
