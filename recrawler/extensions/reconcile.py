"""Reconciler: the run's closing work, in order: guards, misses, holds, publishing, the report."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from scrapy import signals
from scrapy.exceptions import DontCloseSpider, NotConfigured
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.reactor import is_reactor_installed

from recrawler import membership, meta, outcome, reports
from recrawler import signals as recrawler_signals
from recrawler.deploys import SIGNALS
from recrawler.exceptions import ConfigurationError, StateStoreError, StateStoreLost
from recrawler.extensions.guards import RunGuards
from recrawler.extensions.verify import UnseenVerifier
from recrawler.items import PageStatus
from recrawler.kb.publish import Publisher, publish_mode
from recrawler.outcome import HOLD_MASS_REMOVAL, Verdicts
from recrawler.reports import summary
from recrawler.reports.freshness import STORED, freshness_view
from recrawler.runtime import find_runtime, runtime_of
from recrawler.state import RUN_ABORTED, RUN_FINISHED, RUN_HELD, utcnow
from recrawler.state.records import SETTLE_APPLY, SETTLE_DROP, SETTLE_KEEP, SETTLE_KEEP_LISTED

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from twisted.internet.defer import Deferred

    from recrawler.runtime import Runtime
    from recrawler.state import ReconcileResult, Run

logger = logging.getLogger(__name__)

#: the finish reason of a run a forced shutdown (a second Ctrl-C) ended before its closing work
CLOSE_FORCED = "shutdown_forced"
#: how long a forced shutdown waits for the database to record the run's end
_ABORT_SECS = 10.0


def _reactor() -> Any:
    """The installed reactor (its interface's stubs type system-event triggers oddly)."""
    from twisted.internet import reactor

    return reactor


class Reconciler:
    """Closes each run: checks stored pages the run did not reach, decides quarantine, gone and
    moved behind the outage guard and the mass-removal breaker, holds a run whose changes look
    like a template change or a maintenance page, publishes, writes the run report and logs the
    summary line. It works from the run's counters (``Runtime.counters``), never from stats.

    Settings: ``RECRAWLER_VERIFY_UNSEEN_ENABLED``, ``RECRAWLER_VERIFY_BATCH_SIZE``,
    ``RECRAWLER_GONE_AFTER_MISSES``, ``RECRAWLER_GONE_STATUSES``, ``RECRAWLER_MAX_ERROR_RATIO``,
    ``RECRAWLER_MAX_REMOVE_RATIO``, ``RECRAWLER_MAX_REMOVE_MIN``, ``RECRAWLER_LISTING_MIN_RATIO``,
    ``RECRAWLER_CHANGE_ALERT_RATIO``, ``RECRAWLER_CHANGE_ALERT_MIN``, ``RECRAWLER_REPORT_FILE``,
    ``RECRAWLER_REPORT_HTML_FILE``, ``RECRAWLER_REPORT_HTML_RUNS``, ``RECRAWLER_CONDITIONAL_NO_304_AFTER``,
    ``RECRAWLER_DB_URI`` (not set: switched off), ``RECRAWLER_INDEX_ENABLED``, ``RECRAWLER_DRY_RUN``,
    ``RECRAWLER_BOILERPLATE_ENABLED``, ``RECRAWLER_BOILERPLATE_SHARE``,
    ``RECRAWLER_BOILERPLATE_EXIT_SHARE``, ``RECRAWLER_BOILERPLATE_MIN_PAGES`` (the site's furniture,
    re-decided when the run reconciles), ``RECRAWLER_MAX_INTERVAL_SECS`` (the HTML report's freshness).
    Stats (mirrored from the counters): ``recrawler/crawled``, ``recrawler/page/{gone,quarantined,moved}``,
    ``recrawler/page/gone/http_<code>``, ``recrawler/reconcile/verified``,
    ``recrawler/reconcile/skipped/<reason>``, ``recrawler/reconcile/elapsed_seconds``,
    ``recrawler/run/held``, ``recrawler/run/held/<reason>``, ``recrawler/alert``.
    Signals: listens to ``spider_idle``, ``spider_closed`` and ``engine_stopped`` (the summary line is
    the crawl's last); sends ``run_held`` and ``run_finished``. A forced shutdown (a second Ctrl-C
    stops the reactor without closing the spider) still ends the run: ``aborted``
    (``shutdown_forced``), its summary line logged, exit 4 (a reactor "before shutdown" trigger).

    With ``RECRAWLER_SCHEDULE=adaptive`` only unseen pages due by the run clock are checked:
    pages the schedule, lastmod or deltafetch skipped keep their state and chunks.
    """

    def __init__(
        self,
        crawler: Crawler,
        *,
        guards: RunGuards,
        verify_unseen: bool = True,
        verify_batch: int = 500,
        report_file: str | None = None,
        index_enabled: bool = False,
        publish_each_page: bool = False,
        dry_run: bool = False,
    ) -> None:
        if verify_batch < 1:
            raise ConfigurationError(f"RECRAWLER_VERIFY_BATCH_SIZE: bad value {verify_batch!r}")
        self.crawler = crawler
        #: the outage guard and the change holds, with the limits they judge by
        self.guards = guards
        self.limits = guards.limits
        self.verify_unseen = verify_unseen
        self.verify_batch = verify_batch
        self.report_file = report_file
        self.index_enabled = index_enabled
        self.publish_each_page = publish_each_page
        self.dry_run = dry_run
        #: changed pages the boilerplate take-back turned into unchanged ones
        self._taken_back = 0
        self._verifier: UnseenVerifier | None = None
        self.outcome: dict[str, Any] = {}
        #: the last run's report (what ``run_finished`` sends; monitors read it after the run)
        self.report: dict[str, Any] | None = None
        self._shutdown_trigger: Any = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Read settings, build the guards and connect the signals (the Runtime is looked up when
        the spider runs)."""
        meta.require_opt_in(crawler)
        s = crawler.settings
        if not s.get("RECRAWLER_DB_URI"):
            raise NotConfigured("RECRAWLER_DB_URI is not set")
        ext = cls(
            crawler,
            guards=RunGuards.from_crawler(crawler),
            verify_unseen=s.getbool("RECRAWLER_VERIFY_UNSEEN_ENABLED"),
            verify_batch=s.getint("RECRAWLER_VERIFY_BATCH_SIZE"),
            report_file=s.get("RECRAWLER_REPORT_FILE") or None,
            index_enabled=s.getbool("RECRAWLER_INDEX_ENABLED"),
            publish_each_page=publish_mode(s) == "page",
            dry_run=s.getbool("RECRAWLER_DRY_RUN"),
        )
        crawler.signals.connect(ext.spider_idle, signal=signals.spider_idle)
        crawler.signals.connect(ext.run_failed, signal=recrawler_signals.run_failed)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(ext.engine_stopped, signal=signals.engine_stopped)
        if is_reactor_installed():
            # a forced shutdown (a second Ctrl-C) stops the reactor with the run unfinished
            ext._shutdown_trigger = _reactor().addSystemEventTrigger(
                "before", "shutdown", ext.process_stopping
            )
        return ext

    @property
    def runtime(self) -> Runtime:
        """The crawl's Runtime (extensions are all built by the time a handler runs)."""
        return runtime_of(self.crawler)

    def run_failed(self, cause: str, exit_code: int) -> None:
        """A component found a *cause* the run fails for (a worker's lost leader): the run's
        exit code, unless one was decided already."""
        rt = self.runtime
        if rt.exit_code is None:
            rt.exit_code = exit_code

    @property
    def exit_code(self) -> int | None:
        """How the run ended (see ``recrawler.outcome.EXIT_*``); None before it ended."""
        return self.runtime.exit_code

    # -- verifying unseen pages ------------------------------------------------------------------

    def spider_idle(self) -> None:
        """Request stored pages this run has not reached yet (read off the reactor, in batches).
        The frontier and the sitemap files are the scheduler's: the spider goes idle only once
        the whole listing was read and its pages fetched."""
        rt = self.runtime
        if not rt.leads or not self.verify_unseen or rt.lease_lost or rt.run is None or rt.run.site is None:
            return
        workers = rt.workers
        if workers is not None and not (workers.others_idle() and workers.frontier_empty()):
            # pages the other workers are still on are not unseen: wait for them
            raise DontCloseSpider
        why = self.guards.sitemap_failure()
        if self._verifier is None:
            policy = rt.schedule
            due_at = policy.now if policy.mode == "adaptive" else None
            # a whole listing's silence about a page is news: the page is checked in this run
            listed, last = self.guards.listed(), rt.run.last_listed
            whole = (
                why is None
                and listed is not None
                and not (last and listed < self.limits.listing_min_ratio * last)
            )
            self._verifier = UnseenVerifier(
                self.crawler,
                rt,
                batch=self.verify_batch,
                due_at=due_at,
                delisted=whole,
                # a deploy detected (this run, or one that could not check every page): stored pages
                # the listing does not name (found by links) are checked for it too
                deployed=policy.deploys.get(rt.run.site) if due_at is not None else None,
            )
        self._verifier.idle(rt.run, skip_reason=why if why != "sitemap_incomplete" else None)

    def verdicts(self) -> Verdicts:
        """This run's committed verdicts (the store counts a page once its write is durable)."""
        store = self.runtime.store
        return Verdicts.from_outcomes(store.outcomes, store.lost, self._taken_back)

    # -- closing -------------------------------------------------------------------------------------

    def engine_stopped(self) -> None:
        """Log the run's summary line, the crawl's last (Scrapy dumps its stats after spider_closed)."""
        self._forget_shutdown()
        rt = find_runtime(self.crawler)
        if rt is not None and rt.summary is not None:
            logger.log(rt.summary[0], rt.summary[1], extra={"spider": self.crawler.spider})

    def _forget_shutdown(self) -> None:
        if self._shutdown_trigger is not None:
            _reactor().removeSystemEventTrigger(self._shutdown_trigger)
            self._shutdown_trigger = None

    def process_stopping(self) -> Deferred[None] | None:
        """Before the reactor stops: a run that has not ended (a forced shutdown, a second Ctrl-C,
        stops the reactor without closing the spider) is ended here, ``aborted``: nothing removed
        or published, its summary line logged, exit 4. Bounded: the process does stop."""
        self._shutdown_trigger = None
        rt = find_runtime(self.crawler)
        if rt is None or rt.run is None or rt.exit_code is not None:
            return None
        return deferred_from_coro(self._abort(rt, rt.run))

    async def _abort(self, rt: Runtime, run: Run) -> None:
        rt.stop_heartbeat()
        run_report = self._report(run, CLOSE_FORCED, None, ["not_finished"], {}, self._deploy_counts())
        rt.exit_code = outcome.EXIT_GUARD
        self.outcome = {"state": RUN_ABORTED, "reasons": ["not_finished"], "exit_code": rt.exit_code}
        run_report["outcome"] = self.outcome
        try:
            await asyncio.wait_for(self._record_abort(rt, run, run_report), timeout=_ABORT_SECS)
        except (StateStoreError, TimeoutError) as exc:
            why = str(exc) or f"the database did not answer within {_ABORT_SECS:g} s"
            logger.error("run %(run)d could not be marked aborted: %(why)s", {"run": run.id, "why": why})
        if self.report_file:
            Path(self.report_file).write_text(json.dumps(run_report, indent=2) + "\n", encoding="utf-8")
        self.report = run_report
        rt.summary = (logging.WARNING, summary.summary_line(run_report))
        logger.warning(
            "forced shutdown: run %(run)d ends unfinished (aborted): nothing is removed or published; "
            "the next run checks again",
            {"run": run.id},
            extra={"spider": self.crawler.spider},
        )
        logger.log(rt.summary[0], rt.summary[1], extra={"spider": self.crawler.spider})

    async def _record_abort(self, rt: Runtime, run: Run, run_report: dict[str, Any]) -> None:
        # the pages already written are kept (committed); the run itself ends aborted
        await rt.store.flush()
        await rt.store.runs.finish_run(
            run,
            reason=CLOSE_FORCED,
            at=utcnow(),
            report=run_report,
            reasons=["not_finished"],
            exit_code=rt.exit_code,
            aborted=True,
        )

    async def spider_closed(self, reason: str) -> None:
        """Decide, reconcile, publish and report: all ordered work lives here."""
        started = time.monotonic()
        rt = self.runtime
        if rt.workers is not None and rt.run is not None:
            if not rt.leads:
                rt.stop_heartbeat()
                await membership.leave(self.crawler, rt.workers, rt.store, rt.counters, rt.run)
                return
            await membership.gather(rt.workers, rt.store, rt.counters, rt.run)
        rt.stop_heartbeat()
        run = rt.run
        if run is None:
            if rt.failure is None:
                logger.error("recrawler run never started (%(why)s); nothing recorded", {"why": reason})
                # an error no refusal names (its traceback is above): never a success
                rt.exit_code = outcome.EXIT_CRASH
            return
        c = rt.counters
        store = rt.store
        hold: dict[str, str] = {}
        skipped: list[str] = []
        try:
            await store.flush()
            # the block-set changes this run's page writes left (and any a killed run left)
            folded = await store.history.fold_block_stats()
            noise = await self._learn_boilerplate(run)
            skipped = self.guards.outage(reason, run)
            deploy = await self._deploy(run)
            # misses earlier runs kept for a decision are this run's to decide too
            await store.decisions.carry_misses(run)
            plan = await store.decisions.removal_plan(
                run, gone_after=self.limits.gone_after, gone_statuses=self.limits.gone_statuses
            )
            removal = None
            if not skipped:
                removal = outcome.mass_removal(
                    plan,
                    ratio=self.limits.max_remove_ratio,
                    minimum=self.limits.max_remove_min,
                    listing=self.guards.listed() is not None,
                )
            # removals an earlier hold kept wait for a person, whatever this run sees
            waiting = outcome.waiting_removals(plan)
            changes = await self.guards.change_holds(run, self.verdicts().moved_in)
            if self.dry_run or rt.lease_lost:
                changes, removal, waiting = {}, None, None
            held_removals = "; ".join(why for why in (removal, waiting) if why)
            hold = {**changes, **({HOLD_MASS_REMOVAL: held_removals} if held_removals else {})}
            if changes:
                # the whole run waits: its removals with it
                action = SETTLE_KEEP
            elif removal:
                # only the removals the listing does not confirm wait; the rest of the run goes on
                action = SETTLE_KEEP_LISTED if self.guards.listed() is not None else SETTLE_KEEP
            else:
                action = SETTLE_DROP if skipped else SETTLE_APPLY
            settled = await store.decisions.settle_misses(run, action)
            index, result = await self._publish(run, reason, changes)
            if result is None:
                result = settled
            elif action != SETTLE_APPLY:
                # published, but the removals were dropped or kept (moves the outage guard lets through)
                result = dataclasses.replace(
                    result, applied=False, skipped_misses=settled.skipped_misses, kept=settled.kept
                )
            # and those of the pages this reconciliation removed
            folded += await store.history.fold_block_stats()
            c.set("recrawler/reconcile/block_deltas", folded)
            for why in skipped:
                c.inc(f"recrawler/reconcile/skipped/{why}")
            self.guards.log_outage(skipped, result)
            run_report = self._report(run, reason, result, skipped, hold, deploy)
            run_report["noise"] = noise
            run_report["index"] = index
            # how current the published knowledge base is now: what `recrawler due` and the HTML report show
            run_report["freshness"] = await self._freshness(run)
            if hold:
                await self._hold(run, hold, run_report, whole=bool(changes))
            await store.deliver()
            c.set("recrawler/reconcile/elapsed_seconds", round(time.monotonic() - started, 3))
            self._finish_outcome(run_report, skipped, hold, whole=bool(changes))
            await store.runs.finish_run(
                run,
                reason=reason,
                at=utcnow(),
                report=run_report,
                reasons=self.outcome["reasons"],
                listed=self.guards.listed(),
                exit_code=rt.exit_code,
            )
        except StateStoreError as exc:
            c.state_error(exc)
            # a database lost mid-run was said at ERROR when the store noticed: this is its consequence
            level = logging.WARNING if isinstance(exc, StateStoreLost) else logging.ERROR
            logger.log(level, "reconciliation failed, nothing quarantined or gone: %(exc)s", {"exc": exc})
            run_report = self._report(run, reason, None, ["state_error"], {}, self._deploy_counts())
            self._finish_outcome(run_report, ["state_error"], {})
        if self.report_file:
            Path(self.report_file).write_text(json.dumps(run_report, indent=2) + "\n", encoding="utf-8")
        self.report = run_report
        # the HTML report reads what finish_run stored, through the store's readers
        await reports.write_after_run(self.crawler.settings, store.readers, run.id, store.uri)
        # WARNING when the run did not end well, so a quiet cron run (--loglevel WARNING) still says so
        level = logging.INFO if rt.exit_code == outcome.EXIT_OK else logging.WARNING
        # logged when the engine stops: the last line, below Scrapy's stats dump
        rt.summary = (level, summary.summary_line(run_report))
        if rt.workers is not None:
            await asyncio.to_thread(rt.workers.release)
        await self.crawler.signals.send_catch_log_async(
            recrawler_signals.run_finished, run=run, report=run_report
        )

    async def _hold(self, run: Run, hold: dict[str, str], run_report: dict[str, Any], *, whole: bool) -> None:
        c = self.runtime.counters
        c.set("recrawler/run/held", 1)
        c.set("recrawler/alert", 1)
        for why, text in hold.items():
            c.set(f"recrawler/run/held/{why}", 1)
            if whole:
                then = (
                    "nothing of it (nor of earlier unpublished runs) is embedded or published until "
                    "`recrawler runs approve %(run)d` or `recrawler runs discard %(run)d`; later runs go "
                    "on and carry the decision"
                )
            else:
                then = (
                    "the rest of the run is published; these removals wait for `recrawler runs approve "
                    "%(run)d` (or `discard %(run)d`), and later runs carry them until a page answers again"
                )
            logger.error(
                "run %(run)d held (%(why)s: %(text)s): " + then,
                {"run": run.id, "why": why, "text": text},
                extra={"spider": self.crawler.spider},
            )
        await self.crawler.signals.send_catch_log_async(
            recrawler_signals.run_held, run=run, reasons=dict(hold), report=run_report
        )

    def _finish_outcome(
        self, run_report: dict[str, Any], skipped: list[str], hold: dict[str, str], *, whole: bool = True
    ) -> None:
        rt = self.runtime
        index_state = (run_report.get("index") or {}).get("state")
        state_errors = bool(self.guards.state_errors()) or "state_error" in skipped
        # left unpublished for no reason above (the embedder failed): no success either
        unpublished = index_state == "unpublished" and not (skipped or hold or state_errors)
        code = outcome.exit_code(
            state_errors=state_errors,
            lease_lost=rt.lease_lost,
            held=bool(hold),
            skipped=bool(skipped),
            worker_lost="worker_lost" in skipped,
            unpublished=unpublished,
        )
        rt.exit_code = code
        self.outcome = {
            "state": RUN_HELD if hold and whole else (index_state or RUN_FINISHED),
            "reasons": [*skipped, *hold, *(["unpublished"] if unpublished else [])],
            "exit_code": code,
        }
        run_report["outcome"] = self.outcome

    async def _learn_boilerplate(self, run: Run) -> dict[str, Any]:
        """Re-decide the site's boilerplate block pairs from this run's pages (with hysteresis)."""
        s = self.crawler.settings
        if run.site is None or not s.getbool("RECRAWLER_BOILERPLATE_ENABLED"):
            return {}
        store = self.runtime.store
        result = await store.history.update_boilerplate(
            run.site,
            enter_share=s.getfloat("RECRAWLER_BOILERPLATE_SHARE"),
            exit_share=s.getfloat("RECRAWLER_BOILERPLATE_EXIT_SHARE"),
            min_pages=s.getint("RECRAWLER_BOILERPLATE_MIN_PAGES"),
        )
        taken: list[str] = []
        if result["boilerplate_on"]:
            # site-wide furniture that changed on many pages this run is noise, not a docs sprint
            taken = await store.history.take_back_boilerplate_changes(run, run.site)
            self._taken_back += len(taken)
            if taken:
                self.runtime.counters.inc(f"recrawler/page/{PageStatus.UNCHANGED}/boilerplate", len(taken))
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
        self, run: Run, reason: str, hold: dict[str, str]
    ) -> tuple[dict[str, Any], ReconcileResult | None]:
        """Hold the run, or publish it (its misses applied in the same transaction); the report's
        ``index``, and what the misses did (None: the run was not published)."""
        rt = self.runtime
        if not self.index_enabled:
            if hold:
                await rt.store.decisions.hold_run(run)
                return {"state": "disabled"}, None
            if reason != "finished" or self.guards.state_errors():
                return {"state": "disabled"}, None
            result, _ = await rt.store.decisions.publish_run(
                run, at=utcnow(), gone_after=self.limits.gone_after, gone_statuses=self.limits.gone_statuses
            )
            return {"state": "disabled"}, result
        publisher = Publisher(
            rt.store.decisions,
            rt.store.kb,
            rt.store.search_index,
            rt.embedder,
            rt.counters,
            dry_run=self.dry_run,
            each_page=self.publish_each_page,
            pool=rt.cpu_pool,
            gone_after=self.limits.gone_after,
            gone_statuses=self.limits.gone_statuses,
        )
        return await publisher.publish(
            run, reason, held=bool(hold), state_errors=bool(self.guards.state_errors())
        )

    async def _freshness(self, run: Run) -> dict[str, Any]:
        bound = self.crawler.settings.getfloat("RECRAWLER_MAX_INTERVAL_SECS")
        fresh = await asyncio.to_thread(
            self.runtime.store.readers.freshness, run.site, bound_secs=bound, now=self.runtime.schedule.now
        )
        view = freshness_view(fresh)
        # what the run's HTML report shows later, as it was now
        return {k: view[k] for k in STORED} | {"bound_secs": bound}

    def _deploy_counts(self) -> dict[str, Any]:
        """The report's ``deploy`` as the run's counters say it (the reason is the store's)."""
        c = self.runtime.counters
        detected = bool(c["recrawler/deploy/detected"])
        return {
            "detected": detected,
            "signals": [s for s in SIGNALS if c[f"recrawler/deploy/detected/{s}"]],
            "reason": None,
            "checking": c["recrawler/deploy/pages"] if detected else 0,
        }

    async def _deploy(self, run: Run) -> dict[str, Any]:
        """The report's ``deploy``: whether this run detected one, by which signals, why, and how
        many pages it checks for it."""
        deploy = self._deploy_counts()
        if deploy["detected"] and run.site is not None:
            build = await self.runtime.store.schedule.site_build(run.site)
            if build is not None and build.deploy_run == run.id:
                deploy["reason"] = build.deploy_reason
            deploy["line"] = summary.deploy_line(deploy)
        return deploy

    def _report(
        self,
        run: Run,
        reason: str,
        result: ReconcileResult | None,
        skipped: list[str],
        hold: dict[str, str],
        deploy: dict[str, Any],
    ) -> dict[str, Any]:
        rt = self.runtime
        c = rt.counters
        verdicts = self.verdicts()
        counts = summary.counts(c, verdicts, result)
        summary.mirror(c, verdicts, result, counts["crawled"])
        no_304 = summary.hosts_without_304(
            c, self.crawler.settings.getint("RECRAWLER_CONDITIONAL_NO_304_AFTER")
        )
        for host in no_304:
            logger.warning(
                "host %(host)s: %(n)d conditional requests answered in full with the validators sent "
                "and none with a 304: it ignores validators, so the content hash decides",
                {"host": host, "n": c[f"recrawler/conditional/ignored/{host}"]},
            )
        policy = rt.schedule
        return summary.build(
            run,
            reason,
            counts=counts,
            result=result,
            skipped=skipped,
            hold=hold,
            hosts_without_304=no_304,
            db_uri=rt.store.uri,
            schedule={
                "mode": policy.mode,
                "lastmod_mode": policy.lastmod_mode,
                "now": policy.now.isoformat(),
                "due": c.family("recrawler/schedule/due"),
            },
            audit=rt.auditor.report(),
            deploy=deploy,
        )

    @staticmethod
    def summary_line(run_report: dict[str, Any]) -> str:
        """``crawled: N new: N changed: N unchanged: N gone: N errors: N | <per layer>``."""
        return summary.summary_line(run_report)


__all__ = ["Reconciler"]
