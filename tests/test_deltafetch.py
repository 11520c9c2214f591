"""Immutable pages with scrapy-deltafetch, kept in the state database: fetched once, then skipped."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from scrapy import Request
from scrapy.utils.defer import deferred_f_from_coro_f
from scrapy.utils.test import get_crawler

from recrawler.cli import main as cli_main
from recrawler.spidermiddlewares.deltafetch import DeltaFetchMiddleware
from recrawler.spiders.docs import DocsSpider
from tests import docsite, statedb
from tests.test_crawl_schedule import T0

if TYPE_CHECKING:
    from pathlib import Path

    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

IMMUTABLE = {"RECRAWLER_IMMUTABLE_PATTERNS": [r"/v1\.2/"]}


@deferred_f_from_coro_f
async def test_immutable_pages_are_requested_once(site: Site, crawls: Crawls, capsys: Any) -> None:
    site.write("v1.2/a.html", docsite.guide("Old version"), mtime=T0)
    site.write("latest/a.html", docsite.guide("Latest"), mtime=T0)
    sitemap = site.write_sitemap(["v1.2/a.html", "latest/a.html"])
    r1 = await crawls.crawl(sitemap, **IMMUTABLE)
    assert r1.counts["new"] == 2
    assert statedb.rows(crawls.db_path, "SELECT spider, url FROM deltafetch") == [
        ("docs", site.url("v1.2/a.html"))
    ]

    r2 = await crawls.crawl(sitemap, **IMMUTABLE)
    assert r2.counts["skipped_deltafetch"] == 1
    assert r2.counts["unchanged"] == 1
    assert r2.stats["recrawler/page/skipped/deltafetch"] == 1

    # a skipped page is not "unseen": even gone from the server it is not checked or quarantined
    site.remove("v1.2/a.html")
    r3 = await crawls.crawl(sitemap, **IMMUTABLE)
    assert r3.counts["skipped_deltafetch"] == 1
    assert r3.counts["quarantined"] == 0
    assert "recrawler/reconcile/verified" not in r3.stats
    assert len(site.requests("v1.2/a.html")) == 1
    assert len(site.requests("latest/a.html")) == 3

    capsys.readouterr()
    assert cli_main(["immutable", "--db", crawls.db_uri]) == 0
    assert site.url("v1.2/a.html") in capsys.readouterr().out
    # the CLI runs its own event loop: off the test's loop, as from a shell
    assert await asyncio.to_thread(cli_main, ["immutable", "--db", crawls.db_uri, "--reset", r"/v1\.2/"]) == 0
    assert "1 immutable page(s) forgotten" in capsys.readouterr().out
    r4 = await crawls.crawl(sitemap, **IMMUTABLE)
    assert r4.actions() == {"v1.2/a.html": "quarantined"}
    assert len(site.requests("v1.2/a.html")) == 2


@deferred_f_from_coro_f
async def test_deltafetch_enabled_and_reset_settings_still_work(site: Site, crawls: Crawls) -> None:
    site.write("a.html", docsite.guide("A"), mtime=T0)
    site.write("b.html", docsite.guide("B"), mtime=T0)
    sitemap = site.write_sitemap(["a.html", "b.html"])
    await crawls.crawl(sitemap, DELTAFETCH_ENABLED=True)
    r2 = await crawls.crawl(sitemap, DELTAFETCH_ENABLED=True)
    assert r2.counts["skipped_deltafetch"] == 2
    assert r2.counts["crawled"] == 0
    r3 = await crawls.crawl(sitemap, DELTAFETCH_ENABLED=True, DELTAFETCH_RESET=True)
    assert r3.counts["unchanged"] == 2
    assert "recrawler/page/skipped/deltafetch" not in r3.stats


def test_deltafetch_meta_keys(tmp_path: Path) -> None:
    crawler = get_crawler(
        DocsSpider,
        {
            "ADDONS": {"recrawler.addon.RecrawlerAddon": 0},
            "RECRAWLER_DB_URI": f"sqlite:///{tmp_path / 'state.db'}",
            "EXTENSIONS": {"recrawler.extensions.reconcile.Reconciler": None},
            **IMMUTABLE,
        },
    )
    mw = DeltaFetchMiddleware.from_crawler(crawler)
    assert mw._is_enabled_for_request(Request("https://x/v1.2/a.html"))
    assert not mw._is_enabled_for_request(Request("https://x/latest/a.html"))
    assert mw._is_enabled_for_request(Request("https://x/latest/a.html", meta={"deltafetch_enabled": True}))
    assert not mw._is_enabled_for_request(
        Request("https://x/v1.2/a.html", meta={"deltafetch_enabled": False})
    )
    assert mw._get_key(Request("https://x/a", meta={"deltafetch_key": "mine"})) == b"mine"
    # the default key is the request fingerprint: URL variants of one page share it
    assert mw._get_key(Request("https://x/a/")) == mw._get_key(Request("https://www.x/a#top"))
