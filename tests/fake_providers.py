"""Loopback HTTP servers that speak the Anthropic, Gemini and OpenAI wire formats.

The real SDKs talk to these over 127.0.0.1, so tests exercise the same code paths as a live run
(headers, JSON bodies, SSE streams, status codes, Retry-After) without a network or a key.

    with FakeProvider() as server:
        server.enqueue(error_reply(429, "slow down", retry_after="0"), anthropic_reply("hi"))
        client = ClaudeLlmClient("key", base_url=server.url)
        ...
        assert server.requests[-1].body["model"] == "..."

Replies are served in order; when the queue is empty the server answers 501 (not retryable),
so a test that sends more requests than it scripted fails fast instead of hanging.

The servers hold a request to the rules today's models hold it to, and refuse it with the real
APIs' 400 bodies (see `refusal`): Claude's thinking blocks come signed and must come back
unaltered, and a turn of the tool loop in progress that thought must start with its thinking;
Gemini signs the first function call of each turn (thoughtSignature) and refuses a history
whose current turn lacks or alters one; Claude Sonnet 5 and later refuse sampling parameters.
Signatures are a MAC of what they sign, so an altered block is caught without any state;
`FakeProvider.signed` remembers which of Claude's tool calls came in a turn that thought.
Sources (2026-11): platform.claude.com/docs build-with-claude/extended-thinking (thinking
with tool use, signatures, redacted_thinking, streaming thinking_delta/signature_delta) and
adaptive-thinking; ai.google.dev/gemini-api/docs/thought-signatures and thinking
(thoughtSignature on parts, thought parts, thinkingConfig, thoughtsTokenCount); OpenAI's
Chat Completions reference (usage.completion_tokens_details.reasoning_tokens).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from toy_agent.messages import ToolCall, Usage
from toy_agent.providers import PROVIDERS

__all__ = [
    "FakeProvider",
    "RecordedRequest",
    "Reply",
    "anthropic_reply",
    "claude_signature",
    "cut_stream",
    "disconnect",
    "error_reply",
    "gemini_reply",
    "gemini_signature",
    "openai_reply",
    "refusal",
    "responses_reply",
    "sse_reply",
]


@dataclass(frozen=True)
class Reply:
    """One scripted HTTP answer; `drop` closes the socket instead, `delay` stalls it first."""

    status: int = 200
    body: bytes | str | dict[str, Any] | list[Any] = b""
    headers: dict[str, str] = field(default_factory=dict)
    drop: bool = False
    delay: float = 0.0
    cut_after: int | None = None  # send only this many body bytes, then hang up
    trickle: float = 0.0  # send the body one byte at a time, this many seconds apart
    chunked: bool = False  # Transfer-Encoding: chunked, one SSE event a chunk, as proxies relay
    signed: tuple[str, ...] = ()  # Claude's tool call ids that came in a turn that thought

    def encoded(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        if isinstance(self.body, str):
            return self.body.encode()
        return json.dumps(self.body).encode()


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any  # parsed JSON, or the raw text when it was not JSON

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


class FakeProvider:
    """A scriptable HTTP server: a queue of replies out, a list of recorded requests in.

    `serves`, a path prefix, makes it a proxy that serves only those paths (a Gemini proxy
    serving /v1beta): any other path gets a 404 and uses no reply."""

    def __init__(self, *, serves: str = "/") -> None:
        self.serves = serves
        self.requests: list[RecordedRequest] = []
        self.signed: set[str] = set()  # Claude tool call ids whose turn must keep its thinking
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._server = _QuietServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.005}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def env(self, provider: str, key: str = "test-key") -> dict[str, str]:
        """The variables that point toy_agent's `provider` client here (for CLI tests)."""
        suffix = "/v1" if provider == "openai" else ""  # as for Ollama: .../v1/chat/completions
        row = PROVIDERS[provider]
        return {row.key_variables[0]: key, row.base_url_variable: self.url + suffix}

    def enqueue(self, *replies: Reply) -> FakeProvider:
        with self._lock:
            self._replies.extend(replies)
        return self

    def record(self, request: RecordedRequest) -> None:
        """Keep `request` in `requests` (a subclass's own reply_to calls this first)."""
        with self._lock:
            self.requests.append(request)

    def reply_to(self, request: RecordedRequest) -> Reply:
        """The next queued reply (the server's handler asks this for every request)."""
        with self._lock:  # recorded and answered at once: requests[i] got the i-th reply
            self.requests.append(request)
            if not request.path.startswith(self.serves):
                return error_reply(404, f"fake proxy: only {self.serves} is served")
            if (refused := refusal(request, self.signed)) is not None:
                return refused
            if self._replies:
                reply = self._replies.popleft()
                self.signed.update(reply.signed)
                return reply
        return error_reply(501, f"fake provider: no reply queued for {request.path}")

    def __enter__(self) -> FakeProvider:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that timed out and hung up is part of the script, not a failure


