"""SoftNotFoundMiddleware: a page that answers 200 but says it is not there is a miss, not content."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Self

from scrapy import Request
from scrapy.exceptions import NotConfigured

from recrawler import meta, notfound
from recrawler.exceptions import StateStoreError
from recrawler.items import Page, Unread
from recrawler.misses import miss_moves, stage_soft_miss
from recrawler.redact import redact_url
from recrawler.runtime import runtime_of

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from recrawler.runtime import Runtime

logger = logging.getLogger(__name__)


class SoftNotFoundMiddleware:
    """Turns soft 404s into misses before any pipeline sees them.

    A Page whose short text says it is not there (``Page not found``, ``No page /docs/x``, ``404``,
    ``does not exist``) in its title, first headings or first lines is a soft 404 when the page is
    stored and its text became at most half as long, or, for a page never stored (a redirect's
    target, a new listing entry), when its title or first heading is a not-found one. The Page is
    dropped and a miss is staged for its key and for the stored pages a permanent redirect moved
    to it, as a 404 would stage them (quarantine, then gone after ``RECRAWLER_GONE_AFTER_MISSES``);
    a page never stored is an error (``soft_404``). Links found on it are not followed. Redirects
    that are soft 404s are ConditionalRequestMiddleware's to find.

    Settings: ``RECRAWLER_SOFT404_ENABLED``.
    Stats: ``recrawler/page/soft_404``, ``recrawler/page/soft_404/{not_found_text,not_found_page}``,
    ``recrawler/page/missing/soft_404``, ``recrawler/page/error/soft_404``.
    """

    def __init__(self, crawler: Crawler, runtime: Runtime) -> None:
        self.crawler = crawler
        self.runtime = runtime
        self._logged: set[str] = set()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Only for spiders that opt in, while ``RECRAWLER_SOFT404_ENABLED`` is on."""
        meta.require_opt_in(crawler)
        if not crawler.settings.getbool("RECRAWLER_SOFT404_ENABLED"):
            raise NotConfigured("RECRAWLER_SOFT404_ENABLED is off")
        return cls(crawler, runtime_of(crawler))

    async def process_spider_output(
        self, response: Response, result: AsyncIterator[Any]
    ) -> AsyncIterator[Any]:
        """Drop a soft 404's Page (its miss staged) and the links found on it."""
        soft = False
        async for out in result:
            if isinstance(out, Page) and out.text and not out.error and await self._soft(out):
                soft = True
                continue
            if soft and isinstance(out, Request) and meta.is_page_request(out):
                continue
            yield out

    async def _soft(self, page: Page) -> bool:
        if not notfound.might_be_not_found(page.title, page.headings, page.text or ""):
            return False
        stored = await self._stored_length(page)
        shape = notfound.not_found(page.title, page.headings, page.text or "", stored)
        if shape is None:
            return False
        if shape not in self._logged:
            self._logged.add(shape)
            logger.warning(
                "soft 404 (%(shape)s): %(url)s answers 200 with a not-found page (%(title)r): counted "
                "as a miss, never as content; further soft 404s are only counted",
                {"shape": shape, "url": redact_url(page.url), "title": (page.title or "")[:80]},
                extra={"spider": self.crawler.spider},
            )
        staged = await stage_soft_miss(
            self.runtime, page.key, page.url, shape, error_if_unknown=not page.moved_from
        )
        for source in page.moved_from:
            # the pages a permanent redirect sent to a not-found page are the ones missing
            await stage_soft_miss(self.runtime, source, page.url, shape, error_if_unknown=staged != "staged")
        # and so are the others this run found moving there (their hops were not fetched again)
        await miss_moves(self.runtime, page.key, 404, soft=shape)
        return True

    async def _stored_length(self, page: Page) -> int | None:
        """The stored text's length of *page* (None: never stored, or no text kept)."""
        store = self.runtime.store
        try:
            if page.record is Unread.UNREAD:
                # read here, kept on the item: ClassifyPipeline need not read it again
                page.record = await store.get(page.key)
            if page.record is None:
                return None
            fields = await store.get_fields(page.key)
        except StateStoreError as exc:
            # without the stored page nothing is compared: the page is content, as it looks
            self.runtime.counters.inc(f"recrawler/state/error/{type(exc).__name__}")
            logger.error("state read failed: %(exc)s", {"exc": exc})
            return None
        return len(fields.text) if fields is not None and fields.text else None


__all__ = ["SoftNotFoundMiddleware"]
