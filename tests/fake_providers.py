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
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Sequence
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
    "cut_stream",
    "disconnect",
    "error_reply",
    "gemini_reply",
    "openai_reply",
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
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._server = _QuietServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
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
            if self._replies:
                return self._replies.popleft()
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
) -> Reply:
    """A Messages API answer; a list of strings becomes the text deltas when streaming."""
    usage_body = {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_input_tokens": usage.cached_tokens,
        "cache_creation_input_tokens": 0,
    }
    content: list[dict[str, Any]] = []
    if text:
        content.append({"type": "text", "text": "".join(_chunks(text))})
    content += [
        {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in tool_calls
    ]
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": model}
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
        start = {**block, "text": ""} if block["type"] == "text" else {**block, "input": {}}
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
            )
        )
        if block["type"] == "text":
            deltas = [{"type": "text_delta", "text": t} for t in _chunks(text)]
        else:
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
    return sse_reply(events)


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


def gemini_reply(
    text: str | Sequence[str] = "",
    *,
    tool_calls: Sequence[ToolCall] = (),
    finish_reason: str | None = "STOP",
    usage: Usage = DEFAULT_USAGE,
    block_reason: str | None = None,
    stream: bool = False,
) -> Reply:
    """A generateContent answer; `block_reason` gives a prompt-blocked reply (no candidates)."""
    usage_body = {
        "promptTokenCount": usage.input_tokens,
        "candidatesTokenCount": usage.output_tokens,
        "cachedContentTokenCount": usage.cached_tokens,
        "totalTokenCount": usage.input_tokens + usage.output_tokens,
    }
    head = {"usageMetadata": usage_body, "modelVersion": "gemini-test"}
    if block_reason:
        body = {**head, "promptFeedback": {"blockReason": block_reason}}
        return sse_reply([(None, body)]) if stream else Reply(200, body)
    calls = [{"functionCall": {"name": c.name, "args": c.arguments}} for c in tool_calls]
    for call, spec in zip(calls, tool_calls, strict=True):
        if spec.id:  # the Gemini API usually sends no ids; give one only when the test does
            call["functionCall"]["id"] = spec.id

    def candidate(parts: list[dict[str, Any]], finish: str | None) -> dict[str, Any]:
        return {
            "content": {"role": "model", "parts": parts},
            "index": 0,
            **({"finishReason": finish} if finish else {}),
        }

    if not stream:
        parts = ([{"text": "".join(_chunks(text))}] if text else []) + calls
        return Reply(200, {**head, "candidates": [candidate(parts, finish_reason)]})
    pieces = [[{"text": t}] for t in _chunks(text)] if text else []
    if calls:
        pieces.append(calls)
    pieces = pieces or [[]]
    events: list[tuple[str | None, Any]] = [
        (None, {"candidates": [candidate(p, None)], "modelVersion": "gemini-test"})
        for p in pieces[:-1]
    ]
    events.append((None, {**head, "candidates": [candidate(pieces[-1], finish_reason)]}))
    return sse_reply(events)