def _handler_for(provider: FakeProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
            try:
                body: Any = json.loads(raw) if raw else None
            except ValueError:
                body = raw
            headers = {k.lower(): v for k, v in self.headers.items()}
            reply = provider.reply_to(RecordedRequest("POST", self.path, headers, body))
            time.sleep(reply.delay)
            if reply.drop:
                self.close_connection = True
                self.connection.close()
                return
            data = reply.encoded()
            self.send_response(reply.status)
            headers = {"Content-Type": "application/json", **reply.headers}
            for name, value in headers.items():
                self.send_header(name, value)
            if reply.chunked:
                self._send_chunked(data, reply.cut_after)
                return
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if reply.trickle:
                for i in range(len(data)):
                    self.wfile.write(data[i : i + 1])
                    self.wfile.flush()
                    time.sleep(reply.trickle)
                return
            self.wfile.write(data[: reply.cut_after])
            if reply.cut_after is not None:
                self.wfile.flush()
                self.close_connection = True

        def _send_chunked(self, data: bytes, cut_after: int | None) -> None:
            """The body as chunks, one SSE event each, flushed one by one; with `cut_after`,
            the socket is closed after that many bytes, with no final chunk: a cut stream."""
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            body = data[:cut_after]
            for event in re.split(rb"(?<=\n\n)", body):
                if event:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                    self.wfile.flush()
            if cut_after is None:
                self.wfile.write(b"0\r\n\r\n")
                return
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)

        def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
            pass

    return Handler


# --- canned replies -----------------------------------------------------------------------


def error_reply(status: int, message: str, *, retry_after: str | None = None) -> Reply:
    """An error in a shape all three SDKs read: `error.message` (+ Gemini's `error.code`)."""
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    body = {"type": "error", "error": {"type": "error", "code": status, "message": message}}
    return Reply(status, body, headers)


def cut_stream(whole: Reply, *, after: bytes | None = None) -> Reply:
    """`whole`, an SSE reply, relayed chunked the way proxies relay it, and cut by closing the
    socket right after the event holding `after`; without `after`, before the first event."""
    body = whole.encoded()
    cut = 0 if after is None else body.index(b"\n\n", body.index(after)) + 2
    return replace(whole, chunked=True, cut_after=cut)


def disconnect() -> Reply:
    """Close the connection without answering, like a reset or a crashed proxy."""
    return Reply(drop=True)


# --- what today's APIs refuse ------------------------------------------------------------------

_MAC_KEY = b"fake-provider-signing-key"


def _mac(kind: str, text: str) -> bytes:
    return hashlib.sha256(_MAC_KEY + kind.encode() + b"\0" + text.encode()).digest()


def claude_signature(thinking: str) -> str:
    """The signature this server gives a thinking block with `thinking` as its text."""
    return "Eq" + base64.b64encode(_mac("thinking", thinking)).decode()


def _redacted_data(n: int) -> str:
    nonce = f"redacted-{n}"
    return base64.b64encode(nonce.encode()).decode() + "." + claude_signature(nonce)


def _redacted_data_valid(data: Any) -> bool:
    head, _, mac = str(data).partition(".")
    try:
        return mac == claude_signature(base64.b64decode(head, validate=True).decode())
    except ValueError:
        return False


def _base64_mac(kind: str, text: str) -> str:
    return base64.b64encode(_mac(kind, text)).decode()


def gemini_signature(name: str, args: dict[str, Any]) -> str:
    """The thoughtSignature this server puts on a function call (base64 on the wire)."""
    return _base64_mac("call", name + json.dumps(args, sort_keys=True))


