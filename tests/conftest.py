"""Shared fixtures: the local docs-site server, a state database per test, in-process crawls."""

from __future__ import annotations

import inspect
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from scrapy import signals
from scrapy.crawler import AsyncCrawlerRunner, Crawler, CrawlerRunner
from scrapy.statscollectors import DummyStatsCollector
from scrapy.utils.defer import deferred_f_from_coro_f
from scrapy.utils.reactor import is_reactor_installed
from scrapy.utils.test import get_reactor_settings

from recrawler.extensions.reconcile import Reconciler, decided_exit_code
from recrawler.runtime import Runtime
from recrawler.spiders.docs import DocsSpider
from tests.conftest_mockserver import *  # noqa: F403 (fixtures: mockserver, site)
from tests.postgres import own_postgres, postgres_server, postgres_uri  # noqa: F401 (fixtures)
from tests.state_sqlite import db, events_path  # noqa: F401 (fixtures)


def make_crawler(spidercls: type[Any], settings: dict[str, Any]) -> Crawler:
    """A crawler built the way ``scrapy crawl`` builds it: its components are created when it
    crawls, after its spider (``scrapy.utils.test.get_crawler`` creates them before)."""
    full = {"TELNETCONSOLE_ENABLED": False, **get_reactor_settings(), **settings}
    stats_class = os.environ.get("RECRAWLER_TEST_STATS_CLASS")
    if stats_class:
        # the suite under another stats collector (DummyStatsCollector: nothing may read stats back)
        full["STATS_CLASS"] = stats_class
    runner = CrawlerRunner(full) if is_reactor_installed() else AsyncCrawlerRunner(full)
    return runner.create_crawler(spidercls)


@dataclass
class CrawlResult:
    """What one crawl left behind: recrawler stats, the report and the events it delivered."""

    stats: dict[str, Any]
    report: dict[str, Any]
    events: list[dict[str, Any]] = field(default_factory=list)
    #: why the spider closed, and the exit code ``scrapy crawl`` would return
    finish_reason: str | None = None
    exit_code: int | None = None
    #: why the run could not begin (the spider was closed before its first request)
    failure: BaseException | None = None

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
        self, sitemap_url: str | None, spider_args: dict[str, Any] | None = None, **settings: Any
    ) -> CrawlResult:
        """Crawl from *sitemap_url* (None: from the ``start_url`` among *spider_args*)."""
        before = self._events()
        crawler = make_crawler(DocsSpider, self.settings(**settings))
        closed: list[str] = []

        def spider_closed(reason: str) -> None:
            closed.append(reason)

        crawler.signals.connect(spider_closed, signal=signals.spider_closed)
        args = {**({"sitemap_url": sitemap_url} if sitemap_url is not None else {}), **(spider_args or {})}
        await crawler.crawl_async(**args)
        runtime = crawler.get_extension(Runtime)
        assert runtime is not None
        reconciler = crawler.get_extension(Reconciler)
        # decisions come from the run's counters; the stats are their mirror (exact, unless dummy)
        stats = {k: v for k, v in runtime.counters.items() if k.startswith("recrawler/")}
        assert crawler.stats is not None
        if not isinstance(crawler.stats, DummyStatsCollector):
            mirror = {k: v for k, v in crawler.stats.get_stats().items() if k.startswith("recrawler/")}
            assert mirror == stats
        report_path = Path(crawler.settings["RECRAWLER_REPORT_FILE"])
        report = json.loads(report_path.read_text()) if report_path.exists() else {}
        return CrawlResult(
            stats=stats,
            report=report,
            events=self._events()[len(before) :],
            finish_reason=closed[0] if closed else None,
            exit_code=decided_exit_code(crawler),
            failure=reconciler.refusal if reconciler is not None else None,
        )

    def _events(self) -> list[dict[str, Any]]:
        if not self.events_path.exists():
            return []
        return [json.loads(line) for line in self.events_path.read_text().splitlines() if line]


@pytest.fixture
def crawls(tmp_path: Path) -> Crawls:
    return Crawls(tmp_path)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """langchain-tests' async standard tests are plain coroutines: they run as asyncio tasks on
    the reactor's loop (as the suite's own async tests do, through ``deferred_f_from_coro_f``)."""
    for item in items:
        function = getattr(item, "obj", None)
        if "langchain_standard" in item.nodeid and inspect.iscoroutinefunction(function):
            item.obj = deferred_f_from_coro_f(function)  # type: ignore[attr-defined]
