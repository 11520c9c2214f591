"""PostgreSQL stopped under a running crawl: every page the run could not write is counted once,
and each reason is logged once."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any

import pytest
from scrapy import signals
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.runtime import Runtime
from recrawler.spiders.docs import DocsSpider
from tests import docsite
from tests.conftest import make_crawler

if TYPE_CHECKING:
    from pathlib import Path

    from tests.conftest_mockserver import Site
    from tests.postgres import OwnCluster

pytestmark = pytest.mark.postgres

T0 = 1_760_000_000.0
PAGES = 400


def write_site(site: Site, pages: int) -> str:
    names = [f"p{i}.html" for i in range(pages)]
    for name in names:
        site.write(name, docsite.page(name, [("Overview", [f"What {name} does."])]), mtime=T0)
    return site.write_sitemap(names)


@deferred_f_from_coro_f
async def test_a_database_stopped_mid_run_counts_every_unwritten_page_once(
    site: Site, own_postgres: OwnCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sitemap = write_site(site, PAGES)
    report = tmp_path / "report.json"
    crawler = make_crawler(
        DocsSpider,
        {
            "ADDONS": {"recrawler.addon.RecrawlerAddon": 0},
            "RECRAWLER_DB_URI": own_postgres.uri,
            "RECRAWLER_REPORT_FILE": str(report),
            "RECRAWLER_SCHEDULE": "all",
            "RECRAWLER_AUDIT_SAMPLE": 0,
            "RECRAWLER_DB_TIMEOUT_SECS": 2,
            "RETRY_TIMES": 0,
            "LOG_LEVEL": "INFO",
            # pages arrive while the server is down, not all before it
            "CONCURRENT_REQUESTS": 4,
            "CONCURRENT_REQUESTS_PER_DOMAIN": 4,
        },
    )
    scraped: list[Any] = []

    async def item_scraped(item: Any) -> None:
        scraped.append(item)
        if len(scraped) == 100:
            # as an operator's `pg_ctlcluster ... stop -m immediate` (a crash) would
            await asyncio.to_thread(own_postgres.stop, "immediate")

    crawler.signals.connect(item_scraped, signal=signals.item_scraped)
    with caplog.at_level(logging.INFO):
        await crawler.crawl_async(sitemap_url=sitemap)

    runtime = crawler.get_extension(Runtime)
    assert runtime is not None
    assert crawler.stats is not None
    stats = crawler.stats.get_stats()
    dropped = stats.get("item_dropped_count", 0)
    pages = stats.get("item_scraped_count", 0) + dropped
    assert dropped > 0
    counts = json.loads(report.read_text())["counts"]
    # every page that reached the pipelines either committed or was lost, and counts once
    assert counts["new"] + counts["write_failed"] == pages
    assert counts["write_failed"] >= dropped
    assert counts["errors"] >= counts["write_failed"]
    assert runtime.counters["recrawler/page/error/write_failed"] == counts["write_failed"]
    summary = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("crawled: "))
    assert f"errors: {counts['errors']}" in summary
    # one line for each reason, not one (or two) a page
    failures = [r for r in caplog.records if "state write failed" in r.getMessage()]
    assert failures
    assert len(failures) <= 2
    assert len({r.getMessage().split(": ", 2)[-1].split()[-5] for r in failures}) == len(failures)
    assert sum(1 for r in caplog.records if r.getMessage().startswith("Dropped:")) <= 2
