"""One helper runs a call its caller may stop waiting for: the LLM call a cancel abandons, and
the provider attempt its deadline abandons."""

from __future__ import annotations

import contextvars
import threading
import time

import pytest

from toy_agent.abandon import DeadlinePassed, abandonable

_TASK = contextvars.ContextVar("task", default="")


class Stop(Exception):
    pass


def test_a_call_that_finishes_gives_its_value_in_the_callers_context():
    _TASK.set("task-7")
    seen = {}

    def call() -> int:
        seen["task"], seen["thread"] = _TASK.get(), threading.current_thread().name
        return 42

    assert abandonable(call, name="toy-agent-test", timeout=5, check=lambda: None) == 42
    assert seen == {"task": "task-7", "thread": "toy-agent-test"}


def test_a_call_that_fails_raises_its_own_error_in_the_caller():
    def call() -> None:
        raise ValueError("broken")

    with pytest.raises(ValueError, match="broken"):
        abandonable(call, name="toy-agent-test")


def test_a_call_past_its_deadline_is_abandoned_and_runs_on_by_itself():
    release, ended = threading.Event(), threading.Event()

    def call() -> str:
        release.wait(30)
        ended.set()
        return "late"

    started = time.monotonic()
    with pytest.raises(DeadlinePassed, match=r"no complete response within 0.2s"):
        abandonable(call, name="toy-agent-test", timeout=0.2)
    assert 0.2 <= time.monotonic() - started < 5
    assert not ended.is_set()  # abandoned, not stopped: it ends when it ends
    release.set()
    assert ended.wait(5)


def test_a_cancel_stops_the_wait_at_the_next_poll():
    cancelled, release = threading.Event(), threading.Event()

    def check() -> None:
        if cancelled.is_set():
            raise Stop()

    def call() -> str:
        cancelled.set()  # the user cancels while the call is in flight
        release.wait(30)
        return "late"

    started = time.monotonic()
    with pytest.raises(Stop):
        abandonable(call, name="toy-agent-test", check=check)
    assert time.monotonic() - started < 5
    release.set()


def test_a_cancel_as_the_call_ends_still_wins():
    """The check runs once more when the call is done: a cancel that came with the reply
    stops the run before the reply's actions run."""
    cancelled = threading.Event()

    def check() -> None:
        if cancelled.is_set():
            raise Stop()

    def call() -> str:
        cancelled.set()
        return "reply"

    with pytest.raises(Stop):
        abandonable(call, name="toy-agent-test", check=check)


def test_a_deadline_and_a_cancel_together_end_at_whichever_comes_first():
    release = threading.Event()

    def call() -> None:
        release.wait(30)

    with pytest.raises(DeadlinePassed):
        abandonable(call, name="toy-agent-test", timeout=0.3, check=lambda: None)
    release.set()
