"""A bad day on the server's side: a staging robots.txt, a gzip bomb, a sitemap naming pages many
times, entity bombs in a sitemap, a 429 storm, a huge page. Each is counted, never a quiet success."""

from __future__ import annotations

import gzip
import logging
from typing import TYPE_CHECKING, Any

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.reports.summary import summary_line
from tests import docsite, statedb

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.conftest import Crawls
    from tests.conftest_mockserver import MockServer, Site

T0 = 1_760_000_000.0


def write_pages(site: Site, n: int, folder: str = "") -> list[str]:
    paths = [f"{folder}page-{i}.html" for i in range(n)]
    for i, path in enumerate(paths):
        site.write(path, docsite.widget_page(i), mtime=T0)
    return paths


def status_of(crawls: Crawls, path: str) -> str:
    return str(statedb.value(crawls.db_path, "SELECT status FROM pages WHERE url LIKE ?", (f"%/{path}",)))


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.fixture
def robots(mockserver: MockServer) -> Iterator[Any]:
    """Writes the server's robots.txt for one test (the server has one for every site)."""
    path = mockserver.root / "robots.txt"
    yield path
    path.unlink(missing_ok=True)


# --- item 3: a staging robots.txt ------------------------------------------------------------


@deferred_f_from_coro_f
async def test_a_staging_robots_txt_is_an_outage_not_a_quiet_run(
    site: Site, crawls: Crawls, robots: Any, caplog: pytest.LogCaptureFixture
) -> None:
    paths = write_pages(site, 300, "docs/")
    sitemap = site.write_sitemap(paths)
    r1 = await crawls.crawl(sitemap)
    assert (r1.counts["new"], r1.exit_code) == (300, 0)
    # a staging robots.txt is deployed with the docs
    robots.write_text(f"User-agent: *\nDisallow: /{site.name}/docs/\n")
    caplog.clear()
    r2 = await crawls.crawl(sitemap)
    assert r2.exit_code == 4
    assert r2.report["reconcile"]["skipped"] == ["robots_forbidden"]
    assert r2.counts.get("robots_forbidden") == 300
    assert r2.counts["crawled"] == 0
    assert "robots_forbidden: 300" in summary_line(r2.report)
    lines = [m for m in errors(caplog) if "robots.txt" in m]
    assert lines == [
        "robots.txt forbade 300 of 300 page requests: this run checked almost nothing "
        "(a staging robots.txt deployed?); nothing is removed, exit 4"
    ]
    assert status_of(crawls, "docs/page-0.html") == "live"


@deferred_f_from_coro_f
async def test_a_few_pages_robots_txt_forbids_are_counted_and_the_run_goes_on(
    site: Site, crawls: Crawls, robots: Any
) -> None:
    paths = write_pages(site, 100, "docs/")
    write_pages(site, 2, "private/")
    sitemap = site.write_sitemap([*paths, "private/page-0.html", "private/page-1.html"])
    robots.write_text(f"User-agent: *\nDisallow: /{site.name}/private/\n")
    r = await crawls.crawl(sitemap)
    assert (r.counts["new"], r.counts.get("robots_forbidden"), r.exit_code) == (100, 2, 0)
    assert r.stats["recrawler/robots/forbidden"] == 2


# --- item 10: a gzip bomb ---------------------------------------------------------------------


@deferred_f_from_coro_f
async def test_a_page_that_became_a_gzip_bomb_is_a_counted_error(site: Site, crawls: Crawls) -> None:
    paths = write_pages(site, 100)
    sitemap = site.write_sitemap(paths)
    r1 = await crawls.crawl(sitemap)
    assert r1.counts["new"] == 100
    # 40 MiB of HTML in 40 KB of gzip, past the 32 MiB DOWNLOAD_MAXSIZE once decompressed
    bomb = gzip.compress(b"<html><body><main><p>" + b"A" * (40 * 1024 * 1024) + b"</p></main></body></html>")
    site.write("page-7.html", bomb, mtime=T0 + 10, content_encoding="gzip")
    r2 = await crawls.crawl(sitemap)
    assert r2.counts["crawled"] == 100
    assert (r2.counts["unchanged"], r2.counts["errors"]) == (99, 1)
    assert r2.stats["recrawler/page/error/too_large"] == 1
    assert r2.actions() == {"page-7.html": "error"}
    assert r2.events[0]["reason"] == "too_large"
    assert status_of(crawls, "page-7.html") == "live"  # its stored state stays as it was


# --- item 11: a sitemap naming each page three times ------------------------------------------


@deferred_f_from_coro_f
async def test_a_listing_counts_each_page_once_however_often_it_is_named(site: Site, crawls: Crawls) -> None:
    paths = write_pages(site, 200)
    sitemap = site.write_sitemap(paths * 3)
    r1 = await crawls.crawl(sitemap)
    assert r1.counts["new"] == 200
    site.remove("page-5.html")
    r2 = await crawls.crawl(sitemap)
    # the sitemap answered 304: it was listed from the database, each page once
    assert r2.stats["recrawler/sitemap/not_modified"] == 1
    assert r2.report["reconcile"]["skipped"] == []
    assert (r2.counts["quarantined"], r2.exit_code) == (1, 0)
    assert status_of(crawls, "page-5.html") == "quarantined"
    assert r1.stats["recrawler/sitemap/pages"] == r2.stats["recrawler/sitemap/pages"] == 200