def _same_base64(a: Any, b: str) -> bool:
    try:  # either alphabet: google-genai may write URL-safe base64
        return base64.urlsafe_b64decode(str(a)) == base64.urlsafe_b64decode(b)
    except ValueError:
        return False


def refusal(request: RecordedRequest, signed: Collection[str] = ()) -> Reply | None:
    """The 400 today's API would answer `request` with, or None when it takes it."""
    body = request.body if isinstance(request.body, dict) else {}
    if request.path.rstrip("/").endswith("/messages"):
        message = _claude_unanswered(body) or _claude_refusal(body, signed)
        return None if message is None else anthropic_error(400, message)
    if request.path.rstrip("/").endswith("/responses"):
        if (message := _responses_unanswered(body)) is not None:
            return openai_error(400, message)
        return _responses_refusal(body, signed)
    if request.path.rstrip("/").endswith("/chat/completions"):
        message = _chat_unanswered(body)
        return None if message is None else openai_error(400, message)
    if ":generateContent" in request.path or ":streamGenerateContent" in request.path:
        model = re.search(r"/models/([^/:]+):", request.path)
        message = _gemini_unanswered(body) or _gemini_refusal(body, model[1] if model else "")
        return None if message is None else gemini_error(400, message)
    return None


# Every API refuses a tool call the next message does not answer (the wordings are the
# APIs' own, as users of Claude Code, gemini-cli, LiteLLM and the Agents SDK quote them).
def _claude_unanswered(body: dict[str, Any]) -> str | None:
    messages = body.get("messages") or []
    for i, message in enumerate(messages):
        content = message.get("content")
        if message.get("role") != "assistant" or not isinstance(content, list):
            continue
        ids = [b.get("id") for b in content if b.get("type") == "tool_use"]
        following = messages[i + 1].get("content") if i + 1 < len(messages) else None
        results = []
        for block in following if isinstance(following, list) else ():  # results come first
            if block.get("type") != "tool_result":
                break
            results.append(block.get("tool_use_id"))
        missing = [str(id_) for id_ in ids if id_ not in results]
        if missing:
            return (
                f"messages.{i}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                "corresponding `tool_result` block in the next message."
            )
    return None


def _chat_unanswered(body: dict[str, Any]) -> str | None:
    messages = body.get("messages") or []
    for i, message in enumerate(messages):
        if message.get("role") != "assistant" or not message.get("tool_calls"):
            continue
        answered = set()
        for following in messages[i + 1 :]:
            if following.get("role") != "tool":
                break
            answered.add(following.get("tool_call_id"))
        missing = [str(c.get("id")) for c in message["tool_calls"] if c.get("id") not in answered]
        if missing:
            return (
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(missing)}"
            )
    return None


def _gemini_unanswered(body: dict[str, Any]) -> str | None:
    contents = body.get("contents") or []
    for i, content in enumerate(contents):
        calls = sum("functionCall" in p for p in content.get("parts") or ())
        if content.get("role") != "model" or not calls:
            continue
        following = (contents[i + 1].get("parts") or ()) if i + 1 < len(contents) else ()
        if sum("functionResponse" in p for p in following) != calls:
            return (
                "Please ensure that the number of function response parts is equal to the "
                "number of function call parts of the function call turn."
            )
    return None


def _responses_unanswered(body: dict[str, Any]) -> str | None:
    items = [i for i in body.get("input") or [] if isinstance(i, dict)]
    outputs = {i.get("call_id") for i in items if i.get("type") == "function_call_output"}
    for item in items:
        if item.get("type") == "function_call" and item.get("call_id") not in outputs:
            return f"No tool output found for function call {item.get('call_id')}."
    return None


_CLAUDE_FIXED_SAMPLING = re.compile(r"claude-(sonnet|opus|haiku)-([5-9]|\d\d)")
_THINKING_FIRST = (
    "messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
    "`{found}`. When `thinking` is enabled, a final `assistant` message must start with a "
    "thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We "
    "recommend you include thinking blocks from previous turns. To avoid this requirement, "
    "disable `thinking`. Please consult our documentation at "
    "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
)


