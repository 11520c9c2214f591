"""The frontier on PostgreSQL: an idle spider never waits on the reactor for locks held by the
store's own open group transaction (the run used to hang forever there)."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from scrapy import signals
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.extensions.reconcile import decided_exit_code
from recrawler.runtime import Runtime, runtime_of
from recrawler.spiders.docs import DocsSpider
from tests import docsite
from tests.conftest import make_crawler

if TYPE_CHECKING:
    from pathlib import Path

    from tests.conftest_mockserver import Site

pytestmark = pytest.mark.postgres

T0 = 1_760_000_000.0
PAGES = 300


def write_site(site: Site, pages: int) -> str:
    names = [f"p{i}.html" for i in range(pages)]
    for name in names:
        site.write(name, docsite.page(name, [("Overview", [f"What {name} does."])]), mtime=T0)
    return site.write_sitemap(names)


def lock_timeout(uri: str, secs: int) -> None:
    """Lock waits in this database fail after *secs* (a build that waits for its own locks then
    fails the test in seconds instead of hanging it)."""
    with psycopg.connect(uri, autocommit=True) as conn:
        name = conn.execute("SELECT current_database()").fetchone()[0]  # type: ignore[index]
        conn.execute(f"ALTER DATABASE \"{name}\" SET lock_timeout = '{secs}s'")


@deferred_f_from_coro_f
async def test_an_idle_spider_does_not_wait_for_the_stores_own_row_locks(
    site: Site, postgres_uri: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sitemap = write_site(site, PAGES)
    lock_timeout(postgres_uri, 5)
    crawler = make_crawler(
        DocsSpider,
        {
            "ADDONS": {"recrawler.addon.RecrawlerAddon": 0},
            "RECRAWLER_DB_URI": postgres_uri,
            "RECRAWLER_REPORT_FILE": str(tmp_path / "report.json"),
            "RECRAWLER_SCHEDULE": "all",
            "RECRAWLER_AUDIT_SAMPLE": 0,
            "RETRY_TIMES": 0,
            "LOG_LEVEL": "INFO",
            # one group transaction for the whole crawl (nothing commits it on its own) ...
            "RECRAWLER_DB_BATCH_SIZE": 100_000,
            "RECRAWLER_DB_COMMIT_SECS": 3600,
            # ... fed in small batches, each marking its rows fed inside that transaction
            "RECRAWLER_FRONTIER_BATCH_SIZE": 20,
            # pages come in slowly, so most feeds come after the commit below
            "CONCURRENT_REQUESTS": 2,
            "CONCURRENT_REQUESTS_PER_DOMAIN": 2,
        },
    )
    flushed: list[bool] = []

    async def item_scraped(item: Any) -> None:
        if not flushed:
            # the listing's rows are committed once: every later feed locks committed rows in
            # the open group transaction until the run ends
            flushed.append(True)
            await runtime_of(crawler).store.flush()

    closed: list[str] = []

    def spider_closed(reason: str) -> None:
        closed.append(reason)

    crawler.signals.connect(item_scraped, signal=signals.item_scraped)
    crawler.signals.connect(spider_closed, signal=signals.spider_closed)
    start = time.monotonic()
    with caplog.at_level(logging.INFO):
        await crawler.crawl_async(sitemap_url=sitemap)
    elapsed = time.monotonic() - start

    runtime = crawler.get_extension(Runtime)
    assert runtime is not None
    assert closed == ["finished"]
    assert runtime.counters["recrawler/page/new"] == PAGES
    assert runtime.counters["recrawler/frontier/fed"] == PAGES
    assert runtime.counters.total("recrawler/state/error") == 0
    assert "could not read the frontier" not in caplog.text
    assert decided_exit_code(crawler) == 0
    # no lock wait at all: nowhere near the 5 s lock timeout per idle
    assert elapsed < 30
