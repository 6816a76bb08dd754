"""LLM clients: one small seam (`LlmClient.call_llm`) between the agent and each provider.

Provider SDKs are imported by a client's first call (its constructor only checks that the SDK
is installed), never at module import, so `--help` and the replay provider stay instant. Each
provider is three small pure functions (tools, messages -> wire dicts; wire dict ->
`LlmResponse`) around one SDK call; retries, error messages and logging are shared by
`_ProviderClient`.
"""

from __future__ import annotations

import base64
import contextlib
import email.utils
import functools
import importlib
import importlib.util
import json
import logging
import os
import random
import re
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from toy_agent.abandon import DeadlinePassed, abandonable
from toy_agent.messages import (
    FailedAttempt,
    Image,
    LlmResponse,
    Message,
    RetryCallback,
    SignedTurn,
    StopReason,
    TextCallback,
    ToolCall,
    ToolSpec,
    Usage,
)
from toy_agent.providers import EFFORTS, GEMINI, PROVIDERS, Provider, image_types
from toy_agent.record import RecordError, read_trajectory
from toy_agent.redaction import mask_key
from toy_agent.settings import ModelSettings

logger = logging.getLogger(__name__)


class LlmError(Exception):
    """The provider failed in a way the agent cannot recover from (exit code 3).

    `status` is the HTTP status when there was one; the message names the fix. `attempts`:
    each attempt of the call that failed, the last one included, when the client records them.
    """

    attempts: tuple[FailedAttempt, ...] = ()

    def __init__(self, provider: str, message: str, status: int | None = None):
        self.provider = provider
        self.status = status
        prefix = f"{provider} API error" + (f" {status}" if status else "")
        super().__init__(f"{prefix}: {message}")


class LlmConfigError(Exception):
    """A user configuration mistake found while building a client (exit code 2)."""


class LlmClient(ABC):
    """The seam between the agent and a model.

    Implementations convert `messages` to their provider's wire format, call it (retrying
    transient failures), and return the text, any native tool calls, usage and stop reason.
    `tools` is given only in native tool-calling mode. `on_text` receives text deltas when
    the caller wants streaming; clients that cannot stream may ignore it. `on_retry`, given
    only with `on_text`, hears that an attempt failed and another starts: the text streamed
    so far is void. Clients that never retry may ignore it.
    """

    provider: str = "llm"
    model: str = ""
    base_url: str | None = None  # the server the client calls, when it has one
    effort: str | None = None  # --effort: low, medium, high
    model_options: Mapping[str, Any] = MappingProxyType({})  # --model-option NAME=VALUE

    @property
    def image_types(self) -> frozenset[str]:
        """The image types the model takes; none unless the model is known to (a text-only
        model would reject the whole request)."""
        return model_image_types(self.provider, self.model)

    @abstractmethod
    def call_llm(
        self,
        system_prompt: str,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] | None = None,
        on_text: TextCallback | None = None,
        on_retry: RetryCallback | None = None,
    ) -> LlmResponse: ...


class AdaptedClient(LlmClient):
    """Any client as a whole LlmClient: the agent takes its client through this once, where
    it enters (`ReactAgent(llm_client)`), so nothing after asks what a client has. A client
    written to the original spec answers with text and may have no model, provider or image
    types (then it is sent no images); `client` is the one given, whose other attributes
    read through."""

    def __init__(self, client: Any):
        self.client = client
        self.provider = getattr(client, "provider", type(client).__name__)
        self.model = getattr(client, "model", "") or ""
        self.base_url = getattr(client, "base_url", None)
        self.effort = getattr(client, "effort", None)
        self.model_options = dict(getattr(client, "model_options", None) or {})
        self._image_types = frozenset(getattr(client, "image_types", ()))

    @classmethod
    def of(cls, client: Any) -> AdaptedClient:
        return client if isinstance(client, AdaptedClient) else cls(client)

    @property
    def image_types(self) -> frozenset[str]:
        return self._image_types

    def call_llm(
        self,
        system_prompt: str,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] | None = None,
        on_text: TextCallback | None = None,
        on_retry: RetryCallback | None = None,
    ) -> LlmResponse:
        given = {"tools": tools, "on_text": on_text, "on_retry": on_retry}
        asked = {name: value for name, value in given.items() if value is not None}
        return LlmResponse.of(self.client.call_llm(system_prompt, messages, **asked))

    def __getattr__(self, name: str) -> Any:  # only what the adapter itself does not have
        if name.startswith("__") or "client" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["client"], name)


class ReplayDiverged(LlmError):
    """A replayed run's tools answered differently from the recording, so the recorded replies
    no longer fit: the run stops (outcome replay_diverged) instead of pretending."""

    def __init__(self, message: str):
        Exception.__init__(self, message)
        self.provider, self.status = "replay", None


class ReplayLlmClient(LlmClient):
    """Replays the LLM responses recorded in a trajectory file: no key, no network.

    It answers in order. Before each reply after the first it checks that the observations
    it was sent match the recorded ones (timings aside): at the first difference it raises
    ReplayDiverged, unless `lenient`, which replays whatever happens. `repo` is the repository
    the replay runs in: where an observation names it, the recording named its own (a replay
    on a copy elsewhere), and the two are compared as the same.
    """

    provider = "replay"

    def __init__(
        self, trajectory_path: str | Path, *, lenient: bool = False, repo: str | Path | None = None
    ):
        path = Path(trajectory_path)
        try:
            recording = read_trajectory(path)
        except FileNotFoundError:
            raise LlmConfigError(f"replay file not found: {path}") from None
        except RecordError as exc:
            reason = f"{exc.where}: {exc.problem}" if exc.where else exc.problem
            raise LlmConfigError(
                f"{path} is not a toy_agent trajectory ({reason}); record one with "
                "--trajectory FILE"
            ) from None
        self._responses = [step.response for step in recording.steps]
        self._observations = [[o.content for o in step.observations] for step in recording.steps]
        self.model = recording.setting("model") or "replay"
        image_types = recording.settings.get("image_types")
        self._image_types = frozenset(map(str, image_types if isinstance(image_types, list)
                                               else ()))  # fmt: skip
        self.lenient = lenient
        recorded_repo = recording.settings.get("repo")
        self._recorded_repo = recorded_repo if isinstance(recorded_repo, str) else None
        self.repo = repo  # set by the caller that knows it, when not given here
        self._next = 0

    @property
    def image_types(self) -> frozenset[str]:
        """The recorded model's: the replayed run sees the observations the recording saw."""
        return self._image_types

    def call_llm(
        self,
        system_prompt: str,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] | None = None,
        on_text: TextCallback | None = None,
        on_retry: RetryCallback | None = None,
    ) -> LlmResponse:
        if self._next >= len(self._responses):
            count = len(self._responses)
            raise ReplayDiverged(
                f"the replay ran past the end of its recording: it has {count} "
                f"{'reply' if count == 1 else 'replies'} and the run asked for another (the last "
                f"did not end it); pass --max-iterations {count} to stop where the recording stops"
            )
        if self._next and not self.lenient:
            self._check_observations(self._next, messages[-1] if messages else None)
        response = self._responses[self._next]
        self._next += 1
        if on_text and response.text:
            on_text(response.text)
        return response

    def _check_observations(self, step: int, sent: Message | None) -> None:
        """Step `step` (counting from 1) ended with the recorded observations in the message
        sent now; the first one that is not there, timings aside, means the run diverged."""
        # The repository's root, where an observation names it, is the same place in both
        # runs (when both are known: the recording's settings and the caller say where).
        known = self._recorded_repo and self.repo is not None
        roots = (self._recorded_repo, str(self.repo)) if known else (None, None)
        now = _normalise("" if sent is None else sent.content + "".join(
            r.content for r in sent.tool_results), roots[1])  # fmt: skip
        for recorded in (_normalise(o, roots[0]) for o in self._observations[step - 1]):
            if recorded not in now:
                line, then, today = first_difference(recorded, now)
                raise ReplayDiverged(
                    f"the replay left the recording at step {step}: the tools answered "
                    f"differently, first in line {line} of the observation. Recorded: "
                    f"{then!r}; now: {today!r} (--replay-lenient replays anyway)",
                )


