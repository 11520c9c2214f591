"""A held decision never freezes the knowledge base: a release publishes, a broken deploy removes
nothing, a held run is announced nowhere and read nowhere, an interrupted or killed run is judged
whole by the next one (real crawls of a few hundred pages on the local server, real SQLite)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.cli import main as cli_main
from recrawler.kb.reader import open_kb
from recrawler.state.sqlite import SQLiteStateStore
from tests import docsite, shell, statedb
from tests.waiting import until

if TYPE_CHECKING:
    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000
ROOT = Path(__file__).resolve().parents[1]


def page(name: str, words: str) -> str:
    """A docs page whose text carries its own unique *words* (searchable with the hashing embedder)."""
    return docsite.page(
        name.title(),
        [
            ("Overview", [f"The {name} page explains {words} in plain words, with an example."]),
            ("Usage", [f"Configure {words} before the first run."], f"tool --{name}"),
        ],
    )


def word(prefix: str, i: int) -> str:
    """A token no other page holds."""
    return f"{prefix}{i:03d}x{(i * 7919) % 1000:03d}"


def build(site: Site, guides: int, api: int) -> tuple[list[str], list[str], str]:
    guide_names = [f"guides/g{i}.html" for i in range(guides)]
    api_names = [f"api/a{i}.html" for i in range(api)]
    for i, name in enumerate(guide_names):
        site.write(name, page(f"g{i}", word("guide", i)), mtime=T0)
    for i, name in enumerate(api_names):
        site.write(name, page(f"a{i}", word("apiref", i)), mtime=T0)
    return guide_names, api_names, site.write_sitemap(guide_names + api_names)


def found(crawls: Crawls, text: str) -> set[str]:
    """The pages whose published chunks the bot can read *text* in."""
    with open_kb(crawls.db_uri, embedder="hashing") as kb:
        return {c.url.split("#")[0] for c in kb.chunks() if text in c.text}


@deferred_f_from_coro_f
async def test_a_release_that_drops_a_section_is_published_whole(site: Site, crawls: Crawls) -> None:
    # a real minor release: 52 pages rewritten, 1 added, a generated API section of 66 pages
    # dropped from the sitemap and answering 404 (66 of 425 pages: over RECRAWLER_MAX_REMOVE_RATIO)
    guides, api, _ = build(site, 359, 66)
    r1 = await crawls.crawl(site.url("sitemap.xml"))
    assert r1.counts["new"] == 425
    for i in range(52):
        site.write(guides[i], page(f"g{i}", word("release", i)), mtime=T0 + 3600)
    site.write("guides/new.html", page("new", word("added", 1)), mtime=T0 + 3600)
    for name in api:
        site.remove(name)
    site.write_sitemap([*guides, "guides/new.html"])
    r2 = await crawls.crawl(site.url("sitemap.xml"))
    assert (r2.counts["changed"], r2.counts["new"], r2.counts["quarantined"]) == (52, 1, 66)
    assert (r2.report["held"], r2.exit_code) == ([], 0)
    assert r2.report["index"]["state"] == "published"
    # the release is searchable, what it removed is not (20 phrases added, 15 removed)
    for i in range(20):
        assert found(crawls, word("release", i)) == {site.url(guides[i])}
        assert found(crawls, word("guide", i)) == set()
    assert found(crawls, word("added", 1)) == {site.url("guides/new.html")}
    for i in range(15):
        assert found(crawls, word("apiref", i)) == set()
    # the next run is never refused; the section's second 404 makes it gone
    r3 = await crawls.crawl(site.url("sitemap.xml"))
    assert (r3.finish_reason, r3.exit_code) == ("finished", 0)
    assert statedb.statuses(crawls.db_path) == {"live": 360, "gone": 66}


@deferred_f_from_coro_f
async def test_a_broken_deploy_of_listed_pages_removes_nothing_and_the_rest_publishes(
    site: Site, crawls: Crawls
) -> None:
    guides, _, sitemap = build(site, 300, 0)
    await crawls.crawl(sitemap)
    # 290 of 300 listed pages answer 404; the sitemap still names them: nothing is removed
    for name in guides[10:]:
        site.remove(name)
    site.write(guides[0], page("g0", word("hotfix", 0)), mtime=T0 + 60)
    r2 = await crawls.crawl(sitemap)
    assert (r2.report["held"], r2.exit_code) == (["mass_removal"], 3)
    assert "290 of 300 live pages would leave the knowledge base while the listing still names them" in str(
        r2.report["alert"]
    )
    assert statedb.statuses(crawls.db_path) == {"live": 300}
    # the rest of the run is published: the edit is searchable, the missing pages still are
    assert found(crawls, word("hotfix", 0)) == {site.url(guides[0])}
    assert found(crawls, word("guide", 200)) == {site.url(guides[200])}
    # the deploy is fixed: the next run settles the waiting removals by the pages' own answers
    for i, name in enumerate(guides[10:], start=10):
        site.write(name, page(f"g{i}", word("guide", i)), mtime=T0)
    r3 = await crawls.crawl(sitemap)
    assert (r3.report["held"], r3.exit_code, r3.counts["new"]) == ([], 0, 0)
    assert statedb.row(crawls.db_path, "SELECT COUNT(*) FROM run_misses") == (0,)


@deferred_f_from_coro_f
async def test_a_held_run_is_announced_nowhere_and_read_nowhere(
    site: Site, crawls: Crawls, capsys: pytest.CaptureFixture[str]
) -> None:
    guides, _, sitemap = build(site, 12, 0)
    r1 = await crawls.crawl(sitemap)
    published = {e["key"]: e for e in r1.events}
    for i, name in enumerate(guides):
        site.write(name, page(f"g{i}", word("spike", i)), mtime=T0 + 60)
    r2 = await crawls.crawl(sitemap)
    assert r2.report["held"] == ["change_spike"]
    assert [e for e in r2.events if e["action"] == "changed"] == []
    # readers show what the knowledge base holds: the published text beside its own metadata
    code, out = await asyncio.to_thread(
        shell.cli_captured, capsys, "search", word("guide", 3), "--json", "--db", crawls.db_uri
    )
    assert code == 0
    hit = json.loads(out.splitlines()[0])
    assert hit["url"].split("#")[0] == site.url(guides[3])
    pages = {
        p["url"]: p
        for p in (
            json.loads(line)
            for line in (
                await asyncio.to_thread(shell.cli_captured, capsys, "pages", "--json", "--db", crawls.db_uri)
            )[1].splitlines()
        )
    }
    first = pages[site.url(guides[3])]
    assert first["content_hash"] == published[hit["key"]]["content_hash"]
    assert hit["last_changed"] == first["last_changed"]
    # discarded: page metadata exactly as before the held run
    assert (
        await asyncio.to_thread(
            cli_main, ["runs", "discard", str(r2.report["run_id"]), "--db", crawls.db_uri]
        )
        == 0
    )
    after = {
        p["url"]: p
        for p in (
            json.loads(line)
            for line in (
                await asyncio.to_thread(shell.cli_captured, capsys, "pages", "--json", "--db", crawls.db_uri)
            )[1].splitlines()
        )
    }
    for url, before in pages.items():
        assert after[url]["content_hash"] == before["content_hash"] is not None
        assert after[url]["last_changed"] == before["last_changed"]
    # nothing the held run saw was ever delivered
    assert all(e["run_id"] == r1.report["run_id"] for e in crawls._events())


@deferred_f_from_coro_f
async def test_the_rest_of_an_interrupted_first_run_is_not_a_spike(site: Site, crawls: Crawls) -> None:
    _, _, sitemap = build(site, 300, 0)
    # interrupted after 70 pages (a SIGINT, a deploy restarting the job): nothing is published
    r1 = await crawls.crawl(sitemap, CLOSESPIDER_ITEMCOUNT=70, CONCURRENT_REQUESTS=4)
    assert r1.report["index"]["state"] == "unpublished"
    assert found(crawls, word("guide", 1)) == set()
    r2 = await crawls.crawl(sitemap)
    assert (r2.report["held"], r2.exit_code) == ([], 0)
    assert r2.report["index"]["state"] == "published"
    with open_kb(crawls.db_uri, embedder="hashing") as kb:
        assert len({c.key for c in kb.chunks()}) == 300


def crawl_process(sitemap: str, db: Path, *settings: str) -> subprocess.Popen[bytes]:
    args = shell.scrapy_crawl_argv(
        sitemap, "RECRAWLER_SCHEDULE=all", "RECRAWLER_AUDIT_SAMPLE=0", "RETRY_TIMES=0", *settings
    )
    env = {**os.environ, "RECRAWLER_DB_URI": f"sqlite:///{db}", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stored_pending(db: Path) -> int:
    """Pages stored but not published yet (read while another process writes)."""
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)) as conn:
            row = conn.execute(
                "SELECT COUNT(*) FROM page_fields "
                "WHERE key IN (SELECT key FROM pages WHERE pending IS NOT NULL)"
            ).fetchone()
    except sqlite3.Error:
        return 0
    return int(row[0])


@pytest.mark.timeout(300)
@deferred_f_from_coro_f
async def test_a_killed_runs_stored_pages_face_the_guards(site: Site, crawls: Crawls, tmp_path: Path) -> None:
    guides, _, sitemap = build(site, 300, 0)
    await crawls.crawl(sitemap)
    # the site switches to a maintenance page; the run is SIGKILLed once ~290 pages are stored
    maintenance = docsite.page("Down", [("Maintenance", ["Down for maintenance. We will be back soon."])])
    for name in guides:
        site.write(name, maintenance, mtime=T0 + 60)
    proc = await asyncio.to_thread(
        crawl_process, sitemap, crawls.db_path, "RECRAWLER_DB_BATCH_SIZE=10", "CONCURRENT_REQUESTS=2"
    )
    await asyncio.to_thread(
        until,
        lambda: stored_pending(crawls.db_path) >= 250 or proc.poll() is not None,
        "250 pages stored",
        timeout=120,
    )
    proc.send_signal(signal.SIGKILL)
    await asyncio.to_thread(proc.wait)
    assert stored_pending(crawls.db_path) >= 250
    # the next run sees them "unchanged" (the killed run stored them) but judges what is unpublished
    r = await crawls.crawl(sitemap)
    assert r.counts["unchanged"] >= 250
    assert r.exit_code == 3
    assert set(r.report["held"]) >= {"same_content"}
    assert found(crawls, word("guide", 7)) == {site.url(guides[7])}
    assert found(crawls, "Down for maintenance") == set()


def lease_age(db: Path) -> float:
    """Seconds since the site's lease was last renewed (no lease: as good as lapsed)."""
    beats = [row["heartbeat_at"] for row in statedb.dicts(db, "SELECT heartbeat_at FROM leases")]
    if not beats:
        return float("inf")
    return min((datetime.now(UTC) - datetime.fromisoformat(b)).total_seconds() for b in beats)


