"""SoftNotFoundMiddleware: a page answering 200 with the site's own not-found page is a miss, on
the evidence of one probe per scope; switched off, such a page is content."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from scrapy.utils.defer import deferred_f_from_coro_f

from tests import docsite, statedb

if TYPE_CHECKING:
    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0
NOT_FOUND = docsite.page(
    "Page not found", [("Sorry", ["The page {path} does not exist. Try the search, or go home."])]
)


def write_docs(site: Site, n: int) -> str:
    paths = [f"docs/page-{i}.html" for i in range(n)]
    for i, path in enumerate(paths):
        site.write(path, docsite.widget_page(i), mtime=T0)
    return site.write_sitemap(paths)


def answer_soft_404s(site: Site, removed: int) -> None:
    """The site now answers a path it does not have with its not-found page, and a 200."""
    site.write("404.html", NOT_FOUND, mtime=T0)
    site.options("*", not_found="404.html", not_found_status=200)
    for i in range(removed):
        site.remove(f"docs/page-{i}.html")


@deferred_f_from_coro_f
async def test_stored_pages_answering_the_not_found_page_are_misses(site: Site, crawls: Crawls) -> None:
    sitemap = write_docs(site, 150)
    assert (await crawls.crawl(sitemap)).counts["new"] == 150
    answer_soft_404s(site, 4)
    r = await crawls.crawl(sitemap)
    assert r.stats["recrawler/page/soft_404"] == 4
    assert r.stats["recrawler/page/soft_404/not_found_text"] == 4
    # one probe for the one scope (the docs folder), answered: 150 pages, one extra request
    assert (r.stats["recrawler/soft404/probes"], r.stats["recrawler/soft404/probes/answered"]) == (1, 1)
    assert len([e for e in site.requests(probes=True) if "no-such-page" in e["path"]]) == 2  # one per run
    assert r.counts["quarantined"] == 4
    assert Counter(statedb.statuses(crawls.db_path)) == {"live": 146, "quarantined": 4}


@deferred_f_from_coro_f
async def test_switched_off_a_soft_404_is_content(site: Site, crawls: Crawls) -> None:
    sitemap = write_docs(site, 150)
    await crawls.crawl(sitemap, RECRAWLER_SOFT404_ENABLED=False)
    answer_soft_404s(site, 4)
    r = await crawls.crawl(sitemap, RECRAWLER_SOFT404_ENABLED=False)
    assert not any(k.startswith(("recrawler/soft404/", "recrawler/page/soft_404")) for k in r.stats)
    assert not any("no-such-page" in e["path"] for e in site.requests(probes=True))
    assert r.counts["changed"] == 4