def first_difference(recorded: str, now: str, context: int = 40) -> tuple[int, str, str]:
    """Where `recorded` stops being found in `now`: its line number, and the line of each at
    that point, cut to `context` characters either side of it (`…` marks a cut). `now` is
    the whole message sent, so the point in it is where the longest start of `recorded`
    that it holds ends."""
    low, high = 0, len(recorded)
    while low < high:  # the longest start of recorded found in now
        middle = (low + high + 1) // 2
        if recorded[:middle] in now:
            low = middle
        else:
            high = middle - 1
    at_now = now.find(recorded[:low]) + low if low else 0
    line = recorded.count("\n", 0, low) + 1
    return line, _around(recorded, low, context), _around(now, at_now, context)


def _around(text: str, point: int, context: int) -> str:
    """The line of `text` holding `point`, cut to `context` characters either side."""
    start = text.rfind("\n", 0, point) + 1
    end = text.find("\n", point)
    end = len(text) if end < 0 else end
    left, right = max(start, point - context), min(end, point + context)
    return f"{'…' if left > start else ''}{text[left:right]}{'…' if right < end else ''}"


_TIMING = re.compile(r"\b\d+(?:\.\d+)?s\b")


def _normalise(text: str, repo: str | None = None) -> str:
    """`text` with its timings, and the repository root `repo` where it names it, masked."""
    if repo and repo.strip("/"):  # "/" would be every slash
        text = text.replace(repo.rstrip("/"), "<repo>")
    return _TIMING.sub("<t>s", text)


# --- settings -------------------------------------------------------------------------------


def parse_model_options(pairs: Iterable[str]) -> dict[str, Any]:
    """--model-option KEY=VALUE pairs as the request's fields: a value that reads as JSON
    (0.2, true, {"a": 1}) is that JSON, anything else the string. Raises LlmConfigError."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise LlmConfigError(f"--model-option {pair!r}: expected KEY=VALUE (temperature=0.2)")
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
    return options


def check_effort(effort: str | None) -> str | None:
    if effort is not None and effort not in EFFORTS:
        raise LlmConfigError(f"effort {effort!r}: use one of {', '.join(EFFORTS)}")
    return effort


# Local OpenAI-compatible servers (Ollama, vLLM, llama.cpp) ignore the key but the SDK wants one.
LOCAL_SERVER_KEY = "not-needed"
# Transient statuses: request timeout, rate limit, server errors, Anthropic's 529 "overloaded".
RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504, 529})
MAX_RETRY_WAIT = 60.0  # seconds; caps both Retry-After and the backoff
_EMPTY = "(empty)"  # providers reject empty text blocks
_EPHEMERAL = {"type": "ephemeral"}
_NO_PARAMETERS = {"type": "object", "properties": {}}


def resolve_settings(
    provider: str, api_key: str | None, base_url: str | None, environ: Mapping[str, str]
) -> tuple[str, str]:
    """The key and base URL for `provider`: explicit values win over the environment."""
    row = PROVIDERS[provider]
    custom_url = base_url or environ.get(row.base_url_variable, "").strip() or None
    names = row.key_variables
    key = (api_key or next((environ[n] for n in names if environ.get(n)), "")).strip()
    if not key and row.keyless_base_url and custom_url:
        key = LOCAL_SERVER_KEY
    if not key:
        others = [p for p, other in PROVIDERS.items()
                  if p != provider and any(map(environ.get, other.key_variables))]  # fmt: skip
        hint = f", or use --llm-provider {others[0]} (its key is set)" if others else ""
        raise LlmConfigError(f"{row.key_names()} is not set: export it or put it in .env{hint}")
    return key, custom_url or row.default_base_url


def client_for(
    provider: str,
    *,
    model: str | None = None,
    base_url: str | None = None,
    replay: str | None = None,
    replay_lenient: bool = False,
    max_retries: int = ModelSettings.max_retries,
    timeout: float = ModelSettings.timeout,
    environ: Mapping[str, str] = os.environ,
    effort: str | None = None,
    model_options: Mapping[str, Any] | None = None,
    show_thinking: bool = False,
    openai_api: str = ModelSettings.openai_api,
) -> LlmClient:
    """The client the command-line settings ask for: the replay of a recording, or a real
    provider (keys and base URLs from `environ`). Mistakes raise LlmConfigError."""
    if provider == "replay":
        if not replay:
            raise LlmConfigError("--llm-provider replay needs --replay FILE (a trajectory)")
        return ReplayLlmClient(replay, lenient=replay_lenient)
    if replay:
        raise LlmConfigError(f"--replay is for --llm-provider replay, not {provider}")
    return create_llm_client(
        provider,
        model=model,
        base_url=base_url,
        max_retries=max_retries,
        timeout=timeout,
        environ=environ,
        effort=effort,
        model_options=model_options,
        show_thinking=show_thinking,
        openai_api=openai_api,
    )


def create_llm_client(
    provider: str,
    *,
    model: str | None = None,
    base_url: str | None = None,
    max_retries: int = ModelSettings.max_retries,
    timeout: float = ModelSettings.timeout,
    environ: Mapping[str, str] = os.environ,
    effort: str | None = None,
    model_options: Mapping[str, Any] | None = None,
    show_thinking: bool = False,
    openai_api: str = ModelSettings.openai_api,
) -> LlmClient:
    """Build the client for a real provider, reading keys and base URLs from `environ` only.
    `openai_api` "responses" picks OpenAI's Responses API over Chat Completions."""
    if provider not in PROVIDERS:
        names = ", ".join(PROVIDERS)
        raise LlmConfigError(f"unknown LLM provider {provider!r}: use one of {names}")
    key, url = resolve_settings(provider, None, base_url, environ)
    cls = PROVIDERS[provider].client_class()
    if openai_api == "responses":
        if provider != "openai":
            raise LlmConfigError(f"--openai-api responses is for --llm-provider openai, not "
                                 f"{provider}")  # fmt: skip
        cls = OpenAIResponsesLlmClient
    client: LlmClient = cls(
        key, model, base_url=url, max_retries=max_retries, timeout=timeout, environ=environ,
        effort=effort, model_options=model_options, show_thinking=show_thinking,
    )  # fmt: skip
    return client


# --- retries and errors ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Failure:
    """A provider failure reduced to what the retry loop and the error message need."""

    message: str
    status: int | None = None  # None: no HTTP error status (connection reset, timeout, stream)
    retry_after: float | None = None
    retryable: bool = True
    hint: str = ""  # the fix, when the status does not imply it


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds the server asked us to wait (`retry-after-ms`, `Retry-After` seconds or date)."""
    headers = headers or {}
    with contextlib.suppress(KeyError, TypeError, ValueError):
        return max(0.0, float(headers["retry-after-ms"]) / 1000)
    value = headers.get("retry-after") or ""
    with contextlib.suppress(ValueError):
        return max(0.0, float(value))
    with contextlib.suppress(TypeError, ValueError):
        return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    return None


def retry_delay(attempt: int, retry_after: float | None = None, base: float = 1.0) -> float:
    """Wait before retry `attempt + 1`: what the server asked, else exponential backoff + jitter."""
    if retry_after is not None:
        return min(retry_after, MAX_RETRY_WAIT)
    return min(base * 2**attempt, MAX_RETRY_WAIT) * random.uniform(0.5, 1.0)


def _one_line(value: object, limit: int = 300) -> str:
    text = " ".join(str(value).split()) or type(value).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _status_failure(status: int, body: object, fallback: object, headers: Any) -> _Failure:
    """An HTTP error; all three providers nest the human message in `error.message`."""
    error = body.get("error", body) if isinstance(body, dict) else body
    message = _one_line((error.get("message") if isinstance(error, dict) else error) or fallback)
    if status < 400:  # an error event inside a 200 stream: the server failed mid-answer
        return _Failure(f"stream error: {message}")
    if isinstance(error, dict) and "insufficient_quota" in (error.get("code"), error.get("type")):
        return _Failure(
            message, status, retryable=False, hint="check the account's plan and billing"
        )
    retry_after = parse_retry_after(headers)
    return _Failure(message, status, retry_after, status in RETRYABLE_STATUSES)


def _gemini_retry_delay(body: object) -> float | None:
    """Gemini puts its Retry-After in the body: error.details[].retryDelay, e.g. "37s"."""
    error = body.get("error", body) if isinstance(body, dict) else None
    for item in (error.get("details") if isinstance(error, dict) else None) or []:
        delay = item.get("retryDelay") if isinstance(item, dict) else None
        if isinstance(delay, str) and delay.endswith("s"):
            with contextlib.suppress(ValueError):
                return max(0.0, float(delay[:-1]))
    return None


class _StreamCut(Exception):
    """A streamed reply ended before the provider said it was complete: a cut connection,
    retried like one, never taken as the whole reply."""


# What a body that is not the API's JSON (an HTML page, JSON nested thousands deep) raises
# while the SDK or we read it.
_MALFORMED = (KeyError, IndexError, TypeError, ValueError, AttributeError, RecursionError)


class _NotTheApi(Exception):
    """A 200 whose body is not the API's JSON (an HTML login or error page from a proxy)."""

    def __init__(self, body: str):
        super().__init__(body[:200])
        self.body = body


