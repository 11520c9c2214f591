"""The ``docs`` spider: sitemap filtering and lastmod bookkeeping, offsite URLs, hanging pages."""

from __future__ import annotations

import gzip
import logging
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

import pytest
from scrapy import Request, signals
from scrapy.http import HtmlResponse, Response, XmlResponse
from scrapy.utils.defer import deferred_f_from_coro_f
from scrapy.utils.sitemap import Sitemap
from scrapy.utils.test import get_crawler

from recrawler import meta
from recrawler.downloadermiddlewares.listing import ListingBodyMiddleware
from recrawler.exceptions import ConfigurationError
from recrawler.items import Page
from recrawler.spidermiddlewares.listing import ListingMiddleware
from recrawler.spiders.docs import DocsSpider
from tests import docsite, statedb

if TYPE_CHECKING:
    from collections.abc import Iterator
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
    return dict(statedb.rows(db, f"SELECT url, {name} FROM pages"))


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
        "RECRAWLER_CPU_PROCESSES": 0,
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


def listing(spider: DocsSpider, body: str | bytes, url: str = SITEMAP) -> Iterator[Request]:
    """The requests the spider's listing reader yields for a sitemap file (lazily)."""
    data = body.encode() if isinstance(body, str) else body
    return iter(spider.recrawler_parse_listing(XmlResponse(url, body=data, request=Request(url))))


def test_parse_attaches_the_listed_lastmod_once(crawler: Crawler) -> None:
    spider = spider_for(crawler, sitemap_url=SITEMAP)
    a, b = "https://docs.example.com/a", "https://docs.example.com/b"
    ra, rb = listing(spider, docsite.sitemap([(a, " 2026-01-01T10:00:00+00:00 "), (b, None)]))
    page = next(iter(spider.parse(response(a, ra))))
    assert isinstance(page, Page)
    assert (page.url, page.key, page.lastmod) == (a, "docs.example.com/a", "2026-01-01T10:00:00+00:00")
    assert page.text == "Text."
    assert next(iter(spider.parse(response(b, rb)))).lastmod is None
    # carried by the listed request only: a second visit (a verify request) has none
    assert next(iter(spider.parse(response(a)))).lastmod is None


def test_parse_uses_the_listed_url_of_a_redirect(crawler: Crawler) -> None:
    spider = spider_for(crawler, sitemap_url=SITEMAP)
    listed, moved = "https://docs.example.com/old", "https://docs.example.com/new"
    (first,) = listing(spider, docsite.sitemap([(listed, "2026-02-03")]))
    # RedirectMiddleware carries the meta over to the next hop
    request = Request(moved, meta={**first.meta, "redirect_urls": [listed]})
    page = next(iter(spider.parse(response(moved, request))))
    assert (page.url, page.key, page.lastmod) == (moved, "docs.example.com/old", "2026-02-03")


def test_parse_of_a_304_is_not_parsed(crawler: Crawler) -> None:
    spider = spider_for(crawler, sitemap_url=SITEMAP)
    url = "https://docs.example.com/a"
    (listed,) = listing(spider, docsite.sitemap([(url, "2026-01-01")]))
    page = next(iter(spider.parse(HtmlResponse(url, status=304, body=b"", request=listed))))
    assert (page.http_status, page.text, page.lastmod, page.error) == (304, None, "2026-01-01", None)


def test_a_sitemap_is_read_as_its_requests_are_taken(crawler: Crawler) -> None:
    """A file's URLs are never all held at once: each entry is read when its request is taken."""
    spider = spider_for(crawler, sitemap_url=SITEMAP)
    urls = [f"https://docs.example.com/p{i}" for i in range(5000)]
    reader = listing(spider, docsite.sitemap([(u, "2026-01-01") for u in urls]))
    assert crawler.stats is not None
    assert next(reader).url == urls[0]
    assert crawler.stats.get_value("recrawler/sitemap/urls") == 1
    assert next(reader).url == urls[1]
    assert crawler.stats.get_value("recrawler/sitemap/urls") == 2
    assert [r.url for r in reader] == urls[2:]
    assert crawler.stats.get_value("recrawler/sitemap/urls") == 5000


