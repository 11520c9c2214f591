"""Periods on the command line: ``--since 7d`` (an age) or ``--since 2026-11-24`` (a time)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from recrawler.exceptions import ConfigurationError

__all__ = ["parse_since"]

_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([wdhms])\s*$", re.IGNORECASE)
_UNIT_SECS = {"w": 7 * 86400.0, "d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """The start of a period ending at *now* (the wall clock): ``7d``, ``2w``, ``12h``, ``30m``,
    ``90s``, or an ISO 8601 time (UTC when it names no zone)."""
    clock = now or datetime.now(UTC)
    m = _AGE.match(text)
    if m:
        return clock - timedelta(seconds=float(m.group(1)) * _UNIT_SECS[m.group(2).lower()])
    try:
        at = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        msg = f"--since: {text!r} is neither an age (7d, 12h, 30m) nor an ISO 8601 time"
        raise ConfigurationError(msg) from None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)
