"""The ``docs`` spider: ``scrapy crawl docs -a sitemap_url=https://docs.example.com/sitemap.xml``."""

from __future__ import annotations

from recrawler.spiders import RecrawlSitemapSpider


class DocsSpider(RecrawlSitemapSpider):
    """Recrawls one docs site from its sitemap (see RecrawlSitemapSpider for arguments)."""

    name = "docs"