def test_an_index_follows_sitemap_follow_and_alternates_follow_the_setting(crawler: Crawler) -> None:
    spider = spider_for(crawler, sitemap_url=SITEMAP)
    spider.sitemap_follow = [r"/docs-"]
    index = docsite.sitemap_index(
        ["https://docs.example.com/docs-1.xml", "https://docs.example.com/blog.xml"]
    )
    followed = list(listing(spider, index))
    assert [r.url for r in followed] == ["https://docs.example.com/docs-1.xml"]
    assert spider.recrawler_role_of(followed[0]) == "sitemap"
    with_alternates = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
        ' xmlns:xhtml="http://www.w3.org/1999/xhtml"><url>'
        "<loc>https://docs.example.com/en/a</loc><lastmod>2026-03-01</lastmod>"
        '<xhtml:link rel="alternate" hreflang="de" href="https://docs.example.com/de/a"/>'
        '<xhtml:link rel="alternate" hreflang="x" href="https://elsewhere.example.org/a"/>'
        "</url></urlset>"
    )
    assert [r.url for r in listing(spider, with_alternates)] == ["https://docs.example.com/en/a"]
    spider.sitemap_alternate_links = True
    requests = list(listing(spider, with_alternates))
    # the entry's lastmod is its own URL's; an offsite alternate is refused like any entry
    assert [(r.url, r.meta.get("recrawler_lastmod")) for r in requests] == [
        ("https://docs.example.com/en/a", "2026-03-01"),
        ("https://docs.example.com/de/a", None),
    ]
    assert all(spider.recrawler_role_of(r) == "page" for r in requests)


