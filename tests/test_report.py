"""The summary line adds up for a reader: the head sums to ``crawled``, each later count is of pages,
each page counted once."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.reports.summary import summary_line
from tests import docsite

if TYPE_CHECKING:
    from tests.conftest import CrawlResult, Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0


def head(result: CrawlResult) -> dict[str, int]:
    line = summary_line(result.report).split(" | ")[0]
    return {k: int(v) for k, v in re.findall(r"(\w+): (\d+)", line)}


def assert_adds_up(result: CrawlResult) -> None:
    h = head(result)
    assert list(h) == ["crawled", "new", "changed", "unchanged", "gone", "errors"]
    assert h["crawled"] == sum(h[k] for k in ("new", "changed", "unchanged", "gone", "errors"))
    c = result.counts
    assert c["not_modified"] + c["unchanged_by_hash"] + c["unchanged_by_fuzzy"] <= c["unchanged"]


@deferred_f_from_coro_f
async def test_an_audited_304_counts_once_as_unchanged_by_hash(site: Site, crawls: Crawls) -> None:
    for i in range(4):
        site.write(f"p{i}.html", docsite.feature_page(i), mtime=T0)
    sitemap = site.write_sitemap([f"p{i}.html" for i in range(4)])
    assert_adds_up(await crawls.crawl(sitemap))
    r2 = await crawls.crawl(sitemap, RECRAWLER_AUDIT_SAMPLE=1.0)
    # every page answered 304, and the audit fetched each again in full
    assert r2.stats["recrawler/conditional/not_modified"] == 4
    assert r2.stats["recrawler/audit/refetched"] == 4
    assert {k: r2.counts[k] for k in ("unchanged", "not_modified", "unchanged_by_hash", "audited")} == {
        "unchanged": 4,
        "not_modified": 0,
        "unchanged_by_hash": 4,
        "audited": 4,
    }
    assert_adds_up(r2)
    # without the audit, a 304 is the layer that found the page unchanged
    r3 = await crawls.crawl(sitemap)
    assert (r3.counts["not_modified"], r3.counts["unchanged_by_hash"]) == (4, 0)
    assert_adds_up(r3)


@deferred_f_from_coro_f
async def test_pages_reported_after_the_bar_are_not_in_crawled(site: Site, crawls: Crawls) -> None:
    for i in range(6):
        site.write(f"p{i}.html", docsite.feature_page(i), mtime=T0)
    site.write("old.html", docsite.feature_page(9), mtime=T0)
    sitemap = site.write_sitemap([*(f"p{i}.html" for i in range(6)), "old.html"])
    await crawls.crawl(sitemap)
    site.remove("p0.html")
    site.write("p1.html", docsite.feature_page(1, "Now with more."), mtime=T0 + 60)
    site.options("old.html", redirect="p5.html")
    r2 = await crawls.crawl(sitemap)
    c = r2.counts
    assert (c["quarantined"], c["moved"], c["changed"], c["unchanged"]) == (1, 1, 1, 4)
    # p0 answered 404 (quarantined) and old.html moved to p5 (fetched, and counted, as p5)
    assert head(r2) == {"crawled": 5, "new": 0, "changed": 1, "unchanged": 4, "gone": 0, "errors": 0}
    assert_adds_up(r2)
    # the second 404 makes p0 gone: now it is in the head
    r3 = await crawls.crawl(sitemap)
    assert head(r3)["gone"] == 1
    assert_adds_up(r3)
