"""BoundedHttpCompressionMiddleware: a page that decompresses past DOWNLOAD_MAXSIZE is a counted error."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Self

from scrapy.downloadermiddlewares.httpcompression import HttpCompressionMiddleware
from scrapy.exceptions import IgnoreRequest

from recrawler import meta
from recrawler.logformatter import mask_logger
from recrawler.meta import is_page_request

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Request, Response


class BoundedHttpCompressionMiddleware(HttpCompressionMiddleware):
    """Scrapy's :class:`~scrapy.downloadermiddlewares.httpcompression.HttpCompressionMiddleware`,
    whose refusal of a page whose body decompresses past ``DOWNLOAD_MAXSIZE`` (a gzip bomb) is not
    silent: the page's response goes on with an empty body, marked, and ConditionalRequestMiddleware
    counts it as an error (``too_large``) before dropping it, as it counts every page's outcome.
    Other requests are refused as Scrapy refuses them. Its log lines mask credentials in URLs. The
    add-on puts it in HttpCompressionMiddleware's place.
    """

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Build as Scrapy's middleware is built."""
        mask_logger(logging.getLogger(HttpCompressionMiddleware.__module__))
        return super().from_crawler(crawler)

    def process_response(self, request: Request, response: Response) -> Request | Response:  # type: ignore[override]
        """Decompress as Scrapy does; a page over the limit goes on, empty and marked."""
        try:
            return super().process_response(request, response)
        except IgnoreRequest:
            if not is_page_request(request):
                raise
            request.meta[meta.TOO_LARGE] = True
            return response.replace(body=b"")


__all__ = ["BoundedHttpCompressionMiddleware"]