def _claude_refusal(body: dict[str, Any], signed: Collection[str]) -> str | None:
    if _CLAUDE_FIXED_SAMPLING.match(str(body.get("model") or "")):
        for key in ("temperature", "top_p", "top_k"):
            if key in body:
                return f"`{key}` is deprecated for this model."
    messages = body.get("messages") or []
    loop_starts = 0  # the tool loop in progress starts after the last user text
    for i, message in enumerate(messages):
        content = message.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        if message.get("role") == "user" and any(b.get("type") == "text" for b in blocks):
            loop_starts = i + 1
        if message.get("role") != "assistant":
            continue
        for j, block in enumerate(blocks):
            kind = block.get("type")
            if kind == "thinking" and block.get("signature") != claude_signature(
                str(block.get("thinking", ""))
            ):
                return f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
            if kind == "redacted_thinking" and not _redacted_data_valid(block.get("data")):
                return f"messages.{i}.content.{j}: Invalid `data` in `redacted_thinking` block"
    for i in range(loop_starts, len(messages)):
        content = messages[i].get("content")
        if messages[i].get("role") != "assistant" or not isinstance(content, list):
            continue
        ids = {b.get("id") for b in content if b.get("type") == "tool_use"}
        first = content[0].get("type") if content else "nothing"
        if ids & set(signed) and first not in ("thinking", "redacted_thinking"):
            return _THINKING_FIRST.format(i=i, found=first)
    return None


# The placeholders Gemini takes on a call it did not sign (a history from elsewhere).
_NO_SIGNATURE = (b"skip_thought_signature_validator", b"context_engineering_is_the_way_to_go")


# Gemini 2.0 and 1.x do not think: any thinkingConfig is refused, includeThoughts alone too.
_GEMINI_NO_THINKING = re.compile(r"gemini-(?:1(?:\.\d+)?|2\.0)(?![\d.])")


def _gemini_refusal(body: dict[str, Any], model: str = "") -> str | None:
    config = body.get("generationConfig") or {}
    if _GEMINI_NO_THINKING.match(model) and ("thinkingConfig" in config
                                             or "thinking_config" in config):  # fmt: skip
        return f"Thinking is not enabled for models/{model}"
    contents = body.get("contents") or []
    turn_starts = 0  # the current turn starts at the last user text (not at function results)
    for i, content in enumerate(contents):
        if content.get("role") == "user" and any("text" in p for p in content.get("parts", ())):
            turn_starts = i
    for content in contents[turn_starts:]:
        if content.get("role") != "model":
            continue
        parts = content.get("parts") or []
        calls = [(j, p) for j, p in enumerate(parts) if "functionCall" in p]
        if not calls:
            continue
        position, part = calls[0]  # parallel calls: the first one carries the signature
        call = part["functionCall"]
        if "thoughtSignature" not in part:
            return (
                "Function call is missing a thought_signature in functionCall parts. This is "
                "required for tools to work correctly, and missing thought_signature may lead "
                "to degraded model performance. Additional data, function call "
                f"`default_api:{call.get('name')}` , position {position + 1}. Please refer to "
                "https://ai.google.dev/gemini-api/docs/thought-signatures for more details."
            )
        expected = gemini_signature(str(call.get("name")), call.get("args") or {})
        placeholder = any(_same_base64(part["thoughtSignature"], base64.b64encode(p).decode())
                          for p in _NO_SIGNATURE)  # fmt: skip
        if not placeholder and not _same_base64(part["thoughtSignature"], expected):
            return "Corrupted thought signature."
    return None


