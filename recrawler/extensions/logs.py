"""DownloadFailureLog: a run's failed downloads in one line, not an ERROR and a traceback each."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Self

from scrapy import signals

from recrawler import meta

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

__all__ = ["DownloadFailureLog"]

#: Scrapy's lines about a download that failed for good: logger -> how the message starts
SCRAPY_LINES = {
    "scrapy.downloadermiddlewares.retry": "Gave up retrying",
    "scrapy.downloadermiddlewares.robotstxt": "Error downloading",
    "scrapy.core.scraper": "Error downloading",
}


class DownloadFailureLog(logging.Filter):
    """Scrapy logs every download that failed for good as an ERROR, several with a traceback (a
    robots.txt, a sitemap, each page: an unreachable host gave five ERROR lines and two tracebacks
    around recrawler's one). recrawler counts them itself (``errors`` in the summary line,
    ``recrawler/page/error/<reason>``, the outage guard's ``error_ratio``) and says in one ERROR line
    when a sitemap failed; so, while a run crawls, the first of those lines of its spider is a
    WARNING without its traceback and the rest are DEBUG (``--loglevel DEBUG`` shows each).

    Lines of other spiders, and Scrapy's other lines, are left as they are. No settings, stats or
    signals of its own; it listens to ``spider_opened`` and ``engine_stopped``.
    """

    def __init__(self, crawler: Crawler) -> None:
        super().__init__()
        self.crawler = crawler
        self.seen = 0

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """For spiders that opted in only."""
        meta.require_opt_in(crawler)
        ext = cls(crawler)
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.engine_stopped, signal=signals.engine_stopped)
        return ext

    def spider_opened(self) -> None:
        """Start reading Scrapy's download-failure lines."""
        for name in SCRAPY_LINES:
            logging.getLogger(name).addFilter(self)

    def engine_stopped(self) -> None:
        """Leave Scrapy's loggers as they were."""
        for name in SCRAPY_LINES:
            logging.getLogger(name).removeFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        """Demote a download-failure line of this crawler's spider (always kept: never dropped)."""
        start = SCRAPY_LINES.get(record.name)
        if (
            start is None
            or record.levelno <= logging.WARNING
            or getattr(record, "spider", None) is not self.crawler.spider
            or not str(record.msg).startswith(start)
        ):
            return True
        self.seen += 1
        if self.seen == 1:
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info, record.exc_text = None, None
            record.msg = f"{record.msg}; further failed downloads are counted (the summary's errors)"
        else:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True
