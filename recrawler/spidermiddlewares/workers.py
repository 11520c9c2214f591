"""WorkerStartMiddleware: a worker that joins a shared run yields no start requests."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

from scrapy.exceptions import NotConfigured

from recrawler.runtime import runtime_of

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from scrapy.crawler import Crawler


class WorkerStartMiddleware:
    """A joining worker yields no start requests: the leader reads the listing once."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Only with ``RECRAWLER_WORKERS_ENABLED``."""
        if not crawler.settings.getbool("RECRAWLER_WORKERS_ENABLED"):
            raise NotConfigured
        return cls(crawler)

    async def process_start(self, start: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """Pass the spider's start requests through for the leader only."""
        workers = runtime_of(self.crawler).workers
        if workers is not None and not workers.leader:
            return
        async for item in start:
            yield item


__all__ = ["WorkerStartMiddleware"]
