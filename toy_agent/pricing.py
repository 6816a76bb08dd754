"""What a run costs: a price table per model and the meter the agent consults before each call.

The figures are USD per million tokens, as the providers' pricing pages gave them in November
2025 (Anthropic: https://www.anthropic.com/pricing and https://docs.claude.com/en/docs/about-
claude/pricing; Google: https://ai.google.dev/gemini-api/docs/pricing; OpenAI:
https://openai.com/api/pricing). They were written down from those pages as known then and were
NOT re-checked online from the machine this was written on (it has no network): check them
before relying on a cost, and pass --price-input/--price-output to override them.

Simplifications, all on the side of the standard tier:
- Anthropic bills cache *writes* at 1.25x the input price; `Usage` has no separate count for
  them (they are part of `input_tokens`), so they are priced as plain input: a slight
  under-estimate on the first call of a long run.
- Gemini 2.5 Pro charges more for prompts above 200k tokens; the table holds the <= 200k prices
  (the default --context-budget keeps prompts at about 100k tokens).
- Batch and priority tiers, long-context tiers and cache storage fees are not modelled.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from toy_agent.messages import Message, Usage

PRICES_AS_OF = "2025-11"
CHARS_PER_TOKEN = 4  # as toy_agent.context estimates tokens


@dataclass(frozen=True)
class Price:
    """USD per million tokens. `cached_input` is what a prompt token read from the cache costs
    (None: no discount, the input price)."""

    input: float
    output: float
    cached_input: float | None = None

    def cost(self, usage: Usage) -> float:
        """`usage.input_tokens` counts every prompt token, `cached_tokens` the part of them read
        from the cache (toy_agent.messages.Usage)."""
        cached = min(usage.cached_tokens, usage.input_tokens)
        cached_price = self.input if self.cached_input is None else self.cached_input
        return (
            (usage.input_tokens - cached) * self.input
            + cached * cached_price
            + usage.output_tokens * self.output
        ) / 1_000_000


_SONNET = Price(3.00, 15.00, 0.30)
_OPUS_4 = Price(15.00, 75.00, 1.50)

PRICES: dict[str, Price] = {
    # Anthropic. The default, claude-sonnet-5-5, is not on the pricing page as known here: its
    # price is ASSUMED to be the Sonnet family's (Sonnet 4 and 4.5: $3 / $15, cache reads $0.30).
    "claude-sonnet-5-5": _SONNET,
    "claude-sonnet-4-5": _SONNET,
    "claude-sonnet-4": _SONNET,
    "claude-sonnet-4-0": _SONNET,
    "claude-3-7-sonnet": _SONNET,
    "claude-opus-4-5": Price(5.00, 25.00, 0.50),
    "claude-opus-4-1": _OPUS_4,
    "claude-opus-4": _OPUS_4,
    "claude-opus-4-0": _OPUS_4,
    "claude-haiku-4-5": Price(1.00, 5.00, 0.10),
    "claude-3-5-haiku": Price(0.80, 4.00, 0.08),
    # Google Gemini, paid tier, text prompts of at most 200k tokens.
    "gemini-2.5-pro": Price(1.25, 10.00, 0.125),
    "gemini-2.5-flash": Price(0.30, 2.50, 0.03),  # the default
    "gemini-2.5-flash-lite": Price(0.10, 0.40, 0.01),
    "gemini-2.0-flash": Price(0.10, 0.40, 0.025),
    # OpenAI, standard tier.
    "gpt-5": Price(1.25, 10.00, 0.125),
    "gpt-5-mini": Price(0.25, 2.00, 0.025),  # the default
    "gpt-5-nano": Price(0.05, 0.40, 0.005),
    "gpt-4.1": Price(2.00, 8.00, 0.50),
    "gpt-4.1-mini": Price(0.40, 1.60, 0.10),
    "gpt-4.1-nano": Price(0.10, 0.40, 0.025),
    "gpt-4o": Price(2.50, 10.00, 1.25),
    "gpt-4o-2024-05-13": Price(5.00, 15.00),  # the first gpt-4o snapshot, priced higher
    "gpt-4o-mini": Price(0.15, 0.60, 0.075),
}

# What may follow a table name and still be that model: a dated or numbered snapshot
# (claude-sonnet-4-5-20250929, gpt-4o-2024-08-06, gemini-2.0-flash-001) or "-latest".
# Anything else (claude-opus-4-6, gpt-5-codex) is another model, with a price of its own.
_SNAPSHOT = re.compile(r"(-\d{3,}(-\d+)*|-latest)?")


def price_for(model: str) -> Price | None:
    """The table's price for `model` or one of its dated snapshots; None when unknown."""
    name = model.strip().lower().removeprefix("models/")  # Gemini's resource-style names
    for known in sorted(PRICES, key=len, reverse=True):
        if name.startswith(known) and _SNAPSHOT.fullmatch(name[len(known) :]):
            return PRICES[known]
    return None