def _page_failure(body: str, base_url: str) -> _Failure:
    """What the server answered instead of the API, said in the user's words."""
    title = re.search(r"<title[^>]*>(.*?)</title>", body, re.I | re.S)
    page = "an HTML page" if body.lstrip()[:1] == "<" else "text"
    named = f' ("{_one_line(title[1], 80)}")' if title and title[1].strip() else ""
    return _Failure(f"{base_url} answered with {page}{named}, not the API's JSON",
                    retryable=False, hint="check the base URL")  # fmt: skip


def _malformed_failure(exc: Exception, base_url: str) -> _Failure | None:
    if isinstance(exc, _NotTheApi):
        return _page_failure(exc.body, base_url)
    if isinstance(exc, _StreamCut | DeadlinePassed):  # retried like a timeout
        return _Failure(f"{exc} ({base_url})", hint="check the network and the base URL")
    if isinstance(exc, _MALFORMED):
        logger.debug("unreadable response from %s", base_url, exc_info=exc)
        raw = str(exc).partition("Raw response: ")[2]  # google-genai's, streaming
        if raw.lstrip()[:1] == "<":
            return _page_failure(raw, base_url)
        problem = f"{type(exc).__name__}: {_one_line(exc, 120)}"
        return _Failure(f"malformed response from {base_url} ({problem})", retryable=False)
    return None


def _connection_failure(exc: BaseException, base_url: str) -> _Failure:
    message = f"connection to {base_url} failed: {_one_line(exc)}"
    return _Failure(message, hint="check the network and the base URL")


def _transport_failure(exc: Exception, base_url: str) -> _Failure | None:
    """Connection errors, timeouts and non-JSON bodies, whichever SDK let them through."""
    if isinstance(exc, json.JSONDecodeError) and exc.doc.lstrip()[:1] == "<":
        return _page_failure(exc.doc, base_url)
    if isinstance(exc, json.JSONDecodeError):
        return _Failure(f"malformed response from {base_url}: not JSON ({exc})", retryable=False)
    transport = []  # google-genai and mid-stream reads raise httpx(2) errors unwrapped
    for name in ("httpx2", "httpx"):
        with contextlib.suppress(ImportError):
            transport.append(importlib.import_module(name).TransportError)
    return _connection_failure(exc, base_url) if isinstance(exc, tuple(transport)) else None


def _stainless_failure(sdk: Any, exc: Exception, base_url: str) -> _Failure | None:
    """anthropic and openai come from the same generator: same error classes."""
    if isinstance(exc, sdk.APIStatusError):
        return _status_failure(exc.status_code, exc.body, exc.message, exc.response.headers)
    if isinstance(exc, sdk.APIConnectionError):  # includes timeouts
        return _connection_failure(exc.__cause__ or exc, base_url)
    if isinstance(exc, sdk.APIResponseValidationError):
        return _Failure(f"malformed response from {base_url}: {_one_line(exc)}", retryable=False)
    if isinstance(exc, sdk.APIError):  # openai: an error event inside a stream
        return _Failure(f"stream error: {_one_line(exc.message)}")
    return None


def _stop_reason(
    table: Mapping[str | None, StopReason], reason: str | None, calls: Sequence[ToolCall]
) -> StopReason:
    """The provider's stop reason as ours ("other" when the table does not know it). Gemini
    (and some local servers) say STOP/stop when they call tools: that is tool_use."""
    stop = table.get(reason, "other")
    return "tool_use" if calls and stop == "end" else stop


def _declarations(tools: Sequence[ToolSpec], schema_key: str) -> list[dict[str, Any]]:
    """Each tool's name, description and JSON Schema (an empty object schema when it takes no
    parameters), the schema under the key the provider's API gives it."""
    return [
        {"name": t["name"], "description": t.get("description", "")}
        | {schema_key: t.get("parameters") or _NO_PARAMETERS}
        for t in tools
    ]


# --- the shared client ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Request:
    """One call as `call_llm` was given it, for a client's `_send` to write in its wire format.
    `on_text` is set when the reply is to be streamed (each attempt gets its own)."""

    system_prompt: str
    messages: Sequence[Message]
    tools: Sequence[ToolSpec]
    on_text: TextCallback | None = None


def _attempt_error(failure: _Failure) -> str:
    return f"HTTP {failure.status}: {failure.message}" if failure.status else failure.message


# The Responses API's 404 for an item of the conversation it did not keep (store: false).
_ITEM_NOT_FOUND = re.compile(r"\bItem with id '[^']*' not found")