def _responses_refusal(body: dict[str, Any], signed: Collection[str]) -> Reply | None:
    """OpenAI's Responses API: a reasoning item must be one it encrypted and be followed by
    its output; a function call of a turn that reasoned, sent with its item id, must come
    after its reasoning item (a call without an id is not tied to one). A reasoning item
    without encrypted_content is an item to look up, and this server keeps none: a 404, as
    the API answers one under store: false."""
    items = [i for i in body.get("input") or [] if isinstance(i, dict)]
    seen: set[str] = set()
    for n, item in enumerate(items):
        kind, item_id = item.get("type"), str(item.get("id") or "")
        if kind == "reasoning":
            if not item.get("encrypted_content"):
                unkept = (
                    " Items are not persisted when `store` is set to false. Try again "
                    "with `store` set to true, or remove this item from your input."
                )
                return openai_error(404, f"Item with id '{item_id}' not found."
                                    + (unkept if body.get("store") is False else ""))  # fmt: skip
            if item["encrypted_content"] != _base64_mac("reasoning", item_id):
                return openai_error(
                    400, f"The encrypted content for item {item_id} could not be verified."
                )
            following = items[n + 1] if n + 1 < len(items) else {}
            if following.get("type") not in ("message", "function_call"):
                return openai_error(400, f"Item '{item_id}' of type 'reasoning' was provided "
                                    "without its required following item.")  # fmt: skip
            seen.add(item_id)
        if kind == "function_call" and item_id in signed:
            reasoning = "rs_" + item_id.removeprefix("fc_")
            if reasoning not in seen:
                return openai_error(400, f"Item '{item_id}' of type 'function_call' was "
                                    f"provided without its required 'reasoning' item: "
                                    f"'{reasoning}'.")  # fmt: skip
    return None


def openai_error(status: int, message: str) -> Reply:
    """An error as OpenAI's APIs write it."""
    error = {"message": message, "type": "invalid_request_error", "param": "input", "code": None}
    return Reply(status, {"error": error})


def anthropic_error(status: int, message: str) -> Reply:
    """An error as the Messages API writes it."""
    kind = "invalid_request_error" if status == 400 else "api_error"
    body = {"type": "error", "error": {"type": kind, "message": message},
            "request_id": "req_fake"}  # fmt: skip
    return Reply(status, body)


def gemini_error(status: int, message: str) -> Reply:
    """An error as the Gemini API writes it."""
    state = "INVALID_ARGUMENT" if status == 400 else "INTERNAL"
    return Reply(status, {"error": {"code": status, "message": message, "status": state}})


def sse_reply(events: Sequence[tuple[str | None, Any]]) -> Reply:
    """A text/event-stream body from (event name or None, JSON data or raw string) pairs."""
    lines = []
    for event, data in events:
        payload = data if isinstance(data, str) else json.dumps(data)
        lines.append((f"event: {event}\n" if event else "") + f"data: {payload}\n\n")
    return Reply(200, "".join(lines), {"Content-Type": "text/event-stream"})


DEFAULT_USAGE = Usage(10, 5)


def _chunks(text: str | Sequence[str]) -> list[str]:
    return [text] if isinstance(text, str) else list(text)


