"""This process's part in a run shared with other workers: joining, idle and busy, leaving, gathering."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Protocol

from scrapy.exceptions import DontCloseSpider

from recrawler import outcome
from recrawler.exceptions import RunRefused, StateStoreError

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from recrawler.auditor import Auditor
    from recrawler.counters import RunCounters
    from recrawler.shared_run import SharedRun
    from recrawler.state import Lifecycle, Run

logger = logging.getLogger(__name__)


class Member(Protocol):
    """What a process's part in a shared run reads and sets of the run's owner (the Runtime)."""

    crawler: Crawler
    counters: RunCounters
    auditor: Auditor
    run: Run | None
    workers: SharedRun | None
    exit_code: int | None

    @property
    def store(self) -> Lifecycle:
        """The run's store: what its page writes came to."""

    def stop_heartbeat(self) -> None:
        """Stop renewing the site's lease."""


class WorkerActivity:
    """A worker's idleness, as the others see it (``RECRAWLER_WORKERS_ENABLED``): a joining worker
    stays open while its leader lives and work may still come, and reports itself idle (once its
    writes are committed) or busy. The Runtime connects it to ``spider_idle`` and
    ``request_reached_downloader``."""

    def __init__(self, runtime: Member, shared: SharedRun) -> None:
        self.runtime = runtime
        self.shared = shared
        self._idle_report: asyncio.Future[None] | None = None
        #: requests that reached this worker's downloader (an idle report older than one is stale)
        self._busy_gen = 0

    def spider_idle(self) -> None:
        """A joining worker stays open while its leader lives and work may still come."""
        workers = self.shared
        if workers.leader or self.runtime.run is None:
            return
        self._idle_report = asyncio.ensure_future(self._report_idle(self._busy_gen))
        if workers.leader_alive() and not (workers.closing() and workers.frontier_empty()):
            raise DontCloseSpider

    async def _report_idle(self, gen: int) -> None:
        rt = self.runtime
        try:
            # the leader's unseen checks must see every page this worker fetched
            await rt.store.flush()
        except StateStoreError as exc:
            rt.counters.state_error(exc)
        engine = rt.crawler.engine
        # a request that reached this worker meanwhile makes it busy: never report idle over it
        if gen == self._busy_gen and (engine is None or engine.spider_is_idle()):
            await asyncio.to_thread(self.shared.set_state, self.shared.IDLE)

    def request_reached_downloader(self) -> None:
        """A request of the shared frontier reached this worker's downloader."""
        self._busy_gen += 1
        if self.shared.state != self.shared.BUSY:
            self.shared.set_state(self.shared.BUSY)


async def join(rt: Member) -> Run:
    """A joining worker: the leader's run (its audit sample is the leader's to check)."""
    assert rt.workers is not None
    run = await rt.workers.joined_run()
    if run is None:
        msg = (
            f"no leader announced a run within RECRAWLER_WORKERS_WAIT_SECS={rt.workers.wait_secs} "
            "(is another run's leader alive but stuck?)"
        )
        raise RunRefused(msg)
    rt.auditor.sample = 0.0
    logger.info("joined run %(run)d as a worker", {"run": run.id}, extra={"spider": rt.crawler.spider})
    return run


def worker_counts(rt: Member) -> dict[str, int | float]:
    """A joining worker's counts for its leader: its counters, and the page writes its store
    committed (``outcome:``) and lost (``lost:``)."""
    counts: dict[str, int | float] = dict(rt.counters.items())
    counts.update({f"outcome:{k}": v for k, v in rt.store.outcomes.items()})
    counts.update({f"lost:{k}": v for k, v in rt.store.lost.items()})
    return counts


async def leave(rt: Member) -> None:
    """A joining worker: commit its writes and hand its counts to the leader."""
    assert rt.workers is not None
    rt.stop_heartbeat()
    try:
        await rt.store.flush()
    except StateStoreError as exc:
        rt.counters.state_error(exc)
    await asyncio.to_thread(rt.workers.leave, worker_counts(rt))
    run_id = rt.run.id if rt.run else 0
    if not await asyncio.to_thread(rt.workers.leader_alive):
        # nobody closes this run: it stays unfinished until the next run takes the site over
        rt.exit_code = outcome.EXIT_WORKER_LOST
        logger.error(
            "the leader of run %(run)d is gone: the run is unfinished (nothing removed or published; "
            "the next run takes the site over and marks it aborted)",
            {"run": run_id},
        )
        return
    logger.info("worker done: the leader closes run %(run)d", {"run": run_id})


async def gather(rt: Member) -> None:
    """The leader: wait for every worker to leave, then count their pages as its own."""
    assert rt.workers is not None
    await rt.workers.wait_for_workers()
    lost = await asyncio.to_thread(rt.workers.lost)
    if lost:
        # the pages it had taken are not checked this run: the run ends unfinished
        rt.counters.set("recrawler/workers/lost", len(lost))
        logger.error(
            "%(n)d worker(s) of run %(run)d stopped without leaving it (%(names)s): the pages they "
            "had taken are not checked this run, their work is counted as of their last heartbeat",
            {"n": len(lost), "run": rt.run.id if rt.run else 0, "names": ", ".join(lost)},
        )
    for key, value in (await asyncio.to_thread(rt.workers.gathered)).items():
        kind, _, label = key.partition(":")
        if kind == "outcome":
            rt.store.outcomes[label] += int(value)
        elif kind == "lost":
            rt.store.lost[label] += int(value)
        elif not key.endswith("_seconds"):
            rt.counters.inc(key, int(value))


__all__ = ["WorkerActivity", "gather", "join", "leave", "worker_counts"]
