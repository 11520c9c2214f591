"""The PostgreSQL backend end to end: crawls, the CLI, a password kept out of every output, several
sites at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import psycopg
import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.cli import main as cli_main
from recrawler.exceptions import SchemaVersionError, StateStoreUnavailable
from recrawler.kb.reader import open_kb
from recrawler.state import store_from_uri
from recrawler.state.postgres import SCHEMA_VERSION
from tests import docsite
from tests.conftest import Crawls
from tests.state_postgres import PASSWORD, T0, settings, state, with_password, without_bytes
from tests.test_crawl import build_site

if TYPE_CHECKING:
    from pathlib import Path

    from tests.conftest_mockserver import Site


pytestmark = pytest.mark.postgres


@deferred_f_from_coro_f
async def test_two_crawls_on_postgresql_give_what_sqlite_gives(
    site: Site, tmp_path: Path, postgres_uri: str
) -> None:
    sitemap = build_site(site)
    lite, pg = Crawls(tmp_path / "sqlite"), Crawls(tmp_path / "pg")
    for c in (lite, pg):
        c.tmp_path.mkdir()
    pg.db_uri = postgres_uri
    first = [await c.crawl(sitemap) for c in (lite, pg)]
    # the noisy page's body differs on every fetch: bytes are the one count that may differ
    assert without_bytes(first[0].counts) == without_bytes(first[1].counts)
    assert first[0].actions() == first[1].actions()
    # an edit, a new page, a 404, a 410 and a 500
    site.write("strong.html", docsite.page("Strong", [("Overview", ["The NEW text."])]), mtime=T0 + 100)
    site.write("new.html", docsite.page("New", [("Overview", ["A new page."])]), mtime=T0)
    site.remove("missing.html")
    site.remove("tomb.html", gone=True)
    site.options("flaky.html", status=500)
    site.write_sitemap(["strong.html", "weak.html", "lm.html", "guide/", "new.html"], name="pages1.xml")
    second = [await c.crawl(sitemap) for c in (lite, pg)]
    assert without_bytes(second[0].counts) == without_bytes(second[1].counts)
    assert second[1].actions() == {
        "strong.html": "changed",
        "new.html": "new",
        "missing.html": "quarantined",
        "tomb.html": "gone",
        "flaky.html": "error",
    }
    assert second[0].actions() == second[1].actions()
    # timing, and how many hand-overs the pages arriving together made: not the backend's doing
    # (nor how many fed requests waited at once: how the frontier's writes met its reads)
    timing = {
        "recrawler/reconcile/elapsed_seconds",
        "recrawler/cpu/worker_batches",
        "recrawler/frontier/waiting_max",
    }
    for r in second:
        assert 1 <= r.stats["recrawler/frontier/waiting_max"] <= r.stats["recrawler/frontier/fed"]
    assert {k: v for k, v in without_bytes(second[0].stats).items() if k not in timing} == {
        k: v for k, v in without_bytes(second[1].stats).items() if k not in timing
    }
    assert state(lite.db_uri) == state(pg.db_uri)


@deferred_f_from_coro_f
async def test_every_cli_command_reads_postgresql(
    site: Site, tmp_path: Path, postgres_uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sitemap = build_site(site)
    crawls = Crawls(tmp_path)
    crawls.db_uri = postgres_uri
    await crawls.crawl(sitemap)
    await crawls.crawl(sitemap)
    capsys.readouterr()

    def cli(*args: str) -> str:
        assert cli_main([*args, "--db", postgres_uri]) == 0, args
        return capsys.readouterr().out

    pages = [json.loads(line) for line in cli("pages", "--json").splitlines()]
    assert len(pages) == 9
    assert len(cli("runs").splitlines()) >= 2
    hits = [json.loads(line) for line in cli("search", "Run it like this", "--json", "-k", "3").splitlines()]
    assert len(hits) == 3
    assert all("Run it like this" in h["text"] for h in hits)
    host = urlsplit(site.url()).netloc
    assert len(cli("search", "Run it", "--site", host, "--json").splitlines()) == 5
    assert cli("search", "Run it", "--site", "elsewhere.example", "--json") == ""
    assert len(cli("chunks", "--json").splitlines()) >= 9
    assert cli("check") == "ok: every invariant holds\n"
    for command in (("due", "--all"), ("trust",), ("immutable",), ("noise",)):
        cli(*command)
    key = next(p["key"] for p in pages if p["url"].endswith("strong.html"))
    # nothing changed between the two runs: `diff` shows the page's first state
    assert cli_main(["diff", key, "--db", postgres_uri]) == 0
    assert ": new " in capsys.readouterr().out
    # what a drifted database looks like to `check`, and its repair, on PostgreSQL too
    with psycopg.connect(postgres_uri, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO runs (spider, site, started_at, state) VALUES ('docs', 'x', '2026', 'running')"
        )
    assert cli_main(["check", "--db", postgres_uri]) == 1
    assert "stale_run" in capsys.readouterr().out
    # `check --repair` runs its own event loop: off this test's loop
    assert await asyncio.to_thread(cli_main, ["check", "--repair", "--db", postgres_uri]) == 0
    assert "stale_run: 1" in capsys.readouterr().out


@deferred_f_from_coro_f
async def test_a_password_in_the_uri_never_reaches_logs_reports_or_events(
    site: Site, tmp_path: Path, postgres_uri: str, caplog: pytest.LogCaptureFixture
) -> None:
    uri = with_password(postgres_uri)
    crawls = Crawls(tmp_path)
    crawls.db_uri = uri
    with caplog.at_level(logging.DEBUG):
        result = await crawls.crawl(build_site(site))
    assert result.counts["new"] == 9
    assert "***" in caplog.text
    assert PASSWORD not in caplog.text
    assert PASSWORD not in json.dumps(result.report)
    assert PASSWORD not in crawls.events_path.read_text()
    # a server that cannot be reached: the error names the database, never the password
    down = f"postgresql://app:{PASSWORD}@127.0.0.1:1/recrawler"
    store = store_from_uri(down, settings())
    with pytest.raises(StateStoreUnavailable) as exc_info:
        await store.open()
    assert PASSWORD not in str(exc_info.value)
    assert "app:***@127.0.0.1:1" in str(exc_info.value)


@deferred_f_from_coro_f
async def test_a_newer_schema_is_refused_and_left_untouched(postgres_uri: str) -> None:
    store = store_from_uri(postgres_uri, settings())
    await store.open()
    await store.close()
    with psycopg.connect(postgres_uri, autocommit=True) as conn:
        conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (SCHEMA_VERSION + 1,))
    with pytest.raises(SchemaVersionError, match="newer than this recrawler") as exc_info:
        await store_from_uri(postgres_uri, settings()).open()
    assert "\n" not in str(exc_info.value)
    with pytest.raises(SchemaVersionError, match="newer"):
        open_kb(postgres_uri, embedder="hashing")
    with psycopg.connect(postgres_uri) as conn:
        assert conn.execute("SELECT MAX(version) FROM schema_version").fetchone() == (SCHEMA_VERSION + 1,)


def second_host(url: str) -> str:
    """The same local server under another name: another site (sites are hosts)."""
    return url.replace("127.0.0.1", "localhost", 1)


@deferred_f_from_coro_f
async def test_two_sites_crawl_at_once_on_one_database(site: Site, tmp_path: Path, postgres_uri: str) -> None:
    names = [f"p{i}.html" for i in range(12)]
    for i, name in enumerate(names):
        site.write(name, docsite.page(f"Page {i}", [("Body", [f"Alpha page {i} says hello."])]), mtime=T0)
    sitemap_a = site.write_sitemap(names, name="a.xml")
    b_names = [f"b{i}.html" for i in range(8)]
    for i, name in enumerate(b_names):
        site.write(name, docsite.page(f"B {i}", [("Body", [f"Bravo page {i} says goodbye."])]), mtime=T0)
    site.write(
        "b.xml",
        docsite.sitemap([second_host(site.url(n)) for n in b_names]),
    )
    sitemap_b = second_host(site.url("b.xml"))
    a, b = Crawls(tmp_path / "a"), Crawls(tmp_path / "b")
    for c in (a, b):
        c.tmp_path.mkdir()
        c.db_uri = postgres_uri
    ra, rb = await asyncio.gather(a.crawl(sitemap_a), b.crawl(sitemap_b))
    assert (ra.counts["new"], rb.counts["new"]) == (12, 8)
    assert ra.exit_code == rb.exit_code == 0
    host_a, host_b = urlsplit(sitemap_a).netloc, urlsplit(sitemap_b).netloc
    # site A changes and recrawls alone: B's state, chunks and publication are untouched
    site.remove("p0.html")
    site.write_sitemap(names[1:], name="a.xml")
    ra2 = await a.crawl(sitemap_a)
    assert ra2.counts["quarantined"] == 1
    with open_kb(postgres_uri, embedder="hashing") as kb:
        chunks = list(kb.chunks())
        assert sum(1 for c in chunks if c.key.startswith(host_b)) == 8
        assert sum(1 for c in chunks if c.key.startswith(host_a)) == 11
        both = kb.search("page says", k=40)
        assert {h.chunk.key.split("/", 1)[0] for h in both} == {host_a, host_b}
        only_b = kb.search("page says", k=40, site=host_b)
        assert len(only_b) == 8
        assert all(h.chunk.key.startswith(host_b) for h in only_b)
    store = store_from_uri(postgres_uri, settings())
    statuses = {p.key: p.status for p in store.readers.iter_pages()}
    assert all(s == "live" for k, s in statuses.items() if k.startswith(host_b))
    runs = list(store.readers.iter_runs())
    assert sorted((r["site"], r["state"]) for r in runs) == sorted(
        [(host_a, "published"), (host_a, "published"), (host_b, "published")]
    )


@deferred_f_from_coro_f
async def test_a_dry_run_writes_nothing(site: Site, tmp_path: Path, postgres_uri: str) -> None:
    crawls = Crawls(tmp_path)
    crawls.db_uri = postgres_uri
    sitemap = build_site(site)
    await crawls.crawl(sitemap)
    before = state(postgres_uri)
    site.write("new.html", docsite.page("New", [("Overview", ["A new page."])]), mtime=T0)
    site.write_sitemap(["strong.html", "new.html"], name="pages1.xml")
    dry = await crawls.crawl(sitemap, RECRAWLER_DRY_RUN=True)
    assert dry.counts["new"] == 1
    assert state(postgres_uri) == before
