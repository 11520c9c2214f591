"""CountedRobotsTxtMiddleware: Scrapy's robots.txt rules, with the page requests they forbid counted."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware
from scrapy.exceptions import IgnoreRequest

from recrawler.logformatter import mask_logger
from recrawler.meta import is_page_request
from recrawler.runtime import find_runtime

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Request
    from scrapy.robotstxt import RobotParser


class CountedRobotsTxtMiddleware(RobotsTxtMiddleware):
    """Scrapy's :class:`~scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware` (``ROBOTSTXT_OBEY``),
    whose refusals of page requests are counted (``recrawler/robots/forbidden``): a robots.txt that
    forbids the docs (a staging one, deployed by mistake) is an outage the run reports, not a quiet
    run that checked nothing. Its log lines mask credentials in URLs. The add-on puts it in
    RobotsTxtMiddleware's place.

    Stats: ``recrawler/robots/forbidden``.
    """

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        mask_logger(logging.getLogger(RobotsTxtMiddleware.__module__))

    def process_request_2(self, rp: RobotParser | None, request: Request) -> None:
        """Scrapy's check; a page request it forbids is counted before it is dropped."""
        try:
            super().process_request_2(rp, request)
        except IgnoreRequest:
            runtime = find_runtime(self.crawler)
            if runtime is not None and is_page_request(request):
                runtime.counters.inc("recrawler/robots/forbidden")
            raise


__all__ = ["CountedRobotsTxtMiddleware"]
