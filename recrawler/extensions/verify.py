"""Direct checks of stored pages a run did not reach, handed to the scheduler from ``spider_idle``."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from scrapy import Request
from scrapy.exceptions import DontCloseSpider

from recrawler import meta
from recrawler import signals as recrawler_signals
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
    (``DontCloseSpider``) and handed to the scheduler (the ``recrawler.signals.pages_to_check``
    signal: FrontierScheduler queues it); once a read finds nothing left an empty batch says so,
    and the spider closes when no other idle handler keeps it open.
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
        spider = self.crawler.spider
        assert spider is not None
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
                self._hand_over([])
                return
            requests = []
            for key, url, depth in batch:
                if policy is not None and not policy.allows(url):
                    # stored before URLs were checked: never fetched again (`recrawler check` lists it)
                    c.inc("recrawler/reconcile/refused")
                    continue
                meta_ = {meta.KEY: key, meta.VERIFY: True, meta.DEPTH: depth}
                requests.append(Request(url, callback=callback, dont_filter=True, meta=meta_))
            if requests and self._hand_over(requests):
                c.inc("recrawler/reconcile/verified", len(batch))
                logger.info("checking %(n)d stored pages this run did not reach", {"n": len(batch)})
                return
            if self.done:
                return

    def _hand_over(self, requests: list[Request]) -> bool:
        """Whether the scheduler took *requests*."""
        taken = self.crawler.signals.send_catch_log(recrawler_signals.pages_to_check, requests=requests)
        if taken or not requests:
            return bool(taken)
        if not self.done:
            # a project's own SCHEDULER that does not listen: said once, then the check is skipped
            self.done = True
            self.runtime.counters.inc("recrawler/reconcile/skipped/verify_scheduler")
            logger.warning(
                "SCHEDULER %(cls)s does not queue recrawler.signals.pages_to_check: stored pages "
                "this run did not reach are not checked (use recrawler.scheduler.FrontierScheduler)",
                {"cls": self.crawler.settings.get("SCHEDULER")},
            )
        return False


__all__ = ["UnseenVerifier"]
