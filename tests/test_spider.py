"""The ``docs`` spider: sitemap filtering and lastmod bookkeeping, offsite URLs, hanging pages."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest
from scrapy import Request
from scrapy.http import HtmlResponse
from scrapy.utils.defer import deferred_f_from_coro_f
from scrapy.utils.sitemap import Sitemap
from scrapy.utils.test import get_crawler

from recrawler.items import Page
from recrawler.spiders.docs import DocsSpider
from tests import docsite

if TYPE_CHECKING:
    from pathlib import Path

    from scrapy.crawler import Crawler

    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0
SITEMAP = "https://docs.example.com/sitemap.xml"
HTML = b"<html><head><title>T</title></head><body><main><p>Text.</p></main></body></html>"


def body(title: str) -> str:
    return docsite.page(title, [("Intro", [f"About {title}."])])


def column(db: Path, name: str) -> dict[str, Any]:
    with closing(sqlite3.connect(db)) as conn:
        return dict(conn.execute(f"SELECT url, {name} FROM pages").fetchall())


# --- sitemap_filter and parse, on a spider built by a crawler ---------------------------------


@pytest.fixture
def crawler(tmp_path: Path) -> Crawler:
    settings = {
        "ADDONS": {"recrawler.addon.RecrawlerAddon": 0},
        "RECRAWLER_DB_URI": f"sqlite:///{tmp_path / 'state.db'}",
        # no crawl happens here: without the Reconciler nothing opens the database
        "EXTENSIONS": {"recrawler.extensions.reconcile.Reconciler": None},
        # extraction inline: parse() is then a plain generator these tests iterate
        "RECRAWLER_CPU_THREADS": 0,
    }
    return get_crawler(DocsSpider, settings)


def spider_for(crawler: Crawler, **kwargs: Any) -> DocsSpider:
    spider = DocsSpider.from_crawler(crawler, **kwargs)
    crawler.spider = spider
    return spider


def response(url: str, request: Request | None = None, status: int = 200) -> HtmlResponse:
    return HtmlResponse(url, status=status, body=HTML, request=request or Request(url))


def urlset(*entries: tuple[str, str | None]) -> Sitemap:
    return Sitemap(docsite.sitemap(entries).encode())


def test_sitemap_filter_keeps_the_sites_entries_and_counts_offsite(crawler: Crawler) -> None:
    spider = spider_for(crawler, sitemap_url=SITEMAP)
    entries = urlset(
        ("https://docs.example.com/a", "2026-01-01"),
        ("http://www.docs.example.com/b", None),  # scheme and www. are folded
        ("https://other.example.com/c", "2026-01-02"),
        ("https://docs.example.com:8443/d", None),  # another port is another site
    )
    kept = [e["loc"] for e in spider.sitemap_filter(entries)]
    assert kept == ["https://docs.example.com/a", "http://www.docs.example.com/b"]
    assert crawler.stats is not None
    stats = crawler.stats.get_stats()
    assert stats["recrawler/sitemap/parsed"] == 1
    assert stats["recrawler/sitemap/urls"] == 2
    assert stats["recrawler/url/refused/offsite"] == 2


def test_sitemap_index_entries_are_not_page_urls(crawler: Crawler) -> None:
    spider = spider_for(crawler, sitemap_url=SITEMAP)
    index = Sitemap(
        docsite.sitemap_index(
            [("https://docs.example.com/pages.xml", "2026-01-01"), "https://cdn.example.net/x.xml"]
        ).encode()
    )
    assert [e["loc"] for e in spider.sitemap_filter(index)] == ["https://docs.example.com/pages.xml"]
    assert crawler.stats is not None
    assert crawler.stats.get_value("recrawler/sitemap/urls") is None
    assert crawler.stats.get_value("recrawler/url/refused/offsite") == 1
    # a sitemap's lastmod is not a page's
    page = next(iter(spider.parse(response("https://docs.example.com/pages.xml"))))
    assert page.lastmod is None


def test_allowed_hosts(crawler: Crawler) -> None:
    spider = spider_for(crawler, sitemap_url=SITEMAP, allowed_hosts="cdn.example.net, docs.example.com:8443")
    entries = urlset(
        ("https://cdn.example.net/a", None),
        ("https://docs.example.com:8443/b", None),
        ("https://elsewhere.example.org/c", None),
    )
    assert [urlsplit(e["loc"]).hostname for e in spider.sitemap_filter(entries)] == [
        "cdn.example.net",
        "docs.example.com",
    ]
    anything = spider_for(crawler, sitemap_url=SITEMAP, allowed_hosts="*")
    assert len(list(anything.sitemap_filter(urlset(("https://elsewhere.example.org/c", None))))) == 1


def test_site_is_the_first_sitemaps_host_unless_given(crawler: Crawler) -> None:
    spider = spider_for(crawler, sitemap_url=f"https://WWW.Docs.Example.com:8443/s.xml, {SITEMAP}")
    assert spider.recrawler_site == "docs.example.com:8443"
    assert spider.sitemap_urls == ("https://WWW.Docs.Example.com:8443/s.xml", SITEMAP)
    assert spider_for(crawler, sitemap_url=SITEMAP, site="docs.example.com").recrawler_site == (
        "docs.example.com"
    )


def test_parse_attaches_the_listed_lastmod_once(crawler: Crawler) -> None:
    spider = spider_for(crawler, sitemap_url=SITEMAP)
    a, b = "https://docs.example.com/a", "https://docs.example.com/b"
    list(spider.sitemap_filter(urlset((a, " 2026-01-01T10:00:00+00:00 "), (b, None))))
    page = next(iter(spider.parse(response(a))))
    assert isinstance(page, Page)
    assert (page.url, page.key, page.lastmod) == (a, "docs.example.com/a", "2026-01-01T10:00:00+00:00")
    assert page.text == "Text."
    assert next(iter(spider.parse(response(b)))).lastmod is None
    # remembered for one response only: a second visit (a verify request) has none
    assert next(iter(spider.parse(response(a)))).lastmod is None


def test_parse_uses_the_listed_url_of_a_redirect(crawler: Crawler) -> None:
    spider = spider_for(crawler, sitemap_url=SITEMAP)
    listed, moved = "https://docs.example.com/old", "https://docs.example.com/new"
    list(spider.sitemap_filter(urlset((listed, "2026-02-03"))))
    request = Request(moved, meta={"redirect_urls": [listed]})
    page = next(iter(spider.parse(response(moved, request))))
    assert (page.url, page.key, page.lastmod) == (moved, "docs.example.com/old", "2026-02-03")


def test_parse_of_a_304_is_not_parsed(crawler: Crawler) -> None:
    spider = spider_for(crawler, sitemap_url=SITEMAP)
    url = "https://docs.example.com/a"
    list(spider.sitemap_filter(urlset((url, "2026-01-01"))))
    page = next(iter(spider.parse(HtmlResponse(url, status=304, body=b"", request=Request(url)))))
    assert (page.http_status, page.text, page.lastmod, page.error) == (304, None, "2026-01-01", None)


# --- end to end ----------------------------------------------------------------------------------


def other_loopback(site: Site, path: str) -> str:
    """The same port on 127.0.0.2: loopback, but nothing listens there (connection refused)."""
    port = urlsplit(site.url()).port
    return f"http://127.0.0.2:{port}/{site.name}/{path}"


@deferred_f_from_coro_f
async def test_offsite_sitemap_entries_are_not_requested(site: Site, crawls: Crawls) -> None:
    site.write("a.html", body("A"), mtime=T0)
    site.write("b.html", body("B"), mtime=T0)
    listed = [site.url("a.html"), "http://other.invalid/x.html", site.url("b.html")]
    site.write("sitemap.xml", docsite.sitemap(listed))
    r = await crawls.crawl(site.url("sitemap.xml"))
    assert r.stats["recrawler/url/refused/offsite"] == 1
    assert r.stats["recrawler/sitemap/urls"] == 2
    assert r.stats["recrawler/request/count"] == 2
    assert "recrawler/page/error" not in r.stats
    assert r.counts["new"] == 2
    assert sorted(column(crawls.db_path, "status")) == [site.url("a.html"), site.url("b.html")]


@pytest.mark.parametrize("allowed", ["*", "127.0.0.2:{port}"])
@deferred_f_from_coro_f
async def test_allowed_hosts_lets_offsite_entries_through(site: Site, crawls: Crawls, allowed: str) -> None:
    site.write("a.html", body("A"), mtime=T0)
    elsewhere = other_loopback(site, "x.html")
    site.write("sitemap.xml", docsite.sitemap([site.url("a.html"), elsewhere]))
    allowed = allowed.format(port=urlsplit(site.url()).port)
    r = await crawls.crawl(site.url("sitemap.xml"), spider_args={"allowed_hosts": allowed})
    assert "recrawler/url/refused/offsite" not in r.stats
    assert r.stats["recrawler/sitemap/urls"] == 2
    # attempted: a page request that failed to connect
    assert r.stats["recrawler/request/count"] == 2
    assert r.stats["recrawler/request/failed"] == 1
    assert r.stats["recrawler/page/error/DownloadConnectionRefusedError"] == 1
    assert r.actions() == {"a.html": "new", "x.html": "error"}


@deferred_f_from_coro_f
async def test_lastmod_is_stored(site: Site, crawls: Crawls) -> None:
    for name in ("a", "b", "c"):
        site.write(f"{name}.html", body(name), mtime=T0)
    sitemap = site.write_sitemap(
        [("a.html", "2026-01-01"), ("b.html", "2026-01-02T10:30:00+00:00"), "c.html"]
    )
    await crawls.crawl(sitemap)
    assert column(crawls.db_path, "lastmod") == {
        site.url("a.html"): "2026-01-01",
        site.url("b.html"): "2026-01-02T10:30:00+00:00",
        site.url("c.html"): None,
    }
    # a 304 run: a new lastmod replaces the old one, a missing one keeps it
    site.write_sitemap([("a.html", "2026-03-01"), "b.html", ("c.html", "2026-03-03")])
    r2 = await crawls.crawl(sitemap)
    assert r2.stats["recrawler/conditional/not_modified"] == 3
    assert column(crawls.db_path, "lastmod") == {
        site.url("a.html"): "2026-03-01",
        site.url("b.html"): "2026-01-02T10:30:00+00:00",
        site.url("c.html"): "2026-03-03",
    }


@pytest.mark.parametrize("name", ["caf\u00e9.html", "two words.html"])
@deferred_f_from_coro_f
async def test_lastmod_of_a_url_that_needs_encoding_is_stored(site: Site, crawls: Crawls, name: str) -> None:
    site.write(name, body("Caf\u00e9"), mtime=T0)
    sitemap = site.write_sitemap([(name, "2026-01-01")])
    r = await crawls.crawl(sitemap)
    assert r.counts["new"] == 1
    assert list(column(crawls.db_path, "lastmod").values()) == ["2026-01-01"]


@deferred_f_from_coro_f
async def test_hanging_page_is_an_error_and_never_quarantines(site: Site, crawls: Crawls) -> None:
    names = [f"p{i}.html" for i in range(6)]
    for name in names:
        site.write(name, body(name), mtime=T0)
    site.write("gone.html", body("gone"), mtime=T0)
    sitemap = site.write_sitemap([*names, "gone.html"])
    await crawls.crawl(sitemap, DOWNLOAD_TIMEOUT=1)

    site.options("p0.html", hang=True)
    site.remove("gone.html", gone=True)
    r2 = await crawls.crawl(sitemap, DOWNLOAD_TIMEOUT=1)
    assert r2.stats["recrawler/page/error"] == 1
    assert r2.stats["recrawler/page/error/DownloadTimeoutError"] == 1
    assert r2.stats["recrawler/request/failed"] == 1
    # 1 failure in 7 requests is under the error ratio: the run is trusted and reconciles...
    assert r2.report["reconcile"] == {"applied": True, "skipped": []}
    assert r2.actions() == {"p0.html": "error", "gone.html": "gone"}
    # ...but a timeout is no evidence of absence
    assert r2.events[0]["reason"] == "DownloadTimeoutError"
    statuses = column(crawls.db_path, "status || ':' || misses")
    assert statuses[site.url("p0.html")] == "live:0"
    assert statuses[site.url("gone.html")] == "gone:1"
    assert r2.counts["quarantined"] == 0
