"""CountedRobotsTxtMiddleware: Scrapy's robots.txt rules in Scrapy's place, the page requests they
forbid counted, and nothing else (a forbidden sitemap is a failed listing, not a forbidden page)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from tests import docsite

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.conftest import Crawls
    from tests.conftest_mockserver import MockServer, Site

T0 = 1_760_000_000.0


@pytest.fixture
def robots(mockserver: MockServer) -> Iterator[Any]:
    """The server's robots.txt, for one test (every site of the server shares it)."""
    path = mockserver.root / "robots.txt"
    yield path
    path.unlink(missing_ok=True)


def write_pages(site: Site, folder: str, n: int) -> list[str]:
    paths = [f"{folder}/page-{i}.html" for i in range(n)]
    for i, path in enumerate(paths):
        site.write(path, docsite.widget_page(i), mtime=T0)
    return paths


@deferred_f_from_coro_f
async def test_each_forbidden_page_request_is_counted_once_and_the_rest_is_crawled(
    site: Site, crawls: Crawls, robots: Any
) -> None:
    public = write_pages(site, "guide", 120)
    private = write_pages(site, "private", 40)
    robots.write_text(f"User-agent: *\nDisallow: /{site.name}/private/\n")
    r = await crawls.crawl(site.write_sitemap(public + private), ROBOTSTXT_OBEY=True)
    assert r.stats["recrawler/robots/forbidden"] == 40
    assert r.counts["new"] == 120
    requested = {e["path"] for e in site.requests()}
    assert not any(path.startswith("private/") for path in requested)
    # 40 of 160 is more than RECRAWLER_MAX_ERROR_RATIO (0.2) allows: nothing this run missed is evidence
    assert r.report["reconcile"]["skipped"] == ["robots_forbidden"]


@deferred_f_from_coro_f
async def test_a_forbidden_sitemap_is_a_failed_listing_not_a_forbidden_page(
    site: Site, crawls: Crawls, robots: Any
) -> None:
    pages = write_pages(site, "guide", 20)
    sitemap = site.write_sitemap(pages)
    robots.write_text(f"User-agent: *\nDisallow: /{site.name}/sitemap\n")
    r = await crawls.crawl(sitemap, ROBOTSTXT_OBEY=True)
    assert r.stats.get("recrawler/robots/forbidden", 0) == 0
    assert r.counts.get("new", 0) == 0
    assert "sitemap_failed" in r.report["reconcile"]["skipped"]
    assert r.exit_code == 4


@deferred_f_from_coro_f
async def test_without_robotstxt_obey_nothing_is_forbidden(site: Site, crawls: Crawls, robots: Any) -> None:
    pages = write_pages(site, "private", 10)
    robots.write_text(f"User-agent: *\nDisallow: /{site.name}/private/\n")
    r = await crawls.crawl(site.write_sitemap(pages), ROBOTSTXT_OBEY=False)
    assert "recrawler/robots/forbidden" not in r.stats
    assert r.counts["new"] == 10


@deferred_f_from_coro_f
async def test_a_project_that_placed_scrapys_own_keeps_it_uncounted(
    site: Site, crawls: Crawls, robots: Any
) -> None:
    public = write_pages(site, "guide", 20)
    private = write_pages(site, "private", 2)
    robots.write_text(f"User-agent: *\nDisallow: /{site.name}/private/\n")
    own = {"scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware": 100}
    r = await crawls.crawl(
        site.write_sitemap(public + private), ROBOTSTXT_OBEY=True, DOWNLOADER_MIDDLEWARES=own
    )
    # Scrapy's middleware forbids as it always did; the add-on does not count behind its back
    assert not any(e["path"].startswith("private/") for e in site.requests())
    assert "recrawler/robots/forbidden" not in r.stats
    assert r.counts["new"] == 20
