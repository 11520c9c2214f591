"""Lease: a run's hold on its site, renewed while the run goes on."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from recrawler import membership
from recrawler.exceptions import ConfigurationError, StateStoreError, StateStoreLost

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from recrawler.counters import RunCounters
    from recrawler.shared_run import SharedRun
    from recrawler.state import Lifecycle, Run, Runs

logger = logging.getLogger(__name__)

#: the close reason of a run whose lease a later run took over
CLOSE_LEASE_LOST = "recrawler_lease_lost"


class Lease:
    """The site's lease of one run (``RECRAWLER_LEASE_SECS``): renewed every quarter of it (or of
    ``RECRAWLER_WORKERS_TTL_SECS`` in a shared run, where a joining worker beats and reports its
    counts instead); a later run that took it over (this process stalled longer than the lease)
    closes the spider, ``recrawler_lease_lost``."""

    def __init__(self, secs: float) -> None:
        if secs <= 0:
            raise ConfigurationError(f"RECRAWLER_LEASE_SECS: bad value {secs!r}")
        self.secs = secs
        #: a later run took the site over
        self.lost = False
        self._task: asyncio.Task[None] | None = None

    def start(
        self,
        crawler: Crawler,
        runs: Runs,
        run: Run,
        *,
        counters: RunCounters,
        workers: SharedRun | None = None,
        lifecycle: Lifecycle | None = None,
    ) -> None:
        """Renew the lease from now on (the store's runs role renews it; a joining worker reports
        its counts with the page writes its store's *lifecycle* committed)."""
        self._task = asyncio.ensure_future(self._beat(crawler, runs, run, counters, workers, lifecycle))

    def stop(self) -> None:
        """Stop renewing the lease (the closing work releases it with the run)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _beat(
        self,
        crawler: Crawler,
        runs: Runs,
        run: Run,
        counters: RunCounters,
        workers: SharedRun | None,
        lifecycle: Lifecycle | None,
    ) -> None:
        ttl = workers.ttl_secs if workers is not None else self.secs
        while True:
            await asyncio.sleep(min(self.secs, ttl) / 4)
            if workers is not None:
                await asyncio.to_thread(workers.beat)
                if not workers.leader and lifecycle is not None:
                    # this worker's work so far, counted by the leader should this process die
                    await asyncio.to_thread(workers.report, membership.worker_counts(counters, lifecycle))
                    continue
            try:
                held = await runs.heartbeat(run)
            except StateStoreError as exc:
                # a database lost mid-run was said once, by the store, when it noticed
                level = logging.DEBUG if isinstance(exc, StateStoreLost) else logging.ERROR
                logger.log(level, "lease heartbeat failed: %(exc)s", {"exc": exc})
                continue
            if not held:
                self.lost = True
                logger.error(
                    "run %(run)d lost the lease of %(site)s to another run: stopping",
                    {"run": run.id, "site": run.site},
                )
                engine = crawler.engine
                if engine is not None:
                    await engine.close_spider_async(reason=CLOSE_LEASE_LOST)
                return


__all__ = ["CLOSE_LEASE_LOST", "Lease"]
