"""ListingBodyMiddleware: a large sitemap file waits on disk while it is listed, not in the scraper."""

from __future__ import annotations

import asyncio
import tempfile
from typing import IO, TYPE_CHECKING, Self

from recrawler import meta

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Request, Response

#: a sitemap body larger than this share of SCRAPER_SLOT_MAX_ACTIVE_SIZE goes to disk
_SHARE = 16


def _spill(body: bytes) -> IO[bytes]:
    # an anonymous file: nothing is left behind, however the run ends
    file = tempfile.TemporaryFile()  # noqa: SIM115 (closed by the spider once it read the listing)
    file.write(body)
    file.seek(0)
    return file


class ListingBodyMiddleware:
    """Moves the body of a large sitemap file to a temporary file, which the spider reads its
    listing from (``recrawler_parse_listing``), and hands on the response with an empty body.

    Scrapy sends no request while the responses its scraper holds weigh more than
    ``SCRAPER_SLOT_MAX_ACTIVE_SIZE`` (5 MB), and a sitemap file is held until its last entry has
    been handed on: a 50,000-URL file (6 MB) would keep every page request back until the whole
    file was written to the frontier, and keep its body in memory all that time. On disk it
    weighs nothing there, and pages are fetched while it is listed. A body goes to disk when it
    is larger than a sixteenth of ``SCRAPER_SLOT_MAX_ACTIVE_SIZE``; robots.txt and the sitemap
    requests of another callback keep theirs. The add-on places it at 530, below every middleware
    that reads a response's body (decompression at 590 first).

    Settings: ``SCRAPER_SLOT_MAX_ACTIVE_SIZE`` (Scrapy's).
    Meta: sets ``_recrawler_listing_body`` (the open temporary file).
    """

    def __init__(self, *, crawler: Crawler, spill_over: int) -> None:
        self.crawler = crawler
        #: bodies larger than this go to disk
        self.spill_over = spill_over

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Only for spiders that opt in."""
        meta.require_opt_in(crawler)
        budget = crawler.settings.getint("SCRAPER_SLOT_MAX_ACTIVE_SIZE")
        return cls(crawler=crawler, spill_over=max(budget // _SHARE, 0))

    async def process_response(self, request: Request, response: Response) -> Response:
        """A large sitemap file's body to disk; every other response as it is."""
        if (
            response.status != 200
            or len(response.body) <= self.spill_over
            or not meta.is_sitemap_request(request)
            or response.url.endswith("/robots.txt")
            or not self._listed_by_spider(request)
        ):
            return response
        request.meta[meta.LISTING_BODY] = await asyncio.to_thread(_spill, response.body)
        return response.replace(body=b"")

    def _listed_by_spider(self, request: Request) -> bool:
        """Whether the spider's own listing parser reads the file (it knows where to look)."""
        parse_listing = getattr(self.crawler.spider, "recrawler_parse_listing", None)
        return parse_listing is not None and request.callback == parse_listing