def anthropic_reply(
    text: str | Sequence[str] = "",
    *,
    tool_calls: Sequence[ToolCall] = (),
    stop_reason: str = "end_turn",
    usage: Usage = DEFAULT_USAGE,
    model: str = "claude-test",
    stream: bool = False,
    thinking: str | bool = True,
    redacted: bool = False,
) -> Reply:
    """A Messages API answer; a list of strings becomes the text deltas when streaming.

    `thinking`: True, as Claude Sonnet 5.5 answers by default, is a signed thinking block with
    its text omitted when the reply calls tools (a plain answer has none); a string is a
    thinking block with that text (a summary, as asked with display "summarized"); False
    none. `redacted` adds a redacted_thinking block."""
    usage_body = {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_input_tokens": usage.cached_tokens,
        "cache_creation_input_tokens": usage.cache_write_tokens,
    }
    content: list[dict[str, Any]] = []
    if isinstance(thinking, str):
        thought: str | None = thinking
    else:
        thought = "" if thinking and tool_calls else None
    if thought is not None:
        content.append(
            {"type": "thinking", "thinking": thought, "signature": claude_signature(thought)}
        )
    if redacted:
        content.append({"type": "redacted_thinking", "data": _redacted_data(len(tool_calls))})
    if text:
        content.append({"type": "text", "text": "".join(_chunks(text))})
    content += [
        {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in tool_calls
    ]
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": model}
    thought_ids = tuple(c.id for c in tool_calls) if thought is not None or redacted else ()
    if not stream:
        return Reply(
            200,
            {
                **message,
                "content": content,
                "stop_reason": stop_reason,
                "stop_sequence": None,
                "usage": usage_body,
            },
            signed=thought_ids,
        )
    events: list[tuple[str | None, Any]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    **message,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {**usage_body, "output_tokens": 1},
                },
            },
        )
    ]
    for index, block in enumerate(content):
        empty = {"text": {"text": ""}, "tool_use": {"input": {}}, "redacted_thinking": {},
                 "thinking": {"thinking": "", "signature": ""}}[block["type"]]  # fmt: skip
        start = {**block, **empty}
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
            )
        )
        deltas: list[dict[str, Any]] = []
        if block["type"] == "text":
            deltas = [{"type": "text_delta", "text": t} for t in _chunks(text)]
        elif block["type"] == "thinking":  # the text in two pieces, then the signature
            half = len(block["thinking"]) // 2
            pieces = [block["thinking"][:half], block["thinking"][half:]]
            deltas = [{"type": "thinking_delta", "thinking": t} for t in pieces if t]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif block["type"] == "tool_use":
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
        for delta in deltas:
            events.append(
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": usage.output_tokens},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return replace(sse_reply(events), signed=thought_ids)


def openai_reply(
    text: str | Sequence[str] | None = "",
    *,
    tool_calls: Sequence[ToolCall] = (),
    finish_reason: str = "stop",
    usage: Usage = DEFAULT_USAGE,
    model: str = "gpt-test",
    stream: bool = False,
    raw_arguments: Sequence[str] | None = None,
) -> Reply:
    """A Chat Completions answer. `raw_arguments` overrides the JSON string per tool call."""
    usage_body = {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }
    calls = [
        {
            "id": c.id,
            "type": "function",
            "function": {
                "name": c.name,
                "arguments": (raw_arguments[i] if raw_arguments else json.dumps(c.arguments)),
            },
        }
        for i, c in enumerate(tool_calls)
    ]
    head = {"id": "chatcmpl-1", "created": 0, "model": model}
    if not stream:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None if text is None else "".join(_chunks(text)),
        }
        if calls:
            message["tool_calls"] = calls
        choice = {"index": 0, "message": message, "finish_reason": finish_reason}
        return Reply(
            200, {**head, "object": "chat.completion", "choices": [choice], "usage": usage_body}
        )

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            **head,
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    events: list[tuple[str | None, Any]] = [(None, chunk({"role": "assistant", "content": ""}))]
    events += [(None, chunk({"content": t})) for t in _chunks(text or "")]
    for index, call in enumerate(calls):
        args = call["function"]["arguments"]
        half = len(args) // 2  # arguments arrive in pieces; the client must join them
        first = {**call, "function": {"name": call["function"]["name"], "arguments": args[:half]}}
        events.append((None, chunk({"tool_calls": [{"index": index, **first}]})))
        events.append(
            (
                None,
                chunk({"tool_calls": [{"index": index, "function": {"arguments": args[half:]}}]}),
            )
        )
    events.append((None, chunk({}, finish_reason)))
    events.append(
        (None, {**head, "object": "chat.completion.chunk", "choices": [], "usage": usage_body})
    )
    events.append((None, "[DONE]"))
    return sse_reply(events)


