"""The closing guards: whether a run's absence evidence is trusted, and what change holds a run."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Self

from scrapy.spiders import SitemapSpider

from recrawler import outcome
from recrawler.detect.hashing import fuzzy_distance
from recrawler.exceptions import ConfigurationError
from recrawler.outcome import HOLD_SAME_CONTENT, HOLD_SPIKE
from recrawler.runtime import runtime_of

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

    from recrawler.runtime import Runtime
    from recrawler.state import ReconcileResult, Run

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class RemovalLimits:
    """When a page is gone, when a run's absence evidence is not trusted, and how much removal
    or change holds a run. A bad value is a ``ConfigurationError`` naming its setting.

    Settings: ``RECRAWLER_GONE_AFTER_MISSES``, ``RECRAWLER_GONE_STATUSES``, ``RECRAWLER_MAX_ERROR_RATIO``,
    ``RECRAWLER_MAX_REMOVE_RATIO``, ``RECRAWLER_MAX_REMOVE_MIN``, ``RECRAWLER_LISTING_MIN_RATIO``,
    ``RECRAWLER_CHANGE_ALERT_RATIO``, ``RECRAWLER_CHANGE_ALERT_MIN``.
    """

    gone_after: int = 2
    gone_statuses: tuple[int, ...] = (410,)
    max_error_ratio: float = 0.2
    max_remove_ratio: float = 0.1
    max_remove_min: int = 3
    listing_min_ratio: float = 0.5
    alert_ratio: float = 0.5
    alert_min: int = 10

    def __post_init__(self) -> None:
        for name, value, ok in (
            ("RECRAWLER_GONE_AFTER_MISSES", self.gone_after, self.gone_after >= 1),
            ("RECRAWLER_MAX_ERROR_RATIO", self.max_error_ratio, 0 <= self.max_error_ratio <= 1),
            ("RECRAWLER_MAX_REMOVE_RATIO", self.max_remove_ratio, 0 <= self.max_remove_ratio <= 1),
            ("RECRAWLER_MAX_REMOVE_MIN", self.max_remove_min, self.max_remove_min >= 0),
            ("RECRAWLER_LISTING_MIN_RATIO", self.listing_min_ratio, 0 <= self.listing_min_ratio <= 1),
            ("RECRAWLER_CHANGE_ALERT_RATIO", self.alert_ratio, 0 <= self.alert_ratio <= 1),
        ):
            if not ok:
                raise ConfigurationError(f"{name}: bad value {value!r}")

    @classmethod
    def from_settings(cls, s: BaseSettings) -> Self:
        """The limits a crawl's settings give."""
        return cls(
            gone_after=s.getint("RECRAWLER_GONE_AFTER_MISSES"),
            gone_statuses=tuple(int(x) for x in s.getlist("RECRAWLER_GONE_STATUSES")),
            max_error_ratio=s.getfloat("RECRAWLER_MAX_ERROR_RATIO"),
            max_remove_ratio=s.getfloat("RECRAWLER_MAX_REMOVE_RATIO"),
            max_remove_min=s.getint("RECRAWLER_MAX_REMOVE_MIN"),
            listing_min_ratio=s.getfloat("RECRAWLER_LISTING_MIN_RATIO"),
            alert_ratio=s.getfloat("RECRAWLER_CHANGE_ALERT_RATIO"),
            alert_min=s.getint("RECRAWLER_CHANGE_ALERT_MIN"),
        )


