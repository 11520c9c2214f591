"""SQLiteStateStore: opening databases, and refusing the ones it cannot use."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from contextlib import closing
from typing import TYPE_CHECKING

import pytest
from scrapy.settings import Settings
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler import default_settings
from recrawler.events import JsonLinesSink
from recrawler.exceptions import SchemaVersionError, StateStoreUnavailable
from recrawler.kb.reader import open_kb
from recrawler.state import store_from_uri
from recrawler.state.sqlite import SCHEMA_VERSION, SQLiteStateStore, path_from_uri
from tests import statedb
from tests.state_sqlite import SITE, T0, opened, pages, query, rec, refuse, snapshot

if TYPE_CHECKING:
    from pathlib import Path


# --- open ----------------------------------------------------------------------------------


@deferred_f_from_coro_f
async def test_open_creates_schema_in_wal_mode(db: Path) -> None:
    async with opened(db):
        assert query(db, "SELECT MAX(version) FROM schema_version") == [(SCHEMA_VERSION,)]
        tables = {name for (name,) in query(db, "SELECT name FROM sqlite_master WHERE type='table'")}
        assert tables >= {"schema_version", "runs", "pages", "run_misses", "outbox"}
        assert query(db, "PRAGMA journal_mode") == [("wal",)]


TABLE_SQL = "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?"


@deferred_f_from_coro_f
async def test_the_embedding_cache_is_a_rowid_table_and_a_schema_8_cache_moves_into_it(db: Path) -> None:
    """A vector is 1.5 KB: a WITHOUT ROWID table keeps rows that size inside its key's b-tree,
    and storing a run's vectors took about twice as long as in a rowid table with a key index."""
    rows = [("hashing:v1:4", f"h{n:03d}", bytes([n % 251]) * 16) for n in range(300)]
    async with opened(db) as store:
        await store.kb.store_embeddings(rows)
        await store.kb.store_embeddings([*rows[:5], ("hashing:v1:4", "h000", b"\xff" * 16)])  # kept
    ((sql,),) = query(db, TABLE_SQL, ("embeddings",))
    assert "WITHOUT ROWID" not in sql.upper()
    assert "PRIMARY KEY (embedder, text_hash)" in sql
    stored = query(db, "SELECT embedder, text_hash, vector FROM embeddings ORDER BY text_hash")
    assert stored == rows

    # a database from schema 8 (its cache WITHOUT ROWID) is moved over on open, vectors and all
    with statedb.editing(db) as conn:
        conn.execute("ALTER TABLE embeddings RENAME TO embeddings_9")
        conn.execute(
            "CREATE TABLE embeddings (embedder TEXT NOT NULL, text_hash TEXT NOT NULL, vector BLOB NOT NULL,"
            " PRIMARY KEY (embedder, text_hash)) WITHOUT ROWID"
        )
        conn.execute("INSERT INTO embeddings SELECT * FROM embeddings_9")
        conn.execute("DROP TABLE embeddings_9")
        conn.execute("DELETE FROM schema_version WHERE version = 9")
    async with opened(db) as store:
        assert await store.kb.missing_for("hashing:v1:4", ["h001", "h299", "h300"]) == ["h300"]
    ((sql,),) = query(db, TABLE_SQL, ("embeddings",))
    assert "WITHOUT ROWID" not in sql.upper()
    assert query(db, "SELECT embedder, text_hash, vector FROM embeddings ORDER BY text_hash") == rows
    assert query(db, "SELECT MAX(version) FROM schema_version") == [(SCHEMA_VERSION,)]


