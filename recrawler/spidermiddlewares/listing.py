"""ListingMiddleware: what a sitemap yields is tagged (a page or another sitemap) and bounded."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Self

from scrapy import Request
from scrapy.exceptions import NotConfigured

from recrawler import meta
from recrawler.exceptions import ConfigurationError
from recrawler.runtime import runtime_of

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)


class ListingMiddleware:
    """Reads a site's listing defensively.

    Requests yielded while reading a sitemap are tagged as pages or as further sitemaps (through
    the spider's ``recrawler_role_of``). A sitemap index tree is bounded in depth
    (``RECRAWLER_SITEMAP_MAX_DEPTH``) and in files (``RECRAWLER_SITEMAP_MAX_FILES``), and a run
    lists at most ``RECRAWLER_LISTING_MAX_URLS`` pages: what lies beyond is not fetched, and the
    listing counts as incomplete, so the outage guard removes nothing this run.

    Settings: ``RECRAWLER_SITEMAP_MAX_DEPTH``, ``RECRAWLER_SITEMAP_MAX_FILES``,
    ``RECRAWLER_LISTING_MAX_URLS``.
    Stats: ``recrawler/sitemap/refused``, ``recrawler/sitemap/refused/{depth,files,urls}``.
    """

    def __init__(self, crawler: Crawler, *, max_depth: int, max_files: int, max_urls: int) -> None:
        for name, value in (
            ("RECRAWLER_SITEMAP_MAX_DEPTH", max_depth),
            ("RECRAWLER_SITEMAP_MAX_FILES", max_files),
            ("RECRAWLER_LISTING_MAX_URLS", max_urls),
        ):
            if value < 1:
                raise ConfigurationError(f"{name}: must be at least 1, got {value!r}")
        self.crawler = crawler
        self.max_depth = max_depth
        self.max_files = max_files
        self.max_urls = max_urls
        self.files = 0
        self.urls = 0
        self._logged: set[str] = set()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Read the bounds; only for spiders that opt in."""
        if crawler.spider is not None and not meta.spider_opted_in(crawler.spider):
            raise NotConfigured
        s = crawler.settings
        return cls(
            crawler,
            max_depth=s.getint("RECRAWLER_SITEMAP_MAX_DEPTH"),
            max_files=s.getint("RECRAWLER_SITEMAP_MAX_FILES"),
            max_urls=s.getint("RECRAWLER_LISTING_MAX_URLS"),
        )

    async def process_spider_output(
        self, response: Response, result: AsyncIterator[Any]
    ) -> AsyncIterator[Any]:
        """Tag and bound what a sitemap yields; everything else passes through."""
        request = response.request
        role_of = getattr(self.crawler.spider, "recrawler_role_of", None)
        if request is None or role_of is None or not meta.is_sitemap_request(request):
            async for r in result:
                yield r
            return
        depth = int(request.meta.get(meta.SITEMAP_DEPTH) or 0) + 1
        async for r in result:
            if not isinstance(r, Request):
                yield r
                continue
            role = role_of(r)
            r.meta[meta.ROLE] = role
            if role == meta.ROLE_SITEMAP:
                r.meta[meta.SITEMAP_DEPTH] = depth
                if depth > self.max_depth:
                    self._refuse("depth", r.url, f"more than {self.max_depth} sitemap files deep")
                    continue
                self.files += 1
                if self.files > self.max_files:
                    self._refuse("files", r.url, f"more than {self.max_files} sitemap files")
                    continue
            else:
                self.urls += 1
                if self.urls > self.max_urls:
                    self._refuse("urls", r.url, f"more than {self.max_urls} listed pages")
                    continue
            yield r

    def _refuse(self, why: str, url: str, what: str) -> None:
        counters = runtime_of(self.crawler).counters
        counters.inc("recrawler/sitemap/refused")
        counters.inc(f"recrawler/sitemap/refused/{why}")
        if why not in self._logged:
            self._logged.add(why)
            logger.error(
                "listing is incomplete: %(what)s (first refused: %(url)s); nothing is removed this run",
                {"what": what, "url": url[:300]},
                extra={"spider": self.crawler.spider},
            )
