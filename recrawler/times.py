"""Times and durations as people type them, read by one parser wherever one is taken: an age
(``7d``: seven days ago; ``+2h``: two hours from now) or an ISO 8601 time; a duration (``90``,
``90s``, ``2m``, ``1.5h``, ``1w``). Pure: no Scrapy."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from recrawler.exceptions import ConfigurationError

__all__ = ["UNIT_SECS", "parse_duration", "parse_time"]

#: seconds per unit of an age or a duration
UNIT_SECS = {"w": 7 * 86400.0, "d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
_AMOUNT = re.compile(r"^\s*([+-]?)\s*(\d+(?:\.\d+)?)\s*([wdhms]?)\s*$", re.IGNORECASE)
#: a signed age's seconds beyond this are no time a clock shows (and overflow a datetime)
_MAX_SECS = 1000 * 365 * 86400.0


def parse_duration(text: Any, *, name: str) -> float:
    """Seconds of ``90``, ``90s``, ``2m``, ``1.5h``, ``1d`` or ``1w`` (a bare number is seconds);
    anything else, or a negative one, is one ConfigurationError line naming *name*."""
    m = _AMOUNT.match(str(text))
    if m is None or m.group(1) == "-":
        msg = f"{name}: {text!r} is not a duration (90, 90s, 2m, 1.5h, 1d)"
        raise ConfigurationError(msg)
    return float(m.group(2)) * UNIT_SECS[(m.group(3) or "s").lower()]


def parse_time(text: Any, *, name: str, now: datetime | None = None) -> datetime:
    """The time *text* names, timezone-aware UTC: an age before *now* (the wall clock) such as
    ``7d``, ``12h``, ``30m``, ``2w`` (``-7d`` too), a time after it (``+2d``), or an ISO 8601 time
    (``2026-11-24``, ``2026-11-24T10:00:00+01:00``; UTC when it names no zone). Anything else is one
    ConfigurationError line naming *name* and what it takes."""
    if isinstance(text, datetime):
        at = text
    else:
        clock = now or datetime.now(UTC)
        m = _AMOUNT.match(str(text))
        if m is not None and m.group(3):
            secs = float(m.group(2)) * UNIT_SECS[m.group(3).lower()]
            if secs > _MAX_SECS:
                raise ConfigurationError(f"{name}: {text!r} is further than a clock goes")
            return clock + timedelta(seconds=secs if m.group(1) == "+" else -secs)
        try:
            at = datetime.fromisoformat(str(text).strip().replace("Z", "+00:00"))
        except ValueError:
            msg = (
                f"{name}: {text!r} is neither an age (7d, 12h, 30m; +2d from now) nor an ISO 8601 "
                "time (2026-11-24, 2026-11-24T10:00:00Z)"
            )
            raise ConfigurationError(msg) from None
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
