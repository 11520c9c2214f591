"""The PostgreSQL backend's statements and page writes: parameters as psycopg takes them, and a page
the server refuses fails alone.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.exceptions import PageWriteError
from recrawler.state import store_from_uri
from tests.state_postgres import settings

if TYPE_CHECKING:
    from tests.postgres import PostgresServer

pytestmark = pytest.mark.postgres


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


def test_a_large_typed_row_set_is_copied_in_its_order_and_a_refused_one_leaves_nothing(
    postgres_uri: str,
) -> None:
    """A row set of COPY_ROWS rows or more with its types goes in through a temporary table: the
    row's expressions apply, ON CONFLICT applies, the rows land in their order. A set the server
    refuses (a value beyond INTEGER) raises, and takes its table back with it: the next set goes
    in, and nothing of the refused one stays."""
    from recrawler.state.postgres.cursors import COPY_ROWS, _execute_sync, pg_row
    from recrawler.state.sql.dialect import count, drive, rows, values

    n = COPY_ROWS + 500
    keys = [f"k{(i * 7919) % n:05d}" for i in range(n)]  # not in key order
    table = [(k, f"text {i}% '?'", i, f"w{i} common") for i, k in enumerate(keys)]

    def insert(batch: list[tuple[object, ...]]) -> Any:
        return (
            yield from values(
                "INSERT INTO t (key, text, n, words)",
                batch,
                " ON CONFLICT (key) DO UPDATE SET n = t.n + excluded.n",
                row="(?, ?, ?, array_to_tsvector(string_to_array(?, ' ')))",
                types=("text", "text", "int8", "text"),
            )
        )

    def setup() -> Any:
        yield count(
            "CREATE TABLE t (id BIGINT GENERATED ALWAYS AS IDENTITY, key TEXT UNIQUE, text TEXT, "
            "n INTEGER, words tsvector)"
        )

    def query(sql: str) -> Any:
        return (yield rows(sql))

    with psycopg.connect(postgres_uri, row_factory=pg_row, autocommit=True) as conn:

        def run(work: Any) -> Any:
            return drive(work, lambda op: _execute_sync(conn, op))

        run(setup())
        assert run(insert(table)) == n
        got = run(query("SELECT key, text, n, words::text AS words FROM t ORDER BY id"))
        assert [r["key"] for r in got] == keys
        assert (got[7]["text"], got[7]["n"], got[7]["words"]) == ("text 7% '?'", 7, "'common' 'w7'")
        # the same keys again: the conflict clause adds
        assert run(insert([(k, t, 1, w) for k, t, _, w in table])) == n
        assert run(query("SELECT n FROM t ORDER BY id"))[7]["n"] == 7 + 1
        refused = [(f"x{i:05d}", "", 2**40 if i == n - 1 else i, "x") for i in range(n)]
        with pytest.raises(psycopg.errors.NumericValueOutOfRange):
            run(insert(refused))
        assert run(insert([(f"y{i:05d}", "", i, "y") for i in range(n)])) == n
        left = run(query("SELECT COUNT(*) FILTER (WHERE key LIKE 'x%'), COUNT(*) FROM t"))
        assert tuple(left[0]) == (0, 2 * n)
        # in a transaction of the caller's, the set is a savepoint of it
        with conn.transaction():
            with pytest.raises(psycopg.errors.NumericValueOutOfRange):
                run(insert(refused))
            assert run(insert([(f"z{i:05d}", "", i, "z") for i in range(n)])) == n
        assert tuple(run(query("SELECT COUNT(*) FROM t"))[0]) == (3 * n,)


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
        run = await store.runs.begin_run("docs", SITE, AT, holder=HOLDER)
        pages = [rec(f"q{i}", misses=2**40 if i == 5 else 0) for i in range(40)]
        with caplog.at_level(logging.WARNING):
            done = await asyncio.gather(
                *(
                    store.pages.record(run, p, [], chunks=chunks(p, f"q{i}"), outcome=["new"])
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
            got = await store.pages.get(page.key)
            assert (got is None) if i == 5 else (got is not None and got.chunks == 1)
    finally:
        await store.close()


def test_a_schema_14_database_compresses_what_it_writes_next_with_lz4(postgres_uri: str) -> None:
    """Schema 15 compresses the columns of page text, chunks and what a run leaves for later with
    lz4 (this server has it, as Debian's has): a database of schema 14 moves over, what it held
    stays readable as it was stored (pglz), and what is written next is lz4."""
    from recrawler.kb.reader import open_kb
    from recrawler.state.postgres import SCHEMA_VERSION
    from tests.kbfill import fill_sync

    def long(word: str) -> str:
        return " ".join(f"the {word} setting number {i} takes a value" for i in range(150))

    fill_sync(postgres_uri, {"old": [long("alpha")]})
    lz4 = """SELECT c.relname || '.' || a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
             WHERE c.relkind = 'r' AND c.relnamespace = current_schema()::regnamespace
               AND a.attcompression = 'l' ORDER BY 1"""
    with psycopg.connect(postgres_uri, autocommit=True) as conn:
        assert conn.execute(
            "SELECT 'lz4' = ANY (enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
        ).fetchone() == (True,)
        # the database as schema 14 left it: every column compressed the server's default way
        for column in [r[0] for r in conn.execute(lz4).fetchall()]:
            table, name = column.split(".")
            conn.execute(f"ALTER TABLE {table} ALTER COLUMN {name} SET COMPRESSION default")
        conn.execute("UPDATE chunks SET text = text || ''")
        conn.execute("DELETE FROM schema_version WHERE version >= 15")
        assert conn.execute(lz4).fetchall() == []
    fill_sync(postgres_uri, {"new": [long("beta")]})
    with psycopg.connect(postgres_uri) as conn:
        assert conn.execute("SELECT MAX(version) FROM schema_version").fetchone() == (SCHEMA_VERSION,)
        assert [r[0] for r in conn.execute(lz4).fetchall()] == [
            "block_deltas.new_blocks", "block_deltas.old_blocks", "block_deltas.samples",
            "chunks.text", "chunks.words", "frontier.request", "outbox.payload",
            "page_before.f_blocks", "page_before.f_code", "page_before.f_headings",
            "page_before.f_links", "page_before.f_text", "page_changes.diff",
            "page_changes.old_blocks", "page_fields.blocks", "page_fields.code",
            "page_fields.headings", "page_fields.links", "page_fields.text", "runs.report",
        ]  # fmt: skip
        stored = conn.execute(
            "SELECT key, pg_column_compression(text) FROM chunks WHERE retired_run IS NULL ORDER BY key"
        ).fetchall()
        assert [(k.rsplit("/", 1)[-1], how) for k, how in stored] == [("new", "lz4"), ("old", "pglz")]
    with open_kb(postgres_uri) as kb:
        for word, page in [("alpha", "old"), ("beta", "new")]:
            hits = kb.search(f"{word} setting", k=1, mode="keyword")
            assert [h.chunk.key.rsplit("/", 1)[-1] for h in hits] == [page]


def test_a_role_that_may_not_create_temporary_tables_writes_large_sets_as_values(
    postgres_server: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A database locked down the common way (``TEMPORARY`` revoked from everyone, its owner too):
    a page of 1,200 chunks, which a crawl copies in through a temporary table, goes in as VALUES
    statements instead, the refusal noted once in the log; nothing is lost."""
    from tests.kbfill import fill_sync

    role, db = f"app_{uuid.uuid4().hex[:8]}", f"recrawler_app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_server.admin_uri, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{role}" LOGIN NOSUPERUSER')
        admin.execute(f'CREATE DATABASE "{db}" OWNER "{role}"')
        admin.execute(f'REVOKE TEMPORARY ON DATABASE "{db}" FROM PUBLIC, "{role}"')
    admin_of_db = postgres_server.uri_for(db)
    with psycopg.connect(admin_of_db, autocommit=True) as admin:
        admin.execute("CREATE EXTENSION vector")
    parts = urlsplit(admin_of_db)
    port = f":{parts.port}" if parts.port else ""
    uri = urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname or ''}{port}"))
    texts = [f"chunk {i} of the big page" for i in range(1200)]
    try:
        with psycopg.connect(uri) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("CREATE TEMPORARY TABLE t (i INTEGER)")
        with caplog.at_level(logging.INFO, logger="recrawler.state.postgres.cursors"):
            fill_sync(uri, {"big": texts, "small": ["one chunk"]})
        with psycopg.connect(uri) as conn:
            big = "SELECT text FROM chunks WHERE key LIKE '%/big' ORDER BY chunk_index"
            stored = conn.execute(big).fetchall()
        assert [r[0] for r in stored] == texts
        assert [r.getMessage() for r in caplog.records] == [
            "this role may not create temporary tables: large row sets go in as VALUES statements"
        ]
    finally:
        with psycopg.connect(postgres_server.admin_uri, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
            admin.execute(f'DROP ROLE IF EXISTS "{role}"')
