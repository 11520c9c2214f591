"""Commands that almost worked, as a new user types them: ``sync --store module:factory`` from a
project of one's own, ages wherever a time is taken (``changes --since 7d``), the ``changes`` line
to run next time (with its database), a search before anything was published, and a period's
events read without walking the whole outbox. Real processes, real databases (both backends where
the store is involved)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.state.sqlite import SQLiteStateStore
from tests import docsite, shell, statedb
from tests.conftest import Crawls

if TYPE_CHECKING:
    from pathlib import Path

    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0
PAGES = 120


def write_site(site: Site, n: int = PAGES) -> str:
    for i in range(n):
        site.write(f"docs/p{i}.html", docsite.widget_page(i), mtime=T0)
    return site.write_sitemap([f"docs/p{i}.html" for i in range(n)])


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'docs.db'}"
    return str(request.getfixturevalue("postgres_uri"))


def recrawler_in(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``recrawler *argv`` as an installed script runs it: from *cwd*, not from the checkout."""
    return subprocess.run(
        [sys.executable, "-m", "recrawler.cli", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


async def two_runs(site: Site, tmp_path: Path, db_uri: str) -> tuple[Crawls, str]:
    """Two published runs; the second changes five pages. Also the time between the two."""
    crawls = Crawls(tmp_path)
    crawls.db_uri = db_uri
    sitemap = write_site(site)
    assert (await crawls.crawl(sitemap)).counts["new"] == PAGES
    between = datetime.now(UTC).isoformat()
    for i in range(5):
        site.write(f"docs/p{i}.html", docsite.widget_page(i, " It now retries twice."), mtime=T0 + 9)
    assert (await crawls.crawl(sitemap)).counts["changed"] == 5
    return crawls, between


STORE_MODULE = """
import chromadb
from chromadb.config import Settings
from langchain_chroma import Chroma

from recrawler.kb.sync import RecrawlerEmbeddings


def make_store():
    client = chromadb.PersistentClient(path="chroma", settings=Settings(anonymized_telemetry=False))
    return Chroma("docs", embedding_function=RecrawlerEmbeddings("hashing"), client=client)
"""


@deferred_f_from_coro_f
async def test_sync_takes_the_readmes_module_colon_factory_from_the_working_directory(
    site: Site, tmp_path: Path, db_uri: str
) -> None:
    crawls, _ = await two_runs(site, tmp_path, db_uri)
    project = tmp_path / "project"
    (project / "myproject").mkdir(parents=True)
    (project / "myproject" / "__init__.py").write_text("")
    (project / "myproject" / "stores.py").write_text(STORE_MODULE)
    chunks = 2 * PAGES
    for form in ("myproject.stores:make_store", "myproject.stores.make_store"):
        done = recrawler_in(project, "sync", "--store", form, "--name", "prod", "--db", crawls.db_uri)
        assert done.returncode == 0, done.stderr[-3000:]
        added = chunks if form.endswith(":make_store") else 0
        assert done.stdout == f"sink prod: {added} added, 0 deleted, {chunks - added} kept\n"
    # what names nothing is one line
    for form, says in (
        ("nowhere.stores:make_store", "--store: cannot import 'nowhere.stores'"),
        ("myproject.stores:missing", "--store: 'myproject.stores' has no callable 'missing'"),
        ("make_store", "--store: 'make_store' is not MODULE:FACTORY (or MODULE.FACTORY)"),
    ):
        bad = recrawler_in(project, "sync", "--store", form, "--name", "prod", "--db", crawls.db_uri)
        assert bad.returncode == 2
        assert "Traceback" not in bad.stderr
        (line,) = bad.stderr.splitlines()
        assert line.startswith(f"recrawler: error: {says}"), line


@deferred_f_from_coro_f
async def test_changes_takes_an_age_or_a_time_and_says_how_to_go_on(
    site: Site, tmp_path: Path, db_uri: str
) -> None:
    crawls, between = await two_runs(site, tmp_path, db_uri)
    db = ["--db", crawls.db_uri]
    # an age: both runs were published within the week
    week = shell.recrawler_process("changes", "--since", "7d", "--limit", "1000", *db)
    assert week.returncode == 0, week.stderr[-2000:]
    everything = shell.recrawler_process("changes", "--since", "0", "--limit", "1000", *db)
    assert week.stdout.splitlines()[:-1] == everything.stdout.splitlines()[:-1]
    assert len(week.stdout.splitlines()) == 1 + PAGES + 1
    # a time between the two runs: the second run's five pages
    since = shell.recrawler_process("changes", "--since", between, *db)
    rows = since.stdout.splitlines()[1:-1]
    assert [r.split()[:2] for r in rows] == [["changed", "2"]] * 5
    # the line to run next time is the command as it is, database included, and it runs
    last = since.stdout.splitlines()[-1]
    assert last.startswith("up to run 2; next time: recrawler changes --cursor ")
    assert last.endswith(f" --db {shlex.quote(crawls.db_uri)}")
    again = shell.recrawler_process(*shlex.split(last.split("next time: ", 1)[1])[1:])
    assert again.returncode == 0, again.stderr[-2000:]
    # with nothing after it, it says after which run: not "after run None"
    assert again.stdout.splitlines()[0] == "no page changed by a run published after run 2"
    # what is neither a run nor a time is one line
    bad = shell.recrawler_process("changes", "--since", "last week", *db)
    assert bad.returncode == 2
    assert bad.stderr.startswith("recrawler: error: changes: --since: 'last week' is neither an age")


@deferred_f_from_coro_f
async def test_ages_are_taken_wherever_a_time_is(site: Site, crawls: Crawls) -> None:
    await crawls.crawl(write_site(site, 20))
    db = ["--db", crawls.db_uri]
    for argv in (
        ["events", "list", "--since", "7d"],
        ["report", "--since", "1w", "-o", "-"],
        ["due", "--now", "+2d"],
        ["due", "--now", "2026-12-24T10:00:00Z"],
    ):
        done = shell.recrawler_process(*argv, *db)
        assert done.returncode == 0, (argv, done.stderr[-2000:])
    # two days on, every page is due again (the schedule's first interval is a day)
    due = shell.recrawler_process("due", "--now", "+2d", "--json", *db)
    assert len(due.stdout.splitlines()) == 20
    for argv, name in (
        (["events", "list", "--since", "soon"], "--since"),
        (["due", "--now", "tomorrow"], "--now"),
        (["calibrate", "--delay", "a while"], "calibrate: --delay"),
    ):
        bad = shell.recrawler_process(*argv, *db)
        assert bad.returncode == 2, argv
        (line,) = bad.stderr.splitlines()
        assert line.startswith(f"recrawler: error: {name}: "), line


@deferred_f_from_coro_f
async def test_search_before_anything_was_published_says_so(site: Site, tmp_path: Path, db_uri: str) -> None:
    """A first run whose every page failed publishes nothing: the knowledge base is empty, and a
    search says that, not "no match"."""
    crawls = Crawls(tmp_path)
    crawls.db_uri = db_uri
    sitemap = site.write_sitemap([f"docs/p{i}.html" for i in range(30)])  # not one page is there
    await crawls.crawl(sitemap)
    done = shell.recrawler_process("search", "widget retries", "--db", db_uri)
    assert done.returncode == 0
    assert done.stdout.startswith("no run has published yet: the knowledge base is empty")


class CountingStore(SQLiteStateStore):
    """Counts the SQLite virtual-machine steps its readers take (in thousands)."""

    steps = 0

    def _reader(self):  # type: ignore[no-untyped-def]
        conn = super()._reader()

        def tick() -> int:
            CountingStore.steps += 1
            return 0

        conn.set_progress_handler(tick, 1000)
        return conn


def add_old_events(db: Path, runs: int, per_run: int) -> None:
    """*runs* published runs of two months ago with *per_run* events each, older than any period."""
    import json

    base = datetime.now(UTC) - timedelta(days=60)
    with statedb.editing(db) as conn:
        first = int(conn.execute("SELECT MIN(id) FROM runs").fetchone()[0])
        site = conn.execute("SELECT site FROM runs LIMIT 1").fetchone()[0]
        for n in range(runs):
            at = base + timedelta(hours=n)
            run_id = first - runs + n
            stamp = at.isoformat()
            conn.execute(
                "INSERT INTO runs (id, spider, site, started_at, finished_at, published_at, state) "
                "VALUES (?, 'docs', ?, ?, ?, ?, 'published')",
                (run_id, site, stamp, stamp, stamp),
            )
            payloads = [
                json.dumps({"run_id": run_id, "action": "error", "key": f"k{i}", "at": stamp})
                for i in range(per_run)
            ]
            conn.executemany(
                "INSERT INTO outbox (payload, run_id, key, action, delivered) VALUES (?, ?, ?, 'error', 1)",
                [(payload, run_id, f"k{i}") for i, payload in enumerate(payloads)],
            )


def test_a_periods_events_are_read_without_walking_the_whole_outbox(tmp_path: Path, site: Site) -> None:
    """``events list --since 7d`` and the digest (``report --since 7d``) read the period's runs'
    events through the outbox's run index: ten times the history costs the same work."""
    sitemap = write_site(site, 30)
    steps = {}
    for size in (200, 2000):
        db = tmp_path / f"s{size}.db"
        done = shell.scrapy_crawl(sitemap, f"RECRAWLER_DB_URI=sqlite:///{db}")
        assert done.returncode == 0, done.stderr[-2000:]
        add_old_events(db, 50, size)
        store = CountingStore(f"sqlite:///{db}")
        week = datetime.now(UTC) - timedelta(days=7)
        CountingStore.steps = 0
        events = list(store.readers.iter_events(since=week))
        steps[size] = CountingStore.steps
        assert {e["action"] for e in events} == {"new"}
        assert len(events) == 30
    # 10,000 or 100,000 events of older runs: the week's 30 are found with about the same work
    assert steps[2000] < 2 * max(steps[200], 1), steps
