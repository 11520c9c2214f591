"""RecheckMiddleware: a page whose text moved while the server says "same entity" is fetched again."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Self

from scrapy import Request
from scrapy.exceptions import NotConfigured

from recrawler import meta
from recrawler.detect import fingerprint
from recrawler.exceptions import StateStoreError
from recrawler.items import Page, Unread
from recrawler.learning import NoiseRegistry
from recrawler.misses import state_error
from recrawler.runtime import component_of, runtime_of
from recrawler.state import GONE, LIVE, MOVED, PENDING_CHANGED
from recrawler.urls import key_host

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from recrawler.cpu import Worked
    from recrawler.runtime import Runtime
    from recrawler.state import PageRecord

logger = logging.getLogger(__name__)

#: stored states of a page that is out of the knowledge base for good
_REMOVED = (GONE, MOVED)


class RecheckMiddleware:
    """Judges each page where its answer comes in: one whose text moved since it was stored while
    the server says it is the same entity (the same ETag, or the same Last-Modified without one)
    is requested again at once, and this answer is not classified. The spider compares the two
    fetches (``_recrawler_first_body``): the regions that differ are volatile noise, learned
    before the page is decided (ClassifyPipeline stores them). One recheck per page and run; a
    page whose text moved back to what the knowledge base shows is no recheck.

    Settings: ``RECRAWLER_VOLATILE_ENABLED``, ``RECRAWLER_VOLATILE_LEARN`` (off: not enabled).
    Stats: ``recrawler/volatile/recheck``, ``recrawler/state/error/<Exception>``.
    Meta: sets ``_recrawler_first_body`` on the recheck.
    """

    def __init__(self, crawler: Crawler, runtime: Runtime, noise: NoiseRegistry) -> None:
        self.crawler = crawler
        self.runtime = runtime
        self.noise = noise

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Only for spiders that opt in, while volatile regions are learned."""
        meta.require_opt_in(crawler)
        s = crawler.settings
        if not (s.getbool("RECRAWLER_VOLATILE_ENABLED") and s.getbool("RECRAWLER_VOLATILE_LEARN")):
            raise NotConfigured
        return cls(crawler, runtime_of(crawler), component_of(crawler, NoiseRegistry))

    async def process_spider_output(
        self, response: Response, result: AsyncIterator[Any]
    ) -> AsyncIterator[Any]:
        """A page to fetch again becomes its recheck request; everything else passes through."""
        async for r in result:
            if isinstance(r, Page):
                recheck = await self._recheck(r)
                if recheck is not None:
                    self.runtime.counters.inc("recrawler/volatile/recheck")
                    yield recheck
                    continue
            yield r

    async def _recheck(self, page: Page) -> Request | None:
        if (
            page.rechecked
            or page.error
            or page.http_status != 200
            or page.raw_body is None
            or page.text is None
            or self.runtime.run is None
        ):
            return None
        rec = await self._record(page)
        if rec is None or rec.status in _REMOVED:
            return None
        same_validator = (page.etag and page.etag == rec.etag) or (
            page.last_modified and page.last_modified == rec.last_modified and not page.etag
        )
        if not same_validator:
            return None
        store = self.runtime.store
        noise = await self.noise.ensure(key_host(page.key), store.history)
        worked: Worked | None = page.worked
        if worked is not None and worked.noise is noise and worked.fingerprint is not None:
            fp = worked.fingerprint
        else:
            fp = await self.runtime.offload(fingerprint, page.text, noise)
        if fp.content_hash == rec.content_hash:
            return None
        if rec.pending == PENDING_CHANGED and rec.status == LIVE and fp.content_hash == rec.published_hash:
            # back to what the knowledge base shows: decided as it is
            return None
        spider = self.crawler.spider
        callback = getattr(spider, "recrawler_verify_callback", None) or getattr(spider, "parse", None)
        return Request(
            page.url,
            callback=callback,
            dont_filter=True,
            meta={
                meta.KEY: page.key,
                meta.ENABLED: True,
                meta.FIRST_BODY: page.raw_body,
                meta.DEPTH: page.found_depth,
            },
        )

    async def _record(self, page: Page) -> PageRecord | None:
        """The page's stored state: from its request's way, else read now (and kept on the page
        for the pipelines)."""
        if page.record is not Unread.UNREAD:
            rec: PageRecord | None = page.record
            return rec
        try:
            page.record = await self.runtime.store.pages.get(page.key)
        except StateStoreError as exc:
            state_error(self.runtime, exc, "state read", page.url)
            return None
        return page.record  # type: ignore[no-any-return]


__all__ = ["RecheckMiddleware"]
