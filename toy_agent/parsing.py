"""Turning LLM output into actions, one `ActionFormat` per way of writing them.

A format owns three things and nothing else: the response-format section of the system
prompt, parsing a reply into actions, and the message that carries observations back.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from toy_agent.llm import LlmResponse, Message, ToolSpec


@dataclass(frozen=True)
class Action:
    tool_name: str
    parameters: dict[str, Any] = field(default_factory=dict)
    call_id: str = ""  # the provider's id of a native tool call, echoed in its result


@dataclass(frozen=True)
class ParsedResponse:
    thought: str
    actions: tuple[Action, ...]


@dataclass(frozen=True)
class Observation:
    """What one action produced, as the LLM will see it."""

    action: Action
    content: str
    is_error: bool = False


class ParseError(Exception):
    """The reply could not be turned into an action; the message is written for the LLM."""


class ActionFormat(ABC):
    name: str = ""
    native_tools: bool = False  # True: tool schemas go to the provider, not into the prompt

    @abstractmethod
    def prompt_section(self, tools: Sequence[ToolSpec]) -> str:
        """The system prompt's tool list and response-format instructions, with an example."""

    @abstractmethod
    def parse(self, response: LlmResponse) -> ParsedResponse:
        """Return the thought and at least one action, or raise ParseError."""

    @abstractmethod
    def observation_message(self, observations: Sequence[Observation]) -> Message:
        """The user message that carries these observations back to the LLM."""

    @abstractmethod
    def error_message(self, error: ParseError) -> Message:
        """The user message telling the LLM its reply could not be parsed, and why."""
