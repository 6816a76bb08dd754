"""The vocabulary shared by the agent, the action formats and the LLM clients: messages, tool
calls, responses and token usage, as small frozen dataclasses with their JSON forms."""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Callable
from dataclasses import asdict, astuple, dataclass, field, fields
from typing import Any, Literal, get_args


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
    """Tokens one call (or a whole run, once summed) consumed. `input_tokens` counts every
    prompt token: `cached_tokens` of them were read from the prompt cache, `cache_write_tokens`
    written to it (Anthropic bills those apart). `output_tokens` counts every token the model
    wrote, its thinking included: `reasoning_tokens` of them were thinking (when the provider
    says; billed as output)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> Usage:
        """The counts a record holds (a count it lacks, or that is not a number, is 0)."""
        data = data if isinstance(data, dict) else {}
        return cls(*(_count(data.get(f.name)) for f in fields(cls)))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


# The fields of a signed turn that must travel back byte for byte: never redacted, never cut.
# Claude's thinking `signature` and `redacted_thinking` `data`, Gemini's `thought_signature`,
# OpenAI Responses' `encrypted_content`.
OPAQUE_KEYS = frozenset({"signature", "thought_signature", "encrypted_content"})


def opaque_fields(block: dict[str, Any]) -> frozenset[str]:
    """The keys of `block` (one block or part of a signed turn) whose values are opaque."""
    keys = OPAQUE_KEYS & block.keys()
    return keys | {"data"} if block.get("type") == "redacted_thinking" else keys


@dataclass(frozen=True)
class SignedTurn:
    """The model's turn exactly as its provider sent it, for the next request to send back:
    Claude's content blocks (thinking and redacted_thinking with their signatures among
    them), Gemini's parts (thought_signature, base64, on the parts that carried one). Only
    `provider`'s API with the same `model` takes it back; any other rebuilds the turn from
    the message's text and tool calls. Kept only when the turn has something signed."""

    provider: str
    model: str
    blocks: tuple[dict[str, Any], ...]

    def fits(self, provider: str, model: str) -> bool:
        return self.provider == provider and self.model == model

    def to_dict(self) -> dict[str, Any]:
        return {"provider": self.provider, "model": self.model, "blocks": list(self.blocks)}

    @classmethod
    def from_dict(cls, data: Any) -> SignedTurn | None:
        """The turn a record holds; None when there is none or it is not one."""
        if not isinstance(data, dict) or not isinstance(data.get("blocks"), list):
            return None
        blocks = tuple(b for b in data["blocks"] if isinstance(b, dict))
        return cls(str(data.get("provider") or ""), str(data.get("model") or ""), blocks)


def _turn_dict(thinking: str, turn: SignedTurn | None) -> dict[str, Any]:
    return ({"thinking": thinking} if thinking else {}) | ({"turn": turn.to_dict()} if turn else {})


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
class Image:
    """An image for the model (from a tool): base64 `data`, or, once recorded, only its
    reference (mime type, size, sha256). A trajectory or a saved session keeps the reference,
    never megabytes of base64; a conversation resumed from it shows the model a text stub."""

    mime_type: str
    data: str = ""  # base64; "" when only the reference is left
    size: int = 0  # bytes, decoded
    sha256: str = ""

    @classmethod
    def from_base64(cls, data: str, mime_type: str) -> Image:
        """The image `data` holds; size and sha256 of what decodes (nothing: size 0)."""
        data = "".join(data.split())  # base64 as MIME writes it, in lines
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        return cls(mime_type, data if raw else "", len(raw), hashlib.sha256(raw).hexdigest())

    def reference(self) -> dict[str, Any]:
        return {"mime_type": self.mime_type, "bytes": self.size, "sha256": self.sha256}

    @classmethod
    def from_reference(cls, data: Any) -> Image:
        """The reference a record keeps (whatever a hand-edited file holds: no data)."""
        data = data if isinstance(data, dict) else {}
        size = data.get("bytes")
        size = size if isinstance(size, int) and not isinstance(size, bool) else 0
        return cls(str(data.get("mime_type") or ""), "", size, str(data.get("sha256") or ""))

    def stub(self) -> str:
        """What the model reads where the image itself is no longer sent."""
        return (
            f"[image: {self.mime_type}, {self.size:,} bytes, sha256 {self.sha256[:12]}: no longer "
            "shown to you; call the tool again to see it]"
        )


def _images_dict(images: tuple[Image, ...]) -> dict[str, Any]:
    return {"images": [i.reference() for i in images]} if images else {}


def _images_from(data: dict[str, Any]) -> tuple[Image, ...]:
    images = data.get("images")
    return tuple(map(Image.from_reference, images)) if isinstance(images, list) else ()


