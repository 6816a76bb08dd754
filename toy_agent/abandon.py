"""Running a call that its caller may stop waiting for: on a deadline or a cancel.

Network calls block in places no flag can reach (a read that trickles one byte a second, a
provider that never answers), so the call runs in a daemon thread and the caller waits for it
only as long as it wants to. An abandoned call runs on until it ends by itself (its thread
ends with its connection); a daemon thread does not keep the process alive.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
POLL_SECONDS = 0.1  # how often a cancellable wait looks at its `check`


class DeadlinePassed(Exception):
    """The call did not finish within its timeout: it was abandoned."""


def abandonable(
    call: Callable[[], T],
    *,
    name: str,
    timeout: float | None = None,
    check: Callable[[], None] | None = None,
) -> T:
    """`call()`'s value (or its exception, raised here), waited for in a thread named `name`
    until it ends, `timeout` seconds pass (DeadlinePassed), or `check` raises (it is called
    every POLL_SECONDS while the call runs, and once more as it ends: a cancel). The thread
    runs in the caller's context, so a batch's log records name the task."""
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the waiting thread, raised there
            box["error"] = exc
        done.set()

    threading.Thread(
        target=contextvars.copy_context().run, args=(target,), name=name, daemon=True
    ).start()
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if check is not None:
            left = POLL_SECONDS if left is None else min(POLL_SECONDS, left)
        finished = done.wait(left)
        if check is not None:
            check()
        if finished:
            break
        if deadline is not None and time.monotonic() >= deadline:
            raise DeadlinePassed(f"no complete response within {timeout:g}s")
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value
