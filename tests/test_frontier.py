"""Sitemaps asked conditionally (an unchanged file is listed from the database) and the frontier on
disk (listed pages reach Scrapy's scheduler in bounded batches)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from scrapy import signals
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler import meta
from tests import docsite, statedb

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0


def body(title: str) -> str:
    return docsite.page(title, [("Overview", [f"What {title} does, and how to run it."])])


def write_site(site: Site, pages: int, *, per_file: int = 10) -> str:
    """Pages p0..pN listed by sitemap files of *per_file* pages under one sitemap index."""
    names = [f"p{i}.html" for i in range(pages)]
    for name in names:
        site.write(name, body(name), mtime=T0)
    files = []
    for n, start in enumerate(range(0, pages, per_file)):
        files.append(site.write_sitemap(names[start : start + per_file], name=f"pages{n}.xml"))
    site.write("sitemap.xml", docsite.sitemap_index(files), mtime=T0)
    return site.url("sitemap.xml")


def statuses(site: Site, suffix: str) -> dict[str, int]:
    return {r["path"]: r["status"] for r in site.requests() if r["path"].endswith(suffix)}


def stored(db: Path, sql: str) -> list[tuple[Any, ...]]:
    return statedb.rows(db, sql)


@deferred_f_from_coro_f
async def test_an_unchanged_sitemap_is_listed_from_the_database(site: Site, crawls: Crawls) -> None:
    sitemap = write_site(site, 25)
    r1 = await crawls.crawl(sitemap)
    assert r1.stats["recrawler/page/new"] == 25
    assert stored(crawls.db_path, "SELECT COUNT(*), SUM(urls) FROM sitemap_files") == [(4, 25)]

    # run 2: every sitemap file answers 304, is not parsed, and lists its stored pages
    site.clear_requests()
    r2 = await crawls.crawl(sitemap)
    assert statuses(site, ".xml") == {
        "sitemap.xml": 304,
        "pages0.xml": 304,
        "pages1.xml": 304,
        "pages2.xml": 304,
    }
    assert all(r["if_none_match"] for r in site.requests() if r["path"].endswith(".xml"))
    assert {k: v for k, v in r2.stats.items() if k.startswith("recrawler/sitemap/")} == {
        "recrawler/sitemap/conditional": 4,
        "recrawler/sitemap/fetched": 4,
        "recrawler/sitemap/not_modified": 4,
        "recrawler/sitemap/pages": 25,
        "recrawler/sitemap/parsed": 4,
        "recrawler/sitemap/urls": 25,
    }
    assert r2.stats["recrawler/page/unchanged"] == 25
    # a good listing: the outage guard trusts it
    assert r2.report["reconcile"]["skipped"] == []

    # run 3: one file changes (a page added, one dropped): only it is read; the dropped page is unseen
    site.write("p25.html", body("p25.html"), mtime=T0)
    site.write_sitemap([*(f"p{i}.html" for i in range(11, 20)), "p25.html"], name="pages1.xml")
    site.clear_requests()
    r3 = await crawls.crawl(sitemap)
    assert statuses(site, ".xml") == {
        "sitemap.xml": 304,
        "pages0.xml": 304,
        "pages1.xml": 200,
        "pages2.xml": 304,
    }
    assert r3.stats["recrawler/sitemap/parsed"] == 4
    assert r3.stats["recrawler/sitemap/urls"] == 25
    assert r3.stats["recrawler/page/new"] == 1
    assert r3.stats["recrawler/reconcile/verified"] == 1
    assert stored(crawls.db_path, "SELECT COUNT(*) FROM sitemap_entries WHERE url LIKE '%/p10.html'") == [
        (0,)
    ]


@deferred_f_from_coro_f
async def test_a_sitemap_without_validators_is_read_every_run(site: Site, crawls: Crawls) -> None:
    for i in range(3):
        site.write(f"p{i}.html", body(f"p{i}"), mtime=T0)
    site.write_sitemap([f"p{i}.html" for i in range(3)], name="plain.xml")
    site.write("plain.xml", (site.root / "plain.xml").read_bytes(), validators="none")
    await crawls.crawl(site.url("plain.xml"))
    site.clear_requests()
    r2 = await crawls.crawl(site.url("plain.xml"))
    assert statuses(site, ".xml") == {"plain.xml": 200}
    assert "recrawler/sitemap/not_modified" not in r2.stats
    assert r2.stats["recrawler/sitemap/urls"] == 3


class PendingProbe:
    """Records the most requests Scrapy's scheduler ever held during the crawl."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.most = 0
        crawler.signals.connect(self.request_scheduled, signal=signals.request_scheduled)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def request_scheduled(self) -> None:
        engine = self.crawler.engine
        assert engine is not None
        self.most = max(self.most, len(engine._slot.scheduler))  # type: ignore[union-attr,arg-type]

    def spider_closed(self) -> None:
        Path(self.crawler.settings["PROBE_FILE"]).write_text(json.dumps(self.most))


