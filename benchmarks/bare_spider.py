"""Baseline for bench_crawl.py: a SitemapSpider that fetches every page and does nothing with it.

Run with ``scrapy runspider benchmarks/bare_spider.py -a sitemap_url=URL`` from a directory
outside any Scrapy project, so that only the settings below apply.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy.spiders import SitemapSpider

if TYPE_CHECKING:
    from collections.abc import Iterator

    from scrapy.http import Response
    from scrapy.settings import BaseSettings

# The concurrency and throughput settings recrawler runs with. bench_crawl.py compares these
# keys in the "Overridden settings" log line of this run and of the recrawler run.
THROUGHPUT_SETTINGS: dict[str, Any] = {
    "CONCURRENT_REQUESTS": 32,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 32,
    "DOWNLOAD_DELAY": 0,
    "ROBOTSTXT_OBEY": True,
    "LOG_LEVEL": "INFO",
    "TELNETCONSOLE_ENABLED": False,
}


class BareSitemapSpider(SitemapSpider):
    """Download each sitemap URL and discard the response."""

    name = "bare"

    @classmethod
    def update_settings(cls, settings: BaseSettings) -> None:
        """Apply THROUGHPUT_SETTINGS at spider priority, as ``custom_settings`` would."""
        super().update_settings(settings)
        settings.setdict(THROUGHPUT_SETTINGS, priority="spider")

    def __init__(self, sitemap_url: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sitemap_urls = [sitemap_url]

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        """Yield nothing: the baseline is the cost of fetching alone."""
        yield from ()
