"""Bad input and a bad day on the read side are one line and a non-zero exit, never a traceback:
``search -k``, ``changes`` cursors and limits (a cursor is bound to its database: a foreign or
edited one would skip runs without a word), a vector store that is down, a damaged database every
command refuses, a database that vanishes mid-run said once. Real databases (both backends where
the store is involved) and real processes."""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
from typing import TYPE_CHECKING

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from tests import docsite, shell
from tests.conftest import Crawls
from tests.test_trust_database import flip_index, sha

if TYPE_CHECKING:
    import subprocess
    from pathlib import Path

    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0
PAGES = 150


def write_site(site: Site, n: int = PAGES) -> str:
    for i in range(n):
        site.write(f"docs/p{i}.html", docsite.widget_page(i), mtime=T0)
    return site.write_sitemap([f"docs/p{i}.html" for i in range(n)])


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one line a refused command wrote to stderr (and that it wrote nothing else)."""
    assert result.returncode == 2, (result.returncode, result.stdout[-2000:], result.stderr[-3000:])
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("recrawler: error: ")
    return line.removeprefix("recrawler: error: ")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'docs.db'}"
    return str(request.getfixturevalue("postgres_uri"))


async def two_runs(site: Site, tmp_path: Path, db_uri: str) -> Crawls:
    tmp_path.mkdir(exist_ok=True)
    crawls = Crawls(tmp_path)
    crawls.db_uri = db_uri
    sitemap = write_site(site)
    assert (await crawls.crawl(sitemap)).counts["new"] == PAGES
    for i in range(5):
        site.write(f"docs/p{i}.html", docsite.widget_page(i, " It now retries twice."), mtime=T0 + 9)
    assert (await crawls.crawl(sitemap)).counts["changed"] == 5
    return crawls


def forged(payload: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")


@deferred_f_from_coro_f
async def test_search_k_and_changes_limits_and_cursors_are_one_line(
    site: Site, tmp_path: Path, db_uri: str
) -> None:
    await two_runs(site, tmp_path, db_uri)
    # -k: a number too big for SQLite is every chunk; none is one line
    found = shell.recrawler_process("search", "widget retries", "-k", "1e20", "--db", db_uri)
    assert found.returncode == 0, found.stderr[-2000:]
    assert "docs/p" in found.stdout
    huge = shell.recrawler_process("search", "widget retries", "-k", str(2**70), "--db", db_uri)
    assert huge.returncode == 0
    assert one_line(shell.recrawler_process("search", "widget", "-k", "0", "--db", db_uri)) == (
        "search: -k must be 1 or more, got 0"
    )
    for limit in ("0", "-1"):
        line = one_line(shell.recrawler_process("changes", "--since", "0", "--limit", limit, "--db", db_uri))
        assert line == f"changes: --limit must be 1 or more, got {limit}"
    # cursors nobody made here: a number, a forged run past the database's last, an edited one
    restart = "start again with --since RUN (0: everything published)"
    assert one_line(shell.recrawler_process("changes", "--cursor", str(2**63), "--db", db_uri)).startswith(
        "not a changes cursor: '9223372036854775808'"
    )
    for payload in (
        {"since": 2**63, "upto": None, "after": ""},
        {"p": json.dumps({"since": 2**63, "upto": None, "after": ""}), "db": "0" * 16},
    ):
        line = one_line(shell.recrawler_process("changes", "--cursor", forged(payload), "--db", db_uri))
        assert line.endswith(restart), line
    # a real cursor goes on; the same cursor, edited to skip a run, is refused
    out = shell.recrawler_process("changes", "--since", "0", "--limit", "10", "--json", "--db", db_uri)
    assert out.returncode == 0, out.stderr[-2000:]
    cursor = json.loads(out.stdout.splitlines()[-1])["cursor"]
    assert shell.recrawler_process("changes", "--cursor", cursor, "--db", db_uri).returncode == 0
    wrapper = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    payload = json.loads(wrapper["p"])
    edited = forged({"p": json.dumps({**payload, "since": 1}), "db": wrapper["db"]})
    line = one_line(shell.recrawler_process("changes", "--cursor", edited, "--db", db_uri))
    assert line == f"this changes cursor was made for another database (or edited); {restart}"


@deferred_f_from_coro_f
async def test_a_cursor_from_another_database_is_refused(site: Site, tmp_path: Path) -> None:
    """Two knowledge bases of the same site, as a staging and a production deployment: a reader
    that resumes the production feed with the staging cursor would skip runs without a word."""
    here = await two_runs(site, tmp_path / "a", f"sqlite:///{tmp_path / 'a.db'}")
    there = await two_runs(site, tmp_path / "b", f"sqlite:///{tmp_path / 'b.db'}")
    done = shell.recrawler_process("changes", "--since", "0", "--json", "--db", here.db_uri)
    cursor = json.loads(done.stdout.splitlines()[-1])["cursor"]
    line = one_line(shell.recrawler_process("changes", "--cursor", cursor, "--db", there.db_uri))
    assert line.startswith("this changes cursor was made for another database")
    assert shell.recrawler_process("changes", "--cursor", cursor, "--db", here.db_uri).returncode == 0


DOWN_STORES = ["chroma_down", "qdrant_down", "pgvector_down", "own_down"]


@pytest.mark.parametrize("store", DOWN_STORES)
@deferred_f_from_coro_f
async def test_a_vector_store_that_is_down_is_one_line(
    site: Site, crawls: Crawls, store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sitemap = write_site(site, 30)
    monkeypatch.setenv("RECRAWLER_TEST_DOWN_PORT", str(closed_port()))
    await crawls.crawl(sitemap)
    # the command: one line, exit 2 (the README's module:factory form)
    result = shell.recrawler_process(
        "sync", "--store", f"tests.stores:{store}", "--name", "prod", "--db", crawls.db_uri
    )
    line = one_line(result)
    assert line.startswith("sink prod: "), line
    assert "secret" not in line
    # a crawl's sink: the run publishes and exits 0; the sink's failure is one ERROR line
    done = shell.scrapy_crawl(
        sitemap,
        f"RECRAWLER_DB_URI={crawls.db_uri}",
        "RECRAWLER_SCHEDULE=all",
        f'RECRAWLER_VECTORSTORE_SINKS={{"prod": "tests.stores.{store}"}}',
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    failed = [line for line in done.stderr.splitlines() if "vector-store sink failed" in line]
    assert len(failed) == 1
    assert " ERROR: " in failed[0]


@deferred_f_from_coro_f
async def test_every_command_refuses_a_damaged_database_in_one_line(site: Site, crawls: Crawls) -> None:
    await crawls.crawl(write_site(site))
    flip_index(crawls.db_path)
    before = sha(crawls.db_path)
    for argv in (
        ["pages"],
        ["runs"],
        ["search", "widget retries"],
        ["chunks"],
        ["changes", "--since", "0"],
        ["events", "list"],
        ["due"],
    ):
        line = one_line(shell.recrawler_process(*argv, "--db", crawls.db_uri))
        assert "is corrupt (PRAGMA quick_check" in line, (argv, line)
        assert line.endswith("restore it from a backup, or move it away to start afresh")
    assert sha(crawls.db_path) == before


def test_a_database_whose_directory_vanishes_mid_run_is_said_once(site: Site, tmp_path: Path) -> None:
    sitemap = write_site(site, 2000)
    db = tmp_path / "data" / "state.db"
    db.parent.mkdir()
    argv = shell.scrapy_crawl_argv(sitemap, f"RECRAWLER_DB_URI=sqlite:///{db}", "LOG_LEVEL=INFO")
    env = {k: v for k, v in os.environ.items() if k != "RECRAWLER_DB_URI"}
    with shell.Watched(argv, env=env) as crawl:
        # the run has begun (its listing is being read and stored) when the directory goes
        crawl.wait_line("recrawler run 1 on")
        shutil.rmtree(db.parent)
        code = crawl.wait(timeout=300)
    assert code == 5, crawl.stderr[-3000:]
    assert "Traceback" not in crawl.stderr
    errors = [line for line in crawl.lines if " ERROR: " in line]
    assert len(errors) == 1, "\n".join(errors[:20])
    assert "was deleted during the run (or its directory was)" in errors[0]
