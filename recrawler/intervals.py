"""When each page is due: once per staleness bound at a time of its own, and at once on a signal.

Pure: no Scrapy, no database. The spider middleware, the pipelines' schedule update, the CLI and
the benchmark all call these functions.

Docs change in deploys, not page by page: what finds a change is a signal (a new or newer sitemap
entry, a feed entry, a detected deploy, the audit sample), and the staleness bound
(``RECRAWLER_MAX_INTERVAL_SECS``, or a per-URL override) is the safety net. Each page is checked
once per bound at a *phase* of its own (a stable hash of its URL): the bound's requests are
spread evenly over the runs, never a burst where every page comes due at once (the per-page
Poisson schedule this replaced checked a new site's pages an hour, two, four... after its first
crawl, and a changed page more often, while a deploy that changed many pages at once went
unseen until each page's own time came). A page is due from 1/24 of its bound before its
time, so a run that starts a little early still checks it.

A sitemap lastmod (or feed entry) not newer than the page's last check vouches for the page when
the host's lastmods are trusted for it (``skip``: until caught lying; ``hint``: once the self-audit
found them honest): the page counts as verified without a request.

The change counts (Cho and Garcia-Molina's estimator, "Estimating frequency of change", ACM TOIT
3(3), 2003, ``r = -log((n - X + 0.5) / (n + 0.5)) / I``) are kept to say how often a page changed
(``recrawler due``), not to schedule it.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Self

from recrawler.exceptions import ConfigurationError
from recrawler.sitemaps import known_lastmod
from recrawler.times import parse_time

if TYPE_CHECKING:
    from collections.abc import Mapping

    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

SCHEDULE_MODES = ("adaptive", "all")
LASTMOD_MODES = ("skip", "hint", "ignore")
#: checks remembered at full weight; older ones fade (counts scaled by HISTORY / n)
HISTORY = 32
#: a page is due from this share of its bound before its time (a run a little early still checks it)
EARLY = 1 / 24
# page statuses, as stored (kept literal: this module imports nothing from the state package)
_GONE, _QUARANTINED = "gone", "quarantined"

#: why a page is requested (``recrawler/schedule/due/<reason>``)
DUE_REASONS = (
    "new",
    "all",
    "deploy",
    "probe",
    "audit",
    "waiting",
    "feed",
    "lastmod",
    "quarantined",
    "unscheduled",
    "scheduled",
)
#: why a listed page is not (``recrawler/page/skipped/<layer>``)
SKIP_SCHEDULE, SKIP_LASTMOD = "schedule", "lastmod"
#: what verified a page last: a request, or a trusted signal of the listing
VERIFIED_BY = ("request", "lastmod", "feed")


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


def phase_secs(url: str, bound: float) -> float:
    """The page's time within each period of *bound* seconds (a stable hash of *url*)."""
    digest = hashlib.sha256(url.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % max(int(bound), 1)


def next_phase(after: datetime, url: str, bound: float) -> datetime:
    """The page's first time strictly after *after*: its phase plus a whole number of bounds."""
    phase = phase_secs(url, bound)
    t = after.timestamp()
    k = math.floor((t - phase) / bound) + 1
    return datetime.fromtimestamp(phase + k * bound, tz=UTC)


@dataclass(frozen=True, slots=True, kw_only=True)
class Revisit:
    """A page's revisit state: the schedule columns of its row."""

    #: the run clock of the last check (a 200 or a 304)
    last_check_at: datetime | None = None
    #: when the page's bound asks for its next check (its next phase)
    next_check_at: datetime | None = None
    #: the page's bound when it was last checked, seconds
    interval: float | None = None
    #: n, X and the summed intervals of the change estimate (fractional once old checks fade)
    checks: float = 0.0
    changes: float = 0.0
    checked_secs: float = 0.0
    #: the estimate, changes per second (None: not enough history yet); shown, never scheduled by
    rate: float | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether a listed page is requested this run, and why (a due reason or a skip layer); a
    skip a trusted signal vouched for says which (``lastmod`` or ``feed``: the page is verified)."""

    due: bool
    reason: str
    verified: str | None = None


def next_revisit(prev: Revisit | None, *, changed: bool, now: datetime, url: str, bound: float) -> Revisit:
    """The revisit state after a check of *url* at *now* that found a change (or not).

    The next check is the page's next phase after *now* (at most *bound* later). A second check
    at the same run clock teaches nothing: the state is kept.
    """
    following = next_phase(now + timedelta(seconds=bound * EARLY), url, bound)
    if prev is None or prev.last_check_at is None:
        return Revisit(last_check_at=now, next_check_at=following, interval=bound)
    elapsed = (now - prev.last_check_at).total_seconds()
    if elapsed <= 0:
        return prev
    n = prev.checks + 1
    x = prev.changes + (1 if changed else 0)
    t = prev.checked_secs + elapsed
    if n > HISTORY:
        fade = HISTORY / n
        n, x, t = n * fade, x * fade, t * fade
    return Revisit(
        last_check_at=now,
        next_check_at=following,
        interval=bound,
        checks=n,
        changes=x,
        checked_secs=t,
        rate=change_rate(n, x, t),
    )


def parse_now(value: Any, name: str = "RECRAWLER_NOW") -> datetime | None:
    """``RECRAWLER_NOW``: an ISO-8601 time (a zone-less one is UTC) or an age from the wall clock
    (``+2d``, ``12h`` ago: :func:`recrawler.times.parse_time`), or None for the wall clock."""
    if value is None or value == "":
        return None
    return parse_time(value, name=name)


def audit_count(sample: float, population: int, *, part: float = 1.0) -> int:
    """Pages to audit: a ``float`` is a share of *population* (rounded up), an ``int`` a count.

    A share below 1 is the share audited per staleness bound: a run *part* of a bound after the
    last one draws that part of it (at least one page), so running hourly audits no more a day
    than running daily.
    """
    if sample <= 0 or population <= 0:
        return 0
    if isinstance(sample, float):
        if sample < 1:
            return min(population, max(1, math.ceil(sample * population * min(max(part, 0.0), 1.0))))
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

    Built from ``RECRAWLER_SCHEDULE``, ``RECRAWLER_NOW``, ``RECRAWLER_MAX_INTERVAL_SECS``,
    ``RECRAWLER_INTERVAL_OVERRIDES`` and ``RECRAWLER_LASTMOD_MODE`` (``RECRAWLER_MIN_INTERVAL_SECS``
    is no longer read: setting it warns). ``now`` is the run clock: one instant for the whole run,
    the one policy of a crawl (an extension, see :meth:`from_crawler`). A deploy detected on a
    site (:meth:`deployed`) makes every page of it that was not checked since due.
    """

    def __init__(
        self,
        *,
        now: datetime,
        mode: str = "adaptive",
        lastmod_mode: str = "hint",
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
        if not 0 < max_secs < math.inf:
            raise ConfigurationError(f"RECRAWLER_MAX_INTERVAL_SECS: bad bound {max_secs!r}")
        self.now = now
        self.mode = mode
        self.lastmod_mode = lastmod_mode
        self.default_bound = float(max_secs)
        self.overrides: list[tuple[re.Pattern[str], float]] = []
        for pattern, value in (overrides or {}).items():
            self.overrides.append((self._regex(pattern), self._bound(pattern, value)))
        #: site -> when its last deploy was detected: pages last checked before it are due
        self.deploys: dict[str, datetime] = {}

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """The run's one policy (its clock and the deploys it learns are the run's), placed by the
        add-on as an extension for a spider that opted in and found with ``crawler.get_extension``."""
        from recrawler.meta import require_opt_in

        require_opt_in(crawler)
        return cls.from_settings(crawler.settings)

    @classmethod
    def from_settings(cls, settings: BaseSettings, now: datetime | None = None) -> Self:
        """Build from a crawler's (or the CLI's) settings; *now* overrides ``RECRAWLER_NOW``."""
        clock = now or parse_now(settings.get("RECRAWLER_NOW")) or datetime.now(UTC)
        if settings.get("RECRAWLER_MIN_INTERVAL_SECS") is not None:
            logger.warning(
                "RECRAWLER_MIN_INTERVAL_SECS is no longer read: each page is checked once per "
                "RECRAWLER_MAX_INTERVAL_SECS at a time of its own, and at once when a signal says it "
                "changed (a listing, a feed, a deploy)"
            )
        return cls(
            now=clock,
            mode=str(settings.get("RECRAWLER_SCHEDULE")),
            lastmod_mode=str(settings.get("RECRAWLER_LASTMOD_MODE")),
            max_secs=settings.getfloat("RECRAWLER_MAX_INTERVAL_SECS"),
            overrides=settings.getdict("RECRAWLER_INTERVAL_OVERRIDES"),
        )

    @staticmethod
    def _regex(pattern: str) -> re.Pattern[str]:
        try:
            return re.compile(pattern)
        except re.error as exc:
            raise ConfigurationError(f"RECRAWLER_INTERVAL_OVERRIDES: bad pattern {pattern!r}: {exc}") from exc

    def _bound(self, pattern: str, value: Any) -> float:
        # a bound in seconds; [min, max] (the form before per-page intervals went) reads its max
        if isinstance(value, list | tuple) and len(value) == 2:
            value = value[1]
        try:
            bound = self.default_bound if value is None else float(value)
        except (TypeError, ValueError) as exc:
            msg = f"RECRAWLER_INTERVAL_OVERRIDES: {pattern!r} needs a bound in seconds, got {value!r}"
            raise ConfigurationError(msg) from exc
        if not 0 < bound < math.inf:
            raise ConfigurationError(f"RECRAWLER_INTERVAL_OVERRIDES: {pattern!r}: bad bound {value!r}")
        return bound

    def bound(self, url: str) -> float:
        """The staleness bound of *url*: the first matching override (``re.search``), else the default."""
        for regex, bound in self.overrides:
            if regex.search(url):
                return bound
        return self.default_bound

    def deployed(self, site: str, at: datetime) -> None:
        """A deploy of *site* was detected at *at*: its pages not checked since are due."""
        self.deploys[site] = at

    def lastmod_vouches(self, *, trusted: bool, honest: bool) -> bool:
        """Whether a host's lastmods (and feed dates) verify the pages they say are unchanged:
        ``skip`` trusts them until caught lying, ``hint`` once the self-audit found them honest."""
        if not trusted or self.lastmod_mode == "ignore":
            return False
        return self.lastmod_mode == "skip" or honest

    def decide(
        self,
        revisit: Revisit | None,
        *,
        url: str,
        status: str | None,
        site: str | None = None,
        lastmod: str | None = None,
        feed_updated: datetime | None = None,
        audit: bool = False,
        lastmod_trusted: bool = True,
        lastmod_honest: bool = False,
        waiting: bool = False,
    ) -> Decision:
        """Is a listed page due this run? ``revisit`` None (or status gone) means never seen.

        Order: new, ``RECRAWLER_SCHEDULE=all``, a deploy of *site* detected since the page's last
        check, the audit sample, a change or removal that waits for a decision (*waiting*: a check
        brings new evidence), a feed entry newer than the last check, a quarantined page (its
        misses must be consecutive), a lastmod newer than the last check; then a lastmod (or feed
        entry) not newer vouches for the page when the host's lastmods are trusted for it
        (:meth:`lastmod_vouches`); else the page's phase within its bound.
        """
        if revisit is None or status is None or status == _GONE:
            return Decision(True, "new")
        if self.mode == "all":
            return Decision(True, "all")
        last = revisit.last_check_at
        deploy = self.deploys.get(site) if site is not None else None
        if deploy is not None and (last is None or last < deploy):
            return Decision(True, "deploy")
        if audit:
            return Decision(True, "audit")
        if waiting:
            return Decision(True, "waiting")
        if feed_updated is not None and (last is None or feed_updated > last):
            return Decision(True, "feed")
        if status == _QUARANTINED:
            return Decision(True, "quarantined")
        if last is not None and lastmod_trusted and self.lastmod_mode != "ignore":
            moment = known_lastmod(lastmod, self.now)
            if moment is not None and moment > last:
                return Decision(True, "lastmod")
            if self.lastmod_vouches(trusted=lastmod_trusted, honest=lastmod_honest):
                if moment is not None:
                    return Decision(False, SKIP_LASTMOD, verified="lastmod")
                if feed_updated is not None:
                    return Decision(False, SKIP_LASTMOD, verified="feed")
        if revisit.next_check_at is None:
            return Decision(True, "unscheduled")
        early = timedelta(seconds=self.bound(url) * EARLY)
        if revisit.next_check_at <= self.now + early:
            return Decision(True, "scheduled")
        return Decision(False, SKIP_SCHEDULE)

    def after_check(self, prev: Revisit | None, *, url: str, changed: bool, new: bool = False) -> Revisit:
        """The revisit state after checking *url* now (``new``: start a fresh history)."""
        return next_revisit(
            None if new else prev, changed=changed, now=self.now, url=url, bound=self.bound(url)
        )

    def lastmod_claims_unchanged(self, lastmod: str | None, last_check_at: datetime | None) -> bool:
        """True when a known lastmod is not newer than the last check: "nothing changed since"."""
        if last_check_at is None:
            return False
        moment = known_lastmod(lastmod, self.now)
        return moment is not None and moment <= last_check_at


__all__ = [
    "DUE_REASONS",
    "EARLY",
    "LASTMOD_MODES",
    "SCHEDULE_MODES",
    "VERIFIED_BY",
    "Decision",
    "Revisit",
    "SchedulePolicy",
    "audit_count",
    "change_rate",
    "next_phase",
    "next_revisit",
    "parse_audit_sample",
    "parse_now",
    "phase_secs",
]
