"""What a run costs: a price table per model and the meter the agent consults before each call.

The figures are USD per million tokens, in each provider's row (toy_agent.providers), each
with its source and date in a comment: the providers' pricing pages of November 2025, and
claude-sonnet-5-5's of November 2026. Check them before relying on a cost, and pass
--price-input/--price-output to override them.

Simplifications, all on the side of the standard tier:
- Anthropic's cache writes are priced at the 5-minute cache's price (the row's `cache_write`),
  the only cache toy_agent writes; thinking tokens are output tokens, priced as output.
- Gemini 2.5 Pro charges more for prompts above 200k tokens; the table holds the <= 200k prices
  (the default --context-budget keeps prompts at about 100k tokens).
- Batch and priority tiers, long-context tiers and cache storage fees are not modelled.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from toy_agent.messages import Message, Usage
from toy_agent.providers import Price, prices  # Price lives with the rows that hold prices

PRICES_AS_OF = "2025-11"
CHARS_PER_TOKEN = 4  # as toy_agent.budget estimates tokens


# What may follow a table name and still be that model: a dated or numbered snapshot
# (claude-sonnet-4-5-20250929, gpt-4o-2024-08-06, gemini-2.0-flash-001) or "-latest".
# Anything else (claude-opus-4-6, gpt-5-codex) is another model, with a price of its own.
_SNAPSHOT = re.compile(r"(-\d{3,}(-\d+)*|-latest)?")


def price_for(model: str) -> Price | None:
    """The table's price for `model` or one of its dated snapshots; None when unknown."""
    name = model.strip().lower().removeprefix("models/")  # Gemini's resource-style names
    table = prices()
    for known in sorted(table, key=len, reverse=True):
        if name.startswith(known) and _SNAPSHOT.fullmatch(name[len(known) :]):
            return table[known]
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
    """The meter for `model`: the table's price, or --price-input/--price-output over it
    (the table's cache read and cache write prices stay), and the --max-cost `limit`.
    Raises PriceError when a limit or one price has no price to apply to."""
    price = price_for(model)
    if price_input is not None or price_output is not None:
        if price is None and (price_input is None or price_output is None):
            missing = "--price-input" if price_input is None else "--price-output"
            raise PriceError(f"no price is known for model {model!r}: give {missing} too")
        base = price or Price(price_input or 0.0, price_output or 0.0)
        # Only what the flags name changes: the cache prices (a read, Anthropic's write)
        # stay the table's, whichever of the two is given.
        price = replace(
            base,
            input=base.input if price_input is None else price_input,
            output=base.output if price_output is None else price_output,
        )
    if limit is not None and price is None:
        raise PriceError(
            f"--max-cost needs a price, and none is known for model {model!r}: "
            "pass --price-input and --price-output (USD per million tokens)"
        )
    return CostMeter(price, limit)
