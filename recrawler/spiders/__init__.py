"""Spiders: RecrawlSitemapSpider (sitemap-driven recrawls) and the glue for users' own spiders."""

from __future__ import annotations

from recrawler.spiders.mixin import RecrawlerSpiderMixin
from recrawler.spiders.page_builder import PageBuilder
from recrawler.spiders.recrawl_sitemap import RecrawlSitemapSpider

__all__ = ["PageBuilder", "RecrawlSitemapSpider", "RecrawlerSpiderMixin"]
