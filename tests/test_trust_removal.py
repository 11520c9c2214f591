"""Removal is bounded: a bad deploy costs a held run, never the knowledge base; pages that come back
are restored; a maintenance page on many pages at once is a spike of its own."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.cli import main as cli_main
from tests import docsite, shell, statedb

if TYPE_CHECKING:
    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0
MAINTENANCE = (
    "<html><body><main><h1>Down for maintenance</h1><p>We will be back soon.</p></main></body></html>"
)


def body(i: int, note: str = "") -> str:
    return docsite.page(
        f"Page {i}",
        [
            ("Overview", [f"Page {i} explains feature number {i} in detail, with its own examples. {note}"]),
            ("Usage", [f"Call feature_{i}() with the options it needs."], f"tool --feature {i}"),
        ],
    )


def build(site: Site, n: int) -> tuple[list[str], str]:
    names = [f"p{i}.html" for i in range(n)]
    for i, name in enumerate(names):
        site.write(name, body(i), mtime=T0)
    return names, site.write_sitemap(names)


def visible_chunks(crawls: Crawls, capsys: pytest.CaptureFixture[str]) -> int:
    capsys.readouterr()
    assert cli_main(["chunks", "--db", crawls.db_uri, "--json"]) == 0
    return len(capsys.readouterr().out.splitlines())


async def cli(argv: list[str], capsys: pytest.CaptureFixture[str], *, code: int = 0) -> str:
    got, out = await asyncio.to_thread(shell.cli_captured, capsys, *argv)
    assert got == code
    return out


@pytest.mark.parametrize("gone", [False, True], ids=["404", "410"])
@deferred_f_from_coro_f
async def test_a_bad_deploy_that_loses_most_pages_is_held_not_applied(
    site: Site, crawls: Crawls, capsys: pytest.CaptureFixture[str], gone: bool
) -> None:
    names, sitemap = build(site, 40)
    await crawls.crawl(sitemap)
    before = visible_chunks(crawls, capsys)
    for name in names[2:]:
        site.remove(name, gone=gone)
    r = await crawls.crawl(sitemap)
    # nothing left the knowledge base; an alert says why the run waits
    assert statedb.statuses(crawls.db_path) == {"live": 40}
    assert visible_chunks(crawls, capsys) == before
    assert [e for e in r.events if e["action"] in ("quarantined", "gone")] == []
    assert r.counts["quarantined"] == r.counts["gone"] == 0
    assert "38 of 40 live pages" in r.report["alert"]
    assert r.report["held"] == ["mass_removal"]
    assert r.report["outcome"]["exit_code"] == 3
    assert r.stats["recrawler/run/held/mass_removal"] == 1
    # the next cron run goes on (a pending decision never stops the site staying current) and
    # carries the decision: the same removals wait, nothing else is held
    site.write(names[0], body(0, "edited while the decision waits"), mtime=T0 + 60)
    r2 = await crawls.crawl(sitemap)
    assert (r2.finish_reason, r2.exit_code, r2.report["held"]) == ("finished", 3, ["mass_removal"])
    assert r2.report["index"]["state"] == "published"
    assert r2.counts["changed"] == 1
    assert statedb.statuses(crawls.db_path) == {"live": 40}
    # the decision is the latest run's: the first one names it
    out = await cli(["runs", "approve", str(r.report["run_id"]), "--db", crawls.db_uri], capsys, code=2)
    assert f"carried to run {r2.report['run_id']}" in out
    # the operator confirms: the removal happens now, exactly as it would have
    out = await cli(["runs", "approve", str(r2.report["run_id"]), "--db", crawls.db_uri], capsys)
    assert "approved and published" in out
    assert statedb.statuses(crawls.db_path) == (
        {"live": 2, "gone": 38} if gone else {"live": 2, "quarantined": 38}
    )
    assert visible_chunks(crawls, capsys) == 2 * before // 40


@deferred_f_from_coro_f
async def test_a_discarded_mass_removal_leaves_the_site_as_it_was(
    site: Site, crawls: Crawls, capsys: pytest.CaptureFixture[str]
) -> None:
    names, sitemap = build(site, 40)
    await crawls.crawl(sitemap)
    before = visible_chunks(crawls, capsys)
    for name in names[4:]:
        site.remove(name)
    r2 = await crawls.crawl(sitemap)
    assert statedb.statuses(crawls.db_path) == {"live": 40}
    assert r2.report["held"] == ["mass_removal"]
    await cli(["runs", "discard", str(r2.report["run_id"]), "--db", crawls.db_uri], capsys)
    # the deploy is fixed: everything is back, nothing is new, nothing held
    for i, name in enumerate(names):
        site.write(name, body(i), mtime=T0)
    r3 = await crawls.crawl(sitemap)
    assert r3.report["held"] == []
    assert (r3.counts["new"], r3.counts["quarantined"], r3.counts["gone"]) == (0, 0, 0)
    assert statedb.statuses(crawls.db_path) == {"live": 40}
    assert visible_chunks(crawls, capsys) == before


@pytest.mark.parametrize("gone", [False, True], ids=["quarantined", "gone"])
@deferred_f_from_coro_f
async def test_pages_that_come_back_are_restored_not_a_spike(
    site: Site, crawls: Crawls, capsys: pytest.CaptureFixture[str], gone: bool
) -> None:
    names, sitemap = build(site, 40)
    await crawls.crawl(sitemap)
    before = visible_chunks(crawls, capsys)
    for name in names[10:]:
        site.remove(name, gone=gone)
    # a planned restructure: the operator raises the bound for this one run
    r2 = await crawls.crawl(sitemap, RECRAWLER_MAX_REMOVE_RATIO=1.0)
    assert r2.report["alert"] is None
    assert (r2.counts["gone"] if gone else r2.counts["quarantined"]) == 30
    assert visible_chunks(crawls, capsys) == 10 * before // 40
    # ...which turns out to be a mistake: the pages come back with the content they had
    for i, name in enumerate(names):
        site.write(name, body(i), mtime=T0 + 60)
    r3 = await crawls.crawl(sitemap)
    assert r3.report["alert"] is None
    assert r3.report["index"]["state"] == "published"
    assert visible_chunks(crawls, capsys) == before
    assert r3.counts["restored"] == 30
    assert r3.counts["new"] == r3.counts["changed"] == 0
    assert r3.report["index"]["texts_embedded"] == 0


@deferred_f_from_coro_f
async def test_a_maintenance_page_on_many_pages_is_held(
    site: Site, crawls: Crawls, capsys: pytest.CaptureFixture[str]
) -> None:
    names, sitemap = build(site, 30)
    await crawls.crawl(sitemap)
    before = visible_chunks(crawls, capsys)
    for name in names[:12]:  # 40%: under the change-spike ratio
        site.write(name, MAINTENANCE, mtime=T0 + 60)
    r = await crawls.crawl(sitemap)
    assert r.counts["changed"] == 12
    assert visible_chunks(crawls, capsys) == before
    capsys.readouterr()
    assert cli_main(["search", "maintenance", "--db", crawls.db_uri, "--json"]) == 0
    assert "Down for maintenance" not in capsys.readouterr().out
    assert r.report["index"]["state"] == "held"
    assert "12 pages changed to the same text" in r.report["alert"]
    assert r.report["held"] == ["same_content"]


@deferred_f_from_coro_f
async def test_many_pages_edited_in_one_run_are_not_a_maintenance_page(site: Site, crawls: Crawls) -> None:
    names, sitemap = build(site, 30)
    await crawls.crawl(sitemap)
    # a docs sprint: twelve pages each get their own new paragraph
    for i, name in enumerate(names[:12]):
        page = docsite.page(
            f"Page {i}",
            [
                ("Overview", [f"Page {i} explains feature number {i} in detail, with its own examples."]),
                ("Usage", [f"Call feature_{i}() with the options it needs."], f"tool --feature {i}"),
                ("Limits", [f"Feature {i} accepts at most {i + 3} items per call."]),
            ],
        )
        site.write(name, page, mtime=T0 + 60)
    r = await crawls.crawl(sitemap)
    assert r.counts["changed"] == 12
    assert r.report["alert"] is None
    assert r.report["index"]["state"] == "published"
