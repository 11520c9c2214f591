"""The PostgreSQL backend's search with pgvector: exact and HNSW top 10s, the vector indexes and the
extension, and vectors stored bit for bit.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler import default_settings
from recrawler.exceptions import ConfigurationError, StateStoreError
from recrawler.kb.reader import open_kb
from recrawler.state import store_from_uri
from recrawler.state.postgres import SCHEMA_VERSION
from recrawler.state.postgres.vector_index import vector_index_name
from tests import docsite
from tests.conftest import Crawls
from tests.embedserver import EmbedServer
from tests.state_postgres import T0, settings
from tests.test_crawl import build_site

if TYPE_CHECKING:
    from pathlib import Path

    from tests.conftest_mockserver import Site
    from tests.postgres import PostgresServer


pytestmark = pytest.mark.postgres

#: the HNSW build options a store uses by default
BUILD = (default_settings.RECRAWLER_DB_HNSW_M, default_settings.RECRAWLER_DB_HNSW_EF_CONSTRUCTION)


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
        name = vector_index_name(16, embedders[0][0], *BUILD)
        assert hnsw_indexes(postgres_uri) == {name: 0}
        # (a planner that scans so few rows rather than read an index is told not to)
        with open_kb(f"{postgres_uri}?options=-c%20enable_seqscan%3Doff") as kb:
            assert len(kb.search("Run it like this", k=3)) == 3
        assert hnsw_indexes(postgres_uri)[name] >= 1


def hnsw_options_of(uri: str) -> dict[str, list[str]]:
    """Each HNSW index on the embeddings and its build options."""
    with psycopg.connect(uri, autocommit=True) as conn:
        found = conn.execute(
            "SELECT c.relname, c.reloptions FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid "
            "WHERE i.indrelid = 'embeddings'::regclass AND c.relname LIKE 'embeddings_hnsw_%'"
        ).fetchall()
    return {r[0]: sorted(r[1] or []) for r in found}


@deferred_f_from_coro_f
async def test_the_hnsw_build_options_are_settings_and_a_change_rebuilds_the_index(postgres_uri: str) -> None:
    """pgvector's defaults first; the next store that stores vectors with other options builds
    their index and drops the old one; options out of pgvector's bounds are refused by name."""
    vector = bytes(range(16))  # four float32s
    for n, (m, ef) in enumerate(((16, 64), (16, 64), (8, 40))):
        s = settings()
        s.set("RECRAWLER_DB_VECTOR_INDEX_MIN_ROWS", 2)
        s.set("RECRAWLER_DB_HNSW_M", m)
        s.set("RECRAWLER_DB_HNSW_EF_CONSTRUCTION", ef)
        store = store_from_uri(postgres_uri, s)
        await store.open()
        await store.kb.store_embeddings([("model:4", f"text{n}a", vector), ("model:4", f"text{n}b", vector)])
        await store.close()
        name = vector_index_name(4, "model:4", m, ef)
        assert hnsw_options_of(postgres_uri) == {name: [f"ef_construction={ef}", f"m={m}"]}
    assert name == vector_index_name(4, "model:4") + "_m8_ef40"
    for key, value, why in (
        ("RECRAWLER_DB_HNSW_M", 1, "RECRAWLER_DB_HNSW_M: bad value 1 (pgvector takes 2 to 100)"),
        ("RECRAWLER_DB_HNSW_EF_CONSTRUCTION", 20, "RECRAWLER_DB_HNSW_EF_CONSTRUCTION: bad value 20"),
    ):
        s = settings()
        s.set(key, value)
        with pytest.raises(ConfigurationError, match=why.replace("(", r"\(").replace(")", r"\)")):
            store_from_uri(postgres_uri, s)


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
        await store.kb.store_embeddings([("model:4", f"text{n}", vector)])
    await asyncio.wait_for(asyncio.gather(*(store.close() for store in stores)), 30)
    assert list(hnsw_indexes(postgres_uri)) == [vector_index_name(4, "model:4", *BUILD)]
    store = store_from_uri(postgres_uri, s)
    await store.open()
    try:
        assert await store.kb.missing_for("model:4", ["text0", "text1", "none"]) == ["none"]
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