def test_processes_opening_one_new_database_at_once_all_open_it(tmp_path: Path) -> None:
    """Two workers starting together on a new file: the second one to take the write lock used to
    find the first one's schema_version table and call the database corrupt; and one switching
    the file to WAL while another read it got "database is locked" at once (about 1 round in 50)."""
    import threading
    from importlib import resources

    migrations = list((resources.files("recrawler.state") / "migrations" / "sqlite").iterdir())
    migrations = [m for m in migrations if m.name.endswith(".sql")]
    for n in range(150):
        path = tmp_path / f"new{n}.db"
        barrier = threading.Barrier(4)
        failures: list[BaseException] = []

        def open_it(
            path: Path = path, barrier: threading.Barrier = barrier, failures: list[BaseException] = failures
        ) -> None:
            store = SQLiteStateStore(str(path))
            barrier.wait()
            try:
                store.open_sync()
            except BaseException as exc:
                failures.append(exc)
            finally:
                asyncio.run(store.close())

        threads = [threading.Thread(target=open_it) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failures == []
        # one row per migration (numbers PostgreSQL alone uses are skipped)
        assert query(path, "SELECT COUNT(*), MAX(version) FROM schema_version") == [
            (len(migrations), SCHEMA_VERSION)
        ]


@deferred_f_from_coro_f
async def test_reopen_is_idempotent_and_keeps_data(db: Path) -> None:
    async with opened(db) as store:
        await store.open()  # a second open of the same store is a no-op
        run = await store.runs.begin_run("docs", SITE, T0, lease_secs=0)
        await store.pages.record(run, rec("a", content_hash="h"), [])
    async with opened(db) as store:
        got = await store.pages.get(f"{SITE}/a")
        assert got is not None
        assert got.content_hash == "h"
    assert query(db, "SELECT MAX(version) FROM schema_version") == [(SCHEMA_VERSION,)]


def test_path_from_uri() -> None:
    assert path_from_uri("sqlite:///rel/state.db") == "rel/state.db"
    assert path_from_uri("sqlite:////abs/state.db") == "/abs/state.db"
    assert path_from_uri("file:///abs/my%20state.db") == "/abs/my state.db"
    assert path_from_uri("plain/state.db") == "plain/state.db"


def test_store_from_uri_reads_settings(db: Path, events_path: Path) -> None:
    settings = Settings()
    settings.setmodule(default_settings, priority="default")
    settings.set("RECRAWLER_DB_BATCH_SIZE", 7)
    settings.set("RECRAWLER_DB_TIMEOUT_SECS", 0.5)
    settings.set("RECRAWLER_EVENTS_URI", f"file://{events_path}")
    store = store_from_uri(f"sqlite:///{db}", settings)
    assert isinstance(store, SQLiteStateStore)
    assert (store.path, store.batch_size, store.timeout_secs) == (str(db), 7, 0.5)
    assert isinstance(store.sink, JsonLinesSink)
    assert store.sink.path == str(events_path)


# --- refusing databases ----------------------------------------------------------------------


@deferred_f_from_coro_f
async def test_garbage_file_is_refused_and_left_untouched(db: Path) -> None:
    db.write_bytes(bytes(range(256)) * 64)
    before = snapshot(db)
    exc = await refuse(db, SchemaVersionError)
    assert "corrupt" in str(exc)
    assert snapshot(db) == before
    with pytest.raises(SchemaVersionError):
        list(SQLiteStateStore(str(db)).readers.iter_pages())


@deferred_f_from_coro_f
async def test_newer_schema_is_refused_and_left_untouched(db: Path) -> None:
    async with opened(db) as store:
        run = await store.runs.begin_run("docs", SITE, T0, lease_secs=0)
        await store.pages.record(run, rec("a"), [])
    with statedb.editing(db) as conn:
        conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    before = snapshot(db)
    exc = await refuse(db, SchemaVersionError)
    assert "newer" in str(exc)
    assert snapshot(db) == before
    # the CLI readers refuse it too
    with pytest.raises(SchemaVersionError, match="newer"):
        list(SQLiteStateStore(str(db)).readers.iter_pages())
    assert db.read_bytes() == before[db.name]  # (a WAL reader may add its -shm file)


def foreign_database(path: Path) -> None:
    """Another application's SQLite file, in the default rollback-journal mode."""
    with statedb.editing(path) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO users (name) VALUES ('ada')")


@deferred_f_from_coro_f
async def test_foreign_database_is_refused(db: Path) -> None:
    foreign_database(db)
    exc = await refuse(db, SchemaVersionError)
    assert "not a recrawler database" in str(exc)
    assert "users" in str(exc)
    tables = query(db, "SELECT name FROM sqlite_master WHERE type='table'")
    assert tables == [("users",)]
    assert query(db, "SELECT name FROM users") == [("ada",)]


@deferred_f_from_coro_f
async def test_knowledge_base_reader_refuses_newer_and_foreign_databases(db: Path, tmp_path: Path) -> None:
    async with opened(db) as store:
        await store.runs.begin_run("docs", SITE, T0, lease_secs=0)
    with statedb.editing(db) as conn:
        conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    before = db.read_bytes()
    with pytest.raises(SchemaVersionError, match="newer") as exc_info:
        open_kb(f"sqlite:///{db}", embedder="hashing")
    assert "\n" not in str(exc_info.value)
    assert db.read_bytes() == before
    foreign = tmp_path / "foreign.db"
    foreign_database(foreign)
    with pytest.raises(SchemaVersionError, match="not a recrawler database"):
        open_kb(f"sqlite:///{foreign}", embedder="hashing")
    assert query(foreign, "SELECT name FROM users") == [("ada",)]


@deferred_f_from_coro_f
async def test_foreign_database_is_left_untouched(db: Path) -> None:
    foreign_database(db)
    before = snapshot(db)
    await refuse(db, SchemaVersionError)
    assert query(db, "PRAGMA journal_mode") == [("delete",)]
    assert snapshot(db) == before


@deferred_f_from_coro_f
async def test_missing_directory_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "no" / "such" / "state.db"
    exc = await refuse(path, StateStoreUnavailable)
    assert "does not exist" in str(exc)
    assert not (tmp_path / "no").exists()


def test_reader_does_not_create_a_missing_database(db: Path) -> None:
    with pytest.raises(StateStoreUnavailable):
        list(SQLiteStateStore(str(db)).readers.iter_runs())
    assert not db.exists()


@deferred_f_from_coro_f
async def test_locked_database_is_unavailable(db: Path) -> None:
    with closing(sqlite3.connect(db, isolation_level=None)) as other:
        other.execute("BEGIN EXCLUSIVE")
        started = time.monotonic()
        exc = await refuse(db, StateStoreUnavailable, timeout_secs=0.2)
        assert time.monotonic() - started < 5  # the 0.2 s timeout, not the 10 s default
        other.execute("ROLLBACK")
    assert "locked" in str(exc)


@deferred_f_from_coro_f
async def test_page_write_to_a_locked_wal_database_is_unavailable(db: Path) -> None:
    async with opened(db, timeout_secs=0.2, batch_size=1) as store:
        run = await store.runs.begin_run("docs", SITE, T0, lease_secs=0)
        with closing(sqlite3.connect(db, isolation_level=None)) as other:
            other.execute("BEGIN EXCLUSIVE")
            with pytest.raises(StateStoreUnavailable, match="locked"):
                await store.pages.record(run, rec("a"), [])
            other.execute("ROLLBACK")
        await store.pages.record(run, rec("a"), [])  # and it recovers once the lock is gone
    assert pages(db) == {f"{SITE}/a": ("live", 0)}


@deferred_f_from_coro_f
async def test_begin_run_on_a_locked_wal_database_is_unavailable(db: Path) -> None:
    async with opened(db):
        pass
    with closing(sqlite3.connect(db, isolation_level=None)) as other:
        other.execute("BEGIN EXCLUSIVE")
        try:
            async with opened(db, timeout_secs=0.2) as store:
                with pytest.raises(StateStoreUnavailable, match="locked"):
                    await store.runs.begin_run("docs", SITE, T0, lease_secs=0)
        finally:
            other.execute("ROLLBACK")