class FailingPublishStore(SQLiteStateStore):
    """Its publication fails after the run's misses were settled (a crash at the run's end)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # each role is an object of its own: its method is replaced on it
        self.decisions.publish_run = self._fail  # type: ignore[method-assign]

    async def _fail(self, *args: Any, **kwargs: Any) -> Any:
        from recrawler.exceptions import StateStoreError

        raise StateStoreError("injected: killed while publishing")


@deferred_f_from_coro_f
async def test_a_run_that_dies_before_publishing_counts_no_miss(site: Site, crawls: Crawls) -> None:
    guides, _, sitemap = build(site, 100, 0)
    await crawls.crawl(sitemap)
    for name in guides[:5]:
        site.remove(name)
    site.write_sitemap(guides[5:])
    failing = {"sqlite": "tests.test_trust_holds.FailingPublishStore"}
    r2 = await crawls.crawl(sitemap, RECRAWLER_STATE_BACKENDS=failing)
    assert r2.exit_code == 5
    # its misses never counted: one more 404 quarantines (not gone one run early)
    assert statedb.statuses(crawls.db_path) == {"live": 100}
    # (the dead run's lease lapses: here its process lives on, so its lease must age)
    await asyncio.to_thread(until, lambda: lease_age(crawls.db_path) > 0.2, "the lease older than 0.2 s")
    r3 = await crawls.crawl(sitemap, RECRAWLER_LEASE_SECS=0.2)
    assert r3.counts["quarantined"] == 5
    assert statedb.statuses(crawls.db_path) == {"live": 95, "quarantined": 5}


@deferred_f_from_coro_f
async def test_a_move_on_a_guarded_day_lives_once(site: Site, crawls: Crawls) -> None:
    names = [f"p{i}.html" for i in range(10)]
    for i, name in enumerate(names):
        site.write(name, page(f"p{i}", word("moved", i)), mtime=T0)
    sitemap = site.write_sitemap(names)
    await crawls.crawl(sitemap)
    # p1 moves (301) on a day 4 of 10 pages answer 503: the outage guard holds the removals
    site.write("new-p1.html", page("p1", word("moved", 1)), mtime=T0)
    site.options("p1.html", redirect="new-p1.html")
    for name in names[6:]:
        site.options(name, status=503)
    r = await crawls.crawl(sitemap)
    assert "error_ratio" in r.report["reconcile"]["skipped"]
    with open_kb(crawls.db_uri, embedder="hashing") as kb:
        texts = [c.text for c in kb.chunks() if word("moved", 1) in c.text]
    assert len(texts) == len(set(texts)) > 0
    assert statedb.statuses(crawls.db_path).get("moved") == 1