def test_a_schema_12_database_moves_to_chunk_words_and_single_vectors(postgres_uri: str) -> None:
    """Schema 13 files each chunk's words, split by the writer, where schema 11 indexed an
    expression over its text; schema 14 keeps each cached vector once. A database of schema 12
    moves over with its chunks still found by their words and vectors, beside chunks written after
    it; a chunk row without words is refused."""
    from tests.kbfill import fill_sync
    from tests.test_kb_search import docs_pages

    pages = docs_pages()
    old = {name: pages[name] for name in ("errors", "settings")}
    fill_sync(postgres_uri, old)
    with psycopg.connect(postgres_uri, autocommit=True) as conn:
        # the database as schema 12 left it
        conn.execute("ALTER TABLE chunks DROP COLUMN words")
        conn.execute(
            "CREATE INDEX chunks_words ON chunks USING gin "
            "(to_tsvector('simple', regexp_replace(heading || ' ' || text, '[^[:alnum:]]+', ' ', 'g')))"
        )
        conn.execute("ALTER TABLE embeddings ADD COLUMN vector BYTEA NOT NULL DEFAULT ''")
        conn.execute("DELETE FROM schema_version WHERE version >= 13")
    fill_sync(postgres_uri, {"cli": pages["cli"]})
    with psycopg.connect(postgres_uri) as conn:
        assert conn.execute("SELECT MAX(version) FROM schema_version").fetchone() == (SCHEMA_VERSION,)
        index = conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'chunks_words'").fetchone()
        assert index is not None
        assert index[0].endswith("USING gin (words)")
        with pytest.raises(psycopg.errors.NotNullViolation):
            conn.execute(
                "INSERT INTO chunks (key, chunk_index, chunk_hash, url, heading, text, added_run) "
                "VALUES ('k', 0, 'h', 'u', 'H', 'no words', 1)"
            )
    with open_kb(postgres_uri) as kb:
        for question, page in [("E4711", "errors"), ("max_upload_bytes", "settings"), ("dry-run", "cli")]:
            for mode in ("keyword", "hybrid"):
                hits = kb.search(question, k=3, mode=mode)
                assert hits, (question, mode)
                assert hits[0].chunk.key.endswith(f"/{page}"), (question, mode)


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


# a real model (or corpus) over hundreds of chunks: a minute alone, longer on a busy machine
@pytest.mark.timeout(360)
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
    assert build_index(postgres_uri, vectors.shape[1], embedder.id, "64MB")["index"].startswith("hnsw")
    masks = {"all sites": vis, f"--site {SITE_B}": vis & site_b}
    rows = measure(postgres_uri, vectors, masks, make_queries(41, 1), 10, embedder)
    assert [r["filter"] for r in rows] == list(masks)
    assert all(r["recall"] >= 0.95 for r in rows), rows


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
        await store.kb.store_embeddings(rows)
    finally:
        await store.close()
    with psycopg.connect(postgres_uri) as conn:
        got = conn.execute(
            "SELECT text_hash, CAST(embedding AS real[]) FROM embeddings "
            "WHERE embedder = 'model:384' ORDER BY text_hash"
        ).fetchall()
        # the cache keeps each vector once (schema 14): no float32 copy beside pgvector's
        columns = conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'embeddings' "
            "AND table_schema = current_schema() ORDER BY ordinal_position"
        ).fetchall()
    assert [c[0] for c in columns] == ["embedder", "text_hash", "embedding"]
    assert len(got) == 300
    for text_hash, array in got:
        want = vectors[int(text_hash.removeprefix("text"))]
        assert np.array_equal(np.asarray(array, dtype="<f4").view("<u4"), want.view("<u4"))