class _ProviderClient(LlmClient):
    """Retries, error messages and logging shared by the SDK-backed clients.

    Each subclass names its provider's row (toy_agent.providers) in `provider`: the row holds
    its facts (default model, key and base URL variables, default base URL). `api_key` and
    `base_url` default to those variables, read from `environ` (the process environment unless
    given), like any other setting a provider has.

    The SDKs' own retries are off (max_retries=0): anthropic and openai neither cap a long
    Retry-After nor log at WARNING, and google-genai ignores Retry-After; one loop here gives
    all three the same behaviour.
    """

    retry_base_delay = 1.0  # seconds of backoff before the first retry; tests set 0
    base_url: str
    model_options: dict[str, Any]
    _parse: Callable[[dict[str, Any]], LlmResponse]  # one of the from_*_response functions

    def __init__(
        self,
        api_key: str | None = None,
        model: str | None = None,
        *,
        base_url: str | None = None,
        max_retries: int = ModelSettings.max_retries,
        timeout: float = ModelSettings.timeout,
        max_tokens: int = 8192,
        environ: Mapping[str, str] | None = None,
        effort: str | None = None,
        model_options: Mapping[str, Any] | None = None,
        show_thinking: bool = False,
    ):
        self._environ = os.environ if environ is None else environ
        self._api_key, self.base_url = resolve_settings(
            self.provider, api_key, base_url, self._environ
        )
        self.model = model or self.row.default_model
        self.max_retries, self.timeout, self.max_tokens = max(0, max_retries), timeout, max_tokens
        # --effort, --model-option (max_tokens among them sets max_tokens) and whether to ask
        # for the model's thinking (summarised) where it is not shown by default.
        self.effort, self.show_thinking = check_effort(effort), show_thinking
        self.model_options = dict(model_options or {})
        if "max_tokens" in self.model_options:
            self.max_tokens = int(self.model_options.pop("max_tokens"))
        self._check_options()
        _require_installed(self.row.sdk_module)

    @functools.cached_property
    def _sdk(self) -> Any:
        """The SDK's client, made by the first call: importing an SDK takes a second or more,
        which building the client does not wait for (a session shows its prompt, MCP servers
        start, while preload_sdk's thread imports it)."""
        return self._make_sdk()

    def _check_options(self) -> None:
        """Raise LlmConfigError for a --model-option the model is known to refuse."""

    @property
    def row(self) -> Provider:
        """This client's provider row: its facts."""
        return PROVIDERS[self.provider]

    @property
    def key_env(self) -> str:
        """The key variables as error messages name them."""
        return " / ".join(self.row.key_variables)

    @abstractmethod
    def _make_sdk(self) -> Any: ...

    @abstractmethod
    def _send(self, request: _Request) -> dict[str, Any]:
        """One API call, its response as a plain dict (a stream is merged into one first)."""

    @abstractmethod
    def _failure(self, exc: Exception) -> _Failure | None:
        """The SDK's own exception types as a `_Failure`; None for anything else."""

    def call_llm(
        self,
        system_prompt: str,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] | None = None,
        on_text: TextCallback | None = None,
        on_retry: RetryCallback | None = None,
    ) -> LlmResponse:
        shape = (self.provider, self.model, self.max_tokens, len(messages), len(tools or ()))
        logger.debug("%s request: model=%s max_tokens=%d messages=%d tools=%d", *shape)
        _ = self._sdk  # made before the timed attempts: waiting for its import is not the call's
        started = time.monotonic()
        request = _Request(system_prompt, messages, tools or (), on_text)
        data, attempts = self._send_with_retries(request, on_retry if on_text else None)
        try:
            logger.debug("%s response: %s", self.provider, json.dumps(data, default=str))
            response = self._parse(data)
        except _MALFORMED as exc:
            problem = f"{type(exc).__name__}: {_one_line(exc, 120)}"
            raise LlmError(
                self.provider, f"malformed response from {self.base_url} ({problem})"
            ) from exc
        if response.turn is not None:  # the turn goes back only to this very model
            response = replace(response, turn=replace(response.turn, model=self.model))
        u = response.usage
        logger.info(
            "%s %s: %d input tokens (%d cached), %d output, stop=%s, %.1fs",
            *(self.provider, self.model, u.input_tokens, u.cached_tokens, u.output_tokens),
            *(response.stop_reason, time.monotonic() - started),
        )
        return replace(response, attempts=attempts)

    def _send_with_retries(
        self, request: _Request, on_retry: RetryCallback | None
    ) -> tuple[dict[str, Any], tuple[FailedAttempt, ...]]:
        """The reply, and the attempts that failed before it. Transient failures are retried
        up to `max_retries` times, with backoff. A stream that fails after it returned text
        is retried once at most: the model wrote (and was paid for) that text, and a proxy
        that cuts one long reply tends to cut the next."""
        on_text = request.on_text
        failed: list[FailedAttempt] = []
        live = 0  # the attempt whose text is passed on; -1 once it failed
        streamed: list[str] = []  # the text the live attempt passed on

        def emit(delta: str, of_attempt: int) -> None:
            if of_attempt == live and on_text is not None:  # late text of an abandoned
                streamed.append(delta)  # attempt (past the deadline) is dropped
                on_text(delta)

        retried_after_text = False
        for attempt in range(self.max_retries + 1):
            live, streamed = attempt, []
            sink = functools.partial(emit, of_attempt=attempt) if on_text else None
            try:
                # bounded by `timeout` for the whole response, streaming included: the SDKs'
                # own timeouts only bound each read, so a server trickling one byte a second
                # never ends. An attempt past the deadline is abandoned.
                send = functools.partial(self._send, replace(request, on_text=sink))
                data = abandonable(send, name=f"toy-agent-{self.provider}", timeout=self.timeout)
                return data, tuple(failed)
            except Exception as exc:
                failure = (
                    self._failure(exc)
                    or _transport_failure(exc, self.base_url)
                    or _malformed_failure(exc, self.base_url)
                )
                if failure is None:
                    raise
                live = -1  # first: no text of this attempt may follow
                partial = "".join(streamed)
                failed.append(
                    FailedAttempt(self._redact(_attempt_error(failure)), self._redact(partial))
                )
                if (
                    not failure.retryable
                    or attempt == self.max_retries
                    or (partial and retried_after_text)
                ):
                    error = self._error(failure, attempt)
                    error.attempts = tuple(failed)
                    raise error from exc
                retried_after_text = retried_after_text or bool(partial)
                delay = retry_delay(attempt, failure.retry_after, self.retry_base_delay)
                logger.warning(
                    "%s API error %s: %s; retry %d/%d in %.1fs%s",
                    *(self.provider, failure.status or "(no response)"),
                    *(self._redact(failure.message), attempt + 1, self.max_retries, delay),
                    f" (after {len(partial)} characters of reply)" if partial else "",
                )
                if on_retry is not None:
                    on_retry(failed[-1])
                time.sleep(delay)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _error(self, failure: _Failure, retries: int) -> LlmError:
        hints = {
            401: f"check {self.key_env}",
            403: f"check that {self.key_env} may use {self.model}",
            404: f"check the model name ({self.model}) and the base URL ({self.base_url})",
        }
        message = failure.message
        if failure.status == 404 and _ITEM_NOT_FOUND.search(message):  # not the model's 404
            hints[404] = (
                "the conversation sent back an item the API did not keep (toy_agent sends "
                "store: false); start a new session instead of continuing this one"
            )
        if failure.retryable and not failure.hint:  # the provider's trouble, not the settings'
            hints.setdefault(failure.status or 0, "try again later, or raise --max-retries")
        if failure.status == 400 and (named := [k for k in self.model_options if k in message]):
            return LlmError(self.provider, self._redact(
                f"{self.model} refused --model-option {named[0]} ({message})"
            ), failure.status)  # fmt: skip
        if hint := failure.hint or hints.get(failure.status or 0):
            message += f" — {hint}"
        if retries:
            message += f" (gave up after {retries} {'retry' if retries == 1 else 'retries'})"
        return LlmError(self.provider, self._redact(message), failure.status)

    def _redact(self, text: str) -> str:
        return mask_key(text, self._api_key)


class _StainlessClient(_ProviderClient):
    """A client whose SDK Stainless generates (anthropic, openai): built, failing and
    answering a streamed request alike. A subclass names its SDK's client class and writes the
    request body, the call, the streamed call and how a stream becomes one reply."""

    sdk_client: str  # "module:Class", e.g. "openai:OpenAI"

    def _make_sdk(self) -> Any:
        module, _, name = self.sdk_client.partition(":")
        cls = getattr(importlib.import_module(module), name)
        return cls(
            api_key=self._api_key, base_url=self.base_url, max_retries=0, timeout=self.timeout
        )

    def _failure(self, exc: Exception) -> _Failure | None:
        sdk = importlib.import_module(self.sdk_client.partition(":")[0])
        return _stainless_failure(sdk, exc, self.base_url)

    def _send(self, request: _Request) -> dict[str, Any]:
        body = self._body(request)
        if request.on_text is None:
            reply = self._call(body, stream=False)
            if isinstance(reply, str):  # the SDK hands back a body that is not JSON as text
                raise _NotTheApi(reply)
            return reply.to_dict()
        with self._call(body, stream=True) as stream:
            whole = self._whole_reply(stream.response, request.on_text)
            return whole if whole is not None else self._merge(stream, request.on_text)

    @abstractmethod
    def _body(self, request: _Request) -> dict[str, Any]:
        """The request's keyword arguments for the SDK call."""

    def _with_options(self, body: dict[str, Any]) -> dict[str, Any]:
        """`body` with the --model-option fields, which the SDK sends as they are (a field it
        has no argument for too) and which win over ours."""
        return {**body, "extra_body": self.model_options} if self.model_options else body

    @abstractmethod
    def _call(self, body: dict[str, Any], *, stream: bool) -> Any:
        """The SDK's response to `body`: the whole message, or (`stream`) its stream, a
        context manager whose `response` is the HTTP response."""

    @abstractmethod
    def _merge(self, stream: Any, on_text: TextCallback) -> dict[str, Any]:
        """The stream read to its end as one reply, each text delta passed to `on_text`; a
        stream that ends before the provider said it was complete raises _StreamCut."""

    def _whole_reply(self, response: Any, on_text: TextCallback) -> dict[str, Any] | None:
        """The complete reply, when a proxy answered a streamed request with one JSON message
        instead of an event stream (LiteLLM does for some models): the SDK would find no
        events in it and we would take it for a cut stream. Its text goes to `on_text` whole.
        None when `response` (an httpx response, body unread) is an event stream."""
        content_type = response.headers.get("content-type", "")
        kind = content_type.split(";")[0].strip().lower()
        if kind == "text/html":
            raise _NotTheApi(response.read().decode("utf-8", "replace"))
        if kind != "application/json":
            return None
        data = json.loads(response.read())
        if not isinstance(data, dict):
            raise ValueError(f"a JSON {type(data).__name__}, not an object")
        if text := self._parse(data).text:
            on_text(text)
        return data


# --- Images: which models take them ----------------------------------------------------------


def model_image_types(provider: str, model: str) -> frozenset[str]:
    """The image types `model` of `provider` takes, by its row's rule (toy_agent.providers):
    every Claude 3+ and Gemini model; on an OpenAI-compatible server, the known vision
    families only (the conservative rule)."""
    return image_types(provider, model)


# --- Claude (Anthropic Messages API) --------------------------------------------------------

_ANTHROPIC_STOPS: dict[str | None, StopReason] = {
    "end_turn": "end",
    "stop_sequence": "end",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
    "refusal": "safety",
}


def to_anthropic_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return _declarations(tools, "input_schema")


def _anthropic_image(image: Image) -> dict[str, Any]:
    if not image.data:
        return {"type": "text", "text": image.stub()}
    source = {"type": "base64", "media_type": image.mime_type, "data": image.data}
    return {"type": "image", "source": source}


