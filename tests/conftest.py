"""Shared fixtures: the local docs-site server, a state database per test, in-process crawls."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from scrapy.crawler import AsyncCrawlerRunner, Crawler, CrawlerRunner
from scrapy.utils.reactor import is_reactor_installed
from scrapy.utils.test import get_reactor_settings

from recrawler.spiders.docs import DocsSpider
from tests.conftest_mockserver import *  # noqa: F403 (fixtures: mockserver, site)


def make_crawler(spidercls: type[Any], settings: dict[str, Any]) -> Crawler:
    """A crawler built the way ``scrapy crawl`` builds it: its components are created when it
    crawls, after its spider (``scrapy.utils.test.get_crawler`` creates them before)."""
    full = {"TELNETCONSOLE_ENABLED": False, **get_reactor_settings(), **settings}
    runner = CrawlerRunner(full) if is_reactor_installed() else AsyncCrawlerRunner(full)
    return runner.create_crawler(spidercls)


@dataclass
class CrawlResult:
    """What one crawl left behind: recrawler stats, the report and the events it delivered."""

    stats: dict[str, Any]
    report: dict[str, Any]
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        return dict(self.report["counts"])

    def actions(self) -> dict[str, str]:
        """url path (after the site folder) -> event action, for this run's events."""
        return {e["url"].split("/", 4)[-1]: e["action"] for e in self.events}


class Crawls:
    """Runs `docs` crawls in-process against one state database, like successive cron runs."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.db_path = tmp_path / "state.db"
        self.db_uri = f"sqlite:///{self.db_path}"
        self.events_path = tmp_path / "events.jsonl"
        self.n = 0

    def settings(self, **extra: Any) -> dict[str, Any]:
        self.n += 1
        return {
            "ADDONS": {"recrawler.addon.RecrawlerAddon": 0},
            "RECRAWLER_DB_URI": self.db_uri,
            "RECRAWLER_EVENTS_URI": f"file://{self.events_path}",
            "RECRAWLER_REPORT_FILE": str(self.tmp_path / f"report{self.n}.json"),
            "LOG_LEVEL": "INFO",
            "RETRY_TIMES": 0,
            "DOWNLOAD_TIMEOUT": 10,
            # scenarios check every page each run and audit none, unless a test is about that
            "RECRAWLER_SCHEDULE": "all",
            "RECRAWLER_AUDIT_SAMPLE": 0,
            **extra,
        }

    async def crawl(
        self, sitemap_url: str, spider_args: dict[str, Any] | None = None, **settings: Any
    ) -> CrawlResult:
        before = self._events()
        crawler = make_crawler(DocsSpider, self.settings(**settings))
        await crawler.crawl_async(sitemap_url=sitemap_url, **(spider_args or {}))
        assert crawler.stats is not None
        stats = {k: v for k, v in crawler.stats.get_stats().items() if k.startswith("recrawler/")}
        report_path = Path(crawler.settings["RECRAWLER_REPORT_FILE"])
        report = json.loads(report_path.read_text()) if report_path.exists() else {}
        return CrawlResult(stats=stats, report=report, events=self._events()[len(before) :])

    def _events(self) -> list[dict[str, Any]]:
        if not self.events_path.exists():
            return []
        return [json.loads(line) for line in self.events_path.read_text().splitlines() if line]


@pytest.fixture
def crawls(tmp_path: Path) -> Crawls:
    return Crawls(tmp_path)
