"""Direct checks of stored pages a run did not reach, fed to the engine from ``spider_idle``."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from scrapy import Request
from scrapy.exceptions import DontCloseSpider

from recrawler import meta
from recrawler.exceptions import StateStoreError
from recrawler.misses import state_error

if TYPE_CHECKING:
    from datetime import datetime

    from scrapy.crawler import Crawler

    from recrawler.runtime import Runtime
    from recrawler.state import Run

logger = logging.getLogger(__name__)


class UnseenVerifier:
    """Requests, batch by batch, the stored pages this run has not reached yet (that are due).

    The next batch is read from the database off the reactor while the spider stays open
    (``DontCloseSpider``); once a read finds nothing left the engine is woken, and the spider
    closes when no other idle handler keeps it open.
    """

    def __init__(
        self,
        crawler: Crawler,
        runtime: Runtime,
        *,
        batch: int,
        due_at: datetime | None,
        delisted: bool = False,
        deployed: datetime | None = None,
    ) -> None:
        self.crawler = crawler
        self.runtime = runtime
        self.batch = batch
        self.due_at = due_at
        #: the listing is whole: pages it no longer names are checked now, due or not
        self.delisted = delisted
        #: the site's last detected deploy: pages no request checked since are checked now
        self.deployed = deployed
        self.done = False
        self._reading: asyncio.Task[None] | None = None

    def idle(self, run: Run, *, skip_reason: str | None) -> None:
        """Called on ``spider_idle``: keep the spider open while a batch is read or in flight."""
        if self.done:
            return
        if skip_reason is not None:
            # without the listing every stored page would be "unseen": do not hammer a failing site
            self.done = True
            self.runtime.counters.inc(f"recrawler/reconcile/skipped/verify_{skip_reason}")
            return
        if self._reading is None or self._reading.done():
            self._reading = asyncio.ensure_future(self._read(run))
        raise DontCloseSpider

    async def _read(self, run: Run) -> None:
        """Read batches until one has a page to request, or none is left (then close the spider)."""
        c = self.runtime.counters
        spider, engine = self.crawler.spider, self.crawler.engine
        assert spider is not None
        assert engine is not None
        callback = getattr(spider, "recrawler_verify_callback", None) or spider.parse
        policy = getattr(spider, "recrawler_url_policy", None)
        while True:
            try:
                batch = await self.runtime.store.pages.unseen(
                    run, self.batch, due_at=self.due_at, delisted=self.delisted, deployed=self.deployed
                )
            except StateStoreError as exc:
                state_error(self.runtime, exc, "listing unseen pages")
                batch = []
            if not batch:
                self.done = True
                # the spider goes idle again now: the frontier (links found on the pages checked
                # meanwhile) and every other idle handler have their say before it closes
                self.runtime.wake()
                return
            c.inc("recrawler/reconcile/verified", len(batch))
            logger.info("checking %(n)d stored pages this run did not reach", {"n": len(batch)})
            requests = []
            for key, url, depth in batch:
                if policy is not None and not policy.allows(url):
                    # stored before URLs were checked: never fetched again (`recrawler check` lists it)
                    c.inc("recrawler/reconcile/refused")
                    continue
                meta_ = {meta.KEY: key, meta.VERIFY: True, meta.DEPTH: depth}
                requests.append(Request(url, callback=callback, dont_filter=True, meta=meta_))
            for request in requests:
                engine.crawl(request)
            if requests:
                return


__all__ = ["UnseenVerifier"]
