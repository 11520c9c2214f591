"""LinkListingMiddleware: when a site's links are its listing, each page is a listing file of its links."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Self

from scrapy import Request

from recrawler import meta
from recrawler.exceptions import StateStoreError
from recrawler.redact import redact_url
from recrawler.runtime import runtime_of
from recrawler.state import ListedEntry, SitemapFile, utcnow
from recrawler.urls import KeyMaker

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from recrawler.runtime import Runtime
    from recrawler.state import Run

logger = logging.getLogger(__name__)


class LinkListingMiddleware:
    """Keeps the listing of a site crawled from start URLs with no sitemap (the spider marks such
    page requests ``_recrawler_links``): the links a page answered with are stored as it is read,
    by its page key, as a sitemap file's entries are; a page that answers 304 lists the links it
    had when last read (the spider's ``recrawler_link_request`` makes their requests), so an
    unchanged page hides none of the pages below it. A 304 of a page whose links were never stored
    (read before, from a sitemap) is fetched again in full, once.

    A page whose links carry a credential (``?token=``) keeps none stored: it is fetched in full
    each run instead.

    Settings: ``RECRAWLER_FRONTIER_BATCH_SIZE`` (entries per write and read),
    ``RECRAWLER_URL_DROP_PARAMS``, ``RECRAWLER_URL_KEEP_PARAMS`` (the page key).
    Stats: ``recrawler/follow/stored`` (links listed from storage), ``recrawler/follow/refetched``,
    ``recrawler/state/error/<Exception>``.
    """

    def __init__(self, crawler: Crawler, *, batch_size: int = 500, key_maker: KeyMaker | None = None) -> None:
        self.crawler = crawler
        self.batch_size = max(1, batch_size)
        self.key_maker = key_maker or KeyMaker()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Only for spiders that opt in."""
        meta.require_opt_in(crawler)
        s = crawler.settings
        return cls(
            crawler,
            batch_size=s.getint("RECRAWLER_FRONTIER_BATCH_SIZE"),
            key_maker=KeyMaker(
                s.getlist("RECRAWLER_URL_DROP_PARAMS"), s.getlist("RECRAWLER_URL_KEEP_PARAMS")
            ),
        )

    async def process_spider_output(
        self, response: Response, result: AsyncIterator[Any]
    ) -> AsyncIterator[Any]:
        """Store a listing page's links (a 200), or list its stored ones (a 304)."""
        request = response.request
        runtime = runtime_of(self.crawler)
        run = runtime.run
        if (
            request is None
            or run is None
            or not request.meta.get(meta.LINKS)
            or not meta.is_page_request(request)
            or response.status not in (200, 304)
        ):
            async for r in result:
                yield r
            return
        key = meta.request_key(request, self.key_maker)
        if response.status == 304:
            async for r in self._stored(runtime, response, request, key, result):
                yield r
            return
        entries: list[ListedEntry] = []
        count = 0
        keep = True
        async for r in result:
            if keep and isinstance(r, Request) and r.meta.get(meta.FOUND_FROM) == response.url:
                if redact_url(r.url) != r.url:
                    # never stored: the page is read in full next run instead
                    keep, entries = False, []
                else:
                    count += 1
                    entries.append(ListedEntry(url=r.url, kind=meta.ROLE_PAGE, lastmod=None, pos=count))
                    if len(entries) >= self.batch_size:
                        keep = await self._add(runtime, run, key, entries)
                        entries = []
            yield r
        if keep and await self._add(runtime, run, key, entries):
            try:
                await runtime.store.frontier.listing_read(
                    run, SitemapFile(url=key, etag=None, last_modified=None, urls=count), utcnow()
                )
            except StateStoreError as exc:
                self._failed(runtime, key, exc)

    async def _add(self, runtime: Runtime, run: Run, key: str, entries: list[ListedEntry]) -> bool:
        try:
            await runtime.store.frontier.add_listing(run, key, entries)
        except StateStoreError as exc:
            self._failed(runtime, key, exc)
            return False
        return True

    async def _stored(
        self, runtime: Runtime, response: Response, request: Request, key: str, result: AsyncIterator[Any]
    ) -> AsyncIterator[Any]:
        """The 304's own output, then requests for the links stored with the page."""
        spider = self.crawler.spider
        out = [r async for r in result]
        after = 0
        while True:
            try:
                stored = await runtime.store.frontier.listing(key, after=after, limit=self.batch_size)
                known = (
                    bool(stored) or after > 0 or await runtime.store.frontier.sitemap_file(key) is not None
                )
            except StateStoreError as exc:
                self._failed(runtime, key, exc)
                stored, known = [], True
            if not known:
                # read before its links were kept (from a sitemap, or a failed write): read it in
                # full once; its answer decides the page, not this 304
                runtime.counters.inc("recrawler/follow/refetched")
                kept = {
                    name: request.meta[name]
                    for name in (meta.KEY, meta.FOUND_VIA, meta.FOUND_FROM, meta.DEPTH, meta.LINKS, meta.DUE)
                    if name in request.meta
                }
                yield Request(
                    request.url,
                    callback=request.callback,
                    dont_filter=True,
                    priority=request.priority,
                    meta={**kept, meta.CONDITIONAL: False},
                )
                return
            if after == 0:
                for r in out:
                    yield r
            if not stored:
                return
            runtime.counters.inc("recrawler/follow/stored", len(stored))
            for entry in stored:
                link = spider.recrawler_link_request(entry.url, response)  # type: ignore[union-attr]
                if link is not None:
                    yield link
            after = stored[-1].pos

    def _failed(self, runtime: Runtime, key: str, exc: StateStoreError) -> None:
        runtime.counters.state_error(exc)
        logger.error("could not keep the links of %(key)s: %(exc)s", {"key": key, "exc": exc})


__all__ = ["LinkListingMiddleware"]
