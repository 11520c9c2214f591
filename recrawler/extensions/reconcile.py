"""Reconciler: verify unseen pages, apply misses behind the guards and breakers, report the run."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from scrapy import Request, signals
from scrapy.exceptions import DontCloseSpider, NotConfigured
from scrapy.spiders import SitemapSpider

from recrawler import meta
from recrawler import signals as recrawler_signals
from recrawler.audit import auditor_for
from recrawler.embedders import EmbedderError
from recrawler.exceptions import ConfigurationError, StateStoreError
from recrawler.items import PageStatus
from recrawler.pipelines.index import embed_missing, embedder_for, publish_mode, spike
from recrawler.redact import redact_url
from recrawler.schedule import policy_for
from recrawler.state import (
    RUN_FINISHED,
    RUN_HELD,
    RUN_PUBLISHED,
    begin_run_now,
    current_run,
    run_for,
    store_for,
    utcnow,
)

if TYPE_CHECKING:
    from datetime import datetime

    from scrapy.crawler import Crawler

    from recrawler.state import ReconcileResult, RemovalPlan, Run, StateStore

logger = logging.getLogger(__name__)

_NEW, _CHANGED, _UNCHANGED, _GONE, _ERROR = (
    PageStatus.NEW,
    PageStatus.CHANGED,
    PageStatus.UNCHANGED,
    PageStatus.GONE,
    PageStatus.ERROR,
)

#: exit codes of ``scrapy crawl`` / ``recrawler crawl`` (1 stays Scrapy's own: a crash)
EXIT_OK, EXIT_CONFIG, EXIT_HELD, EXIT_GUARD, EXIT_STATE, EXIT_BUSY = 0, 2, 3, 4, 5, 6
#: hold reasons: the run waits for ``recrawler runs approve`` / ``discard``
HOLD_MASS_REMOVAL, HOLD_SPIKE, HOLD_SAME_CONTENT = "mass_removal", "change_spike", "same_content"


class Reconciler:
    """Closes each run: checks stored pages the run did not reach, decides quarantine, gone and
    moved behind the outage guard and the mass-removal breaker, holds a run whose changes look
    like a template change or a maintenance page, writes the run report, logs the summary line and
    closes the store. It also begins the run (taking the site's lease, so one run at a time) and
    keeps the lease alive.

    Settings: ``RECRAWLER_VERIFY_UNSEEN_ENABLED``, ``RECRAWLER_VERIFY_BATCH_SIZE``,
    ``RECRAWLER_GONE_AFTER_MISSES``, ``RECRAWLER_GONE_STATUSES``, ``RECRAWLER_MAX_ERROR_RATIO``,
    ``RECRAWLER_MAX_REMOVE_RATIO``, ``RECRAWLER_MAX_REMOVE_MIN``, ``RECRAWLER_LISTING_MIN_RATIO``,
    ``RECRAWLER_CHANGE_ALERT_RATIO``, ``RECRAWLER_CHANGE_ALERT_MIN``, ``RECRAWLER_LEASE_SECS``,
    ``RECRAWLER_REPORT_FILE``.
    Stats: ``recrawler/crawled``, ``recrawler/page/{gone,quarantined,moved}``,
    ``recrawler/page/gone/http_<code>``, ``recrawler/reconcile/verified``,
    ``recrawler/reconcile/skipped/<reason>``, ``recrawler/reconcile/elapsed_seconds``,
    ``recrawler/run/held``, ``recrawler/run/held/<reason>``, ``recrawler/alert``.
    Signals: listens to ``spider_opened``, ``spider_idle``, ``spider_closed``; sends ``run_held``
    and ``run_finished``.

    With ``RECRAWLER_SCHEDULE=adaptive`` only unseen pages due by the run clock are checked:
    pages the schedule, lastmod or deltafetch skipped keep their state and chunks.
    """

    def __init__(
        self,
        crawler: Crawler,
        store: StateStore,
        *,
        verify_unseen: bool = True,
        verify_batch: int = 500,
        gone_after: int = 2,
        gone_statuses: tuple[int, ...] = (410,),
        max_error_ratio: float = 0.2,
        max_remove_ratio: float = 0.1,
        max_remove_min: int = 3,
        listing_min_ratio: float = 0.5,
        alert_ratio: float = 0.5,
        alert_min: int = 10,
        lease_secs: float = 60.0,
        report_file: str | None = None,
        index_enabled: bool = False,
        publish_each_page: bool = False,
        dry_run: bool = False,
    ) -> None:
        for name, value, ok in (
            ("RECRAWLER_GONE_AFTER_MISSES", gone_after, gone_after >= 1),
            ("RECRAWLER_VERIFY_BATCH_SIZE", verify_batch, verify_batch >= 1),
            ("RECRAWLER_MAX_ERROR_RATIO", max_error_ratio, 0 <= max_error_ratio <= 1),
            ("RECRAWLER_MAX_REMOVE_RATIO", max_remove_ratio, 0 <= max_remove_ratio <= 1),
            ("RECRAWLER_MAX_REMOVE_MIN", max_remove_min, max_remove_min >= 0),
            ("RECRAWLER_LISTING_MIN_RATIO", listing_min_ratio, 0 <= listing_min_ratio <= 1),
            ("RECRAWLER_CHANGE_ALERT_RATIO", alert_ratio, 0 <= alert_ratio <= 1),
            ("RECRAWLER_LEASE_SECS", lease_secs, lease_secs > 0),
        ):
            if not ok:
                raise ConfigurationError(f"{name}: bad value {value!r}")
        self.crawler = crawler
        self.store = store
        self.verify_unseen = verify_unseen
        self.verify_batch = verify_batch
        self.gone_after = gone_after
        self.gone_statuses = gone_statuses
        self.max_error_ratio = max_error_ratio
        self.max_remove_ratio = max_remove_ratio
        self.max_remove_min = max_remove_min
        self.listing_min_ratio = listing_min_ratio
        self.alert_ratio = alert_ratio
        self.alert_min = alert_min
        self.lease_secs = lease_secs
        self.report_file = report_file
        self.index_enabled = index_enabled
        self.publish_each_page = publish_each_page
        self.dry_run = dry_run
        self._verify_done = False
        #: changed pages the boilerplate take-back turned into unchanged ones
        self._taken_back = 0
        self._heartbeat: asyncio.Task[None] | None = None
        self._lease_lost = False
        #: how the run ended, for ``scrapy crawl``'s exit code (see EXIT_*)
        self.exit_code: int | None = None
        self.outcome: dict[str, Any] = {}

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Read settings, open the store and begin the run (a bad database, or another run of the
        site, stops the crawl before the first request), and connect the signals."""
        if crawler.spider is not None and not meta.spider_opted_in(crawler.spider):
            raise NotConfigured
        s = crawler.settings
        if not s.get("RECRAWLER_DB_URI"):
            raise NotConfigured("RECRAWLER_DB_URI is not set")
        ext = cls(
            crawler,
            store_for(crawler),
            verify_unseen=s.getbool("RECRAWLER_VERIFY_UNSEEN_ENABLED"),
            verify_batch=s.getint("RECRAWLER_VERIFY_BATCH_SIZE"),
            gone_after=s.getint("RECRAWLER_GONE_AFTER_MISSES"),
            gone_statuses=tuple(int(x) for x in s.getlist("RECRAWLER_GONE_STATUSES")),
            max_error_ratio=s.getfloat("RECRAWLER_MAX_ERROR_RATIO"),
            max_remove_ratio=s.getfloat("RECRAWLER_MAX_REMOVE_RATIO"),
            max_remove_min=s.getint("RECRAWLER_MAX_REMOVE_MIN"),
            listing_min_ratio=s.getfloat("RECRAWLER_LISTING_MIN_RATIO"),
            alert_ratio=s.getfloat("RECRAWLER_CHANGE_ALERT_RATIO"),
            alert_min=s.getint("RECRAWLER_CHANGE_ALERT_MIN"),
            lease_secs=s.getfloat("RECRAWLER_LEASE_SECS"),
            report_file=s.get("RECRAWLER_REPORT_FILE") or None,
            index_enabled=s.getbool("RECRAWLER_INDEX_ENABLED"),
            publish_each_page=publish_mode(s) == "page",
            dry_run=s.getbool("RECRAWLER_DRY_RUN"),
        )
        # Fail before the first request: a locked, corrupt or newer database, or another run of
        # the same site, stops the crawl (the crawl command prints it and picks the exit code).
        if crawler.spider is not None:
            begin_run_now(crawler)
        else:
            # built before its spider (scrapy.utils.test.get_crawler): the run begins when the
            # spider opens
            ext.store.open_sync()
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.spider_idle, signal=signals.spider_idle)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    def _stat(self, name: str) -> int:
        stats = self.crawler.stats
        assert stats is not None
        return int(stats.get_value(name, 0) or 0)

    async def spider_opened(self) -> None:
        """Log the run and start the lease heartbeat."""
        run = await run_for(self.crawler)
        logger.info(
            "recrawler run %(run)d on %(uri)s (site: %(site)s)",
            {"run": run.id, "uri": redact_url(self.store.uri), "site": run.site or "-"},
            extra={"spider": self.crawler.spider},
        )
        self._heartbeat = asyncio.ensure_future(self._beat(run))

    async def _beat(self, run: Run) -> None:
        """Renew the site's lease every quarter of ``RECRAWLER_LEASE_SECS``; close the spider if a
        later run took it over (this process stalled longer than the lease)."""
        while True:
            await asyncio.sleep(self.lease_secs / 4)
            try:
                held = await self.store.heartbeat(run)
            except StateStoreError as exc:
                logger.error("lease heartbeat failed: %(exc)s", {"exc": exc})
                continue
            if not held:
                self._lease_lost = True
                logger.error(
                    "run %(run)d lost the lease of %(site)s to another run: stopping",
                    {"run": run.id, "site": run.site},
                )
                engine = self.crawler.engine
                if engine is not None:
                    await engine.close_spider_async(reason="recrawler_lease_lost")
                return

    def _sitemap_failure(self) -> str | None:
        if not isinstance(self.crawler.spider, SitemapSpider):
            return None
        if self._stat("recrawler/sitemap/error"):
            return "sitemap_failed"
        parsed, fetched = (
            self._stat("recrawler/sitemap/parsed"),
            self._stat("recrawler/sitemap/fetched"),
        )
        if parsed == 0 or parsed < fetched or self._stat("recrawler/sitemap/urls") == 0:
            return "sitemap_failed"
        if self._stat("recrawler/sitemap/refused"):
            # a bound cut the listing short: what lies beyond it was never listed
            return "sitemap_incomplete"
        return None

    def spider_idle(self) -> None:
        """Schedule direct checks of stored pages this run has not reached yet."""
        if not self.verify_unseen or self._verify_done or self._lease_lost:
            return
        run = current_run(self.crawler)
        if run is None or run.site is None:
            self._verify_done = True
            return
        why = self._sitemap_failure()
        if why is not None and why != "sitemap_incomplete":
            # Without the listing, every stored page would be "unseen": do not hammer a failing site.
            self._verify_done = True
            self.crawler.stats.inc_value(f"recrawler/reconcile/skipped/verify_{why}")
            return
        try:
            # Blocking is fine here: the spider is idle, nothing else is in flight.
            batch = self.store.unseen_sync(run, self.verify_batch, due_at=self._due_at())
        except StateStoreError as exc:
            self.crawler.stats.inc_value(f"recrawler/state/error/{type(exc).__name__}")
            logger.error("could not list unseen pages: %(exc)s", {"exc": exc})
            self._verify_done = True
            return
        if not batch:
            self._verify_done = True
            return
        spider = self.crawler.spider
        assert spider is not None
        callback = getattr(spider, "recrawler_verify_callback", None) or spider.parse
        policy = getattr(spider, "recrawler_url_policy", None)
        assert self.crawler.engine is not None
        for key, url, depth in batch:
            if policy is not None and not policy.allows(url):
                # stored before URLs were checked: never fetched again (`recrawler check` lists it)
                self.crawler.stats.inc_value("recrawler/reconcile/refused")
                continue
            self.crawler.engine.crawl(
                Request(
                    url,
                    callback=callback,
                    dont_filter=True,
                    meta={meta.KEY: key, meta.VERIFY: True, meta.DEPTH: depth},
                )
            )
        self.crawler.stats.inc_value("recrawler/reconcile/verified", len(batch))
        logger.info("checking %(n)d stored pages this run did not reach", {"n": len(batch)})
        raise DontCloseSpider

    def _due_at(self) -> datetime | None:
        """Unseen pages not due by the run clock are skipped, not verified (None: all are)."""
        policy = policy_for(self.crawler)
        return policy.now if policy.mode == "adaptive" else None

    def _layer_counts(self) -> dict[str, int]:
        """What each cheap layer saved this run, and what the audit found."""
        return {
            "skipped_schedule": self._stat("recrawler/page/skipped/schedule"),
            "skipped_lastmod": self._stat("recrawler/page/skipped/lastmod"),
            "skipped_deltafetch": self._stat("recrawler/page/skipped/deltafetch"),
            "unchanged_by_fuzzy": self.store.outcomes[f"{_UNCHANGED}/fuzzy"],
            "audited": self._stat("recrawler/audit/checked"),
            "lies": self._stat("recrawler/audit/lies"),
        }

    def _schedule_report(self) -> dict[str, Any]:
        policy = policy_for(self.crawler)
        prefix = "recrawler/schedule/due/"
        stats = self.crawler.stats
        assert stats is not None
        return {
            "mode": policy.mode,
            "lastmod_mode": policy.lastmod_mode,
            "now": policy.now.isoformat(),
            "due": {
                k[len(prefix) :]: v for k, v in sorted(stats.get_stats().items()) if k.startswith(prefix)
            },
        }

    def _listed(self) -> int | None:
        """How many pages this run's listing named (None: not a sitemap spider)."""
        if not isinstance(self.crawler.spider, SitemapSpider):
            return None
        return self._stat("recrawler/sitemap/urls")

    def _guard(self, reason: str, run: Run) -> list[str]:
        """Reasons not to trust this run's absence evidence (empty: trust it)."""
        why = []
        if reason != "finished":
            why.append("not_finished")
        sitemap = self._sitemap_failure()
        if sitemap:
            why.append(sitemap)
        listed = self._listed()
        if (
            not sitemap
            and listed is not None
            and run.last_listed
            and listed < self.listing_min_ratio * run.last_listed
        ):
            # the listing lost most of its entries since the last run: a broken sitemap, not proof
            why.append("listing_shrunk")
        requests, failed = (
            self._stat("recrawler/request/count"),
            self._stat("recrawler/request/failed"),
        )
        if requests and failed / requests > self.max_error_ratio:
            why.append("error_ratio")
        if self._state_errors():
            why.append("state_error")
        return why

    def _state_errors(self) -> int:
        stats = self.crawler.stats
        assert stats is not None
        return sum(int(v) for k, v in stats.get_stats().items() if k.startswith("recrawler/state/error/"))

    def _mass_removal(self, plan: RemovalPlan) -> str | None:
        """Why removing what the run would remove needs an operator (None: it is within bounds)."""
        allowed = max(self.max_remove_ratio * plan.live, self.max_remove_min)
        if plan.removals <= allowed:
            return None
        return (
            f"{plan.removals} of {plan.live} live pages would leave the knowledge base "
            f"({plan.quarantine} quarantined, {plan.gone} gone, {plan.moved} moved; "
            f"RECRAWLER_MAX_REMOVE_RATIO={self.max_remove_ratio})"
        )

    async def spider_closed(self, reason: str) -> None:
        """Decide, reconcile, publish, report and close the store: all ordered work lives here."""
        started = time.monotonic()
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        run = current_run(self.crawler)
        if run is None:
            logger.error("recrawler run never started (state store failed to open); nothing recorded")
            return
        stats = self.crawler.stats
        assert stats is not None
        hold: dict[str, str] = {}
        skipped: list[str] = []
        try:
            await self.store.flush()
            noise = await self._learn_boilerplate(run)
            skipped = self._guard(reason, run)
            if self._lease_lost:
                skipped.append("lease_lost")
            plan = await self.store.removal_plan(
                run, gone_after=self.gone_after, gone_statuses=self.gone_statuses
            )
            if not skipped:
                why = self._mass_removal(plan)
                if why:
                    hold[HOLD_MASS_REMOVAL] = why
            hold.update(await self._change_holds(run))
            if hold and (self.dry_run or self._lease_lost):
                hold = {}
            result = await self.store.reconcile(
                run,
                apply=not skipped and not hold,
                keep=bool(hold) and not skipped,
                gone_after=self.gone_after,
                gone_statuses=self.gone_statuses,
                at=utcnow(),
            )
            for why in skipped:
                stats.inc_value(f"recrawler/reconcile/skipped/{why}")
            self._log_guard(skipped, result)
            report = self._report(run, reason, result, skipped, hold)
            report["noise"] = noise
            report["index"] = await self._publish(run, reason, report, hold)
            if hold:
                await self._hold(run, hold, report)
            await self.store.deliver()
            stats.set_value("recrawler/reconcile/elapsed_seconds", round(time.monotonic() - started, 3))
            self._finish_outcome(report, skipped, hold)
            await self.store.finish_run(
                run,
                reason=reason,
                at=utcnow(),
                report=report,
                reasons=[*skipped, *hold],
                listed=self._listed(),
                exit_code=self.exit_code,
            )
        except StateStoreError as exc:
            stats.inc_value(f"recrawler/state/error/{type(exc).__name__}")
            logger.error("reconciliation failed, nothing quarantined or gone: %(exc)s", {"exc": exc})
            report = self._report(run, reason, None, ["state_error"], {})
            self._finish_outcome(report, ["state_error"], {})
        finally:
            try:
                await self.store.close()
            except StateStoreError as exc:
                logger.error("closing the state store failed: %(exc)s", {"exc": exc})
        if self.report_file:
            Path(self.report_file).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        # WARNING when the run did not end well, so a quiet cron run (--loglevel WARNING) still says so
        level = logging.INFO if self.exit_code == EXIT_OK else logging.WARNING
        logger.log(level, self.summary_line(report), extra={"spider": self.crawler.spider})
        await self.crawler.signals.send_catch_log_async(
            recrawler_signals.run_finished, run=run, report=report
        )

    def _log_guard(self, skipped: list[str], result: ReconcileResult) -> None:
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

    async def _change_holds(self, run: Run) -> dict[str, str]:
        """A change spike, or the same text on many pages at once (a maintenance page), holds the run."""
        holds: dict[str, str] = {}
        new_changed = self._spike_count(run)
        judged = self._checked() + self._stat("recrawler/page/skipped")
        if spike(run, new_changed, judged, ratio=self.alert_ratio, minimum=self.alert_min):
            holds[HOLD_SPIKE] = (
                f"{new_changed} of {judged} pages new or changed "
                f"(> RECRAWLER_CHANGE_ALERT_RATIO={self.alert_ratio}): template change or noisy hash?"
            )
        if run.prior_pages:
            group = await self.store.largest_same_content(run)
            if group is not None and group[0] >= self.alert_min:
                size, sample = group
                holds[HOLD_SAME_CONTENT] = (
                    f"{size} pages changed to the same text this run (RECRAWLER_CHANGE_ALERT_MIN="
                    f"{self.alert_min}): a maintenance or error page? e.g. {sample}"
                )
        if self.crawler.stats is not None and self.crawler.stats.get_value("recrawler/run/held"):
            # page mode held the run as soon as the spike showed
            holds.setdefault(HOLD_SPIKE, "change spike while pages were being published")
        return holds

    def _verdicts(self) -> dict[str, int]:
        """This run's committed verdicts: a page counts once its write is durable."""
        o = self.store.outcomes
        return {
            "new": o[_NEW],
            "changed": o[_CHANGED] - self._taken_back,
            "unchanged": o[_UNCHANGED] + self._taken_back,
            "unchanged_by_hash": o[f"{_UNCHANGED}/hash"],
            "unchanged_by_fuzzy": o[f"{_UNCHANGED}/fuzzy"],
            "restored": o[PageStatus.RESTORED],
            "moved_in": o[f"{_NEW}/moved_in"],
            # page writes a failed commit lost (a full disk): errors, never verdicts
            "write_failed": sum(self.store.lost[s] for s in (_NEW, _CHANGED, _UNCHANGED)),
        }

    def _spike_count(self, run: Run) -> int:
        """New and changed pages that count toward a spike: not those a redirect moved in, and
        not new pages after a run that failed to store them (they are the knowledge base catching up)."""
        v = self._verdicts()
        new = 0 if run.backfill else v["new"] - v["moved_in"]
        return max(new, 0) + v["changed"]

    def _checked(self) -> int:
        v = self._verdicts()
        return v["new"] + v["changed"] + v["unchanged"]

    async def _hold(self, run: Run, hold: dict[str, str], report: dict[str, Any]) -> None:
        stats = self.crawler.stats
        assert stats is not None
        stats.set_value("recrawler/run/held", 1)
        stats.set_value("recrawler/alert", 1)
        for why, text in hold.items():
            stats.set_value(f"recrawler/run/held/{why}", 1)
            logger.error(
                "run %(run)d held (%(why)s): %(text)s. Nothing is removed, embedded or published until "
                "`recrawler runs approve %(run)d` (or `recrawler runs discard %(run)d`)",
                {"run": run.id, "why": why, "text": text},
                extra={"spider": self.crawler.spider},
            )
        await self.crawler.signals.send_catch_log_async(
            recrawler_signals.run_held, run=run, reasons=dict(hold), report=report
        )

    def _finish_outcome(self, report: dict[str, Any], skipped: list[str], hold: dict[str, str]) -> None:
        if self._state_errors() or "state_error" in skipped:
            code = EXIT_STATE
        elif self._lease_lost:
            code = EXIT_BUSY
        elif hold:
            code = EXIT_HELD
        elif skipped:
            code = EXIT_GUARD
        else:
            code = EXIT_OK
        self.exit_code = code
        index_state = (report.get("index") or {}).get("state")
        self.outcome = {
            "state": RUN_HELD if hold else (index_state or RUN_FINISHED),
            "reasons": [*skipped, *hold],
            "exit_code": code,
        }
        report["outcome"] = self.outcome

    async def _learn_boilerplate(self, run: Run) -> dict[str, Any]:
        """Re-decide the site's boilerplate block pairs from this run's pages (with hysteresis)."""
        s = self.crawler.settings
        if run.site is None or not s.getbool("RECRAWLER_BOILERPLATE_ENABLED"):
            return {}
        result = await self.store.update_boilerplate(
            run.site,
            enter_share=s.getfloat("RECRAWLER_BOILERPLATE_SHARE"),
            exit_share=s.getfloat("RECRAWLER_BOILERPLATE_EXIT_SHARE"),
            min_pages=s.getint("RECRAWLER_BOILERPLATE_MIN_PAGES"),
        )
        taken: list[str] = []
        if result["boilerplate_on"]:
            # site-wide furniture that changed on many pages this run is noise, not a docs sprint
            taken = await self.store.take_back_boilerplate_changes(run, run.site)
            self._taken_back += len(taken)
            if taken:
                stats = self.crawler.stats
                assert stats is not None
                stats.inc_value(f"recrawler/page/{_UNCHANGED}/boilerplate", len(taken))
        result["taken_back"] = len(taken)
        if result["boilerplate_on"] or result["boilerplate_off"]:
            logger.info(
                "boilerplate of %(site)s: %(on)d block pairs learned, %(off)d dropped; %(n)d pages re-hashed",
                {
                    "site": run.site,
                    "on": result["boilerplate_on"],
                    "off": result["boilerplate_off"],
                    "n": result["rehashed"],
                },
            )
        return result

    async def _publish(
        self, run: Run, reason: str, report: dict[str, Any], hold: dict[str, str]
    ) -> dict[str, Any]:
        """Hold, or embed what is new and publish the run in one statement."""
        if not self.index_enabled:
            return {"state": "disabled"}
        stats = self.crawler.stats
        assert stats is not None
        embedder = embedder_for(self.crawler)
        counts = await self.store.run_index_counts(run.id, embedder.id)
        info: dict[str, Any] = {
            "embedder": embedder.id,
            "chunks_added": counts["chunks_added"],
            "chunks_retired": counts["chunks_retired"],
            "texts_embedded": self._stat("recrawler/embed/texts"),
            "embed_calls": self._stat("recrawler/embed/calls"),
            "embed_cache_hits": counts["texts_cached"],
        }
        if self.dry_run:
            info.update(
                state="dry_run",
                would_embed=await self.store.count_missing(embedder.id),
                would_publish=counts["chunks_added"],
                would_delete=counts["chunks_retired"],
            )
            return info
        if hold:
            await self.store.set_run_state(run.id, RUN_HELD)
            info["state"] = RUN_HELD
            return info
        if self._state_errors():
            # a write failed: what did commit is published by the next run, with what it adds
            await self.store.set_run_state(run.id, RUN_FINISHED)
            info.update(state="unpublished", reason="state_error: the next run completes and publishes it")
            return info
        if reason != "finished" and not self.publish_each_page:
            await self.store.set_run_state(run.id, RUN_FINISHED)
            info.update(
                state="unpublished", reason=f"run ended with {reason}: the next run publishes its work"
            )
            return info
        try:
            embedded, calls = await embed_missing(self.store, embedder)
        except (EmbedderError, StateStoreError) as exc:
            stats.inc_value("recrawler/index/error")
            logger.error("run %(run)d not published, embedding failed: %(exc)s", {"run": run.id, "exc": exc})
            await self.store.set_run_state(run.id, RUN_FINISHED)
            info.update(state="unpublished", reason=str(exc))
            return info
        stats.inc_value("recrawler/embed/texts", embedded)
        stats.inc_value("recrawler/embed/calls", calls)
        gc = await self.store.publish(run.id, utcnow())
        stats.set_value("recrawler/index/deleted", gc["chunks_deleted"])
        info.update(
            state=RUN_PUBLISHED,
            texts_embedded=info["texts_embedded"] + embedded,
            embed_calls=info["embed_calls"] + calls,
            chunks_deleted=gc["chunks_deleted"],
        )
        return info

    def _report(
        self,
        run: Run,
        reason: str,
        result: ReconcileResult | None,
        skipped: list[str],
        hold: dict[str, str],
    ) -> dict[str, Any]:
        stats = self.crawler.stats
        assert stats is not None
        gone = sum(result.gone.values()) if result else 0
        quarantined = result.quarantined if result else 0
        moved = result.moved if result else 0
        missing = sum(v for k, v in stats.get_stats().items() if k.startswith("recrawler/page/missing/"))
        for code, n in result.gone.items() if result else ():
            stats.set_value(f"recrawler/page/{_GONE}/{code}", n)
        stats.set_value(f"recrawler/page/{_GONE}", gone)
        stats.set_value(f"recrawler/page/{PageStatus.QUARANTINED}", quarantined)
        stats.set_value(f"recrawler/page/{PageStatus.MOVED}", moved)
        verdicts = self._verdicts()
        # the stats mirror what committed (the pipelines counted pages as they went)
        for name in ("new", "changed", "unchanged"):
            if verdicts[name] or stats.get_value(f"recrawler/page/{name}") is not None:
                stats.set_value(f"recrawler/page/{name}", verdicts[name])
        if verdicts["write_failed"]:
            stats.set_value(f"recrawler/page/{_ERROR}/write_failed", verdicts["write_failed"])
        counts = {
            "new": verdicts["new"],
            "changed": verdicts["changed"],
            "unchanged": verdicts["unchanged"],
            "gone": gone,
            "quarantined": quarantined,
            "moved": moved,
            "errors": self._stat(f"recrawler/page/{_ERROR}") + verdicts["write_failed"],
            "write_failed": verdicts["write_failed"],
            "not_modified": self._stat("recrawler/conditional/not_modified"),
            "validators_sent": self._stat("recrawler/conditional/sent"),
            "unchanged_by_hash": verdicts["unchanged_by_hash"],
            "restored": verdicts["restored"],
            "missing_held": result.skipped_misses if result else missing,
            "verified": self._stat("recrawler/reconcile/verified"),
            "refused_urls": self._stat("recrawler/url/refused"),
            **self._layer_counts(),
        }
        # every checked page lands in exactly one bucket; misses held by the guard included
        counts["crawled"] = (
            counts["new"]
            + counts["changed"]
            + counts["unchanged"]
            + gone
            + quarantined
            + moved
            + counts["errors"]
            + counts["missing_held"]
        )
        stats.set_value("recrawler/crawled", counts["crawled"])
        alert = "; ".join(f"{why}: {text}" for why, text in hold.items()) or None
        no_304 = self._hosts_without_304()
        for host in no_304:
            logger.warning(
                "host %(host)s answered no 304 to %(n)d conditional requests: it ignores validators, "
                "so the content hash decides",
                {"host": host, "n": self._stat(f"recrawler/conditional/sent/{host}")},
            )
        return {
            "run_id": run.id,
            "spider": run.spider,
            "site": run.site,
            "started_at": run.started_at.isoformat(),
            "finished_at": utcnow().isoformat(),
            "finish_reason": reason,
            "counts": counts,
            "alert": alert,
            "held": sorted(hold),
            "reconcile": {"applied": bool(result and result.applied), "skipped": skipped},
            "hosts_without_304": no_304,
            "db": redact_url(self.store.uri),
            "schedule": self._schedule_report(),
            "audit": auditor_for(self.crawler).report(),
        }

    def _hosts_without_304(self) -> list[str]:
        stats = self.crawler.stats
        assert stats is not None
        threshold = self.crawler.settings.getint("RECRAWLER_CONDITIONAL_NO_304_AFTER")
        prefix = "recrawler/conditional/sent/"
        return sorted(
            k[len(prefix) :]
            for k, v in stats.get_stats().items()
            if k.startswith(prefix)
            and v >= threshold
            and not stats.get_value(f"recrawler/conditional/not_modified/{k[len(prefix) :]}")
        )

    @staticmethod
    def summary_line(report: dict[str, Any]) -> str:
        """``crawled: N new: N changed: N unchanged: N gone: N errors: N | <per layer>``."""
        c = report["counts"]
        head = " ".join(f"{k}: {c[k]}" for k in ("crawled", "new", "changed", "unchanged", "gone", "errors"))
        tail = " ".join(
            f"{k}: {c.get(k, 0)}"
            for k in (
                "quarantined",
                "moved",
                "restored",
                "validators_sent",
                "not_modified",
                "unchanged_by_hash",
                "verified",
                "missing_held",
                "refused_urls",
                "skipped_schedule",
                "skipped_lastmod",
                "skipped_deltafetch",
                "unchanged_by_fuzzy",
                "audited",
                "lies",
            )
        )
        line = f"{head} | {tail}"
        index = report.get("index") or {}
        if index.get("state") not in (None, "disabled"):
            line += (
                f" | index: {index['state']} chunks_added: {index.get('chunks_added', 0)}"
                f" texts_embedded: {index.get('texts_embedded', 0)}"
            )
        if report["reconcile"]["skipped"]:
            line += f" | reconcile skipped: {', '.join(report['reconcile']['skipped'])}"
        if report.get("held"):
            line += f" | HELD: {', '.join(report['held'])}"
        outcome = report.get("outcome")
        if outcome:
            line += f" | exit {outcome['exit_code']}"
        return line