@deferred_f_from_coro_f
async def test_the_listing_reaches_the_scheduler_in_bounded_batches(
    site: Site, crawls: Crawls, tmp_path: Path
) -> None:
    sitemap = write_site(site, 120, per_file=60)
    probe = tmp_path / "probe.json"
    settings = {
        "RECRAWLER_FRONTIER_BATCH_SIZE": 10,
        "CONCURRENT_REQUESTS": 4,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 4,
        "EXTENSIONS": {PendingProbe: 0},
        "PROBE_FILE": str(probe),
    }
    r1 = await crawls.crawl(sitemap, **settings)
    assert r1.stats["recrawler/page/new"] == 120
    assert r1.stats["recrawler/frontier/queued"] == r1.stats["recrawler/frontier/fed"] == 120
    # a batch and a half at most waits in memory (the sitemap requests aside), never the listing
    assert json.loads(probe.read_text()) <= 15 + 3
    assert r1.stats["recrawler/frontier/waiting_max"] <= 15

    # the same from a listing taken from the database
    r2 = await crawls.crawl(sitemap, **settings)
    assert r2.stats["recrawler/sitemap/not_modified"] == 3
    assert r2.stats["recrawler/page/unchanged"] == 120
    assert json.loads(probe.read_text()) <= 15 + 3

    # without it, a sitemap file's whole listing waits in Scrapy's scheduler
    await crawls.crawl(sitemap, **settings, RECRAWLER_FRONTIER_ENABLED=False)
    assert json.loads(probe.read_text()) >= 60


@deferred_f_from_coro_f
async def test_without_the_frontier_results_are_the_same(site: Site, crawls: Crawls) -> None:
    sitemap = write_site(site, 12)
    r1 = await crawls.crawl(sitemap, RECRAWLER_FRONTIER_ENABLED=False)
    assert r1.stats["recrawler/page/new"] == 12
    assert "recrawler/frontier/queued" not in r1.stats
    r2 = await crawls.crawl(sitemap, RECRAWLER_FRONTIER_ENABLED=False, RECRAWLER_CPU_THREADS=0)
    assert r2.stats["recrawler/page/unchanged"] == 12


class ListingClock:
    """When the listing's last page request was handed to the scheduler (to be written to the
    frontier), and how many were."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.handed = 0
        self.last_at = 0.0
        crawler.signals.connect(self.request_scheduled, signal=signals.request_scheduled)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def request_scheduled(self, request: Any) -> None:
        if request.meta.get(meta.LISTED):
            self.handed += 1
            self.last_at = time.time()

    def spider_closed(self) -> None:
        Path(self.crawler.settings["PROBE_FILE"]).write_text(
            json.dumps({"handed": self.handed, "last_at": self.last_at})
        )


@deferred_f_from_coro_f
async def test_pages_are_fetched_while_a_large_sitemap_is_still_listed(
    site: Site, crawls: Crawls, tmp_path: Path
) -> None:
    """Scrapy sends no request while the responses its scraper holds are over
    SCRAPER_SLOT_MAX_ACTIVE_SIZE (5 MB), and a sitemap file is held until its last entry is
    handed on: a 50,000-URL file (6 MB) would hold every page request back until the whole file
    was written to the frontier. Here a 10,000-URL file (0.8 MB) against a budget of 200 KB: the
    first page is requested while the file is still being listed."""
    listed = 10_000
    for i in range(300):
        site.write(f"p{i}.html", body(f"p{i}"), mtime=T0)
    sitemap = site.write_sitemap([f"p{i}.html" for i in range(listed)], name="big.xml")
    assert (site.root / "big.xml").stat().st_size > 4 * 200_000
    probe = tmp_path / "clock.json"
    r1 = await crawls.crawl(
        sitemap,
        SCRAPER_SLOT_MAX_ACTIVE_SIZE=200_000,
        CLOSESPIDER_PAGECOUNT=100,
        EXTENSIONS={ListingClock: 0},
        PROBE_FILE=str(probe),
    )
    clock = json.loads(probe.read_text())
    # Scrapy lets the sitemap's callback finish before the spider closes: the whole listing
    assert clock["handed"] == listed
    assert r1.stats["recrawler/sitemap/urls"] == listed
    pages = [r for r in site.requests() if r["path"].startswith("p")]
    assert 100 <= len(pages) < 300
    first_page_at = min(r["at"] for r in pages)
    assert first_page_at < clock["last_at"], (
        f"first page requested {first_page_at - clock['last_at']:.2f} s after the listing was handed over"
    )
