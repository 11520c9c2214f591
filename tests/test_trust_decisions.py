"""A removal waits for a person: a rejected listing is never a baseline, held removals stay held
until a decision, one decision wins, and what is held is shown (real crawls of a few hundred pages
on the local server, real SQLite)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest
from lxml import html as lxml_html
from scrapy.utils.defer import deferred_f_from_coro_f

from tests import docsite, shell, statedb
from tests.conftest_mockserver import REPO_ROOT
from tests.embedserver import EmbedServer, Reply

if TYPE_CHECKING:
    from collections.abc import Iterator

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


class SlowEmbedServer(EmbedServer):
    """An embedding service that takes its time (a real one, under load): each answer waits."""

    delay_secs = 0.0

    def _answer(self, path: str, headers: dict[str, str], raw: bytes) -> Reply:
        return dataclasses.replace(super()._answer(path, headers, raw), delay_secs=self.delay_secs)


@pytest.fixture
def embed_server() -> Iterator[SlowEmbedServer]:
    with SlowEmbedServer(dim=16) as server:
        yield server


def decide_together(db_uri: str, run_id: int, base_url: str) -> dict[str, tuple[int, str]]:
    """``recrawler runs approve RUN`` and ``recrawler runs discard RUN`` started together, as two
    processes against one database: each one's exit code and output (stdout, then stderr)."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    argv = {
        "approve": ["approve", str(run_id), "--base-url", base_url],
        "discard": ["discard", str(run_id)],
    }
    procs = {
        action: subprocess.Popen(
            [sys.executable, "-m", "recrawler.cli", "runs", *args, "--db", db_uri],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for action, args in argv.items()
    }
    got = {}
    for action, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        got[action] = (proc.returncode, out + err)
    return got


def one_decision_won(got: dict[str, tuple[int, str]]) -> str:
    """The action that won: it exited 0, the other 2 with one line naming what happened."""
    assert sorted(code for code, _ in got.values()) == [0, 2], got
    won = next(action for action, (code, _) in got.items() if code == 0)
    lost = next(action for action in got if action != won)
    line = got[lost][1]
    assert line.count("\n") == 1, line
    assert "Traceback" not in line
    assert f"was {'approved' if won == 'approve' else 'discarded'}" in line, line
    return won


async def held_spike(site: Site, crawls: Crawls, **settings: Any) -> int:
    """A site of 60 pages whose second run is held whole (all of them changed: a change spike)."""
    names, sitemap = build(site, 60)
    await crawls.crawl(sitemap, **settings)
    for i, name in enumerate(names):
        site.write(name, page(i, "A template change on every page."), mtime=T0 + 60)
    r = await crawls.crawl(sitemap, **settings)
    assert (r.exit_code, r.report["held"]) == (3, ["change_spike"])
    return int(r.report["run_id"])


def query(uri: str, sql: str, params: tuple[Any, ...] = ()) -> Any:
    """The first column of the first row *sql* gives, on either backend."""
    if uri.startswith("sqlite:"):
        return statedb.value(uri.removeprefix("sqlite:///"), sql, params)
    import psycopg

    with psycopg.connect(uri) as conn:
        row = conn.execute(sql.replace("?", "%s"), params).fetchone()
    return row[0] if row else None


def spike_decided(uri: str, run_id: int, won: str) -> None:
    """The database says what the winner did, and only that."""
    state, decision = (
        query(uri, f"SELECT {column} FROM runs WHERE id = ?", (run_id,)) for column in ("state", "decision")
    )
    assert (state, decision) == (
        ("published", "approved") if won == "approve" else ("discarded", "discarded")
    )
    assert query(uri, "SELECT COUNT(*) FROM pages WHERE pending IS NOT NULL") == 0
    assert query(uri, "SELECT COUNT(*) FROM page_before") == 0


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
@pytest.mark.timeout(600)
@deferred_f_from_coro_f
async def test_approve_and_discard_started_together_one_wins(
    site: Site,
    crawls: Crawls,
    embed_server: SlowEmbedServer,
    request: pytest.FixtureRequest,
    backend: str,
) -> None:
    server = request.getfixturevalue("postgres_server") if backend == "postgres" else None
    if server is not None:
        crawls.db_uri = server.database()
    embedder = {"RECRAWLER_EMBEDDER": "openai:test-model", "RECRAWLER_EMBEDDER_BASE_URL": embed_server.url}
    run_id = await held_spike(site, crawls, **embedder)
    wins = []
    for trial in range(8):
        # every other trial, approving waits on the embedding service as a real one makes it wait
        embed_server.delay_secs = 0.5 if trial % 2 == 0 else 0.0
        if server is not None:
            uri = await asyncio.to_thread(server.copy, crawls.db_uri)
        else:
            db = crawls.tmp_path / f"trial{trial}.db"
            shutil.copyfile(crawls.db_path, db)
            uri = f"sqlite:///{db}"
        got = await asyncio.to_thread(decide_together, uri, run_id, embed_server.url)
        won = one_decision_won(got)
        await asyncio.to_thread(spike_decided, uri, run_id, won)
        wins.append(won)
    # discarding takes a moment, approving waits on the embedding service: discard wins those
    assert "discard" in wins


def execute(uri: str, *statements: str) -> None:
    """Run *statements* on either backend, outside any store."""
    if uri.startswith("sqlite:"):
        with statedb.editing(uri.removeprefix("sqlite:///")) as conn:
            for sql in statements:
                conn.execute(sql)
        return
    import psycopg

    with psycopg.connect(uri, autocommit=True) as conn:
        for sql in statements:
            conn.execute(sql)


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
@deferred_f_from_coro_f
async def test_a_run_an_older_recrawler_held_is_decided_once_after_the_upgrade(
    site: Site, crawls: Crawls, request: pytest.FixtureRequest, backend: str
) -> None:
    """Schema 16 adds ``runs.decision``: a database an older recrawler left with a held run opens,
    and the run is decided once."""
    if backend == "postgres":
        crawls.db_uri = request.getfixturevalue("postgres_uri")
    run_id = await held_spike(site, crawls)
    execute(
        crawls.db_uri,
        "ALTER TABLE runs DROP COLUMN decision",
        "DELETE FROM schema_version WHERE version = 16",
    )
    code, out = await asyncio.to_thread(shell.run_cli, "runs", "discard", str(run_id), "--db", crawls.db_uri)
    assert (code, out.startswith(f"run {run_id} discarded")) == (0, True)
    assert query(crawls.db_uri, "SELECT COUNT(*) FROM schema_version WHERE version = 16") == 1
    assert query(crawls.db_uri, "SELECT decision FROM runs WHERE id = ?", (run_id,)) == "discarded"
    code, _ = await asyncio.to_thread(shell.run_cli, "runs", "approve", str(run_id), "--db", crawls.db_uri)
    assert code == 2


EMPTY_HASH = hashlib.sha256(b"").hexdigest()
MAINTENANCE = docsite.page("Maintenance", [("Down", ["Down for maintenance. We will be back soon."])])


@deferred_f_from_coro_f
async def test_a_held_runs_report_and_diff_show_what_is_held(site: Site, crawls: Crawls) -> None:
    names, sitemap = build(site, 300)
    await crawls.crawl(sitemap, RECRAWLER_BOILERPLATE_MIN_PAGES=20)
    # a maintenance page on 201 of 300 pages: so common the site's furniture learns its blocks
    for name in names[:201]:
        site.write(name, MAINTENANCE, mtime=T0 + 60)
    r = await crawls.crawl(sitemap, RECRAWLER_BOILERPLATE_MIN_PAGES=20)
    assert r.exit_code == 3
    assert r.report["index"]["state"] == "held"
    assert r.counts["changed"] == 201
    run_id = r.report["run_id"]
    out = crawls.tmp_path / "held.html"
    code, _ = await asyncio.to_thread(
        shell.run_cli, "report", str(run_id), "--db", crawls.db_uri, "-o", str(out)
    )
    assert code == 0
    doc = lxml_html.fromstring(out.read_text(encoding="utf-8"))
    # the report lists what is held, its count agreeing with the run's counts
    changes = doc.cssselect("#changes")[0]
    assert changes.cssselect("h2 .badge")[0].text_content() == "201"
    assert "No page changed" not in changes.text_content()
    assert len(changes.cssselect("article.change")) > 0
    assert "Down for maintenance" in changes.text_content()
    # no empty text is a page's state: the maintenance page is hashed on its text
    assert (
        statedb.value(crawls.db_path, "SELECT COUNT(*) FROM pages WHERE content_hash = ?", (EMPTY_HASH,)) == 0
    )
    # during the hold, `diff` shows the page as the knowledge base holds it, and the change held
    code, text = await asyncio.to_thread(shell.run_cli, "diff", site.url(names[7]), "--db", crawls.db_uri)
    assert code == 0
    assert EMPTY_HASH[:12] not in text
    first, _, held = text.partition(f"run {run_id}")
    assert "Page 7 explains feature number 7" in first
    assert "Down for maintenance" not in first
    assert "held" in held
    assert "Down for maintenance" in held
