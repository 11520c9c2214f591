"""This process's part in a run shared with other workers: joining, idle and busy, leaving, gathering."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from scrapy.exceptions import DontCloseSpider

from recrawler import outcome
from recrawler import signals as recrawler_signals
from recrawler.exceptions import RunRefused, StateStoreError

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from recrawler.auditor import Auditor
    from recrawler.counters import RunCounters
    from recrawler.shared_run import SharedRun
    from recrawler.state import Lifecycle, Run

logger = logging.getLogger(__name__)

#: the cause a joining worker reports (``recrawler.signals.run_failed``) when its leader is gone
LEADER_LOST = "leader_lost"


class WorkerActivity:
    """A worker's idleness, as the others see it (``RECRAWLER_WORKERS_ENABLED``): a joining worker
    stays open while its leader lives and work may still come, and reports itself idle (once its
    writes are committed) or busy. The Runtime connects it to ``spider_idle`` and
    ``request_reached_downloader``; the shared run says when this worker's run has begun (``joined``)."""

    def __init__(self, crawler: Crawler, shared: SharedRun, store: Lifecycle, counters: RunCounters) -> None:
        self.crawler = crawler
        self.shared = shared
        self.store = store
        self.counters = counters
        self._idle_report: asyncio.Future[None] | None = None
        #: requests that reached this worker's downloader (an idle report older than one is stale)
        self._busy_gen = 0

    def spider_idle(self) -> None:
        """A joining worker stays open while its leader lives and work may still come."""
        workers = self.shared
        if workers.leader or not workers.joined:
            return
        self._idle_report = asyncio.ensure_future(self._report_idle(self._busy_gen))
        if workers.leader_alive() and not (workers.closing() and workers.frontier_empty()):
            raise DontCloseSpider

    async def _report_idle(self, gen: int) -> None:
        try:
            # the leader's unseen checks must see every page this worker fetched
            await self.store.flush()
        except StateStoreError as exc:
            self.counters.state_error(exc)
        engine = self.crawler.engine
        # a request that reached this worker meanwhile makes it busy: never report idle over it
        if gen == self._busy_gen and (engine is None or engine.spider_is_idle()):
            await asyncio.to_thread(self.shared.set_state, self.shared.IDLE)

    def request_reached_downloader(self) -> None:
        """A request of the shared frontier reached this worker's downloader."""
        self._busy_gen += 1
        if self.shared.state != self.shared.BUSY:
            self.shared.set_state(self.shared.BUSY)


async def join(workers: SharedRun, auditor: Auditor, crawler: Crawler) -> Run:
    """A joining worker: the leader's run (its audit sample is the leader's to check)."""
    run = await workers.joined_run()
    if run is None:
        msg = (
            f"no leader announced a run within RECRAWLER_WORKERS_WAIT_SECS={workers.wait_secs} "
            "(is another run's leader alive but stuck?)"
        )
        raise RunRefused(msg)
    auditor.sample = 0.0
    logger.info("joined run %(run)d as a worker", {"run": run.id}, extra={"spider": crawler.spider})
    return run


def worker_counts(counters: RunCounters, store: Lifecycle) -> dict[str, int | float]:
    """A joining worker's counts for its leader: its counters, and the page writes its store
    committed (``outcome:``) and lost (``lost:``)."""
    counts: dict[str, int | float] = dict(counters.items())
    counts.update({f"outcome:{k}": v for k, v in store.outcomes.items()})
    counts.update({f"lost:{k}": v for k, v in store.lost.items()})
    return counts


async def leave(
    crawler: Crawler, workers: SharedRun, store: Lifecycle, counters: RunCounters, run: Run
) -> None:
    """A joining worker: commit its writes and hand its counts to the leader. A leader gone is
    reported (``recrawler.signals.run_failed``, ``leader_lost``): the Reconciler decides the exit
    code."""
    try:
        await store.flush()
    except StateStoreError as exc:
        counters.state_error(exc)
    await asyncio.to_thread(workers.leave, worker_counts(counters, store))
    run_id = run.id
    if not await asyncio.to_thread(workers.leader_alive):
        # nobody closes this run: it stays unfinished until the next run takes the site over
        await crawler.signals.send_catch_log_async(
            recrawler_signals.run_failed, cause=LEADER_LOST, exit_code=outcome.EXIT_WORKER_LOST
        )
        logger.error(
            "the leader of run %(run)d is gone: the run is unfinished (nothing removed or published; "
            "the next run takes the site over and marks it aborted)",
            {"run": run_id},
        )
        return
    logger.info("worker done: the leader closes run %(run)d", {"run": run_id})


async def gather(workers: SharedRun, store: Lifecycle, counters: RunCounters, run: Run) -> None:
    """The leader: wait for every worker to leave, then count their pages as its own."""
    await workers.wait_for_workers()
    lost = await asyncio.to_thread(workers.lost)
    if lost:
        # the pages it had taken are not checked this run: the run ends unfinished
        counters.set("recrawler/workers/lost", len(lost))
        logger.error(
            "%(n)d worker(s) of run %(run)d stopped without leaving it (%(names)s): the pages they "
            "had taken are not checked this run, their work is counted as of their last heartbeat",
            {"n": len(lost), "run": run.id, "names": ", ".join(lost)},
        )
    for key, value in (await asyncio.to_thread(workers.gathered)).items():
        kind, _, label = key.partition(":")
        if kind == "outcome":
            store.outcomes[label] += int(value)
        elif kind == "lost":
            store.lost[label] += int(value)
        elif not key.endswith("_seconds"):
            counters.inc(key, int(value))


__all__ = ["LEADER_LOST", "WorkerActivity", "gather", "join", "leave", "worker_counts"]