def responses_reply(
    text: str = "",
    *,
    tool_calls: Sequence[ToolCall] = (),
    reasoning: str | None = "",
    usage: Usage = DEFAULT_USAGE,
    model: str = "gpt-test",
    stream: bool = False,
    turn: int = 1,
) -> Reply:
    """A Responses API answer, as a reasoning model gives it: a reasoning item first (its
    summary `reasoning`, its encrypted_content), then the message and function calls; `None`
    for no reasoning item. `turn` numbers the items' ids (rs_N, msg_N, fc_N_i)."""
    output: list[dict[str, Any]] = []
    if reasoning is not None:
        summary = [{"type": "summary_text", "text": reasoning}] if reasoning else []
        output.append({"id": f"rs_{turn}", "type": "reasoning", "summary": summary,
                       "encrypted_content": _base64_mac("reasoning", f"rs_{turn}")})  # fmt: skip
    if text:
        output.append({"id": f"msg_{turn}", "type": "message", "role": "assistant",
                       "status": "completed", "content": [
                           {"type": "output_text", "text": text, "annotations": []}]})  # fmt: skip
    calls = [{"id": f"fc_{turn}" if i == 0 else f"fc_{turn}_{i}", "type": "function_call",
              "call_id": c.id, "name": c.name, "arguments": json.dumps(c.arguments),
              "status": "completed"} for i, c in enumerate(tool_calls)]  # fmt: skip
    output += calls
    usage_body = {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }
    response = {"id": f"resp_{turn}", "object": "response", "created_at": 0, "model": model,
                "status": "completed", "output": output, "usage": usage_body,
                "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}  # fmt: skip
    signed = (calls[0]["id"],) if calls and reasoning is not None else ()
    if not stream:
        return Reply(200, response, signed=signed)
    events: list[tuple[str | None, Any]] = [
        ("response.created", {"type": "response.created", "sequence_number": 0,
                              "response": {**response, "status": "in_progress", "output": []}}),
    ]  # fmt: skip
    if text:
        half = len(text) // 2
        for piece in (text[:half], text[half:]):
            events.append(("response.output_text.delta",
                           {"type": "response.output_text.delta", "sequence_number": len(events),
                            "item_id": f"msg_{turn}", "output_index": 0, "content_index": 0,
                            "delta": piece, "logprobs": []}))  # fmt: skip
    done = {"type": "response.completed", "sequence_number": len(events), "response": response}
    events.append(("response.completed", done))
    return replace(sse_reply(events), signed=signed)


def gemini_reply(
    text: str | Sequence[str] = "",
    *,
    tool_calls: Sequence[ToolCall] = (),
    finish_reason: str | None = "STOP",
    usage: Usage = DEFAULT_USAGE,
    block_reason: str | None = None,
    stream: bool = False,
    thought: str = "",
    signed: bool = True,
) -> Reply:
    """A generateContent answer; `block_reason` gives a prompt-blocked reply (no candidates).

    As Gemini 3 answers: the first function call carries a thoughtSignature (`signed`), or,
    without calls, the last part does; `thought` is a thought summary part (thought: true), as
    includeThoughts asks for. `usage.reasoning_tokens` is thoughtsTokenCount, counted apart
    from candidatesTokenCount."""
    usage_body = {
        "promptTokenCount": usage.input_tokens,
        "candidatesTokenCount": usage.output_tokens - usage.reasoning_tokens,
        "cachedContentTokenCount": usage.cached_tokens,
        "totalTokenCount": usage.input_tokens + usage.output_tokens,
    }
    if usage.reasoning_tokens:
        usage_body["thoughtsTokenCount"] = usage.reasoning_tokens
    head = {"usageMetadata": usage_body, "modelVersion": "gemini-test"}
    if block_reason:
        body = {**head, "promptFeedback": {"blockReason": block_reason}}
        return sse_reply([(None, body)]) if stream else Reply(200, body)
    calls = [{"functionCall": {"name": c.name, "args": c.arguments}} for c in tool_calls]
    for call, spec in zip(calls, tool_calls, strict=True):
        if spec.id:  # the Gemini API usually sends no ids; give one only when the test does
            call["functionCall"]["id"] = spec.id
    if calls and signed:
        calls[0]["thoughtSignature"] = gemini_signature(tool_calls[0].name, tool_calls[0].arguments)
    thoughts = [{"text": thought, "thought": True}] if thought else []
    text_signature = {"thoughtSignature": _base64_mac("text", str(text))} if signed else {}

    def candidate(parts: list[dict[str, Any]], finish: str | None) -> dict[str, Any]:
        return {
            "content": {"role": "model", "parts": parts},
            "index": 0,
            **({"finishReason": finish} if finish else {}),
        }

    if not stream:
        parts = thoughts + ([{"text": "".join(_chunks(text))}] if text else []) + calls
        if parts and not calls:
            parts[-1] = {**parts[-1], **text_signature}
        return Reply(200, {**head, "candidates": [candidate(parts, finish_reason)]})
    pieces = [[{"text": t}] for t in _chunks(text)] if text else []
    if pieces and not calls:
        pieces[-1] = [{**pieces[-1][0], **text_signature}]
    pieces = ([thoughts] if thoughts else []) + pieces
    if calls:
        pieces.append(calls)
    pieces = pieces or [[]]
    events: list[tuple[str | None, Any]] = [
        (None, {"candidates": [candidate(p, None)], "modelVersion": "gemini-test"})
        for p in pieces[:-1]
    ]
    events.append((None, {**head, "candidates": [candidate(pieces[-1], finish_reason)]}))
    return sse_reply(events)
