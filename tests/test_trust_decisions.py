"""A removal waits for a person: a rejected listing is never a baseline, held removals stay held
until a decision, one decision wins, and what is held is shown (real crawls of a few hundred pages
on the local server, real SQLite)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from scrapy.utils.defer import deferred_f_from_coro_f

from tests import docsite, shell, statedb

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


async def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    return await asyncio.to_thread(shell.cli_captured, capsys, *argv)


@deferred_f_from_coro_f
async def test_held_removals_wait_for_a_person_when_some_pages_come_back(
    site: Site, crawls: Crawls, capsys: pytest.CaptureFixture[str]
) -> None:
    names, sitemap = build(site, 300)
    await crawls.crawl(sitemap)
    # a broken deploy: 60 listed pages answer 404 (over RECRAWLER_MAX_REMOVE_RATIO=0.1): held
    for name in names[:60]:
        site.remove(name)
    r1 = await crawls.crawl(sitemap)
    assert (r1.exit_code, r1.report["held"]) == (3, ["mass_removal"])
    assert statedb.statuses(crawls.db_path) == {"live": 300}
    # half of them come back; the other 30 (within the bound on their own) still wait
    for i, name in enumerate(names[:30]):
        site.write(name, page(i), mtime=T0)
    r2 = await crawls.crawl(sitemap)
    assert (r2.exit_code, r2.report["held"]) == (3, ["mass_removal"])
    assert "30 removals wait for a decision" in str(r2.report["alert"])
    assert r2.counts["quarantined"] == r2.counts["gone"] == 0
    assert statedb.statuses(crawls.db_path) == {"live": 300}
    # a third run changes nothing about that: the decision is carried, never taken for the person
    r3 = await crawls.crawl(sitemap)
    assert (r3.exit_code, r3.report["held"], r3.counts["quarantined"]) == (3, ["mass_removal"], 0)
    code, out = await cli(capsys, "runs", "approve", str(r1.report["run_id"]), "--db", crawls.db_uri)
    assert (code, f"carried to run {r3.report['run_id']}" in out) == (2, True)
    code, out = await cli(capsys, "runs", "approve", str(r3.report["run_id"]), "--db", crawls.db_uri)
    assert code == 0, out
    assert "30 pages quarantined" in out
    assert statedb.statuses(crawls.db_path) == {"live": 270, "quarantined": 30}
    r4 = await crawls.crawl(sitemap)
    assert (r4.exit_code, r4.report["held"]) == (0, [])


@deferred_f_from_coro_f
async def test_held_removals_are_discarded_only_by_a_person(
    site: Site, crawls: Crawls, capsys: pytest.CaptureFixture[str]
) -> None:
    names, sitemap = build(site, 300)
    await crawls.crawl(sitemap)
    for name in names[:60]:
        site.remove(name)
    await crawls.crawl(sitemap)
    for i, name in enumerate(names[:30]):
        site.write(name, page(i), mtime=T0)
    r2 = await crawls.crawl(sitemap)
    assert (r2.exit_code, r2.report["held"]) == (3, ["mass_removal"])
    code, out = await cli(capsys, "runs", "discard", str(r2.report["run_id"]), "--db", crawls.db_uri)
    assert code == 0, out
    assert "30 removals dropped" in out
    assert statedb.statuses(crawls.db_path) == {"live": 300}