@dataclass(frozen=True)
class CommandResult:
    """How a shell command ended, as data (run_command's, a check's): the observation's text
    says the same in words, for the model; the trajectory, the JSON outputs, the live view
    and the report read these fields."""

    command: str
    exit_code: int | None  # None: it timed out (killed); negative: killed by that signal
    seconds: float
    timed_out: bool = False
    sandbox_note: str | None = None  # the sandbox refused something it did
    output_tail: str = ""  # the last lines of its output

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @property
    def killed(self) -> bool:
        """Killed: it timed out, or a signal ended it."""
        return self.timed_out or (self.exit_code is not None and self.exit_code < 0)

    @property
    def status(self) -> str:
        """`exit 1`, `timed out`, `killed by signal 9`: how the view and the report say it."""
        if self.timed_out:
            return f"timed out after {self.seconds:.0f}s"
        if self.exit_code is not None and self.exit_code < 0:
            return f"killed by signal {-self.exit_code}"
        return f"exit {self.exit_code}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "command": self.command, "exit_code": self.exit_code,
            "seconds": round(self.seconds, 3), "timed_out": self.timed_out,
            "killed": self.killed, "sandbox_note": self.sandbox_note,
            "output_tail": self.output_tail,
        }  # fmt: skip


# What the agent's own rules did to an observation, one kind a rule: a cut (a cap on what the
# model sees), the repeat guard's warning, the sandbox's note, a refusal (a permission rule or
# mode, a hook, a tool refusing a path), the user declining, a hook's note for the model, a
# failed check. A new kind is one word here.
NoteKind = Literal["cut", "repeat", "sandbox", "refused", "declined", "hook", "check"]
NOTE_KINDS: tuple[str, ...] = get_args(NoteKind)


@dataclass(frozen=True)
class Note:
    """One rule's mark on an observation, as data: the observation's text says the same in
    words, for the model; the trajectory, stream-json and the report read this."""

    kind: NoteKind
    text: str

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "text": self.text}


def output_tail(text: str, lines: int = 20, chars: int = 2_000) -> str:
    """The last `lines` lines of a command's output, at most `chars` characters."""
    tail = "\n".join(text.rstrip().split("\n")[-lines:])
    return tail[-chars:]


@dataclass(frozen=True)
class ToolOutput:
    """What a tool returns when text is not all it has: the text, and images for the model;
    a command's result as data."""

    text: str
    images: tuple[Image, ...] = ()
    command: CommandResult | None = None


@dataclass(frozen=True)
class ToolResult:
    """The answer to one native `ToolCall`, sent back in the next user message."""

    call_id: str
    name: str
    content: str
    is_error: bool = False
    images: tuple[Image, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = {"call_id": self.call_id, "name": self.name, "content": self.content,
                "is_error": self.is_error}  # fmt: skip
        return data | _images_dict(self.images)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolResult:
        return cls(data["call_id"], data["name"], data["content"], bool(data.get("is_error")),
                   _images_from(data))  # fmt: skip


@dataclass(frozen=True)
class Message:
    """One conversation turn in a provider-neutral shape.

    `tool_calls` only appear on assistant turns and `tool_results` only on user turns, and
    only in native tool-calling mode; in the text formats both stay empty. `images` (user
    turns) go beside the text: the text formats' observations carry their images here.
    `thinking` (assistant turns) is the model's reasoning as the provider showed it (a
    summary, or nothing), `turn` the turn as the provider sent it, to be sent back.
    """

    role: Literal["user", "assistant"]
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_results: tuple[ToolResult, ...] = ()
    images: tuple[Image, ...] = ()
    thinking: str = ""
    turn: SignedTurn | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form; images as references only (see `Image`)."""
        data: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            data["tool_calls"] = [asdict(c) for c in self.tool_calls]
        if self.tool_results:
            data["tool_results"] = [r.to_dict() for r in self.tool_results]
        return data | _images_dict(self.images) | _turn_dict(self.thinking, self.turn)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Message:
        return cls(
            role=data["role"],
            content=data.get("content", ""),
            tool_calls=tuple(ToolCall.from_dict(c) for c in data.get("tool_calls", ())),
            tool_results=tuple(ToolResult.from_dict(r) for r in data.get("tool_results", ())),
            images=_images_from(data),
            thinking=str(data.get("thinking") or ""),
            turn=SignedTurn.from_dict(data.get("turn")),
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
    thinking: str = ""  # the model's reasoning as shown (a summary), not sent back as text
    turn: SignedTurn | None = None  # the turn as sent, when it holds something signed

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "tool_calls": [asdict(c) for c in self.tool_calls],
            "usage": self.usage.to_dict(),
            "stop_reason": self.stop_reason,
            "model": self.model,
        } | _turn_dict(self.thinking, self.turn)

    def message(self) -> Message:
        """The assistant turn this reply is in the conversation."""
        return Message("assistant", self.text, tool_calls=self.tool_calls,
                       thinking=self.thinking, turn=self.turn)  # fmt: skip

    @classmethod
    def of(cls, reply: LlmResponse | str) -> LlmResponse:
        """A reply as a response: the original spec's clients and step methods use text."""
        return reply if isinstance(reply, LlmResponse) else cls(reply)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LlmResponse:
        return cls(
            text=data.get("text") or "",
            tool_calls=tuple(ToolCall.from_dict(c) for c in data.get("tool_calls") or ()),
            usage=Usage.from_dict(data.get("usage")),
            stop_reason=data.get("stop_reason") or "end",
            model=data.get("model") or "",
            thinking=str(data.get("thinking") or ""),
            turn=SignedTurn.from_dict(data.get("turn")),
        )
