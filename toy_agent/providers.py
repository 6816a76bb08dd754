"""The LLM providers: one row each, that every other module reads.

A row holds what toy_agent knows about a provider apart from its wire format: the variables
that carry its key, base URL and API version, its default model, the model names that pick it,
its aliases, what its models cost, which of them take images, its SDK's module and loggers, and
its client class (named as "module:Class" and imported only when a client is built, so `--help`
imports no SDK). `.env` loading, child environments, the redactor, the CLI's choices and help,
batch workers' credentials, the price table and the clients themselves derive from here, so
adding a provider is its row plus its client class. This module imports nothing from toy_agent:
every layer may read it.

The prices are USD per million tokens, as the providers' pricing pages gave them in November
2025 (Anthropic: https://www.anthropic.com/pricing and https://docs.claude.com/en/docs/about-
claude/pricing; Google: https://ai.google.dev/gemini-api/docs/pricing; OpenAI:
https://openai.com/api/pricing); toy_agent.pricing says how they are applied and simplified.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toy_agent.messages import Usage

DEFAULT_PROVIDER = "claude"  # --llm-provider's default, and the pick for a name no row claims
EFFORTS = ("low", "medium", "high")  # --effort; each client maps it to its provider's control
REPLAY = "replay"  # the offline provider: plays a recording back, has no row


@dataclass(frozen=True)
class Price:
    """USD per million tokens. `cached_input` is what a prompt token read from the cache costs
    (None: no discount, the input price); `cache_write` what a prompt token written to the
    cache costs (None: the input price; Anthropic's 5-minute cache writes cost more)."""

    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None

    def cost(self, usage: Usage) -> float:
        """`usage.input_tokens` counts every prompt token, `cached_tokens` the part of them read
        from the cache, `cache_write_tokens` the part written to it; output tokens include
        thinking (toy_agent.messages.Usage)."""
        cached = min(usage.cached_tokens, usage.input_tokens)
        written = min(usage.cache_write_tokens, usage.input_tokens - cached)
        cached_price = self.input if self.cached_input is None else self.cached_input
        write_price = self.input if self.cache_write is None else self.cache_write
        return (
            (usage.input_tokens - cached - written) * self.input
            + cached * cached_price
            + written * write_price
            + usage.output_tokens * self.output
        ) / 1_000_000


def _no_images(model: str) -> frozenset[str]:
    return frozenset()


@dataclass(frozen=True)
class Provider:
    """One provider. `client` is its LlmClient class or "module:Class"; the class's `provider`
    attribute names this row. `models` is a regex matched at the start of a model name's last
    path segment, lower-cased ("openrouter/openai/gpt-5" -> "gpt-5"): a name it matches picks
    this provider. `image_types` gives the image types a model (lower-cased) takes.
    `keyless_base_url`: with a custom base URL no key is needed (local servers ignore it)."""

    name: str
    client: str | type[Any]
    default_model: str
    key_variables: tuple[str, ...]  # the first is preferred, and named first in messages
    base_url_variable: str
    default_base_url: str
    api_version_variable: str = ""
    models: str = ""
    aliases: tuple[str, ...] = ()
    prices: Mapping[str, Price] = field(default_factory=dict, hash=False)
    image_types: Callable[[str], frozenset[str]] = _no_images
    sdk_module: str = ""  # imported early (preload), checked by the client, a dependency
    loggers: tuple[str, ...] = ()  # the SDK's loggers, quietened to WARNING
    keyless_base_url: bool = False

    def client_class(self) -> type[Any]:
        """The client class, imported now if the row names it as "module:Class"."""
        if not isinstance(self.client, str):
            return self.client
        module, _, name = self.client.partition(":")
        cls: type[Any] = getattr(importlib.import_module(module), name)
        return cls

    def key_names(self) -> str:
        """The key variables as messages name them: "GEMINI_API_KEY (or GOOGLE_API_KEY)"."""
        first, *others = self.key_variables
        return first + "".join(f" (or {name})" for name in others)

    def claims(self, model: str) -> bool:
        """Whether the model name says it is this provider's."""
        return bool(self.models) and re.match(self.models, _short_name(model)) is not None


def _short_name(model: str) -> str:
    return model.lower().rsplit("/", 1)[-1]


# --- images: which models take them ----------------------------------------------------------

_COMMON_IMAGES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
_GEMINI_IMAGES = frozenset({"image/png", "image/jpeg", "image/webp"})
# Chat Completions servers serve any model; these families take images (OpenAI's own, and the
# open vision models local servers run). Any other name is taken to be text-only.
_OPENAI_VISION = re.compile(
    r"gpt-4o|gpt-4\.1|gpt-4\.5|gpt-4-turbo|gpt-4-vision|gpt-5|(^|/)o1(?!-mini|-preview)|"
    r"(^|/)o3(?!-mini)|(^|/)o4|claude-(3|sonnet|opus|haiku)|gemini|llava|vision|[-_.]vl\b|"
    r"pixtral|gemma-?3|llama-?4|minicpm-v|moondream|bakllava"
)


def _claude_images(model: str) -> frozenset[str]:
    """Every Claude 3+ model."""
    return frozenset() if re.match(r"claude-(2|instant)", model) else _COMMON_IMAGES


def _gemini_images(model: str) -> frozenset[str]:
    return _GEMINI_IMAGES if "gemini" in model else frozenset()


def _openai_images(model: str) -> frozenset[str]:
    """The known vision families only: the conservative rule for any server's models."""
    return _COMMON_IMAGES if _OPENAI_VISION.search(model) else frozenset()


# --- the built-in rows -------------------------------------------------------------------------

# Each entry: input, output, cache read[, 5-minute cache write] per million tokens, with where
# and when it was read. A price change is one line.
_ANTHROPIC_PRICING = "anthropic.com/pricing, 2025-11"
_SONNET = Price(3.00, 15.00, 0.30, 3.75)  # _ANTHROPIC_PRICING
_OPUS_4 = Price(15.00, 75.00, 1.50, 18.75)  # _ANTHROPIC_PRICING

CLAUDE = Provider(
    name="claude",
    client="toy_agent.llm:ClaudeLlmClient",
    default_model="claude-sonnet-5-5",
    key_variables=("ANTHROPIC_API_KEY",),
    base_url_variable="ANTHROPIC_BASE_URL",
    default_base_url="https://api.anthropic.com",
    models=r"claude",
    aliases=("anthropic",),
    prices={
        # The default: platform.claude.com/docs/en/about-claude/pricing and the Sonnet 5.5
        # migration guide, 2026-11 ($2 / $10; cache writes $2.50, reads $0.10; the model's
        # overview page still said $0.20 for reads then).
        "claude-sonnet-5-5": Price(2.00, 10.00, 0.10, 2.50),
        "claude-sonnet-4-5": _SONNET,  # _ANTHROPIC_PRICING
        "claude-sonnet-4": _SONNET,  # _ANTHROPIC_PRICING
        "claude-sonnet-4-0": _SONNET,  # _ANTHROPIC_PRICING
        "claude-3-7-sonnet": _SONNET,  # _ANTHROPIC_PRICING
        "claude-opus-4-5": Price(5.00, 25.00, 0.50, 6.25),  # _ANTHROPIC_PRICING
        "claude-opus-4-1": _OPUS_4,  # _ANTHROPIC_PRICING
        "claude-opus-4": _OPUS_4,  # _ANTHROPIC_PRICING
        "claude-opus-4-0": _OPUS_4,  # _ANTHROPIC_PRICING
        "claude-haiku-4-5": Price(1.00, 5.00, 0.10, 1.25),  # _ANTHROPIC_PRICING
        "claude-3-5-haiku": Price(0.80, 4.00, 0.08, 1.00),  # _ANTHROPIC_PRICING
    },
    image_types=_claude_images,
    sdk_module="anthropic",
    loggers=("anthropic",),
)
GEMINI = Provider(
    name="gemini",
    client="toy_agent.llm:GeminiLlmClient",
    default_model="gemini-2.5-flash",
    key_variables=("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    base_url_variable="GOOGLE_GEMINI_BASE_URL",
    default_base_url="https://generativelanguage.googleapis.com/",
    api_version_variable="GOOGLE_GENAI_API_VERSION",  # google-genai's own variable
    models=r"gemini",
    aliases=("google",),
    prices={  # paid tier, text prompts of at most 200k tokens; thinking billed as output
        "gemini-2.5-pro": Price(1.25, 10.00, 0.125),  # ai.google.dev/pricing, 2025-11
        "gemini-2.5-flash": Price(0.30, 2.50, 0.03),  # the default; same page, 2025-11
        "gemini-2.5-flash-lite": Price(0.10, 0.40, 0.01),  # same page, 2025-11
        "gemini-2.0-flash": Price(0.10, 0.40, 0.025),  # same page, 2025-11
    },
    image_types=_gemini_images,
    sdk_module="google.genai",
    loggers=("google_genai", "google"),
)
OPENAI = Provider(
    name="openai",
    client="toy_agent.llm:OpenAICompatibleLlmClient",
    default_model="gpt-5-mini",
    key_variables=("OPENAI_API_KEY",),
    base_url_variable="OPENAI_BASE_URL",
    default_base_url="https://api.openai.com/v1",
    models=r"gpt-|chatgpt|codex|o\d(\b|-)",  # gpt-5, o3-mini, o4
    prices={  # standard tier; reasoning tokens billed as output
        "gpt-5": Price(1.25, 10.00, 0.125),  # openai.com/api/pricing, 2025-11
        "gpt-5-mini": Price(0.25, 2.00, 0.025),  # the default; same page, 2025-11
        "gpt-5-nano": Price(0.05, 0.40, 0.005),  # same page, 2025-11
        "gpt-4.1": Price(2.00, 8.00, 0.50),  # same page, 2025-11
        "gpt-4.1-mini": Price(0.40, 1.60, 0.10),  # same page, 2025-11
        "gpt-4.1-nano": Price(0.10, 0.40, 0.025),  # same page, 2025-11
        "gpt-4o": Price(2.50, 10.00, 1.25),  # same page, 2025-11
        "gpt-4o-2024-05-13": Price(5.00, 15.00),  # the first snapshot, priced higher; 2025-11
        "gpt-4o-mini": Price(0.15, 0.60, 0.075),  # same page, 2025-11
    },
    image_types=_openai_images,
    sdk_module="openai",
    loggers=("openai",),
    keyless_base_url=True,  # Ollama, vLLM, llama.cpp
)

_ROWS: dict[str, Provider] = {row.name: row for row in (CLAUDE, GEMINI, OPENAI)}
PROVIDERS: Mapping[str, Provider] = MappingProxyType(_ROWS)  # live: includes registered rows


def register_provider(row: Provider) -> None:
    """Add a provider to the table, for this process: the CLI's choices, `.env` loading, the
    redactor, batch credentials and prices see it from now on. Raises ValueError when its name
    or an alias is taken (our caller's mistake, not the user's)."""
    taken = {REPLAY, *_ROWS, *aliases()}
    clash = sorted(taken & {row.name, *row.aliases})
    if clash:
        raise ValueError(f"provider name already taken: {', '.join(clash)}")
    if not row.key_variables:
        raise ValueError(f"provider {row.name!r} names no key variable")
    _ROWS[row.name] = row


def unregister_provider(name: str) -> None:
    """Remove a row register_provider added (a test's, say)."""
    _ROWS.pop(name, None)


def aliases() -> dict[str, str]:
    """Other names for providers: alias -> name."""
    return {alias: row.name for row in _ROWS.values() for alias in row.aliases}


def canonical_name(name: str) -> str:
    """The provider's own name for `name` or one of its aliases; anything else unchanged."""
    return aliases().get(name, name)


def provider_for_model(model: str | None) -> Provider | None:
    """The row whose model names `model` matches (the first, in table order); None when no row
    claims it."""
    return next((row for row in _ROWS.values() if model and row.claims(model)), None)


def saved_base_url(url: object) -> str | None:
    """A base URL as a session may keep it: None when it could carry a secret (a user name or
    password, a query string such as Azure's `?api-key=`), so a key never reaches the file."""
    if not isinstance(url, str) or not url:
        return None
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return None if parts.username or parts.password or parts.query else url


def key_variables() -> tuple[str, ...]:
    """Every provider's key variables."""
    return tuple(name for row in _ROWS.values() for name in row.key_variables)


def base_url_variables() -> tuple[str, ...]:
    return tuple(row.base_url_variable for row in _ROWS.values() if row.base_url_variable)


def endpoint_variables() -> tuple[str, ...]:
    """Where requests go: the base URLs, and the API versions in their path."""
    versions = (row.api_version_variable for row in _ROWS.values() if row.api_version_variable)
    return (*base_url_variables(), *versions)


def sdk_loggers() -> tuple[str, ...]:
    return tuple(name for row in _ROWS.values() for name in row.loggers)


def sdk_packages() -> frozenset[str]:
    """The SDKs' top-level package names: one missing is a setup problem, not our bug."""
    return frozenset(row.sdk_module.split(".")[0] for row in _ROWS.values() if row.sdk_module)


def prices() -> dict[str, Price]:
    """Every provider's price table, model name -> price."""
    return {model: price for row in _ROWS.values() for model, price in row.prices.items()}


def image_types(provider: str, model: str) -> frozenset[str]:
    """The image types `model` of `provider` takes (none for an unknown provider)."""
    row = _ROWS.get(provider)
    return row.image_types(model.lower()) if row else frozenset()
