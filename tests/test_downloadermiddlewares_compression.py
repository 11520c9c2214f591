"""BoundedHttpCompressionMiddleware: pages decompressed as Scrapy does; a page past DOWNLOAD_MAXSIZE
once decompressed goes on empty and marked, counted as an error; any other request is refused."""

from __future__ import annotations

import gzip
from typing import TYPE_CHECKING

from scrapy.utils.defer import deferred_f_from_coro_f

from tests import docsite, statedb

if TYPE_CHECKING:
    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0
#: small enough that a 1 MiB page is a bomb, large enough for every ordinary page and sitemap
MAXSIZE = 256 * 1024


def bomb() -> bytes:
    """1 MiB of HTML in about 1 KB of gzip."""
    return gzip.compress(b"<html><body><main><p>" + b"A" * (1024 * 1024) + b"</p></main></body></html>")


def write_pages(site: Site, n: int) -> list[str]:
    paths = [f"page-{i}.html" for i in range(n)]
    for i, path in enumerate(paths):
        site.write(path, docsite.widget_page(i), mtime=T0)
    return paths


def content_hash(crawls: Crawls, path: str) -> str:
    return str(
        statedb.value(crawls.db_path, "SELECT content_hash FROM pages WHERE url LIKE ?", (f"%/{path}",))
    )


@deferred_f_from_coro_f
async def test_gzipped_pages_are_read_decompressed(site: Site, crawls: Crawls) -> None:
    paths = write_pages(site, 60)
    for i in range(0, 60, 3):
        gzipped = gzip.compress(docsite.widget_page(i).encode())
        site.write(paths[i], gzipped, mtime=T0, content_encoding="gzip")
    # page 0's text, served plain at another address
    site.write("twin-0.html", docsite.widget_page(0), mtime=T0)
    r = await crawls.crawl(site.write_sitemap([*paths, "twin-0.html"]), DOWNLOAD_MAXSIZE=MAXSIZE)
    assert (r.counts["new"], r.counts["errors"]) == (61, 0)
    assert "recrawler/page/error/too_large" not in r.stats
    # what was stored of the gzipped page is its text: the same as its plain twin's
    assert content_hash(crawls, "page-0.html") == content_hash(crawls, "twin-0.html")
    assert content_hash(crawls, "page-0.html") != content_hash(crawls, "page-1.html")


@deferred_f_from_coro_f
async def test_a_page_past_the_limit_once_decompressed_is_one_counted_error(
    site: Site, crawls: Crawls
) -> None:
    paths = write_pages(site, 80)
    site.write("page-7.html", bomb(), mtime=T0, content_encoding="gzip")
    r = await crawls.crawl(site.write_sitemap(paths), DOWNLOAD_MAXSIZE=MAXSIZE)
    assert (r.counts["new"], r.counts["errors"]) == (79, 1)
    assert r.stats["recrawler/page/error/too_large"] == 1
    # one error is no outage: the run ends well
    assert r.exit_code == 0
    # a page never stored is not stored from an empty body
    assert statedb.value(crawls.db_path, "SELECT COUNT(*) FROM pages WHERE url LIKE '%/page-7.html'") == 0
    assert r.actions().get("page-7.html") == "error"


@deferred_f_from_coro_f
async def test_a_sitemap_past_the_limit_is_refused_as_scrapy_refuses_it(site: Site, crawls: Crawls) -> None:
    paths = write_pages(site, 10)
    listing = docsite.sitemap(
        [site.url(p) for p in paths] + [site.url(f"x{i:05d}.html") for i in range(20_000)]
    )
    site.write("big-sitemap.xml", gzip.compress(listing.encode()), content_encoding="gzip")
    r = await crawls.crawl(site.url("big-sitemap.xml"), DOWNLOAD_MAXSIZE=MAXSIZE)
    # not a page: no page error is counted for it, and the listing failed (nothing is evidence)
    assert "recrawler/page/error/too_large" not in r.stats
    assert r.counts.get("new", 0) == 0
    assert "sitemap_failed" in r.report["reconcile"]["skipped"]
