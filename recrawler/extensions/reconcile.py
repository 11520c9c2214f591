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
from scrapy.spiders import SitemapSpider
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.reactor import is_reactor_installed

from recrawler import membership, meta, reports
from recrawler import signals as recrawler_signals
from recrawler.detect.hashing import fuzzy_distance
from recrawler.exceptions import ConfigurationError, StateStoreError, StateStoreLost
from recrawler.extensions import runreport
from recrawler.extensions.alerts import say_held, say_kept, say_outage
from recrawler.extensions.guards import (
    CHANGE_GUARDS,
    FINAL_GUARDS,
    LISTING_LINKS,
    LISTING_SITEMAP,
    MASS_REMOVAL,
    OUTAGE_GUARDS,
    REMOVAL_GUARDS,
    Finding,
    RemovalLimits,
    RunFacts,
    evaluate,
    holds,
    most_severe,
)
from recrawler.extensions.verify import UnseenVerifier
from recrawler.intervals import SchedulePolicy
from recrawler.items import PageStatus
from recrawler.kb.embedders import RunEmbedder
from recrawler.kb.publish import Publisher, publish_mode
from recrawler.outcome import EXIT_CRASH, EXIT_GUARD, EXIT_OK, EXIT_STATE, Verdicts
from recrawler.reports import summary
from recrawler.runtime import component_of, find_runtime, runtime_of
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
    """Closes each run: checks stored pages the run did not reach, evaluates the declared guards
    (``recrawler.extensions.guards``: the outage guards, the mass-removal breaker, the change holds)
    over the run's counters (``Runtime.counters``, never stats) and then acts on their findings:
    quarantines, marks gone and moved, holds or publishes, writes the run report and logs the
    summary line. It alone decides the run's exit code (:attr:`exit_code`): from the findings, and
    from the causes other components report with ``run_failed``.

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
    the crawl's last) and ``run_failed`` (a cause another component found); sends ``run_held`` and
    ``run_finished``. A forced shutdown (a second Ctrl-C
    stops the reactor without closing the spider) still ends the run: ``aborted``
    (``shutdown_forced``), its summary line logged, exit 4 (a reactor "before shutdown" trigger).

    With ``RECRAWLER_SCHEDULE=adaptive`` only unseen pages due by the run clock are checked:
    pages the schedule, lastmod or deltafetch skipped keep their state and chunks.
    """

    def __init__(
        self,
        crawler: Crawler,
        *,
        limits: RemovalLimits,
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
        #: the limits the declared guards judge by
        self.limits = limits
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
        #: how the run ended (``recrawler.outcome.EXIT_*``), decided here only; None before it ended
        self.exit_code: int | None = None
        #: the run's summary line and the level it is logged at (None: the run has not ended)
        self.summary: tuple[int, str] | None = None
        #: causes other components reported (``run_failed``), each with the exit code it asks for
        self.failures: list[Finding] = []
        #: why the run could not begin (the Runtime refused it at start), or None
        self.refusal: BaseException | None = None

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
            limits=RemovalLimits.from_settings(s),
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

    # -- the run's exit code ---------------------------------------------------------------------

    def run_failed(self, cause: str, exit_code: int, error: BaseException | None = None) -> None:
        """A component found a *cause* the run fails for (a refusal, a lost leader): the exit code
        stands at the most severe cause so far, and the closing findings can only raise it. A
        run refused at start says with *error* what it was refused for."""
        if error is not None and self.refusal is None:
            self.refusal = error
        self.failures.append(Finding(cause, exit_code))
        self._decide(())

    def _decide(self, findings: tuple[Finding, ...] | list[Finding]) -> int:
        """The run's exit code: the most severe of the *findings* and the reported causes."""
        self.exit_code = most_severe(f.exit_code for f in (*findings, *self.failures))
        return self.exit_code

    # -- the facts the guards judge ----------------------------------------------------------------

    def facts(self, reason: str = "finished", run: Run | None = None, **more: Any) -> RunFacts:
        """What the declared guards judge: the run's counters, its listing and how it ended."""
        rt = self.runtime
        spider = self.crawler.spider
        listing = None
        if isinstance(spider, SitemapSpider):
            kind = getattr(spider, "recrawler_listing", LISTING_SITEMAP)
            listing = LISTING_LINKS if kind == LISTING_LINKS else LISTING_SITEMAP
        run = run if run is not None else rt.run
        return RunFacts(
            counters=rt.counters,
            limits=self.limits,
            reason=reason,
            listing=listing,
            last_listed=run.last_listed if run is not None else None,
            lease_lost=rt.lease_lost,
            backfill=bool(run is not None and run.backfill),
            **more,
        )

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
        facts = self.facts(run=rt.run)
        why = facts.sitemap_failure
        if self._verifier is None:
            policy = component_of(self.crawler, SchedulePolicy)
            due_at = policy.now if policy.mode == "adaptive" else None
            self._verifier = UnseenVerifier(
                self.crawler,
                rt,
                batch=self.verify_batch,
                due_at=due_at,
                # a whole listing's silence about a page is news: the page is checked in this run
                delisted=facts.listing_whole,
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
        if self.summary is not None:
            logger.log(self.summary[0], self.summary[1], extra={"spider": self.crawler.spider})

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
        # (a cause reported mid-run decided an exit code already: the run has not ended for it)
        if rt is None or rt.run is None or self.outcome:
            return None
        return deferred_from_coro(self._abort(rt, rt.run))

    async def _abort(self, rt: Runtime, run: Run) -> None:
        rt.stop_heartbeat()
        run_report = self._report(
            run, CLOSE_FORCED, None, ["not_finished"], {}, runreport.deploy_counts(rt.counters)
        )
        code = self._decide([Finding("not_finished", EXIT_GUARD)])
        self.outcome = {"state": RUN_ABORTED, "reasons": ["not_finished"], "exit_code": code}
        run_report["outcome"] = self.outcome
        try:
            await asyncio.wait_for(self._record_abort(rt, run, run_report), timeout=_ABORT_SECS)
        except (StateStoreError, TimeoutError) as exc:
            why = str(exc) or f"the database did not answer within {_ABORT_SECS:g} s"
            logger.error("run %(run)d could not be marked aborted: %(why)s", {"run": run.id, "why": why})
        if self.report_file:
            Path(self.report_file).write_text(json.dumps(run_report, indent=2) + "\n", encoding="utf-8")
        self.report = run_report
        self.summary = (logging.WARNING, summary.summary_line(run_report))
        logger.warning(
            "forced shutdown: run %(run)d ends unfinished (aborted): nothing is removed or published; "
            "the next run checks again",
            {"run": run.id},
            extra={"spider": self.crawler.spider},
        )
        logger.log(self.summary[0], self.summary[1], extra={"spider": self.crawler.spider})

    async def _record_abort(self, rt: Runtime, run: Run, run_report: dict[str, Any]) -> None:
        # the pages already written are kept (committed); the run itself ends aborted
        await rt.store.flush()
        await rt.store.runs.finish_run(
            run,
            reason=CLOSE_FORCED,
            at=utcnow(),
            report=run_report,
            reasons=["not_finished"],
            exit_code=self.exit_code,
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
            if self.refusal is None:
                logger.error("recrawler run never started (%(why)s); nothing recorded", {"why": reason})
                # an error no refusal names (its traceback is above): never a success
                self.failures.append(Finding("never_started", EXIT_CRASH))
            self._decide(())
            return
        c = rt.counters
        store = rt.store
        hold: dict[str, str] = {}
        skipped: list[str] = []
        findings: tuple[Finding, ...] = ()
        try:
            await store.flush()
            # the block-set changes this run's page writes left (and any a killed run left)
            folded = await store.history.fold_block_stats()
            noise = await self._learn_boilerplate(run)
            outage = evaluate(OUTAGE_GUARDS, self.facts(reason, run))
            skipped = [f.reason for f in outage]
            say_outage(outage, self.crawler.spider)
            deploy = await runreport.deploy(rt, run)
            # misses earlier runs kept for a decision are this run's to decide too
            await store.decisions.carry_misses(run)
            facts = await self._hold_facts(reason, run, outage)
            # a dry run and a run that lost its lease hold nothing (they remove and publish nothing)
            judged = not (self.dry_run or rt.lease_lost)
            changes = evaluate(CHANGE_GUARDS, facts) if judged else ()
            removals = evaluate(REMOVAL_GUARDS, facts) if judged else ()
            findings = (*outage, *changes, *removals)
            hold = holds((*changes, *removals))
            # the breaker's own finding (removals an earlier hold left waiting settle apart)
            removal = judged and MASS_REMOVAL.evaluate(facts) is not None
            if changes:
                # the whole run waits: its removals with it
                action = SETTLE_KEEP
            elif removal:
                # only the removals the listing does not confirm wait; the rest of the run goes on
                action = SETTLE_KEEP_LISTED if facts.listing is not None else SETTLE_KEEP
            else:
                action = SETTLE_DROP if skipped else SETTLE_APPLY
            settled = await store.decisions.settle_misses(run, action)
            index, result = await self._publish(run, reason, holds(changes))
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
            say_kept(skipped, result)
            run_report = self._report(run, reason, result, skipped, hold, deploy)
            run_report["noise"] = noise
            run_report["index"] = index
            # how current the published knowledge base is now: what `recrawler due` and the HTML report show
            run_report["freshness"] = await runreport.freshness(rt, run, self.crawler.settings)
            if hold:
                await self._hold(run, hold, run_report, whole=bool(changes))
            await store.deliver()
            c.set("recrawler/reconcile/elapsed_seconds", round(time.monotonic() - started, 3))
            self._finish_outcome(run_report, skipped, hold, findings, whole=bool(changes))
            await store.runs.finish_run(
                run,
                reason=reason,
                at=utcnow(),
                report=run_report,
                reasons=self.outcome["reasons"],
                listed=facts.listed,
                exit_code=self.exit_code,
            )
        except StateStoreError as exc:
            c.state_error(exc)
            # a database lost mid-run was said at ERROR when the store noticed: this is its consequence
            level = logging.WARNING if isinstance(exc, StateStoreLost) else logging.ERROR
            logger.log(level, "reconciliation failed, nothing quarantined or gone: %(exc)s", {"exc": exc})
            run_report = self._report(run, reason, None, ["state_error"], {}, runreport.deploy_counts(c))
            self._finish_outcome(run_report, ["state_error"], {}, (Finding("state_error", EXIT_STATE),))
        if self.report_file:
            Path(self.report_file).write_text(json.dumps(run_report, indent=2) + "\n", encoding="utf-8")
        self.report = run_report
        # the HTML report reads what finish_run stored, through the store's readers
        await reports.write_after_run(self.crawler.settings, store.readers, run.id, store.uri)
        # WARNING when the run did not end well, so a quiet cron run (--loglevel WARNING) still says so
        level = logging.INFO if self.exit_code == EXIT_OK else logging.WARNING
        # logged when the engine stops: the last line, below Scrapy's stats dump
        self.summary = (level, summary.summary_line(run_report))
        if rt.workers is not None:
            await asyncio.to_thread(rt.workers.release)
        await self.crawler.signals.send_catch_log_async(
            recrawler_signals.run_finished, run=run, report=run_report
        )

    async def _hold_facts(self, reason: str, run: Run, outage: tuple[Finding, ...]) -> RunFacts:
        """The facts the hold guards judge: the removal plan, and what the site has not published
        (whichever run stored it: a killed run's pages too)."""
        store = self.runtime.store
        plan = await store.decisions.removal_plan(
            run, gone_after=self.limits.gone_after, gone_statuses=self.limits.gone_statuses
        )
        pending = await store.decisions.pending_changes(run.site)
        same = (
            await store.decisions.largest_same_content(run, distance=fuzzy_distance)
            if pending["published"]
            else None
        )
        return self.facts(
            reason,
            run,
            moved_in=self.verdicts().moved_in,
            plan=plan,
            pending=pending,
            same_content=same,
            outage=outage,
        )

    async def _hold(self, run: Run, hold: dict[str, str], run_report: dict[str, Any], *, whole: bool) -> None:
        c = self.runtime.counters
        c.set("recrawler/run/held", 1)
        c.set("recrawler/alert", 1)
        for why in hold:
            c.set(f"recrawler/run/held/{why}", 1)
        say_held(run.id, hold, self.crawler.spider, whole=whole)
        await self.crawler.signals.send_catch_log_async(
            recrawler_signals.run_held, run=run, reasons=dict(hold), report=run_report
        )

    def _finish_outcome(
        self,
        run_report: dict[str, Any],
        skipped: list[str],
        hold: dict[str, str],
        findings: tuple[Finding, ...],
        *,
        whole: bool = True,
    ) -> None:
        """Decide the run's exit code from the guards' *findings* (the state store's errors counted
        again: publishing can add some) and record the report's ``outcome``."""
        index_state = (run_report.get("index") or {}).get("state")
        late = evaluate(FINAL_GUARDS, self.facts())
        # left unpublished for no reason above (the embedder failed): no success either
        unpublished = index_state == "unpublished" and not (skipped or hold or late)
        code = self._decide(
            [*findings, *late, *([Finding("unpublished", EXIT_GUARD)] if unpublished else [])]
        )
        reasons = [*skipped, *hold, *(["unpublished"] if unpublished else [])]
        self.outcome = {
            "state": RUN_HELD if hold and whole else (index_state or RUN_FINISHED),
            # and the causes other components reported, each once
            "reasons": list(dict.fromkeys([*reasons, *(f.reason for f in self.failures)])),
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
            if reason != "finished" or self.facts().state_errors:
                return {"state": "disabled"}, None
            result, _ = await rt.store.decisions.publish_run(
                run, at=utcnow(), gone_after=self.limits.gone_after, gone_statuses=self.limits.gone_statuses
            )
            return {"state": "disabled"}, result
        publisher = Publisher(
            rt.store.decisions,
            rt.store.kb,
            rt.store.search_index,
            component_of(self.crawler, RunEmbedder).embedder,
            rt.counters,
            dry_run=self.dry_run,
            each_page=self.publish_each_page,
            pool=rt.cpu_pool,
            gone_after=self.limits.gone_after,
            gone_statuses=self.limits.gone_statuses,
        )
        return await publisher.publish(
            run, reason, held=bool(hold), state_errors=bool(self.facts().state_errors)
        )

    def _report(
        self,
        run: Run,
        reason: str,
        result: ReconcileResult | None,
        skipped: list[str],
        hold: dict[str, str],
        deploy: dict[str, Any],
    ) -> dict[str, Any]:
        return runreport.build(
            self.runtime, self.crawler.settings, run, reason, self.verdicts(), result, skipped, hold, deploy
        )

    @staticmethod
    def summary_line(run_report: dict[str, Any]) -> str:
        """``crawled: N new: N changed: N unchanged: N gone: N errors: N | <per layer>``."""
        return summary.summary_line(run_report)


def decided_summary(crawler: Crawler | None) -> tuple[int, str] | None:
    """The summary line the crawl's Reconciler logged, with its level (None: none)."""
    if crawler is None or getattr(crawler, "extensions", None) is None:
        return None
    reconciler = crawler.get_extension(Reconciler)
    return reconciler.summary if reconciler is not None else None


def decided_exit_code(crawler: Crawler | None) -> int | None:
    """The exit code the crawl's Reconciler decided (None: none yet, or no Reconciler enabled)."""
    if crawler is None or getattr(crawler, "extensions", None) is None:
        return None
    reconciler = crawler.get_extension(Reconciler)
    return reconciler.exit_code if reconciler is not None else None


__all__ = ["Reconciler", "decided_exit_code", "decided_summary"]
