"""Test doubles that go through the narrow seams (here: `LlmClient`), never patches."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from toy_agent.llm import LlmClient, LlmError
from toy_agent.messages import LlmResponse, Message, ToolCall


def xml_action(tool: str, thought: str = "", **params: Any) -> str:
    """A well-formed reply in the default XML action format."""
    return (
        f"<THOUGHT>{thought or f'I will use {tool}.'}</THOUGHT>\n"
        f"<ACTION>\n<tool_name>{tool}</tool_name>\n"
        f"<parameters>{json.dumps(params)}</parameters>\n</ACTION>"
    )


def native_call(*calls: tuple[str, dict[str, Any]], text: str = "") -> LlmResponse:
    tool_calls = tuple(ToolCall(name, args, f"call_{i}") for i, (name, args) in enumerate(calls))
    return LlmResponse(text, tool_calls=tool_calls, stop_reason="tool_use")


class ScriptedLlm(LlmClient):
    """Answers with the replies it was given, in order, and records every request."""

    provider = "scripted"
    model = "scripted-1"

    def __init__(self, *replies: str | LlmResponse | Exception):
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []

    def call_llm(
        self,
        system_prompt: str,
        messages: Sequence[Message],
        *,
        tools=None,
        on_text=None,
        on_retry=None,
    ) -> LlmResponse:
        self.requests.append({"system": system_prompt, "messages": list(messages), "tools": tools})
        if not self.replies:
            raise AssertionError("the agent asked for more replies than the script has")
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        if isinstance(reply, str):
            reply = LlmResponse(reply)
        if on_text and reply.text:
            on_text(reply.text)
        return reply

    def sent_text(self) -> str:
        """Everything the LLM was ever sent, as one string (for 'never leaked' checks)."""
        parts = []
        for request in self.requests:
            parts.append(request["system"])
            parts += [json.dumps(m.to_dict()) for m in request["messages"]]
        return "\n".join(parts)


class BlockingLlm(LlmClient):
    """Never answers until released: an LLM call in flight, for cancellation tests."""

    provider = "blocking"

    def __init__(self) -> None:
        self.called = threading.Event()
        self.release = threading.Event()

    def call_llm(
        self, system_prompt, messages, *, tools=None, on_text=None, on_retry=None
    ) -> LlmResponse:
        self.called.set()
        if not self.release.wait(30):
            raise LlmError("blocking", "never released")
        return LlmResponse(xml_action("task_complete", result="late"))


def write_replay(path: Path, *replies: str) -> Path:
    """A recording (a trajectory with only the LLM's replies) for --replay to play back."""
    steps = [{"response": LlmResponse(text).to_dict()} for text in replies]
    path.write_text(json.dumps({"steps": steps, "settings": {"model": "replayed"}}))
    return path


def write(root: Path, rel: str, content: str | bytes = "x\n") -> Path:
    """Write `content` to root/rel, making its folders: text as text, bytes as they are."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def folder(root: Path, files: Mapping[str, str | bytes]) -> Path:
    """The folder `root` (made if missing) holding `files`, relative path to content: a test's
    repository, or the folder outside it that nothing may reach."""
    root.mkdir(parents=True, exist_ok=True)
    for rel, content in files.items():
        write(root, rel, content)
    return root


T = TypeVar("T")


def finishes(call: Callable[[], T], seconds: float = 20.0) -> T:
    """Run `call` in a thread and fail, instead of hanging the suite, if it does not return
    (a call blocked in the kernel, on a FIFO say). The bound is generous (these calls take
    milliseconds); it is no timing benchmark."""
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed back to the test
            box["error"] = exc

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"{call} did not finish in {seconds}s"
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


def wait_until(condition: Callable[[], object], what: str, seconds: float = 30.0) -> None:
    """Poll `condition` every 50 ms until it holds (a request arrived, a file appeared); fail
    naming `what` if it does not within `seconds` (generous: a wait, not a benchmark)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {seconds}s"
        time.sleep(0.05)


def run_in_pty(argv: list[str], extra_env: dict[str, str] | None = None) -> str:
    """Run `argv` on a pseudo-terminal (TERM=xterm, NO_COLOR unset) and return all it wrote."""
    controller, terminal = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    proc = subprocess.Popen(
        argv,
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        env={**env, "TERM": "xterm", **(extra_env or {})},
        close_fds=True,
    )
    os.close(terminal)
    chunks = []
    while True:
        ready, _, _ = select.select([controller], [], [], 30)
        if not ready:
            break
        try:
            data = os.read(controller, 4096)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(30)
    os.close(controller)
    return b"".join(chunks).decode("utf-8", "replace")
