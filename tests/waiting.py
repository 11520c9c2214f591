"""Waiting on the outside world in tests: a condition polled until a deadline, never a fixed sleep.

Prefer a real event (a ``threading.Event``, a line on a subprocess's pipe, a Scrapy signal); poll
with :func:`until` only what has no event to wait on (a row in another process's database, a
process's state, a server that reports only when asked)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

T = TypeVar("T")

#: how often a condition is asked again
POLL_SECS = 0.05


def until(condition: Callable[[], T], what: str, *, timeout: float = 60.0, poll: float = POLL_SECS) -> T:
    """The first truthy value of *condition* (asked at once, then every *poll* seconds); an
    ``AssertionError`` naming *what* when none came within *timeout* seconds. From a coroutine:
    ``await asyncio.to_thread(until, ...)``, so the reactor goes on meanwhile."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(poll)
    return value


__all__ = ["POLL_SECS", "until"]