class CostLimitReached(Exception):
    """The next LLM call would take the spend past the limit; the run stops before it."""


class CostMeter:
    """Adds up what the calls cost and stops a run before the call that would exceed `limit`.

    The next call is estimated to cost what the last one did; before the first call, what its
    prompt (system prompt + messages, ~4 characters a token) costs at the input price. One
    meter may serve several runs (an interactive session): the limit is on their total.
    """

    def __init__(self, price: Price | None, limit: float | None = None):
        if limit is not None and price is None:
            raise ValueError("a cost limit needs a price")
        self.price = price
        self.limit = limit
        self.spent = 0.0
        self.last: float | None = None

    @property
    def known(self) -> bool:
        return self.price is not None

    def check(self, system_prompt: str, messages: Sequence[Message]) -> None:
        """Raise CostLimitReached when the call about to send `messages` would likely go over."""
        if self.limit is None or self.price is None:
            return
        estimate = self.last
        if estimate is None:
            chars = len(system_prompt) + sum(_chars(m) for m in messages)
            estimate = chars / CHARS_PER_TOKEN * self.price.input / 1_000_000
        if self.spent + estimate > self.limit:
            raise CostLimitReached(
                f"stopped before the next LLM call: at about ${estimate:.4f} it would take the "
                f"spend (${self.spent:.4f}) past the cost limit of ${self.limit:.4f}"
            )

    def add(self, usage: Usage) -> None:
        if self.price is None:
            return
        self.last = self.price.cost(usage)
        self.spent += self.last

    def since(self, spent_before: float) -> float | None:
        """What was spent since `spent` read `spent_before`; None without a price."""
        return round(self.spent - spent_before, 6) if self.price is not None else None


def _chars(message: Message) -> int:
    return (
        len(message.content)
        + sum(len(r.content) for r in message.tool_results)
        + sum(len(str(c.arguments)) for c in message.tool_calls)
    )


class PriceError(ValueError):
    """A cost limit or price flag that cannot be applied to the model (a usage error)."""


def meter_for(
    model: str,
    limit: float | None = None,
    price_input: float | None = None,
    price_output: float | None = None,
) -> CostMeter:
    """The meter for `model`: the table's price, or --price-input/--price-output over it,
    and the --max-cost `limit`. Raises PriceError when a limit or one price has no price to
    apply to."""
    price = price_for(model)
    if price_input is not None or price_output is not None:
        if price is None and (price_input is None or price_output is None):
            missing = "--price-input" if price_input is None else "--price-output"
            raise PriceError(f"no price is known for model {model!r}: give {missing} too")
        base = price or Price(price_input or 0.0, price_output or 0.0)
        price = Price(
            base.input if price_input is None else price_input,
            base.output if price_output is None else price_output,
            base.cached_input,
        )
    if limit is not None and price is None:
        raise PriceError(
            f"--max-cost needs a price, and none is known for model {model!r}: "
            "pass --price-input and --price-output (USD per million tokens)"
        )
    return CostMeter(price, limit)
