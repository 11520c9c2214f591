"""The PostgreSQL backend end to end: crawls, the CLI, search with pgvector, several sites at once."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from scrapy.settings import Settings
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler import default_settings
from recrawler.cli import main as cli_main
from recrawler.exceptions import PageWriteError, SchemaVersionError, StateStoreError, StateStoreUnavailable
from recrawler.kb.reader import open_kb
from recrawler.state import store_from_uri
from recrawler.state.postgres import SCHEMA_VERSION
from recrawler.state.postgres.vector_index import vector_index_name
from tests import docsite
from tests.conftest import Crawls
from tests.embedserver import EmbedServer
from tests.test_crawl import build_site

if TYPE_CHECKING:
    from pathlib import Path

    from tests.conftest_mockserver import Site
    from tests.postgres import PostgresServer

pytestmark = pytest.mark.postgres

T0 = 1_760_000_000.0
PASSWORD = "s3cret-pw-in-uri"


def with_password(uri: str) -> str:
    """*uri* with a password (the test server trusts its socket or loopback: any password logs in)."""
    parts = urlsplit(uri)
    user = parts.username or "postgres"
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit(parts._replace(netloc=f"{user}:{PASSWORD}@{parts.hostname or ''}{port}"))


def settings() -> Settings:
    s = Settings()
    s.setmodule(default_settings)
    return s


def state(uri: str) -> dict[str, object]:
    """What a database holds, backend-neutral: pages, published chunks and runs."""
    store = store_from_uri(uri, settings())
    pages = {
        p.key.split("/", 2)[-1]: (p.status, p.content_hash, p.chunks, p.misses) for p in store.iter_pages()
    }
    with open_kb(uri, embedder="hashing") as kb:
        chunks = sorted((c.key.split("/", 2)[-1], c.chunk_index, c.text) for c in kb.chunks())
    runs = [(r["state"], r["finish_reason"]) for r in store.iter_runs()]
    return {"pages": pages, "chunks": chunks, "runs": runs}


def without_bytes(counts: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in counts.items() if not k.startswith(("bytes", "recrawler/bytes"))}


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


def hnsw_indexes(uri: str) -> dict[str, int]:
    """The HNSW indexes on the embeddings and how many scans each has served."""
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
        found = conn.execute(
            "SELECT indexrelname, idx_scan FROM pg_stat_user_indexes "
            "WHERE indexrelname LIKE 'embeddings_hnsw_%'"
        ).fetchall()
    return {r[0]: int(r[1]) for r in found}


@deferred_f_from_coro_f
async def test_search_of_the_hashing_embedders_vectors_is_exact_and_reads_the_published_run(
    site: Site, tmp_path: Path, postgres_uri: str
) -> None:
    crawls = Crawls(tmp_path)
    crawls.db_uri = postgres_uri
    # however many vectors: the lexical hashing embedder's nearest chunks are found by a scan
    await crawls.crawl(build_site(site), RECRAWLER_DB_VECTOR_INDEX_MIN_ROWS=1)
    assert hnsw_indexes(postgres_uri) == {}
    with open_kb(postgres_uri) as kb:
        assert "Run it like this" in kb.search("Run it like this", k=1)[0].text
    # the SQLite column cache's size is no embedder option: PostgreSQL takes it and keeps its own
    with open_kb(postgres_uri, cache_mb=64) as kb:
        assert "Run it like this" in kb.search("Run it like this", k=1)[0].text
    # a run that has not published yet is invisible to search
    site.write("strong.html", docsite.page("Strong", [("Overview", ["Zebra crossing."])]), mtime=T0 + 5)
    with open_kb(postgres_uri) as kb:
        before = [h.text for h in kb.search("Zebra crossing", k=20)]
    assert not any("Zebra" in t for t in before)


@deferred_f_from_coro_f
async def test_a_model_embedders_vectors_get_an_hnsw_index_of_their_own_once_there_are_enough(
    site: Site, tmp_path: Path, postgres_uri: str
) -> None:
    crawls = Crawls(tmp_path)
    crawls.db_uri = postgres_uri
    with EmbedServer(dim=16) as server:
        model = {"RECRAWLER_EMBEDDER": "openai:test-model", "RECRAWLER_EMBEDDER_BASE_URL": server.url}
        # fewer vectors than the bound (10,000): no index, they are searched exactly
        await crawls.crawl(build_site(site), **model)
        assert hnsw_indexes(postgres_uri) == {}
        # a run that stores vectors (a changed page) builds it once there are enough
        sitemap = build_site(site)
        site.write("flaky.html", docsite.page("Flaky", [("Overview", ["Changed words."])]), mtime=T0 + 5)
        await crawls.crawl(sitemap, RECRAWLER_DB_VECTOR_INDEX_MIN_ROWS=2, **model)
        with psycopg.connect(postgres_uri) as conn:
            embedders = conn.execute("SELECT DISTINCT embedder FROM embeddings").fetchall()
        assert len(embedders) == 1
        name = vector_index_name(16, embedders[0][0])
        assert hnsw_indexes(postgres_uri) == {name: 0}
        # (a planner that scans so few rows rather than read an index is told not to)
        with open_kb(f"{postgres_uri}?options=-c%20enable_seqscan%3Doff") as kb:
            assert len(kb.search("Run it like this", k=3)) == 3
        assert hnsw_indexes(postgres_uri)[name] >= 1


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
    statuses = {p.key: p.status for p in store.iter_pages()}
    assert all(s == "live" for k, s in statuses.items() if k.startswith(host_b))
    runs = list(store.iter_runs())
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


@deferred_f_from_coro_f
async def test_two_runs_building_the_vector_index_at_once_do_not_deadlock(postgres_uri: str) -> None:
    """Each store builds the HNSW index of the vectors it stored when it closes. Two sites
    publishing at once deadlocked (seen in CI: run 2 of a site left unpublished, "deadlock
    detected ... pg_class_relname_nsp_index") when both made the index: whoever makes it now
    holds a lock to the end of its transaction, and the other finds it made."""
    s = settings()
    s.set("RECRAWLER_DB_VECTOR_INDEX_MIN_ROWS", 2)
    stores = [store_from_uri(postgres_uri, s) for _ in range(2)]
    for store in stores:
        await store.open()
    vector = bytes(range(16))  # four float32s
    for n, store in enumerate(stores):
        await store.store_embeddings([("model:4", f"text{n}", vector)])
    await asyncio.wait_for(asyncio.gather(*(store.close() for store in stores)), 30)
    assert list(hnsw_indexes(postgres_uri)) == [vector_index_name(4, "model:4")]
    store = store_from_uri(postgres_uri, s)
    await store.open()
    try:
        assert await store.missing_for("model:4", ["text0", "text1", "none"]) == ["none"]
    finally:
        await store.close()


@deferred_f_from_coro_f
async def test_a_superuser_creates_the_vector_extension_and_the_apps_own_role_needs_no_more(
    postgres_server: PostgresServer,
) -> None:
    """As the PostgreSQL guide says: pgvector is not a trusted extension, so a superuser creates it
    once in recrawler's database; the role recrawler connects as owns that database, nothing more."""
    role, db = f"app_{uuid.uuid4().hex[:8]}", f"recrawler_app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_server.admin_uri, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{role}" LOGIN NOSUPERUSER')
        admin.execute(f'CREATE DATABASE "{db}" OWNER "{role}"')
    admin_of_db = postgres_server.uri_for(db)
    parts = urlsplit(admin_of_db)
    port = f":{parts.port}" if parts.port else ""
    uri = urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname or ''}{port}"))
    try:
        store = store_from_uri(uri, settings())
        with pytest.raises(StateStoreError) as refused:
            await store.open()
        assert "a superuser runs `CREATE EXTENSION vector;` in that database once" in str(refused.value)
        with psycopg.connect(uri) as conn:
            assert conn.execute("SELECT COUNT(*) FROM pg_tables WHERE schemaname = 'public'").fetchone() == (
                0,
            )
        with psycopg.connect(admin_of_db, autocommit=True) as admin:
            admin.execute("CREATE EXTENSION vector")
        store = store_from_uri(uri, settings())
        await store.open()
        await store.close()
        with psycopg.connect(uri) as conn:
            assert conn.execute("SELECT MAX(version) FROM schema_version").fetchone() == (SCHEMA_VERSION,)
    finally:
        with psycopg.connect(postgres_server.admin_uri, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
            admin.execute(f'DROP ROLE IF EXISTS "{role}"')


def test_search_finds_the_exact_top_10_with_the_visibility_and_site_filters(postgres_uri: str) -> None:
    """recall@10 against an exact scan, over two sites, a held run and retired chunks (the PostgreSQL
    top 10 held 0.4 of the exact one through the HNSW index): benchmarks/bench_pgvector.py's
    knowledge base, small."""
    from benchmarks.bench_pgvector import SITE_B, build_index, fill, measure
    from benchmarks.lib.scale_fill import make_queries
    from recrawler.kb.embedders import HashingEmbedder

    embedder = HashingEmbedder()
    vectors, vis, site_b, _ = fill(postgres_uri, 3000, 1, embedder.id)
    build_index(postgres_uri, embedder.dim, embedder.id, "64MB")
    masks = {"all sites": vis, f"--site {SITE_B}": vis & site_b}
    rows = measure(postgres_uri, vectors, masks, make_queries(31, 1), 10, embedder)
    assert [(r["filter"], r["recall"]) for r in rows] == [(f, 1.0) for f in masks]


def test_a_model_embedders_hnsw_search_finds_the_exact_top_10_with_the_filters(postgres_uri: str) -> None:
    """A model embedder is searched through its HNSW index (iterative scans, ``hnsw.ef_search``
    200): over a real model's vectors, with a held run, retired chunks and ``--site`` (a fifth of
    the chunks), the top 10 holds at least 0.95 of the exact one. benchmarks/bench_pgvector.py
    --embedder model, small."""
    pytest.importorskip("sentence_transformers")
    from benchmarks.bench_pgvector import MODEL_SPEC, SITE_B, ModelVectors, build_index, fill, measure
    from benchmarks.lib.scale_fill import make_queries
    from recrawler.kb.embedders import embedder_from_spec

    embedder = embedder_from_spec(MODEL_SPEC)
    vectors, vis, site_b, _ = fill(postgres_uri, 4000, 1, embedder.id, ModelVectors(embedder, 400, 1))
    assert build_index(postgres_uri, vectors.shape[1], embedder.id, "64MB")["index"] == "hnsw"
    masks = {"all sites": vis, f"--site {SITE_B}": vis & site_b}
    rows = measure(postgres_uri, vectors, masks, make_queries(41, 1), 10, embedder)
    assert [r["filter"] for r in rows] == list(masks)
    assert all(r["recall"] >= 0.95 for r in rows), rows


def test_positional_statements_go_in_numbered_parameters_and_named_ones_through_psycopg(
    postgres_uri: str,
) -> None:
    """``?`` statements reach PostgreSQL as ``$1, $2, ...`` (a ``?`` or ``%`` in a literal stays
    text), a multi-row insert of 4,000 parameters among them; ``:name`` ones go through psycopg."""
    from recrawler.state.postgres.cursors import _execute_sync, pg_row
    from recrawler.state.sql.dialect import count, drive, many, one, values

    rows = [(i, f"k{i}", f"text {i}% '?'", i * 2) for i in range(1000)]

    def work() -> Any:
        yield count("CREATE TEMPORARY TABLE t (id INTEGER, key TEXT, text TEXT, n INTEGER)")
        yield from values("INSERT INTO t (id, key, text, n)", rows)
        yield many("UPDATE t SET n = n + ? WHERE key = ?", [(1, "k0"), (1, "k999")])
        got = yield one(
            "SELECT COUNT(*) AS rows, SUM(n) AS total, '50% ?' AS lit, CAST(? AS INTEGER) + 1 AS next, "
            "(SELECT text FROM t WHERE key = ?)::text AS text FROM t WHERE id >= ?",
            (41, "k7", 0),
        )
        named = yield one("SELECT n FROM t WHERE key = :key AND n > :least", {"key": "k999", "least": 0})
        return got, named

    with psycopg.connect(postgres_uri, row_factory=pg_row) as conn:
        got, named = drive(work(), lambda op: _execute_sync(conn, op))
    assert (got["rows"], got["total"], got["lit"], got["next"], got["text"]) == (
        1000, sum(i * 2 for i in range(1000)) + 2, "50% ?", 42, "text 7% '?'",
    )  # fmt: skip
    assert named["n"] == 1999


@deferred_f_from_coro_f
async def test_a_page_the_server_refuses_among_pages_written_together_fails_alone(
    postgres_uri: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A value only the server refuses (a miss count beyond INTEGER) fails a statement in the
    middle of a write of pages written together: the write goes back to its savepoint and its
    pages are written one by one, so that page alone fails, with a PageWriteError; the group
    stands (the savepoint stays open for the next write to release) and nothing else is logged."""
    from tests.state_contract import HOLDER, SITE, chunks, rec
    from tests.state_contract import T0 as AT

    store = store_from_uri(postgres_uri, settings())
    await store.open()
    try:
        run = await store.begin_run("docs", SITE, AT, holder=HOLDER)
        pages = [rec(f"q{i}", misses=2**40 if i == 5 else 0) for i in range(40)]
        with caplog.at_level(logging.WARNING):
            done = await asyncio.gather(
                *(
                    store.record(run, p, [], chunks=chunks(p, f"q{i}"), outcome=["new"])
                    for i, p in enumerate(pages)
                ),
                return_exceptions=True,
            )
            await store.flush()
        assert [i for i, d in enumerate(done) if isinstance(d, BaseException)] == [5]
        assert isinstance(done[5], PageWriteError)
        assert store.outcomes == {"new": 39}
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
        for i, page in enumerate(pages):
            got = await store.get(page.key)
            assert (got is None) if i == 5 else (got is not None and got.chunks == 1)
    finally:
        await store.close()


@deferred_f_from_coro_f
async def test_vectors_reach_the_vector_column_bit_for_bit_in_binary_form(postgres_uri: str) -> None:
    """A vector goes to pgvector's column as the float32s the blob holds (binary, no text
    literal on the way): 300 vectors of 384 dimensions, with values a short text form would
    round (subnormals, the largest float32, -0.0, thirds), read back equal to their blobs."""
    import numpy as np

    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((300, 384)).astype("<f4")
    vectors[0, :4] = [np.float32(1.4e-45), np.float32(3.4028235e38), np.float32(-0.0), np.float32(1 / 3)]
    rows = [("model:384", f"text{i}", v.tobytes()) for i, v in enumerate(vectors)]
    store = store_from_uri(postgres_uri, settings())
    await store.open()
    try:
        await store.store_embeddings(rows)
    finally:
        await store.close()
    with psycopg.connect(postgres_uri) as conn:
        got = conn.execute(
            "SELECT text_hash, vector, CAST(embedding AS real[]) FROM embeddings "
            "WHERE embedder = 'model:384' ORDER BY text_hash"
        ).fetchall()
    assert len(got) == 300
    for text_hash, blob, array in got:
        want = vectors[int(text_hash.removeprefix("text"))]
        assert bytes(blob) == want.tobytes()
        assert np.array_equal(np.asarray(array, dtype="<f4").view("<u4"), want.view("<u4"))
