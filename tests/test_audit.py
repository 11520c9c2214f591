"""Self-audit end to end: a server whose 304s or lastmods lie is caught and stops being trusted."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.cli import main as cli_main
from recrawler.downloadermiddlewares.audit import AuditMiddleware
from recrawler.extensions.reconcile import Reconciler
from recrawler.spiders.docs import DocsSpider
from tests import docsite
from tests.conftest import make_crawler
from tests.test_crawl_schedule import T0, at

if TYPE_CHECKING:
    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

ALL = "100%"


def host(site: Site) -> str:
    return site.url().split("/")[2]


@deferred_f_from_coro_f
async def test_a_304_for_changed_content_is_caught_and_the_validator_loses_trust(
    site: Site, crawls: Crawls, capsys: Any
) -> None:
    site.write("a.html", docsite.guide("A"), mtime=T0, lie304=True)
    site.write("b.html", docsite.guide("B"), mtime=T0)
    sitemap = site.write_sitemap(["a.html", "b.html"])
    await crawls.crawl(sitemap)

    # a changes, but the server keeps answering 304 to any conditional request
    site.write("a.html", docsite.guide("A", "New text."), mtime=T0 + 100, lie304=True)
    r2 = await crawls.crawl(sitemap, RECRAWLER_AUDIT_SAMPLE=ALL)
    assert r2.actions() == {"a.html": "changed"}
    assert (r2.counts["audited"], r2.counts["lies"]) == (2, 1)
    assert r2.report["audit"]["lies"] == [{"host": host(site), "signal": "etag", "url": site.url("a.html")}]
    assert r2.report["audit"]["distrusted"] == [{"host": host(site), "signal": "etag"}]
    assert r2.stats["recrawler/audit/refetched"] == 2
    assert "audited: 2 lies: 1" in Reconciler.summary_line(r2.report)

    # next run: no If-None-Match to that host any more; If-Modified-Since is caught lying too
    site.write("a.html", docsite.guide("A", "Newer text."), mtime=T0 + 200, lie304=True)
    site.clear_requests()
    r3 = await crawls.crawl(sitemap, RECRAWLER_AUDIT_SAMPLE=ALL)
    first, refetch = site.requests("a.html")
    assert (first["if_none_match"], first["if_modified_since"] is not None, first["status"]) == (
        None,
        True,
        304,
    )
    assert (refetch["if_none_match"], refetch["if_modified_since"], refetch["status"]) == (None, None, 200)
    assert site.requests("b.html")[0]["if_none_match"] is None  # host-wide
    assert r3.report["audit"]["distrusted"] == [{"host": host(site), "signal": "last_modified"}]
    assert r3.actions() == {"a.html": "changed"}

    # without an audit: no validators at all for that host, so the content hash finds the change
    site.write("a.html", docsite.guide("A", "Newest text."), mtime=T0 + 300, lie304=True)
    site.clear_requests()
    r4 = await crawls.crawl(sitemap)
    assert [(r["if_none_match"], r["if_modified_since"], r["status"]) for r in site.requests("a.html")] == [
        (None, None, 200)
    ]
    assert r4.actions() == {"a.html": "changed"}
    assert r4.counts["audited"] == 0

    capsys.readouterr()
    assert cli_main(["trust", "--db", crawls.db_uri, "--json"]) == 0
    records = {r["signal"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert {s: (r["trusted"], r["lies"]) for s, r in records.items()} == {
        "etag": (False, 1),
        "last_modified": (False, 1),
    }
    assert records["etag"]["last_lie_url"] == site.url("a.html")
    # the CLI runs its own event loop: off the test's loop, as from a shell
    reset = ["trust", "--db", crawls.db_uri, "--reset", host(site), "--signal", "etag"]
    assert await asyncio.to_thread(cli_main, reset) == 0
    assert "1 trust record(s) reset" in capsys.readouterr().out
    site.clear_requests()
    await crawls.crawl(sitemap)
    assert site.requests("a.html")[0]["if_none_match"] is not None


@deferred_f_from_coro_f
async def test_an_old_lastmod_for_changed_content_is_caught_and_lastmod_loses_trust(
    site: Site, crawls: Crawls
) -> None:
    settings = {
        "RECRAWLER_SCHEDULE": "adaptive",
        "RECRAWLER_LASTMOD_MODE": "skip",
        # a month-long staleness bound: lastmod alone decides within these days
        "RECRAWLER_MAX_INTERVAL_SECS": 30 * 86400,
        # no probe: the audit alone catches the lie here (a probe would, too)
        "RECRAWLER_DEPLOY_PROBES": 0,
    }
    old = "2025-06-01"
    site.write("a.html", docsite.guide("A"), mtime=T0)
    site.write("b.html", docsite.guide("B"), mtime=T0)
    sitemap = site.write_sitemap([("a.html", old), ("b.html", old)])
    await crawls.crawl(sitemap, RECRAWLER_NOW=at(0), **settings)

    # a changes, its lastmod stays old: trusted, skip mode never asks
    site.write("a.html", docsite.guide("A", "New text."), mtime=T0 + 100)
    r2 = await crawls.crawl(sitemap, RECRAWLER_NOW=at(1), **settings)
    assert r2.counts["skipped_lastmod"] == 2
    assert r2.actions() == {}

    # the audit fetches both anyway: a's lastmod lied
    r3 = await crawls.crawl(sitemap, RECRAWLER_NOW=at(2), RECRAWLER_AUDIT_SAMPLE=ALL, **settings)
    assert r3.report["schedule"]["due"] == {"audit": 2}
    assert r3.actions() == {"a.html": "changed"}
    assert r3.report["audit"]["lies"] == [
        {"host": host(site), "signal": "lastmod", "url": site.url("a.html")}
    ]
    assert r3.report["audit"]["distrusted"] == [{"host": host(site), "signal": "lastmod"}]

    # from now on lastmod decides nothing on that host: the schedule does (a bound after the audit)
    r4 = await crawls.crawl(sitemap, RECRAWLER_NOW=at(33), **settings)
    assert r4.counts["skipped_lastmod"] == 0
    assert r4.report["schedule"]["due"] == {"scheduled": 2}
    assert r4.report["audit"]["switched_off"] == [{"host": host(site), "signal": "lastmod"}]


@deferred_f_from_coro_f
async def test_an_honest_site_keeps_its_trust(site: Site, crawls: Crawls) -> None:
    for name in ("a", "b", "c"):
        site.write(f"{name}.html", docsite.guide(name), mtime=T0)
    sitemap = site.write_sitemap(["a.html", "b.html", "c.html"])
    await crawls.crawl(sitemap)
    site.write("a.html", docsite.guide("a", "Edited."), mtime=T0 + 100)
    r2 = await crawls.crawl(sitemap, RECRAWLER_AUDIT_SAMPLE=2)
    assert r2.counts["audited"] == 2
    assert r2.counts["lies"] == 0
    assert r2.report["audit"]["switched_off"] == []
    assert r2.actions() == {"a.html": "changed"}


@deferred_f_from_coro_f
async def test_a_run_that_samples_no_page_installs_no_audit(site: Site, crawls: Crawls) -> None:
    """``RECRAWLER_AUDIT_SAMPLE = 0``: no audit step on each response, no listener on each page."""
    site.write("a.html", docsite.guide("a"), mtime=T0)
    sitemap = site.write_sitemap(["a.html"])
    for sample, installed in ((0, False), (ALL, True)):
        found: list[bool] = []
        crawler = make_crawler(DocsSpider, crawls.settings(RECRAWLER_AUDIT_SAMPLE=sample))

        def opened(crawler: Any = crawler, found: list[bool] = found) -> None:
            chain = crawler.engine.downloader.middleware.middlewares
            found.append(any(isinstance(m, AuditMiddleware) for m in chain))

        crawler.signals.connect(opened, signal=signals.spider_opened)
        await crawler.crawl_async(sitemap_url=sitemap)
        assert found == [installed]
