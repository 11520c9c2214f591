"""Periods on the command line: ``--since 7d`` (an age) or ``--since 2026-11-24`` (a time), read by
:func:`recrawler.times.parse_time`, the one parser of times."""

from __future__ import annotations

from typing import TYPE_CHECKING

from recrawler.times import parse_time

if TYPE_CHECKING:
    from datetime import datetime

__all__ = ["parse_since"]


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """The start of a period ending at *now* (the wall clock): ``7d``, ``2w``, ``12h``, ``30m``,
    ``90s``, or an ISO 8601 time (UTC when it names no zone)."""
    return parse_time(text, name="--since", now=now)
