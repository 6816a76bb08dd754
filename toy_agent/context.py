"""Keeping what is sent to the LLM within a token budget.

The history itself keeps everything (the trajectory records it all); only the view sent to
the model is trimmed. Tokens are estimated as characters / 4: crude, provider-independent,
and on the safe side for code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from toy_agent.llm import Message

CHARS_PER_TOKEN = 4
DEFAULT_CONTEXT_BUDGET = 100_000  # tokens; below every supported cloud model's window
KEEP_RECENT_MESSAGES = 4  # the latest two steps (assistant + observation each) stay whole
ELIDED_STUB_CHARS = 300


def observation_cap(budget_tokens: int) -> int:
    """Most characters one observation may keep: a quarter of the budget, within bounds."""
    return max(2_000, min(60_000, budget_tokens * CHARS_PER_TOKEN // 4))


def cap_text(text: str, max_chars: int) -> str:
    """Keep the head and the tail of `text`, with a note of what was cut in between."""
    if len(text) <= max_chars:
        return text
    half = max_chars // 2
    cut = len(text) - 2 * half
    head, tail = text[:half], text[-half:]
    return (
        f"{head}\n[... {cut:,} characters cut here to fit the context budget; "
        f"ask for a narrower range to see them ...]\n{tail}"
    )


def fit_to_budget(messages: Sequence[Message], budget_tokens: int) -> list[Message]:
    """Elide the oldest bulky messages until the conversation fits `budget_tokens`.

    The first message (the task) and the latest steps are never touched. Elided messages keep
    a short stub saying what was there, so the LLM knows it can ask again.
    """
    fitted = list(messages)
    budget_chars = budget_tokens * CHARS_PER_TOKEN
    total = sum(_message_chars(m) for m in fitted)
    last_elidable = len(fitted) - KEEP_RECENT_MESSAGES
    for index in range(1, last_elidable):
        if total <= budget_chars:
            break
        before = _message_chars(fitted[index])
        fitted[index] = _elide(fitted[index])
        total -= before - _message_chars(fitted[index])
    return fitted


def estimate_tokens(messages: Sequence[Message]) -> int:
    """The conversation's size in tokens, estimated as everywhere here: characters / 4."""
    return sum(_message_chars(m) for m in messages) // CHARS_PER_TOKEN


def _message_chars(message: Message) -> int:
    return (
        len(message.content)
        + sum(len(r.content) for r in message.tool_results)
        + sum(len(str(c.arguments)) for c in message.tool_calls)
    )


def _elide(message: Message) -> Message:
    content = _stub(message.content)
    results = tuple(replace(r, content=_stub(r.content)) for r in message.tool_results)
    calls = tuple(
        replace(c, arguments={k: _stub_value(v) for k, v in c.arguments.items()})
        for c in message.tool_calls
    )
    return Message(message.role, content, tool_calls=calls, tool_results=results)


def _stub(text: str) -> str:
    if len(text) <= ELIDED_STUB_CHARS:
        return text
    return (
        f"{text[:ELIDED_STUB_CHARS]}\n[... {len(text) - ELIDED_STUB_CHARS:,} more characters "
        "elided from this old message to stay within the context budget; run the tool again "
        "if you need them ...]"
    )


def _stub_value(value: object) -> object:
    return _stub(value) if isinstance(value, str) else value
