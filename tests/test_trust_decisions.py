"""A removal waits for a person: a rejected listing is never a baseline, held removals stay held
until a decision, one decision wins, and what is held is shown (real crawls of a few hundred pages
on the local server, real SQLite)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.utils.defer import deferred_f_from_coro_f

from tests import docsite, statedb

if TYPE_CHECKING:
    import pytest

    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000


def page(i: int, note: str = "") -> str:
    return docsite.page(
        f"Page {i}",
        [
            ("Overview", [f"Page {i} explains feature number {i} in detail, with its own examples. {note}"]),
            ("Usage", [f"Call feature_{i}() with the options it needs."], f"tool --feature {i}"),
        ],
    )


def build(site: Site, n: int) -> tuple[list[str], str]:
    names = [f"docs/p{i}.html" for i in range(n)]
    for i, name in enumerate(names):
        site.write(name, page(i), mtime=T0)
    return names, site.write_sitemap(names)


@deferred_f_from_coro_f
async def test_a_sitemap_broken_for_two_runs_removes_nothing(
    site: Site, crawls: Crawls, caplog: pytest.LogCaptureFixture
) -> None:
    names, sitemap = build(site, 300)
    r0 = await crawls.crawl(sitemap)
    assert r0.counts["new"] == 300
    # a broken deploy that lasts: the sitemap names 30 pages, the other 270 answer 404
    site.write_sitemap(names[:30])
    for name in names[30:]:
        site.remove(name)
    r1 = await crawls.crawl(sitemap)
    assert (r1.exit_code, r1.report["reconcile"]["skipped"]) == (4, ["listing_shrunk"])
    # run 2 compares its listing with the last accepted one (300 pages), not with run 1's
    r2 = await crawls.crawl(sitemap)
    assert (r2.exit_code, r2.report["reconcile"]["skipped"]) == (4, ["listing_shrunk"])
    assert r2.counts["quarantined"] == r2.counts["gone"] == 0
    assert "a site that really shrank: run once with RECRAWLER_LISTING_MIN_RATIO=0" in caplog.text
    r3 = await crawls.crawl(sitemap)
    assert r3.exit_code == 4
    assert statedb.statuses(crawls.db_path) == {"live": 300}
    # the deploy is fixed: the listing is whole again, nothing was lost
    site.write_sitemap(names)
    for i, name in enumerate(names[30:], start=30):
        site.write(name, page(i), mtime=T0)
    r4 = await crawls.crawl(sitemap)
    assert (r4.exit_code, r4.counts["new"], r4.counts["unchanged"]) == (0, 0, 300)