def test_a_gzipped_sitemap_is_read_within_the_size_limit(crawler: Crawler) -> None:
    spider = spider_for(crawler, sitemap_url=SITEMAP)
    body = docsite.sitemap([f"https://docs.example.com/p{i}" for i in range(200)]).encode()
    packed = gzip.compress(body)
    gz = "https://docs.example.com/pages.xml.gz"
    requests = list(spider.recrawler_parse_listing(Response(gz, body=packed, request=Request(gz))))
    assert len(requests) == 200
    assert crawler.stats is not None
    assert crawler.stats.get_value("recrawler/sitemap/error") is None
    # a gzip bomb: more than download_maxsize once decompressed is no sitemap
    bomb = Request(gz, meta={"download_maxsize": len(body) // 2})
    assert list(spider.recrawler_parse_listing(Response(gz, body=packed, request=bomb))) == []
    assert crawler.stats.get_value("recrawler/sitemap/error") == 1


@deferred_f_from_coro_f
async def test_a_large_sitemap_is_listed_from_disk_as_from_memory(tmp_path: Path) -> None:
    """ListingBodyMiddleware moves a sitemap body larger than a sixteenth of Scrapy's scraper
    budget to a temporary file, which the spider lists it from: the same requests as from memory,
    gzipped or not; the file is closed once read; a gzip bomb stays bounded. Robots.txt, a small
    file, a 304 and another callback's sitemap keep their bodies."""
    crawler = get_crawler(
        DocsSpider,
        {
            "ADDONS": {"recrawler.addon.RecrawlerAddon": 0},
            "RECRAWLER_DB_URI": f"sqlite:///{tmp_path / 'state.db'}",
            "EXTENSIONS": {"recrawler.extensions.reconcile.Reconciler": None},
            "SCRAPER_SLOT_MAX_ACTIVE_SIZE": 64_000,
        },
    )
    spider = spider_for(crawler, sitemap_url=SITEMAP)
    mw = ListingBodyMiddleware.from_crawler(crawler)
    assert mw.spill_over == 4_000
    xml = docsite.sitemap(
        [(f"https://docs.example.com/p{i}", f"2026-01-{i % 28 + 1:02d}") for i in range(2000)]
    )
    packed = gzip.compress(xml.encode())
    assert len(packed) > mw.spill_over

    def sitemap_request(url: str, **request_meta: Any) -> Request:
        return Request(
            url, callback=spider.recrawler_parse_listing, meta={meta.ROLE: meta.ROLE_SITEMAP, **request_meta}
        )

    def listed(requests: list[Request]) -> list[tuple[str, Any]]:
        return [(r.url, r.meta.get(meta.LASTMOD)) for r in requests]

    in_memory = listed(
        list(
            spider.recrawler_parse_listing(XmlResponse(SITEMAP, body=xml.encode(), request=Request(SITEMAP)))
        )
    )
    assert len(in_memory) == 2000
    gz = "https://docs.example.com/pages.xml.gz"
    for url, body, cls in ((SITEMAP, xml.encode(), XmlResponse), (gz, packed, Response)):
        request = sitemap_request(url)
        spilled = await mw.process_response(request, cls(url, body=body, request=request))
        assert spilled.body == b""
        file = request.meta[meta.LISTING_BODY]
        assert listed(list(spider.recrawler_parse_listing(spilled))) == in_memory
        assert file.closed
        assert meta.LISTING_BODY not in request.meta
    assert crawler.stats is not None
    assert crawler.stats.get_value("recrawler/sitemap/error") is None

    # a gzip bomb: more than download_maxsize once decompressed is no sitemap, from disk too
    bomb = sitemap_request(gz, download_maxsize=len(xml) // 2)
    spilled = await mw.process_response(bomb, Response(gz, body=packed, request=bomb))
    assert list(spider.recrawler_parse_listing(spilled)) == []
    assert crawler.stats.get_value("recrawler/sitemap/error") == 1

    robots = "https://docs.example.com/robots.txt"
    big_robots = b"".join(b"Sitemap: https://docs.example.com/s%d.xml\n" % i for i in range(500))
    kept = [
        (sitemap_request(robots), big_robots, 200),
        (sitemap_request(SITEMAP), xml.encode()[:3000], 200),
        (sitemap_request(SITEMAP), xml.encode(), 304),
        (Request(SITEMAP, meta={meta.ROLE: meta.ROLE_SITEMAP}), xml.encode(), 200),
    ]
    for request, body, status in kept:
        answer = XmlResponse(request.url, status=status, body=body, request=request)
        assert await mw.process_response(request, answer) is answer
        assert meta.LISTING_BODY not in request.meta


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"garbage", "not XML"),
        (b"", "not XML"),
        (b"<html><body>moved</body></html>", "neither a urlset nor a sitemap index ('html')"),
    ],
)
def test_a_file_that_is_no_sitemap_is_one_counted_error(
    crawler: Crawler, body: bytes, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    spider = spider_for(crawler, sitemap_url=SITEMAP)
    with caplog.at_level(logging.ERROR):
        assert list(listing(spider, body)) == []
    assert crawler.stats is not None
    assert crawler.stats.get_value("recrawler/sitemap/error") == 1
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [f"sitemap {SITEMAP} is not a sitemap: {why}; nothing is removed this run"]


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


class ReadingProbe:
    """Closest to the spider: counts the sitemap files downloaded and not yet read to their end
    (held), and those being read, at once (class attributes: one crawl per test)."""

    held = reading = most_held = most_reading = 0

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ReadingProbe:
        crawler.signals.connect(cls.response_received, signal=signals.response_received)
        return cls()

    @classmethod
    def response_received(cls, response: Any, request: Any) -> None:
        if request.meta.get("recrawler_role") == "sitemap" and response.status == 200:
            cls.held += 1
            cls.most_held = max(cls.most_held, cls.held)

    async def process_spider_output(self, response: Any, result: Any) -> Any:
        if response.meta.get("recrawler_role") != "sitemap":
            async for r in result:
                yield r
            return
        cls = type(self)
        cls.reading += 1
        cls.most_reading = max(cls.most_reading, cls.reading)
        try:
            async for r in result:
                yield r
        finally:
            cls.reading -= 1
            cls.held -= 1


@pytest.mark.parametrize("concurrency", [1, 2])
@deferred_f_from_coro_f
async def test_at_most_the_set_number_of_sitemap_files_are_held_and_read_at_once(
    site: Site, crawls: Crawls, concurrency: int
) -> None:
    """Each file downloaded holds its body, each file read its requests in flight: when every file
    of an index went out at once, the whole listing was in memory."""
    ReadingProbe.held = ReadingProbe.reading = ReadingProbe.most_held = ReadingProbe.most_reading = 0
    files = [f"part{n}.xml" for n in range(8)]
    for n, name in enumerate(files):
        site.write(name, docsite.sitemap([site.url(f"p{n}-{i}.html") for i in range(20)]))
    # one file is missing: its failed request frees its place for the next
    site.write("sitemap.xml", docsite.sitemap_index([site.url(name) for name in [*files, "gone.xml"]]))
    r = await crawls.crawl(
        site.url("sitemap.xml"),
        RECRAWLER_SITEMAP_CONCURRENCY=concurrency,
        # small batches: a file's reading spans many database writes, where other files could start
        RECRAWLER_FRONTIER_BATCH_SIZE=5,
        SPIDER_MIDDLEWARES={"tests.test_spider.ReadingProbe": 115},
    )
    assert r.stats["recrawler/sitemap/parsed"] == 9
    assert r.stats["recrawler/sitemap/error"] == 1
    assert r.stats["recrawler/sitemap/urls"] == 160
    assert ReadingProbe.reading == ReadingProbe.held == 0
    # at most the set number at once (whether two reads overlap at all is the scheduler's timing)
    assert 1 <= ReadingProbe.most_reading <= concurrency
    # the index itself (a start request) and the files it let out
    assert ReadingProbe.most_held <= concurrency + 1


class BelowListingProbe:
    """Below the listing on the output side: the sitemap files a sitemap's read yields (class
    attributes: one crawl per test)."""

    seen: ClassVar[list[str]] = []
    idle = 0

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> BelowListingProbe:
        crawler.signals.connect(cls.spider_idle, signal=signals.spider_idle)
        return cls()

    @classmethod
    def spider_idle(cls) -> None:
        cls.idle += 1

    async def process_spider_output(self, response: Any, result: Any) -> Any:
        async for r in result:
            if isinstance(r, Request) and r.meta.get("recrawler_role") == "sitemap":
                type(self).seen.append(r.url)
            yield r


@deferred_f_from_coro_f
async def test_sitemap_files_are_the_output_of_the_index_and_wait_in_the_scheduler(
    site: Site, crawls: Crawls
) -> None:
    """Further sitemap files waited in the listing middleware's own deque, went out through
    ``engine.crawl`` past the spider middlewares below it, and were pumped from ``spider_idle``:
    they are the index's output now, and wait in the scheduler with the listing's priority."""
    BelowListingProbe.seen, BelowListingProbe.idle = [], 0
    files = [f"part{n}.xml" for n in range(12)]
    for n, name in enumerate(files):
        site.write(name, docsite.sitemap([site.url(f"p{n}-{i}.html") for i in range(25)]))
    site.write("sitemap.xml", docsite.sitemap_index([site.url(name) for name in files]))
    r = await crawls.crawl(
        site.url("sitemap.xml"),
        RECRAWLER_SITEMAP_CONCURRENCY=1,
        SPIDER_MIDDLEWARES={"tests.test_spider.BelowListingProbe": 95},
    )
    assert sorted(BelowListingProbe.seen) == sorted(site.url(name) for name in files)
    assert r.stats["recrawler/sitemap/parsed"] == 13
    assert r.stats["recrawler/sitemap/urls"] == 300
    assert r.stats["recrawler/sitemap/pages"] == 300
    # the spider went idle once the listing was read, and once more after the unseen-page check
    assert BelowListingProbe.idle <= 2


def test_a_bad_numeric_setting_is_one_line(tmp_path: Path) -> None:
    """A value that is no number stopped the crawl without a word (exit 1); now it is named."""
    base = {
        "ADDONS": {"recrawler.addon.RecrawlerAddon": 0},
        "RECRAWLER_DB_URI": f"sqlite:///{tmp_path / 'state.db'}",
    }
    crawler = get_crawler(DocsSpider, {**base, "RECRAWLER_SITEMAP_CONCURRENCY": 0})
    with pytest.raises(ConfigurationError) as caught:
        ListingMiddleware.from_crawler(crawler)
    assert str(caught.value) == "RECRAWLER_SITEMAP_CONCURRENCY: must be at least 1, got 0"
    for name, bad, why in (
        ("RECRAWLER_SITEMAP_CONCURRENCY", "two", "must be a whole number, got 'two'"),
        ("RECRAWLER_SITEMAP_MAX_FILES", "1e3", "must be a whole number, got '1e3'"),
        ("RECRAWLER_VERIFY_BATCH_SIZE", "abc", "must be a whole number, got 'abc'"),
        ("RECRAWLER_LEASE_SECS", "a minute", "must be a number, got 'a minute'"),
    ):
        with pytest.raises(ConfigurationError) as caught:
            get_crawler(DocsSpider, {**base, name: bad})
        assert str(caught.value) == f"{name}: {why}"
    # a setting with its own parser keeps it
    sampled = get_crawler(DocsSpider, {**base, "RECRAWLER_AUDIT_SAMPLE": "5%"})
    assert sampled.settings["RECRAWLER_AUDIT_SAMPLE"] == "5%"


def test_deployed_is_a_yes_or_a_no() -> None:
    """``-a deployed=1`` says the docs were just deployed; anything but a yes or a no is one line."""
    sitemap = "https://docs.example.com/sitemap.xml"
    assert DocsSpider(sitemap_url=sitemap, deployed="1").recrawler_deployed is True
    assert DocsSpider(sitemap_url=sitemap, deployed="no").recrawler_deployed is False
    assert DocsSpider(sitemap_url=sitemap).recrawler_deployed is False
    with pytest.raises(ConfigurationError) as caught:
        DocsSpider(sitemap_url=sitemap, deployed="maybe")
    assert str(caught.value) == ("deployed: not a yes or no (1, true, yes, on / 0, false, no, off): 'maybe'")


def test_bad_deploy_settings_are_one_line(tmp_path: Path) -> None:
    from recrawler.spidermiddlewares.schedule import ScheduleMiddleware

    base = {
        "ADDONS": {"recrawler.addon.RecrawlerAddon": 0},
        "RECRAWLER_DB_URI": f"sqlite:///{tmp_path / 'state.db'}",
    }
    for name, bad, why in (
        ("RECRAWLER_DEPLOY_SIGNALS", ["listing", "vibes"], "unknown signal(s) vibes"),
        ("RECRAWLER_DEPLOY_PROBES", -1, "bad value -1"),
    ):
        crawler = get_crawler(DocsSpider, {**base, name: bad})
        crawler.spider = DocsSpider(sitemap_url="https://docs.example.com/sitemap.xml")
        with pytest.raises(ConfigurationError) as caught:
            ScheduleMiddleware.from_crawler(crawler)
        assert str(caught.value).startswith(f"{name}: {why}")
