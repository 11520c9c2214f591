"""A crawl extension for benchmarks: stop once the listing is in and a few batches of pages more."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Self

from scrapy import signals

from recrawler.runtime import runtime_of

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class StopAfterListing:
    """Closes the spider (``bench_listed``) once ``BENCH_SITEMAP_FILES`` sitemap files were read and
    ``BENCH_BATCHES_AFTER`` batches (``RECRAWLER_FRONTIER_BATCH_SIZE``) more pages were answered."""

    def __init__(self, crawler: Crawler, files: int, batches: int) -> None:
        self.crawler = crawler
        self.files = files
        self.batches = batches
        self._task: asyncio.Task[None] | None = None
        self._closing: asyncio.Future[None] | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Read the two settings; poll from the moment the spider opens."""
        ext = cls(
            crawler,
            crawler.settings.getint("BENCH_SITEMAP_FILES"),
            crawler.settings.getint("BENCH_BATCHES_AFTER"),
        )
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    def spider_opened(self) -> None:
        self._task = asyncio.ensure_future(self._watch())

    def spider_closed(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _watch(self) -> None:
        c = runtime_of(self.crawler).counters
        batch = self.crawler.settings.getint("RECRAWLER_FRONTIER_BATCH_SIZE")
        fed_at_listed: int | None = None
        while True:
            await asyncio.sleep(0.2)
            if fed_at_listed is None and c["recrawler/sitemap/parsed"] >= self.files:
                fed_at_listed = c["recrawler/request/count"]
                logger.info(
                    "bench: listing in (%(urls)d URLs), %(fed)d pages answered",
                    {"urls": c["recrawler/sitemap/urls"], "fed": fed_at_listed},
                )
            if (
                fed_at_listed is not None
                and c["recrawler/request/count"] >= fed_at_listed + self.batches * batch
            ):
                logger.info("bench: stopping after %(n)d more batches", {"n": self.batches})
                engine = self.crawler.engine
                if engine is not None:
                    # a task of its own: spider_closed cancels this watcher, not the closing
                    self._closing = asyncio.ensure_future(engine.close_spider_async(reason="bench_listed"))
                return
