"""Adaptive revisit intervals: a Poisson change-rate estimate per page, the next interval, and due decisions.

Pure: no Scrapy, no database. The spider middleware, the pipelines' schedule update, the CLI and
the benchmark all call these functions.

The change rate follows Cho and Garcia-Molina, "Estimating frequency of change" (ACM TOIT 3(3),
2003), improved estimator for regular checks: with ``n`` checks, ``X`` of which found a change,
and a mean interval ``I`` between checks,

    r = -log((n - X + 0.5) / (n + 0.5)) / I

(``I`` is the summed intervals over ``n``). The estimator stays finite when every check found a
change (``X == n``) and is 0 when none did. The next interval aims at the median time to the next
change, ``log(2) / r``, and moves from the interval just observed: after a change it shrinks (to at
most 3/4 of it), after a check that found none it never shrinks and at most doubles; it stays within the
page's bounds (``RECRAWLER_MIN_INTERVAL_SECS`` / ``RECRAWLER_MAX_INTERVAL_SECS`` or a per-pattern
override). Old checks fade: past ``HISTORY`` checks the counts are scaled down, so a page that
changes its habits is followed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Self

from recrawler.exceptions import ConfigurationError
from recrawler.sitemaps import known_lastmod

if TYPE_CHECKING:
    from collections.abc import Mapping

    from scrapy.settings import BaseSettings

SCHEDULE_MODES = ("adaptive", "all")
LASTMOD_MODES = ("skip", "hint", "ignore")
#: checks remembered at full weight; older ones fade (counts scaled by HISTORY / n)
HISTORY = 32
#: an unchanged check at most multiplies the interval by this
MAX_GROWTH = 2.0
#: a check that found a change cuts the observed interval at least by this factor
CHANGED_SHRINK = 0.75
_LN2 = math.log(2)
# page statuses, as stored (kept literal: this module imports nothing from the state package)
_GONE, _QUARANTINED = "gone", "quarantined"

#: why a page is requested (``recrawler/schedule/due/<reason>``)
DUE_REASONS = (
    "new",
    "all",
    "audit",
    "waiting",
    "feed",
    "lastmod",
    "quarantined",
    "max_interval",
    "unscheduled",
    "scheduled",
)
#: why a listed page is not (``recrawler/page/skipped/<layer>``)
SKIP_SCHEDULE, SKIP_LASTMOD = "schedule", "lastmod"


def change_rate(checks: float, changes: float, checked_secs: float) -> float | None:
    """Cho and Garcia-Molina's improved Poisson estimator, in changes per second.

    ``checks`` (n) checks, ``changes`` (X) of which found a change, over ``checked_secs`` summed
    intervals (so the mean interval is ``checked_secs / checks``). None without any interval.
    """
    if checks <= 0 or checked_secs <= 0:
        return None
    changes = min(max(changes, 0.0), checks)
    mean_interval = checked_secs / checks
    return -math.log((checks - changes + 0.5) / (checks + 0.5)) / mean_interval


@dataclass(frozen=True, slots=True)
class Bounds:
    """Shortest and longest revisit interval of a page, in seconds."""

    min_secs: float
    max_secs: float

    def clamp(self, secs: float) -> float:
        """*secs* kept within the bounds."""
        return min(max(secs, self.min_secs), self.max_secs)


@dataclass(frozen=True, slots=True, kw_only=True)
class Revisit:
    """A page's revisit state: the schedule columns of its row."""

    #: the run clock of the last check (a 200 or a 304)
    last_check_at: datetime | None = None
    next_check_at: datetime | None = None
    #: the interval chosen after the last check, seconds
    interval: float | None = None
    #: n, X and the summed intervals of the estimator (fractional once old checks fade)
    checks: float = 0.0
    changes: float = 0.0
    checked_secs: float = 0.0
    #: the estimate, changes per second (None: not enough history yet)
    rate: float | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether a listed page is requested this run, and why (a due reason or a skip layer)."""

    due: bool
    reason: str


def next_revisit(prev: Revisit | None, *, changed: bool, now: datetime, bounds: Bounds) -> Revisit:
    """The revisit state after a check at *now* that found a change (or not).

    A page without a previous check (new, or stored before schedules existed) starts at the
    shortest interval. A second check at the same run clock teaches nothing about time: the
    state is kept, and a change only brings the next check forward to the shortest interval.
    """
    if prev is None or prev.last_check_at is None:
        return Revisit(
            last_check_at=now,
            next_check_at=now + timedelta(seconds=bounds.min_secs),
            interval=bounds.min_secs,
        )
    elapsed = (now - prev.last_check_at).total_seconds()
    if elapsed <= 0:
        if not changed:
            return prev
        soon = now + timedelta(seconds=bounds.min_secs)
        return replace(prev, next_check_at=min(prev.next_check_at or soon, soon))
    n = prev.checks + 1
    x = prev.changes + (1 if changed else 0)
    t = prev.checked_secs + elapsed
    if n > HISTORY:
        fade = HISTORY / n
        n, x, t = n * fade, x * fade, t * fade
    rate = change_rate(n, x, t)
    target = _LN2 / rate if rate else math.inf
    # a change shortens the interval; a check that found none never does
    interval = (
        min(target, elapsed * CHANGED_SHRINK) if changed else min(max(target, elapsed), elapsed * MAX_GROWTH)
    )
    interval = bounds.clamp(interval)
    return Revisit(
        last_check_at=now,
        next_check_at=now + timedelta(seconds=interval),
        interval=interval,
        checks=n,
        changes=x,
        checked_secs=t,
        rate=rate,
    )


def parse_now(value: Any) -> datetime | None:
    """``RECRAWLER_NOW``: an ISO-8601 time (a zone-less one is UTC), or None for the wall clock."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        moment = value
    else:
        try:
            moment = datetime.fromisoformat(str(value).strip())
        except ValueError as exc:
            raise ConfigurationError(f"RECRAWLER_NOW: not an ISO-8601 time: {value!r}") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def audit_count(sample: float, population: int) -> int:
    """Pages to audit: a ``float`` is a share of *population* (rounded up), an ``int`` a count."""
    if sample <= 0 or population <= 0:
        return 0
    if isinstance(sample, float):
        return min(population, math.ceil(sample * population))
    return min(population, int(sample))