@deferred_f_from_coro_f
async def test_pages_the_cheap_layers_skip_are_still_listed(site: Site, crawls: Crawls) -> None:
    paths = write_pages(site, 100)
    sitemap = site.write_sitemap(paths * 2)
    # 60 pages fetched once, then skipped by deltafetch; the rest skipped by the schedule
    settings = {
        "RECRAWLER_IMMUTABLE_PATTERNS": [r"page-[0-5]?[0-9]\.html$"],
        "RECRAWLER_SCHEDULE": "adaptive",
    }
    r1 = await crawls.crawl(sitemap, **settings)
    r2 = await crawls.crawl(sitemap, **settings)
    assert r2.counts["skipped_deltafetch"] == 60
    # (and the run's deploy probes, asked first)
    assert r2.counts["skipped_schedule"] + r2.stats["recrawler/schedule/due/probe"] == 40
    assert r1.stats["recrawler/sitemap/pages"] == r2.stats["recrawler/sitemap/pages"] == 100
    assert (r2.report["reconcile"]["skipped"], r2.exit_code) == ([], 0)


# --- "also seen": sitemaps that stop parsing early -----------------------------------------


def laughs(depth: int = 9) -> str:
    entities = "".join(
        f'<!ENTITY lol{i} "' + f"&lol{i - 1};" * 10 + '">\n' if i else '<!ENTITY lol0 "lol">\n'
        for i in range(depth + 1)
    )
    return f'<?xml version="1.0"?>\n<!DOCTYPE urlset [\n{entities}]>\n'


@pytest.mark.parametrize("attack", ["billion_laughs", "quadratic", "cut_short"])
@deferred_f_from_coro_f
async def test_a_sitemap_that_stops_parsing_early_is_a_failed_listing(
    site: Site, crawls: Crawls, caplog: pytest.LogCaptureFixture, attack: str
) -> None:
    paths = write_pages(site, 100)
    sitemap = site.write_sitemap(paths)
    await crawls.crawl(sitemap)
    site.remove("page-90.html")  # deleted meanwhile: nothing may be removed on a broken listing
    entries = docsite.sitemap([site.url(p) for p in paths])
    head, _, rest = entries.partition("<url>")
    middle = rest.index("<url>", len(rest) // 2)
    if attack == "billion_laughs":
        broken = laughs() + head.split("?>", 1)[1] + "<url>" + rest[:middle] + "<url><loc>&lol9;</loc></url>"
    elif attack == "quadratic":
        prolog = '<?xml version="1.0"?>\n<!DOCTYPE urlset [<!ENTITY a "' + "A" * 50_000 + '">]>\n'
        bomb = "<url><loc>" + "&a;" * 50_000 + "</loc></url>"
        broken = prolog + head.split("?>", 1)[1] + "<url>" + rest[:middle] + bomb
    else:
        broken = head + "<url>" + rest[:middle] + "<url><loc>http://"
    site.write("sitemap.xml", broken + rest[middle:] if attack != "cut_short" else broken)
    caplog.clear()
    r = await crawls.crawl(sitemap)
    assert r.exit_code == 4
    assert r.report["reconcile"]["skipped"] == ["sitemap_failed"]
    assert any("stopped parsing" in m for m in errors(caplog))
    assert status_of(crawls, "page-90.html") == "live"


# --- "also seen": 429 storms and Retry-After --------------------------------------------------


@deferred_f_from_coro_f
async def test_a_429_storm_slows_the_crawl_down_to_retry_after(site: Site, crawls: Crawls) -> None:
    paths = write_pages(site, 40)
    sitemap = site.write_sitemap(paths)
    for path in paths:
        # each page answers its first request 429 Retry-After: 1
        site.options(path, status=429, status_times=1, headers={"Retry-After": "1"})
    r = await crawls.crawl(sitemap, RETRY_TIMES=2)
    assert (r.counts["new"], r.counts["errors"]) == (40, 0)
    pages = [e for e in site.requests() if e["path"].startswith("page-")]
    # every page was asked twice (its 429, its retry), never three times
    assert len(pages) == 80
    first_429 = min(e["at"] for e in pages if e["status"] == 429)
    # after the first 429 the host got at most one request per second for a while: no storm of
    # retries at full concurrency (the first answers were in flight together)
    answered = sorted(e["at"] for e in pages if e["status"] == 200)
    assert answered[0] - first_429 >= 0.9
    assert r.report["counts"]["errors"] == 0


# --- "also seen": a huge page -------------------------------------------------------------------


@deferred_f_from_coro_f
async def test_a_huge_page_is_indexed_in_a_bounded_number_of_chunks(site: Site, crawls: Crawls) -> None:
    paths = write_pages(site, 100)
    # about 3 MB of text: some 2,700 chunks of 1,200 characters
    words = " ".join(f"Sentence {i} says something about retries." for i in range(70_000))
    site.write("page-3.html", docsite.widget_page(3, " " + words), mtime=T0)
    sitemap = site.write_sitemap(paths)
    r = await crawls.crawl(sitemap, RECRAWLER_CHUNK_MAX_PER_PAGE=50)
    assert r.counts["new"] == 100
    chunks = statedb.value(crawls.db_path, "SELECT chunks FROM pages WHERE url LIKE '%/page-3.html'")
    assert chunks == 50
    assert r.stats["recrawler/index/capped"] == 1