def _anthropic_result(content: str, images: Sequence[Image]) -> str | list[dict[str, Any]]:
    """A tool_result's content: its text, or text and image blocks (Claude takes both)."""
    if not images:
        return content or _EMPTY
    return [{"type": "text", "text": content or _EMPTY}, *map(_anthropic_image, images)]


# The fields of each block Claude sends that go back with the turn (citations and the like
# do not).
_ANTHROPIC_ECHOED = {
    "thinking": ("type", "thinking", "signature"),
    "redacted_thinking": ("type", "data"),
    "text": ("type", "text"),
    "tool_use": ("type", "id", "name", "input"),
}
_ANTHROPIC_SIGNED = ("thinking", "redacted_thinking")


def _anthropic_echo(turn: SignedTurn) -> list[dict[str, Any]]:
    """The turn's blocks as Claude sent them; a thinking block whose signature is gone (its
    text held a secret and was redacted in the saved session) is left out: the API takes a
    turn without it once its tool loop is closed, never one with a broken signature."""
    kept = [b for b in turn.blocks if b.get("type") not in _ANTHROPIC_SIGNED or b.get("signature")
            or b.get("data")]  # fmt: skip
    return [dict(b) for b in kept]


def _anthropic_blocks(message: Message, model: str = "") -> list[dict[str, Any]]:
    if message.turn is not None and message.turn.fits("claude", model):
        return _anthropic_echo(message.turn)
    blocks: list[dict[str, Any]] = [
        {"type": "tool_result", "tool_use_id": r.call_id}
        | {"content": _anthropic_result(r.content, r.images), "is_error": r.is_error}
        for r in message.tool_results
    ]
    if message.content.strip():
        blocks.append({"type": "text", "text": message.content})
    blocks += map(_anthropic_image, message.images)
    for c in message.tool_calls:
        blocks.append({"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments})
    return blocks or [{"type": "text", "text": _EMPTY}]


def to_anthropic_messages(messages: Sequence[Message], model: str = "") -> list[dict[str, Any]]:
    """Alternating user/assistant turns starting with user, the last user block cached.
    `model`'s own turns go back as Claude sent them (thinking blocks and signatures); any
    other model's are rebuilt from their text and tool calls.

    With the breakpoint on the system prompt, the one on the newest user block lets every call
    of a long run read the whole earlier conversation from the prompt cache (2 of 4 allowed).
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        blocks = _anthropic_blocks(message, model)
        if out and out[-1]["role"] == message.role:
            out[-1]["content"] += blocks
        else:
            out.append({"role": message.role, "content": blocks})
    if not out or out[0]["role"] != "user":
        out.insert(0, {"role": "user", "content": [{"type": "text", "text": _EMPTY}]})
    for turn in out:  # tool results must open their user turn, even after a merge
        turn["content"].sort(key=lambda block: block["type"] != "tool_result")
    last_user = next(turn for turn in reversed(out) if turn["role"] == "user")
    last_user["content"][-1] = {**last_user["content"][-1], "cache_control": _EPHEMERAL}
    return out


def from_anthropic_response(data: dict[str, Any]) -> LlmResponse:
    """The reply; when it thought (thinking or redacted_thinking blocks), the whole turn as
    sent, to go back with the next request, and the thinking text as shown (a summary, or
    nothing when the model omits it). Claude does not count thinking tokens apart."""
    blocks, usage = data["content"], data["usage"]
    calls = tuple(
        ToolCall(b["name"], dict(b.get("input") or {}), b["id"])
        for b in blocks
        if b["type"] == "tool_use"
    )
    cached = usage.get("cache_read_input_tokens") or 0
    written = usage.get("cache_creation_input_tokens") or 0
    # input counts every prompt token, as OpenAI and Gemini do; cached is the part read
    tokens = Usage(usage["input_tokens"] + cached + written, usage["output_tokens"], cached,
                   cache_write_tokens=written)  # fmt: skip
    text = "".join(b["text"] for b in blocks if b["type"] == "text")
    stop = _stop_reason(_ANTHROPIC_STOPS, data.get("stop_reason"), calls)
    thinking = "\n\n".join(b["thinking"] for b in blocks
                            if b["type"] == "thinking" and b.get("thinking"))  # fmt: skip
    turn = None
    if any(b["type"] in _ANTHROPIC_SIGNED for b in blocks):
        echoed = tuple(
            {k: b[k] for k in _ANTHROPIC_ECHOED[b["type"]] if k in b}
            for b in blocks
            if b["type"] in _ANTHROPIC_ECHOED
        )
        turn = SignedTurn("claude", data.get("model") or "", echoed)
    return LlmResponse(text, calls, tokens, stop, data.get("model") or "", thinking=thinking,
                       turn=turn)  # fmt: skip


# Claude's thinking controls by generation (platform.claude.com/docs, build-with-claude/
# adaptive-thinking and effort, 2026-11): these think adaptively by default, take
# output_config.effort, and fix their sampling (temperature, top_p, top_k are refused) ...
_CLAUDE_ADAPTIVE_BY_DEFAULT = re.compile(
    r"claude-(?:(?:sonnet|opus|haiku|fable|mythos)-(?:[5-9]|\d\d)|opus-4-[7-9]|mythos|fable)"
)
# ... these think adaptively when asked (thinking.type adaptive) and take effort ...
_CLAUDE_ADAPTIVE = re.compile(r"claude-(?:sonnet|opus)-4-6")
# ... and these think with a budget of tokens when asked (thinking.type enabled); a dated
# snapshot (claude-opus-4-20250514) is its model.
_CLAUDE_BUDGETED = re.compile(
    r"claude-(?:3-7-sonnet|sonnet-4-5|opus-4-5|opus-4-1|haiku-4-5"
    r"|(?:sonnet|opus)-4(?:-0)?(?!-\d(?!\d)))"
)
# Claude 5 and later refuse sampling parameters.
_CLAUDE_FIXED_SAMPLING = re.compile(r"claude-(?:sonnet|opus|haiku|fable|mythos)-(?:[5-9]|\d\d)")
CLAUDE_BUDGETS = {"low": 2048, "medium": 8192, "high": 24576}  # --effort as budget_tokens
_SAMPLING = ("temperature", "top_p", "top_k")


def claude_thinking(model: str, effort: str | None, show: bool) -> dict[str, Any]:
    """The request fields that carry --effort and the wish to see the thinking, for `model`'s
    generation: {} when there is nothing to ask (the model's defaults apply)."""
    name = model.lower()
    default = bool(_CLAUDE_ADAPTIVE_BY_DEFAULT.match(name))
    if default or (_CLAUDE_ADAPTIVE.match(name) and (effort or show)):
        fields: dict[str, Any] = {}
        if show:  # the newest omit the thinking text unless asked for a summary
            fields["thinking"] = {"type": "adaptive", "display": "summarized"}
        elif not default:
            fields["thinking"] = {"type": "adaptive"}
        if effort:
            fields["output_config"] = {"effort": effort}
        return fields
    if effort and _CLAUDE_BUDGETED.match(name):
        return {"thinking": {"type": "enabled", "budget_tokens": CLAUDE_BUDGETS[effort]}}
    return {}


class ClaudeLlmClient(_StainlessClient):
    """Claude through the anthropic SDK's Messages API, with prompt caching."""

    provider = "claude"
    sdk_client = "anthropic:Anthropic"
    _parse = staticmethod(from_anthropic_response)

    def _check_options(self) -> None:
        fixed = [k for k in _SAMPLING if k in self.model_options]
        if fixed and _CLAUDE_FIXED_SAMPLING.match(self.model.lower()):
            raise LlmConfigError(
                f"--model-option {fixed[0]}: {self.model} does not take {fixed[0]} (its "
                "sampling is fixed; use --effort instead): remove the option"
            )

    def _body(self, request: _Request) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens}
        body |= claude_thinking(self.model, self.effort, self.show_thinking)
        if budget := body.get("thinking", {}).get("budget_tokens"):  # it counts in max_tokens
            body["max_tokens"] = max(self.max_tokens, budget + 4096)
        body["messages"] = to_anthropic_messages(request.messages, self.model)
        if request.system_prompt:
            body["system"] = [
                {"type": "text", "text": request.system_prompt} | {"cache_control": _EPHEMERAL}
            ]
        if request.tools:
            body["tools"] = to_anthropic_tools(request.tools)
        return self._with_options(body)

    def _call(self, body: dict[str, Any], *, stream: bool) -> Any:
        messages = self._sdk.messages  # .stream: the SDK's helper that accumulates the events
        return messages.stream(**body) if stream else messages.create(**body)

    def _merge(self, stream: Any, on_text: TextCallback) -> dict[str, Any]:
        for delta in stream.text_stream:
            on_text(delta)
        try:
            data: dict[str, Any] = stream.get_final_message().to_dict()
        except AssertionError:  # the SDK's check that any message arrived at all
            raise _StreamCut("the stream ended before message_start") from None
        if data.get("stop_reason") is None:
            raise _StreamCut("the stream ended before message_stop")
        return data


# --- Gemini (google-genai generate_content) -------------------------------------------------

_GEMINI_SAFETY = ("SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY")
_GEMINI_STOPS: dict[str | None, StopReason] = {"STOP": "end", "MAX_TOKENS": "max_tokens"}
_GEMINI_STOPS.update(dict.fromkeys(_GEMINI_SAFETY, "safety"))


def to_gemini_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """One Tool of FunctionDeclarations; the JSON Schema goes in untouched."""
    return [{"function_declarations": _declarations(tools, "parameters_json_schema")}]


def _gemini_image(image: Image) -> dict[str, Any]:
    """An inline_data part; the SDK takes the bytes and sends them as base64."""
    if not image.data:
        return {"text": image.stub()}
    return {"inline_data": {"mime_type": image.mime_type, "data": base64.b64decode(image.data)}}


# What a rebuilt function call (another model's, or a record's without its signature) carries:
# the placeholder Gemini's thought-signature FAQ gives for calls it did not sign, which skips
# the check (ai.google.dev/gemini-api/docs/thought-signatures, 2026-11).
GEMINI_NO_SIGNATURE = b"skip_thought_signature_validator"


def _gemini_echo(turn: SignedTurn) -> list[dict[str, Any]]:
    """The turn's parts as Gemini sent them: thought parts and thought signatures on the parts
    that carried them (base64 in the record; the SDK takes bytes)."""
    parts = []
    for part in turn.blocks:
        part = dict(part)
        if isinstance(part.get("thought_signature"), str):
            part["thought_signature"] = base64.urlsafe_b64decode(part["thought_signature"])
        parts.append(part)
    return parts


def to_gemini_contents(messages: Sequence[Message], model: str = "") -> list[dict[str, Any]]:
    """Gemini contents: assistant is role "model"; tool results are function_response parts,
    the images they returned inline_data parts beside them in the same turn. `model`'s own
    turns go back as sent (thought signatures on their parts); others are rebuilt."""
    out: list[dict[str, Any]] = []
    unnamed: set[str] = set()  # our ids of echoed calls Gemini sent without one
    for message in messages:
        role = "model" if message.role == "assistant" else "user"
        if message.turn is not None and message.turn.fits("gemini", model):
            out.append({"role": role, "parts": _gemini_echo(message.turn)})
            calls = [p["function_call"] for p in message.turn.blocks if p.get("function_call")]
            unnamed.update(c.id for c, f in zip(message.tool_calls, calls, strict=False)
                           if not f.get("id"))  # fmt: skip
            continue
        parts: list[dict[str, Any]] = []
        for r in message.tool_results:  # an answer names its call as the call named itself
            response = {"error" if r.is_error else "output": r.content}
            named = {} if r.call_id in unnamed else {"id": r.call_id}
            parts.append({"function_response": named | {"name": r.name, "response": response}})
        parts += (_gemini_image(i) for r in message.tool_results for i in r.images)
        if message.content.strip():
            parts.append({"text": message.content})
        parts += map(_gemini_image, message.images)
        for n, c in enumerate(message.tool_calls):
            parts.append({"function_call": {"id": c.id, "name": c.name, "args": c.arguments}})
            if n == 0:  # a turn not the model's own: Gemini 3 wants a signature all the same
                parts[-1]["thought_signature"] = GEMINI_NO_SIGNATURE
        parts = parts or [{"text": _EMPTY}]
        if out and out[-1]["role"] == role:
            out[-1]["parts"] += parts
        else:
            out.append({"role": role, "parts": parts})
    return out


def gemini_api_version(base_url: str, environ: Mapping[str, str]) -> str | None:
    """The version in the request path (`/v1beta/models/...`): GOOGLE_GENAI_API_VERSION when
    set ("beta" is v1beta, as google-genai reads it); else, behind a custom base URL, v1beta,
    the version proxies (LiteLLM, API gateways) serve, where the SDK would ask for v1. None
    leaves google-genai's own default for Google's URL."""
    version = environ.get(GEMINI.api_version_variable, "").strip()
    if version:
        return "v1beta" if version == "beta" else version
    custom = base_url.rstrip("/") != GEMINI.default_base_url.rstrip("/")
    return "v1beta" if custom else None


def _gemini_parts(data: dict[str, Any]) -> list[dict[str, Any]]:
    candidates = data.get("candidates") or [{}]
    return (candidates[0].get("content") or {}).get("parts") or []


def merge_gemini_chunks(
    chunks: Iterable[dict[str, Any]], on_text: TextCallback | None = None
) -> dict[str, Any]:
    """Fold streamed responses into one, passing each text delta to `on_text` as it arrives."""
    merged: dict[str, Any] = {}
    parts: list[dict[str, Any]] = []
    candidate: dict[str, Any] | None = None
    for chunk in chunks:
        for part in _gemini_parts(chunk):
            if on_text and part.get("text") and not part.get("thought"):
                on_text(part["text"])
            parts.append(part)
        if chunk.get("candidates"):
            candidate = {**(candidate or {}), **chunk["candidates"][0]}
        merged.update({k: v for k, v in chunk.items() if k != "candidates"})
    if candidate is not None:
        merged["candidates"] = [{**candidate, "content": {"role": "model", "parts": parts}}]
    return merged


def from_gemini_response(data: dict[str, Any]) -> LlmResponse:
    """A response dict as google-genai dumps it (snake_case). Thought parts (thought: true)
    are the thinking, shown, not the reply's text; when a part is signed (thought_signature)
    or a thought, the parts as sent are kept to go back with the next request."""
    meta = data.get("usage_metadata") or {}
    thoughts = meta.get("thoughts_token_count") or 0
    output = (meta.get("candidates_token_count") or 0) + thoughts
    usage = Usage(
        meta.get("prompt_token_count") or 0, output, meta.get("cached_content_token_count") or 0,
        reasoning_tokens=thoughts,
    )  # fmt: skip
    model = data.get("model_version") or ""
    if not data.get("candidates"):
        if (data.get("prompt_feedback") or {}).get("block_reason"):
            return LlmResponse("", (), usage, "safety", model)
        raise ValueError("no candidates and no prompt_feedback.block_reason")
    parts = _gemini_parts(data)
    functions = [p["function_call"] for p in parts if p.get("function_call")]
    calls = tuple(
        ToolCall(f["name"], dict(f.get("args") or {}), f.get("id") or f"call_{i}")
        for i, f in enumerate(functions)
    )
    text = "".join(p["text"] for p in parts if p.get("text") and not p.get("thought"))
    thinking = "".join(p["text"] for p in parts if p.get("text") and p.get("thought"))
    signed = any(p.get("thought_signature") or p.get("thought") for p in parts)
    turn = SignedTurn("gemini", model, tuple(parts)) if signed else None
    stop = _stop_reason(_GEMINI_STOPS, data["candidates"][0].get("finish_reason"), calls)
    return LlmResponse(text, calls, usage, stop, model, thinking=thinking, turn=turn)


# Gemini's thinking controls by generation (ai.google.dev/gemini-api/docs/thinking, 2026-11):
# Gemini 3 and later take a thinking level, 2.5 a budget of tokens; 2.0 and 1.x do not think
# and refuse any thinkingConfig, includeThoughts alone too ("Thinking is not enabled for
# models/gemini-2.0-flash"; googleapis/js-genai#681).
_GEMINI_LEVELS = re.compile(r"gemini-(?:[3-9]|\d\d)")
_GEMINI_NO_THINKING = re.compile(r"gemini-(?:1(?:\.\d+)?|2\.0)(?![\d.])")
GEMINI_BUDGETS = {"low": 1024, "medium": 8192, "high": 24576}  # --effort on Gemini 2.5


def gemini_thinks(model: str) -> bool:
    """Whether `model` takes a thinkingConfig (Gemini 2.5 and later, and unknown names)."""
    return not _GEMINI_NO_THINKING.search(model.lower())


def gemini_thinking(model: str, effort: str | None, show: bool) -> dict[str, Any]:
    """The thinking_config that carries --effort and the wish to see thought summaries: none
    for a model that does not think (the client refuses --effort for one before it starts)."""
    if not gemini_thinks(model):
        return {}
    config: dict[str, Any] = {"include_thoughts": True} if show else {}
    if effort and _GEMINI_LEVELS.search(model.lower()):
        config["thinking_level"] = effort
    elif effort:
        config["thinking_budget"] = GEMINI_BUDGETS[effort]
    return config


def _dump_gemini(response: Any) -> dict[str, Any]:
    skip = {"sdk_http_response", "automatic_function_calling_history"}
    return response.model_dump(mode="json", exclude_none=True, exclude=skip)


class GeminiLlmClient(_ProviderClient):
    """Gemini through google-genai (never the retired google-generativeai)."""

    provider = "gemini"
    _parse = staticmethod(from_gemini_response)

    def _make_sdk(self) -> Any:
        from google import genai

        http_options = genai.types.HttpOptions(
            base_url=self.base_url,
            timeout=int(self.timeout * 1000),
            api_version=gemini_api_version(self.base_url, self._environ),
        )
        return genai.Client(api_key=self._api_key, vertexai=False, http_options=http_options)

    def _send(self, request: _Request) -> dict[str, Any]:
        config: dict[str, Any] = {"max_output_tokens": self.max_tokens}
        config["automatic_function_calling"] = {"disable": True}  # we run the tools
        if request.system_prompt:
            config["system_instruction"] = request.system_prompt
        if request.tools:
            config["tools"] = to_gemini_tools(request.tools)
        if thinking := gemini_thinking(self.model, self.effort, self.show_thinking):
            config["thinking_config"] = thinking
        config |= self.model_options  # Gemini's options live in the config (temperature, ...)
        contents = to_gemini_contents(request.messages, self.model)
        body = {"model": self.model, "contents": contents, "config": config}
        if request.on_text is None:
            return _dump_gemini(self._sdk.models.generate_content(**body))
        stream = self._sdk.models.generate_content_stream(**body)
        data = merge_gemini_chunks(map(_dump_gemini, stream), request.on_text)
        candidates = data.get("candidates") or [{}]
        if not candidates[0].get("finish_reason") and not data.get("prompt_feedback"):
            raise _StreamCut("the stream ended without a finish reason")
        return data

    def _check_options(self) -> None:
        if self.effort and not gemini_thinks(self.model):
            raise LlmConfigError(
                f"--effort: {self.model} does not think (Gemini 2.0 and 1.5 take no thinking "
                "config): remove the option, or use gemini-2.5-flash or later"
            )
        if not self.model_options:
            return  # and the SDK need not be loaded yet
        from google.genai import types

        known = types.GenerateContentConfig.model_fields
        if unknown := [k for k in self.model_options if k not in known]:
            raise LlmConfigError(
                f"--model-option {unknown[0]}: Gemini's generation config has no such field "
                "(temperature, top_p, top_k, seed, max_output_tokens, ...)"
            )

    def _failure(self, exc: Exception) -> _Failure | None:
        from google.genai import errors

        if not isinstance(exc, errors.APIError):
            return None
        headers = getattr(exc.response, "headers", None)
        failure = _status_failure(exc.code or 0, exc.details, exc.message or exc, headers)
        if failure.retry_after is None and failure.retryable:
            failure = replace(failure, retry_after=_gemini_retry_delay(exc.details))
        return failure


# --- OpenAI-compatible (Chat Completions) ---------------------------------------------------

_OPENAI_STOPS: dict[str | None, StopReason] = {
    "stop": "end",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "safety",
}


def to_openai_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": f} for f in _declarations(tools, "parameters")]


def to_openai_messages(system_prompt: str, messages: Sequence[Message]) -> list[dict[str, Any]]:
    """System first; each tool result becomes its own `role: "tool"` message."""
    out: list[dict[str, Any]] = []
    if system_prompt:
        out.append({"role": "system", "content": system_prompt})
    for message in messages:
        if message.role == "assistant":
            out.append({"role": "assistant", "content": message.content})
            if message.tool_calls:
                out[-1]["content"] = message.content or None
                out[-1]["tool_calls"] = [_openai_call(c) for c in message.tool_calls]
            continue
        for r in message.tool_results:  # an error's content says so already ("Error: ...")
            out.append({"role": "tool", "tool_call_id": r.call_id, "content": r.content})
        # a tool message takes no image: the results' images follow in a user message
        images = [i for r in message.tool_results for i in r.images] + list(message.images)
        if images:
            text = message.content or "The images the tool calls above returned:"
            parts = [{"type": "text", "text": text}, *map(_openai_image, images)]
            out.append({"role": "user", "content": parts})
        elif message.content or not message.tool_results:
            out.append({"role": "user", "content": message.content})
    return out


def _openai_image(image: Image) -> dict[str, Any]:
    if not image.data:
        return {"type": "text", "text": image.stub()}
    url = f"data:{image.mime_type};base64,{image.data}"
    return {"type": "image_url", "image_url": {"url": url}}


def _openai_call(call: ToolCall) -> dict[str, Any]:
    function = {"name": call.name, "arguments": json.dumps(call.arguments)}
    return {"id": call.id, "type": "function", "function": function}


def parse_tool_arguments(raw: str | dict[str, Any] | None) -> tuple[dict[str, Any], str]:
    """Arguments arrive as a JSON string the model wrote: (the object, "") or, for anything but
    an object, ({}, the raw text), not raised: the model's mistake becomes an observation."""
    if isinstance(raw, dict):
        return raw, ""
    if not raw or not raw.strip():
        return {}, ""
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    return (value, "") if isinstance(value, dict) else ({}, raw)


def merge_openai_chunks(
    chunks: Iterable[dict[str, Any]], on_text: TextCallback | None = None
) -> dict[str, Any]:
    """Fold `chat.completion.chunk`s into one `chat.completion` dict (tool calls by index)."""
    text: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    merged: dict[str, Any] = {"model": "", "usage": None, "finish_reason": None}
    for chunk in chunks:
        merged["model"] = chunk.get("model") or merged["model"]
        merged["usage"] = chunk.get("usage") or merged["usage"]
        for choice in (chunk.get("choices") or [])[:1]:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                text.append(delta["content"])
                if on_text:
                    on_text(delta["content"])
            for piece in delta.get("tool_calls") or []:
                call = calls.setdefault(
                    piece.get("index", len(calls)), dict.fromkeys(("id", "name", "arguments"), "")
                )
                function = piece.get("function") or {}
                call["id"] = call["id"] or piece.get("id") or ""
                call["name"] = call["name"] or function.get("name") or ""
                call["arguments"] += function.get("arguments") or ""
            merged["finish_reason"] = choice.get("finish_reason") or merged["finish_reason"]
    tool_calls = [
        {
            "id": c["id"],
            "type": "function",
            "function": {"name": c["name"], "arguments": c["arguments"]},
        }
        for _, c in sorted(calls.items())
    ]
    message = {"role": "assistant", "content": "".join(text), "tool_calls": tool_calls}
    choice = {"index": 0, "message": message, "finish_reason": merged.pop("finish_reason")}
    return {**merged, "choices": [choice]}


def _openai_tool_call(index: int, call: dict[str, Any]) -> ToolCall:
    arguments, error = parse_tool_arguments(call["function"].get("arguments"))
    return ToolCall(call["function"]["name"], arguments, call.get("id") or f"call_{index}", error)


def from_openai_response(data: dict[str, Any]) -> LlmResponse:
    choice = data["choices"][0]
    message, usage = choice["message"], data.get("usage") or {}
    calls = tuple(_openai_tool_call(i, c) for i, c in enumerate(message.get("tool_calls") or []))
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    tokens = Usage(usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0, cached,
                   reasoning_tokens=reasoning)  # fmt: skip
    stop = _stop_reason(_OPENAI_STOPS, choice.get("finish_reason"), calls)
    return LlmResponse(message.get("content") or "", calls, tokens, stop, data.get("model") or "")


class OpenAICompatibleLlmClient(_StainlessClient):
    """Any Chat Completions server: OpenAI, Ollama, vLLM, llama.cpp, LM Studio, OpenRouter."""

    provider = "openai"
    sdk_client = "openai:OpenAI"
    _parse = staticmethod(from_openai_response)

    def _body(self, request: _Request) -> dict[str, Any]:
        # OpenAI itself wants max_completion_tokens (its reasoning models reject max_tokens);
        # local servers know max_tokens.
        limit = "max_completion_tokens" if "api.openai.com" in self.base_url else "max_tokens"
        body: dict[str, Any] = {"model": self.model, limit: self.max_tokens}
        if self.effort:  # reasoning models only; a server that knows no such field ignores it
            body["reasoning_effort"] = self.effort
        body["messages"] = to_openai_messages(request.system_prompt, request.messages)
        if request.tools:
            body["tools"] = to_openai_tools(request.tools)
        return self._with_options(body)

    def _call(self, body: dict[str, Any], *, stream: bool) -> Any:
        if stream:  # a stream tells the usage only when asked to, in its last chunk
            body = {**body, "stream": True, "stream_options": {"include_usage": True}}
        return self._sdk.chat.completions.create(**body)

    def _merge(self, stream: Any, on_text: TextCallback) -> dict[str, Any]:
        data = merge_openai_chunks((chunk.to_dict() for chunk in stream), on_text)
        if data["choices"][0]["finish_reason"] is None:
            raise _StreamCut("the stream ended without a finish_reason")
        return data


# --- OpenAI Responses API (--openai-api responses) ------------------------------------------

_RESPONSES_STOPS: dict[str | None, StopReason] = {
    "max_output_tokens": "max_tokens",
    "content_filter": "safety",
}


def to_responses_input(messages: Sequence[Message], model: str = "") -> list[dict[str, Any]]:
    """Responses API input items. `model`'s own turns go back as they came (reasoning items
    with their encrypted_content, then its messages and function calls); others are rebuilt;
    tool results are function_call_output items, images an input_image beside them."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "assistant":
            if message.turn is not None and message.turn.fits("openai", model):
                out += _responses_echo(message.turn)
                continue
            if message.content:
                out.append({"role": "assistant", "content": message.content})
            out += [
                {"type": "function_call", "call_id": c.id, "name": c.name}
                | {"arguments": json.dumps(c.arguments)}
                for c in message.tool_calls
            ]
            continue
        out += [{"type": "function_call_output", "call_id": r.call_id, "output": r.content}
                for r in message.tool_results]  # fmt: skip
        images = [i for r in message.tool_results for i in r.images] + list(message.images)
        if images:
            text = message.content or "The images the tool calls above returned:"
            parts = [{"type": "input_text", "text": text}, *map(_responses_image, images)]
            out.append({"role": "user", "content": parts})
        elif message.content or not message.tool_results:
            out.append({"role": "user", "content": message.content})
    return out


def _responses_echo(turn: SignedTurn) -> list[dict[str, Any]]:
    """The turn's output items as OpenAI sent them. A reasoning item whose encrypted_content
    is gone (its summary held a secret and was redacted in the saved session) is left out:
    under store: false nothing is kept at OpenAI, so the bare item would be answered with a
    404 ("Item with id 'rs_…' not found"). The items that followed it go without their ids,
    which would tie them to it ("Item 'fc_…' of type 'function_call' was provided without
    its required 'reasoning' item"): as a turn of another model is rebuilt."""
    out: list[dict[str, Any]] = []
    orphaned = False  # the items since the last reasoning item lost theirs
    for item in turn.blocks:
        kind = item.get("type")
        if kind == "reasoning":
            orphaned = not item.get("encrypted_content")
            if not orphaned:
                out.append(dict(item))
        elif not orphaned:
            out.append(dict(item))
        elif kind == "function_call":
            out.append({k: item[k] for k in ("type", "call_id", "name", "arguments") if k in item})
        elif kind == "message":
            out.append({"role": item.get("role", "assistant"), "content": item.get("content")})
        else:
            out.append({k: v for k, v in item.items() if k != "id"})
    return out


def _responses_image(image: Image) -> dict[str, Any]:
    if not image.data:
        return {"type": "input_text", "text": image.stub()}
    return {"type": "input_image", "image_url": f"data:{image.mime_type};base64,{image.data}"}


def from_responses_response(data: dict[str, Any]) -> LlmResponse:
    """A Responses API response: its messages' text, its function calls, the reasoning
    summaries as the thinking, and, when it reasoned, its output items to go back."""
    output = data["output"]
    text = "".join(part.get("text") or "" for item in output if item.get("type") == "message"
                   for part in item.get("content") or ()
                   if part.get("type") == "output_text")  # fmt: skip
    functions = [item for item in output if item.get("type") == "function_call"]
    calls = tuple(_openai_tool_call(i, {"id": f.get("call_id"), "function": f})
                  for i, f in enumerate(functions))  # fmt: skip
    thinking = "\n\n".join(summary.get("text") or "" for item in output
                            if item.get("type") == "reasoning"
                            for summary in item.get("summary") or ())  # fmt: skip
    usage = data.get("usage") or {}
    tokens = Usage(
        usage.get("input_tokens") or 0, usage.get("output_tokens") or 0,
        (usage.get("input_tokens_details") or {}).get("cached_tokens") or 0,
        reasoning_tokens=(usage.get("output_tokens_details") or {}).get("reasoning_tokens") or 0,
    )  # fmt: skip
    reason = (data.get("incomplete_details") or {}).get("reason")
    stop = _RESPONSES_STOPS.get(reason, "other") if data.get("status") == "incomplete" else "end"
    stop = "tool_use" if calls and stop == "end" else stop
    model = data.get("model") or ""
    reasoned = any(item.get("type") == "reasoning" for item in output)
    turn = SignedTurn("openai", model, tuple(output)) if reasoned else None
    return LlmResponse(text, calls, tokens, stop, model, thinking=thinking, turn=turn)


class OpenAIResponsesLlmClient(OpenAICompatibleLlmClient):
    """OpenAI's Responses API (`--openai-api responses`): the reasoning of its reasoning
    models goes back between turns as encrypted reasoning items (nothing is stored at
    OpenAI: store is false). Chat Completions stays the default: local servers speak only it."""

    _parse = staticmethod(from_responses_response)

    def _body(self, request: _Request) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "max_output_tokens": self.max_tokens}
        body |= {"store": False, "include": ["reasoning.encrypted_content"]}
        if request.system_prompt:
            body["instructions"] = request.system_prompt
        body["input"] = to_responses_input(request.messages, self.model)
        if request.tools:
            declarations = _declarations(request.tools, "parameters")
            body["tools"] = [{"type": "function"} | d for d in declarations]
        reasoning = {"effort": self.effort} if self.effort else {}
        if self.show_thinking:
            reasoning["summary"] = "auto"
        if reasoning:
            body["reasoning"] = reasoning
        return self._with_options(body)

    def _call(self, body: dict[str, Any], *, stream: bool) -> Any:
        return self._sdk.responses.create(**body, **({"stream": True} if stream else {}))

    def _merge(self, stream: Any, on_text: TextCallback) -> dict[str, Any]:
        for event in stream:
            if event.type == "response.output_text.delta":
                on_text(event.delta)
            elif event.type in ("response.completed", "response.incomplete"):
                data: dict[str, Any] = event.response.to_dict()
                return data
            elif event.type in ("response.failed", "error"):
                raise _StreamCut(f"the stream reported {event.type}")
        raise _StreamCut("the stream ended before response.completed")


def preload_sdk(provider: str, then: Callable[[], None] = lambda: None) -> None:
    """Start importing `provider`'s SDK in a background thread (anthropic alone takes about a
    second), so it loads while the caller reads .env, builds the prompt, starts MCP servers
    and waits for the first task; then call `then`, in that thread (at once, here, when the
    provider has no SDK). The client's first call waits for this import instead of starting
    another."""
    row = PROVIDERS.get(provider)
    if row is None or not row.sdk_module:
        then()
        return
    worker = threading.Thread(target=_import_quietly, args=(row.sdk_module, then), daemon=True)
    worker.start()


def _import_quietly(module: str, then: Callable[[], None]) -> None:
    try:
        with contextlib.suppress(Exception):  # a missing SDK is reported by the client
            importlib.import_module(module)
    finally:
        then()


def _require_installed(module: str) -> None:
    """Raise ModuleNotFoundError, as its import would, if `module` is not installed (without
    importing it: a client is built before its SDK has loaded)."""
    if module and importlib.util.find_spec(module) is None:
        raise ModuleNotFoundError(f"No module named {module!r}", name=module)
