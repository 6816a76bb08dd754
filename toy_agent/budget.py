"""Keeping what is sent to the LLM within a token budget.

The history itself keeps everything (the trajectory records it all); only the view sent to
the model is trimmed. Tokens are estimated as characters / 4: crude, provider-independent,
and on the safe side for code.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass, replace

from toy_agent.cuts import BUDGET, cut, how_to_see_more
from toy_agent.llm import Message
from toy_agent.messages import Image, ToolOutput
from toy_agent.settings import AgentSettings

CHARS_PER_TOKEN = 4
DEFAULT_CONTEXT_BUDGET = AgentSettings.context_budget  # its home: toy_agent.settings
KEEP_RECENT_MESSAGES = 4  # the latest two steps (assistant + observation each) stay whole
ELIDED_STUB_CHARS = 300
_AGAIN = "run the tool again if you need them"
# Images: what every provider takes (Claude refuses one over 5 MB of base64), and what a run
# may spend on them (an image costs ~1,600 tokens whatever its size, in every request it is in).
IMAGE_MAX_BYTES = 3_750_000  # one image, decoded: 5 MB as base64
STEP_IMAGES_MAX = 4  # images one step's observations may send
STEP_IMAGE_MAX_BYTES = 8_000_000  # and their bytes together
REQUEST_IMAGES_MAX = 8  # images in one request: older ones are sent as a text stub
IMAGE_CHARS = 6_400  # an image, counted against the context budget (~1,600 tokens)
_MAGIC = (  # what the bytes are, whatever the server said
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def observation_cap(budget_tokens: int, task: str = "") -> int:
    """Most characters one observation may keep: a quarter of the budget the task leaves (the
    task is sent whole with every step), within bounds."""
    room = max(0, budget_tokens * CHARS_PER_TOKEN - len(task))
    return max(2_000, min(60_000, room // 4))


def oversized_task(task: str, budget_tokens: int) -> str | None:
    """Why `task` cannot be sent (it alone is over the budget, and the first message is sent
    whole with every step), with the way out; None when it fits."""
    tokens = len(task) // CHARS_PER_TOKEN
    if tokens <= budget_tokens:
        return None
    size = len(task.encode("utf-8", "replace"))
    shown = f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{size / 1e3:.0f} KB"
    return (f"the task is {shown} (about {tokens:,} tokens), more than the context budget of "
            f"{budget_tokens:,} tokens, and would be sent whole with every step: save it as a "
            "file in the repository (say TASK.md) and give a short task that names it (\"do "
            "what TASK.md says\")")  # fmt: skip


def cap_text(text: str, max_chars: int, tool: str = "") -> str:
    """Keep the head and the tail of `text`, with the note of what was cut in between and how
    `tool` shows more."""
    return cut(text, max_chars, f"{BUDGET}; {how_to_see_more(tool)}", keep="both")


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
    images = [*message.images, *(i for r in message.tool_results for i in r.images)]
    return (
        len(message.content)
        + len(message.thinking)
        + sum(len(r.content) for r in message.tool_results)
        + sum(len(str(c.arguments)) for c in message.tool_calls)
        + IMAGE_CHARS * sum(bool(i.data) for i in images)
    )


def _elide(message: Message) -> Message:
    """The message with its bulk cut to stubs; a signed turn stays whole (its provider refuses
    it altered), its tool results are what shrink."""
    if message.turn is not None:
        return message
    content = _stub(message.content)
    results = tuple(
        replace(r, content=_stub(r.content), images=_stubbed(r.images))
        for r in message.tool_results
    )
    calls = tuple(
        replace(c, arguments={k: _stub_value(v) for k, v in c.arguments.items()})
        for c in message.tool_calls
    )
    return Message(message.role, content, tool_calls=calls, tool_results=results,
                   images=_stubbed(message.images))  # fmt: skip


def _stubbed(images: tuple[Image, ...]) -> tuple[Image, ...]:
    """The images as references only: providers are sent their text stub."""
    return tuple(replace(i, data="") for i in images)


def _stub(text: str) -> str:
    return cut(text, ELIDED_STUB_CHARS, f"elided from this old message {BUDGET}; {_AGAIN}")


def _stub_value(value: object) -> object:
    return _stub(value) if isinstance(value, str) else value


def recent_images(messages: Sequence[Message], limit: int = REQUEST_IMAGES_MAX) -> list[Message]:
    """`messages` with only the newest `limit` images still attached; older ones become
    references, which providers are sent as a text stub."""
    out, kept = [], 0
    for message in reversed(messages):
        results = []
        for result in reversed(message.tool_results):
            images, kept = _newest(result.images, kept, limit)
            results.append(replace(result, images=images))
        images, kept = _newest(message.images, kept, limit)
        out.append(replace(message, tool_results=tuple(reversed(results)), images=images))
    return out[::-1]


def _newest(images: tuple[Image, ...], kept: int, limit: int) -> tuple[tuple[Image, ...], int]:
    shown = []
    for image in reversed(images):
        if image.data and kept < limit:
            kept += 1
            shown.append(image)
        else:
            shown.append(replace(image, data=""))
    return tuple(reversed(shown)), kept


@dataclass
class ImageBudget:
    """What one step's observations have sent so far (STEP_IMAGES_MAX, STEP_IMAGE_MAX_BYTES)."""

    count: int = 0
    size: int = 0


def tool_images(
    output: str | ToolOutput, accepted: frozenset[str], model: str, budget: ImageBudget
) -> tuple[str, tuple[Image, ...]]:
    """A tool's observation text and the images the model is sent (those it takes, within the
    step's `budget`); each image left out gets a line saying why. Images are not redacted."""
    if isinstance(output, str):
        return output, ()
    images, notes = admit_images(output.images, accepted, model, budget)
    return "\n".join([output.text, *notes]), images


def admit_images(
    images: Sequence[Image], accepted: frozenset[str], model: str, budget: ImageBudget
) -> tuple[tuple[Image, ...], list[str]]:
    """The images the model is sent (typed by their bytes), and a line for each one that is
    not, saying why, for the observation."""
    sent: list[Image] = []
    notes = []
    for number, image in enumerate(images, 1):
        kind = sniff_image(image.data)
        if not accepted:
            why = f"the model {model or 'in use'} is not known to take images"
        elif kind is None:
            why = "its data is not a PNG, JPEG, GIF or WebP image"
        elif kind not in accepted:
            why = f"the model {model} does not take {kind}"
        elif image.size > IMAGE_MAX_BYTES:
            why = f"it has {image.size:,} bytes, over the limit of {IMAGE_MAX_BYTES:,} per image"
        elif budget.count >= STEP_IMAGES_MAX or budget.size + image.size > STEP_IMAGE_MAX_BYTES:
            why = (f"one step sends at most {STEP_IMAGES_MAX} images and "
                   f"{STEP_IMAGE_MAX_BYTES:,} bytes")  # fmt: skip
        else:
            budget.count += 1
            budget.size += image.size
            sent.append(replace(image, mime_type=kind))
            continue
        notes.append(f"[image {number} not shown to you: {why}]")
    return tuple(sent), notes


def sniff_image(data: str) -> str | None:
    """The image type base64 `data` holds, by its first bytes (a PNG, JPEG, GIF or WebP)."""
    try:
        head = base64.b64decode(data[:64], validate=True)
    except (binascii.Error, ValueError):
        return None
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return next((kind for magic, kind in _MAGIC if head.startswith(magic)), None)