class RunGuards:
    """The Reconciler's judges of a run, over the run's counters (``Runtime.counters``), never
    stats: the outage guard (reasons not to trust what the run did not see), the listing it
    compares, and the change holds (a spike, the same text on many pages).

    Settings: those of ``RemovalLimits``.
    """

    def __init__(self, crawler: Crawler, limits: RemovalLimits) -> None:
        self.crawler = crawler
        self.limits = limits

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """The guards with the crawl's ``RemovalLimits``."""
        return cls(crawler, RemovalLimits.from_settings(crawler.settings))

    @property
    def runtime(self) -> Runtime:
        """The crawl's Runtime (looked up when a guard runs: every extension is built by then)."""
        return runtime_of(self.crawler)

    def sitemap_failure(self) -> str | None:
        """Why the run's listing cannot be trusted (None: it can, or not a sitemap spider): its
        sitemaps, or the links of a site crawled from start URLs (``recrawler_listing``)."""
        spider = self.crawler.spider
        if not isinstance(spider, SitemapSpider):
            return None
        c = self.runtime.counters
        if getattr(spider, "recrawler_listing", "sitemap") == "links":
            return outcome.link_listing_failure(c.family("recrawler/sitemap"), c.family("recrawler/follow"))
        return outcome.sitemap_failure(c.family("recrawler/sitemap"))

    def listed(self) -> int | None:
        """How many pages this run's listing named (None: not a sitemap spider)."""
        if not isinstance(self.crawler.spider, SitemapSpider):
            return None
        c = self.runtime.counters
        # distinct page keys (the schedule, the frontier and deltafetch count each once); entries, else
        return c["recrawler/sitemap/pages"] or c["recrawler/sitemap/urls"]

    def state_errors(self) -> int:
        """The run's state-store errors so far."""
        return self.runtime.counters.total("recrawler/state/error")

    def outage(self, reason: str, run: Run) -> list[str]:
        """Reasons not to trust this run's absence evidence (empty: trust it)."""
        c = self.runtime.counters
        why = outcome.outage_reasons(
            reason=reason,
            sitemap=self.sitemap_failure(),
            listed=self.listed(),
            last_listed=run.last_listed,
            listing_min_ratio=self.limits.listing_min_ratio,
            requests=c["recrawler/request/count"],
            failed=c["recrawler/request/failed"],
            max_error_ratio=self.limits.max_error_ratio,
            state_errors=self.state_errors(),
            robots_forbidden=c["recrawler/robots/forbidden"],
        )
        if outcome.OUTAGE_ROBOTS in why:
            logger.error(
                "robots.txt forbade %(n)d of %(all)d page requests: this run checked almost nothing "
                "(a staging robots.txt deployed?); nothing is removed, exit 4",
                {
                    "n": c["recrawler/robots/forbidden"],
                    "all": c["recrawler/robots/forbidden"] + c["recrawler/request/count"],
                },
                extra={"spider": self.crawler.spider},
            )
        if self.runtime.lease_lost:
            why.append("lease_lost")
        if self.runtime.counters["recrawler/workers/lost"]:
            why.append("worker_lost")
        return why

    def log_outage(self, skipped: list[str], result: ReconcileResult) -> None:
        """Say what the outage guard kept: ERROR when missing pages were kept, else a WARNING."""
        if skipped and result.skipped_misses:
            logger.error(
                "outage guard: %(n)d missing pages were NOT quarantined or marked gone (%(why)s)",
                {"n": result.skipped_misses, "why": ", ".join(skipped)},
            )
        elif skipped:
            logger.warning(
                "outage guard held (%(why)s): nothing quarantined or gone this run",
                {"why": ", ".join(skipped)},
            )
        if "listing_shrunk" in skipped:
            # a rejected listing is never the next run's baseline: the guard holds until it is whole
            logger.warning(
                "the listing is compared with the last accepted one until it is whole again; a site "
                "that really shrank: run once with RECRAWLER_LISTING_MIN_RATIO=0",
            )

    async def change_holds(self, run: Run, moved_in: int) -> dict[str, str]:
        """A change spike, or the same text on many pages at once (a maintenance page), holds the
        run. Both judge everything the site has not published, whichever run stored it (a killed
        run's pages too); a first run (nothing published yet) is never a spike. *moved_in*: the
        run's pages that moved in from another key (not new)."""
        rt = self.runtime
        limits = self.limits
        holds: dict[str, str] = {}
        pending = await rt.store.decisions.pending_changes(run.site)
        new = 0 if run.backfill else max(pending["new"] - moved_in, 0)
        new_changed = new + pending["changed"]
        judged = pending["published"] + pending["new"]
        if outcome.is_spike(
            prior_pages=pending["published"],
            new_changed=new_changed,
            judged=judged,
            ratio=limits.alert_ratio,
            minimum=limits.alert_min,
        ):
            holds[HOLD_SPIKE] = (
                f"{new_changed} of {judged} pages new or changed and not published yet "
                f"(> RECRAWLER_CHANGE_ALERT_RATIO={limits.alert_ratio}): a template change or a noisy hash?"
            )
        if pending["published"]:
            group = await rt.store.decisions.largest_same_content(run, distance=fuzzy_distance)
            if group is not None and group[0] >= limits.alert_min:
                size, sample = group
                holds[HOLD_SAME_CONTENT] = (
                    f"{size} pages changed to the same text and are not published yet "
                    f"(RECRAWLER_CHANGE_ALERT_MIN={limits.alert_min}): a maintenance or error page? "
                    f"e.g. {sample}"
                )
        if rt.counters["recrawler/run/held"]:
            # page mode held the run as soon as the spike showed
            holds.setdefault(HOLD_SPIKE, "change spike while pages were being published")
        return holds


__all__ = ["RemovalLimits", "RunGuards"]