def parse_audit_sample(value: Any) -> float:
    """``RECRAWLER_AUDIT_SAMPLE``: a share (``0.02``, ``"2%"``, ``1.0`` or ``"100%"`` for every
    page) as a ``float``, or a whole count (``20``) as an ``int``."""
    text = str(value).strip()
    try:
        if text.endswith("%"):
            sample: float = float(text[:-1]) / 100
        elif isinstance(value, float) or any(c in text for c in ".eE"):
            sample = float(text)
        else:
            sample = int(text)
    except ValueError as exc:
        raise ConfigurationError(f"RECRAWLER_AUDIT_SAMPLE: not a share or a count: {value!r}") from exc
    if sample < 0 or math.isnan(sample) or (isinstance(sample, float) and sample > 1):
        raise ConfigurationError(
            f"RECRAWLER_AUDIT_SAMPLE: bad value {value!r} (a share is at most 1.0 or 100%; a count is whole)"
        )
    return sample


class SchedulePolicy:
    """Decides which pages a run requests, and when each is due next.

    Built from ``RECRAWLER_SCHEDULE``, ``RECRAWLER_NOW``, ``RECRAWLER_MIN_INTERVAL_SECS``,
    ``RECRAWLER_MAX_INTERVAL_SECS``, ``RECRAWLER_INTERVAL_OVERRIDES`` and
    ``RECRAWLER_LASTMOD_MODE``. ``now`` is the run clock: one instant for the whole run.
    """

    def __init__(
        self,
        *,
        now: datetime,
        mode: str = "adaptive",
        lastmod_mode: str = "hint",
        min_secs: float = 3600.0,
        max_secs: float = 86400.0,
        overrides: Mapping[str, Any] | None = None,
    ) -> None:
        if mode not in SCHEDULE_MODES:
            raise ConfigurationError(
                f"RECRAWLER_SCHEDULE: {mode!r} is not one of {', '.join(SCHEDULE_MODES)}"
            )
        if lastmod_mode not in LASTMOD_MODES:
            msg = f"RECRAWLER_LASTMOD_MODE: {lastmod_mode!r} is not one of {', '.join(LASTMOD_MODES)}"
            raise ConfigurationError(msg)
        if not 0 < min_secs <= max_secs:
            msg = (
                "RECRAWLER_MIN_INTERVAL_SECS / RECRAWLER_MAX_INTERVAL_SECS: "
                f"bad bounds {min_secs!r}, {max_secs!r}"
            )
            raise ConfigurationError(msg)
        self.now = now
        self.mode = mode
        self.lastmod_mode = lastmod_mode
        self.default_bounds = Bounds(float(min_secs), float(max_secs))
        self.overrides: list[tuple[re.Pattern[str], Bounds]] = []
        for pattern, value in (overrides or {}).items():
            self.overrides.append((self._regex(pattern), self._bounds(pattern, value)))

    @classmethod
    def from_settings(cls, settings: BaseSettings, now: datetime | None = None) -> Self:
        """Build from a crawler's (or the CLI's) settings; *now* overrides ``RECRAWLER_NOW``."""
        clock = now or parse_now(settings.get("RECRAWLER_NOW")) or datetime.now(UTC)
        return cls(
            now=clock,
            mode=str(settings.get("RECRAWLER_SCHEDULE")),
            lastmod_mode=str(settings.get("RECRAWLER_LASTMOD_MODE")),
            min_secs=settings.getfloat("RECRAWLER_MIN_INTERVAL_SECS"),
            max_secs=settings.getfloat("RECRAWLER_MAX_INTERVAL_SECS"),
            overrides=settings.getdict("RECRAWLER_INTERVAL_OVERRIDES"),
        )

    @staticmethod
    def _regex(pattern: str) -> re.Pattern[str]:
        try:
            return re.compile(pattern)
        except re.error as exc:
            raise ConfigurationError(f"RECRAWLER_INTERVAL_OVERRIDES: bad pattern {pattern!r}: {exc}") from exc

    def _bounds(self, pattern: str, value: Any) -> Bounds:
        try:
            low, high = value
            bounds = Bounds(
                float(low) if low is not None else self.default_bounds.min_secs,
                float(high) if high is not None else self.default_bounds.max_secs,
            )
        except (TypeError, ValueError) as exc:
            msg = f"RECRAWLER_INTERVAL_OVERRIDES: {pattern!r} needs [min_secs, max_secs], got {value!r}"
            raise ConfigurationError(msg) from exc
        if not 0 < bounds.min_secs <= bounds.max_secs:
            raise ConfigurationError(f"RECRAWLER_INTERVAL_OVERRIDES: {pattern!r}: bad bounds {value!r}")
        return bounds

    def bounds(self, url: str) -> Bounds:
        """The interval bounds of *url*: the first matching override (``re.search``), else the defaults."""
        for regex, bounds in self.overrides:
            if regex.search(url):
                return bounds
        return self.default_bounds

    def decide(
        self,
        revisit: Revisit | None,
        *,
        url: str,
        status: str | None,
        lastmod: str | None = None,
        feed_updated: datetime | None = None,
        audit: bool = False,
        lastmod_trusted: bool = True,
        waiting: bool = False,
    ) -> Decision:
        """Is a listed page due this run? ``revisit`` None (or status gone) means never seen.

        Order: new, ``RECRAWLER_SCHEDULE=all``, audit sample, a change or removal that waits for a
        decision (*waiting*: a check brings new evidence), a feed entry newer than the last check,
        a quarantined page (its misses must be consecutive), then the sitemap lastmod
        (``skip``/``hint``: newer than the last check means due at once; ``skip``: not newer means
        skipped until the max interval has passed), then the adaptive schedule.
        """
        if revisit is None or status is None or status == _GONE:
            return Decision(True, "new")
        if self.mode == "all":
            return Decision(True, "all")
        if audit:
            return Decision(True, "audit")
        if waiting:
            return Decision(True, "waiting")
        last = revisit.last_check_at
        if feed_updated is not None and (last is None or feed_updated > last):
            return Decision(True, "feed")
        if status == _QUARANTINED:
            return Decision(True, "quarantined")
        if last is not None and lastmod_trusted and self.lastmod_mode != "ignore":
            moment = known_lastmod(lastmod, self.now)
            if moment is not None:
                if moment > last:
                    return Decision(True, "lastmod")
                if self.lastmod_mode == "skip":
                    if last + timedelta(seconds=self.bounds(url).max_secs) <= self.now:
                        return Decision(True, "max_interval")
                    return Decision(False, SKIP_LASTMOD)
        if revisit.next_check_at is None:
            return Decision(True, "unscheduled")
        if revisit.next_check_at <= self.now:
            return Decision(True, "scheduled")
        return Decision(False, SKIP_SCHEDULE)

    def after_check(self, prev: Revisit | None, *, url: str, changed: bool, new: bool = False) -> Revisit:
        """The revisit state after checking *url* now (``new``: start a fresh history)."""
        return next_revisit(None if new else prev, changed=changed, now=self.now, bounds=self.bounds(url))

    def lastmod_claims_unchanged(self, lastmod: str | None, last_check_at: datetime | None) -> bool:
        """True when a known lastmod is not newer than the last check: "nothing changed since"."""
        if last_check_at is None:
            return False
        moment = known_lastmod(lastmod, self.now)
        return moment is not None and moment <= last_check_at


__all__ = [
    "DUE_REASONS",
    "LASTMOD_MODES",
    "SCHEDULE_MODES",
    "Bounds",
    "Decision",
    "Revisit",
    "SchedulePolicy",
    "audit_count",
    "change_rate",
    "next_revisit",
    "parse_audit_sample",
    "parse_now",
]
