"""Sitemap ``lastmod`` values: every W3C datetime form, read as the latest instant they can denote;
a gzipped sitemap decompressed a chunk at a time; whether a sitemap's parser read it to its end."""

from __future__ import annotations

import gzip
import re
import struct
from datetime import UTC, datetime, timedelta
from typing import IO, Any

# W3C datetime (https://www.w3.org/TR/NOTE-datetime): YYYY, YYYY-MM, YYYY-MM-DD, then
# Thh:mmTZD, Thh:mm:ssTZD or Thh:mm:ss.sTZD; TZD is Z or +hh:mm / -hh:mm.
_W3C = re.compile(
    r"""^(?P<y>\d{4})(?:-(?P<mo>\d{2})(?:-(?P<d>\d{2})
        (?:[Tt ](?P<h>\d{2}):(?P<mi>\d{2})(?::(?P<s>\d{2})(?:\.(?P<f>\d+))?)?
        (?P<tz>[Zz]|[+-]\d{2}:?\d{2})?)?)?)?$""",
    re.VERBOSE,
)


def _end_of_month(year: int, month: int) -> datetime:
    nxt = datetime(year + 1, 1, 1, tzinfo=UTC) if month == 12 else datetime(year, month + 1, 1, tzinfo=UTC)
    return nxt - timedelta(microseconds=1)


def parse_lastmod(value: str | None) -> datetime | None:
    """Return the latest UTC instant *value* can mean, or None when it is missing or malformed.

    A reduced precision covers its whole period (``2026-03-01`` is read as 23:59:59.999999 that
    day, ``2026-03`` as the month's last instant), so a date-only lastmod never looks older than a
    check made the same day. A time without a zone designator is read as UTC.
    """
    if not value:
        return None
    m = _W3C.match(value.strip())
    if m is None:
        return None
    try:
        year = int(m["y"])
        if m["mo"] is None:
            return datetime(year, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
        month = int(m["mo"])
        if m["d"] is None:
            return _end_of_month(year, month)
        day = int(m["d"])
        if m["h"] is None:
            return datetime(year, month, day, 23, 59, 59, 999999, tzinfo=UTC)
        hour, minute = int(m["h"]), int(m["mi"])
        if m["s"] is None:
            second, micro = 59, 999999
        else:
            second = int(m["s"])
            micro = int((m["f"] or "0")[:6].ljust(6, "0")) if m["f"] is not None else 0
        moment = datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)
    except ValueError:
        # 2026-02-30, 25:00: not a date
        return None
    tz = m["tz"]
    if tz and tz not in ("Z", "z"):
        sign = 1 if tz[0] == "+" else -1
        digits = tz[1:].replace(":", "")
        offset = timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
        moment -= sign * offset
    return moment


def known_lastmod(value: str | None, now: datetime) -> datetime | None:
    """Parse *value*; a date in the future (beyond *now*) means "unknown", like a missing one.

    The future test uses the earliest instant the value can mean, so today's date-only
    lastmod is known.
    """
    moment = parse_lastmod(value)
    if moment is None:
        return None
    earliest = parse_lastmod_start(value)
    if earliest is not None and earliest > now:
        return None
    return moment


def parse_lastmod_start(value: str | None) -> datetime | None:
    """The earliest UTC instant *value* can mean (``2026-03-01`` is its midnight), or None."""
    if not value:
        return None
    m = _W3C.match(value.strip())
    if m is None:
        return None
    if m["h"] is not None:
        latest = parse_lastmod(value)
        if latest is None:
            return None
        # a time without seconds covers its minute: the start is the minute itself
        return latest.replace(second=0, microsecond=0) if m["s"] is None else latest
    try:
        return datetime(int(m["y"]), int(m["mo"] or 1), int(m["d"] or 1), tzinfo=UTC)
    except ValueError:
        return None


__all__ = ["gunzip_into", "known_lastmod", "parse_lastmod", "parse_lastmod_start", "stopped_early"]

#: bytes decompressed at a time
_CHUNK = 65_536


def gunzip_into(src: IO[bytes], dst: IO[bytes], *, max_size: int = 0) -> IO[bytes]:
    """Decompress the gzip stream *src* into *dst* a chunk at a time, as Scrapy's ``gunzip`` does
    in memory: a damaged or cut-short stream keeps what came before the damage (and fails only if
    nothing came), and more than *max_size* bytes (0: no bound) is a ValueError. Returns *dst*,
    rewound."""
    unpacked = gzip.GzipFile(fileobj=src)
    size = 0
    while True:
        try:
            chunk = unpacked.read1(_CHUNK)
        except (OSError, EOFError, struct.error):
            if size:
                break
            raise
        if not chunk:
            break
        size += len(chunk)
        if max_size and size > max_size:
            msg = f"more than {max_size} bytes once decompressed"
            raise ValueError(msg)
        dst.write(chunk)
    dst.seek(0)
    return dst


def stopped_early(sitemap: Any) -> tuple[int, str] | None:
    """Where and why the parser of a read :class:`scrapy.utils.sitemap.Sitemap` stopped before the
    end (its first fatal error: a file cut short, an entity expansion bomb), or None. lxml recovers
    and ends the listing there, silently."""
    errors = getattr(getattr(sitemap, "xmliter", None), "error_log", None)
    fatal = errors.filter_from_fatals() if errors is not None else ()
    if not fatal:
        return None
    return int(fatal[0].line), str(fatal[0].message).strip()[:200]
