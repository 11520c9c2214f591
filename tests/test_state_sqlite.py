"""SQLiteStateStore: opening and refusing databases, group commits, the outbox, reconciliation."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
import time
from contextlib import asynccontextmanager, closing
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
from scrapy.settings import Settings
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler import default_settings
from recrawler.events import JsonLinesSink
from recrawler.exceptions import SchemaVersionError, StateStoreError, StateStoreUnavailable
from recrawler.kb.reader import open_kb
from recrawler.state import Event, PageRecord, Run, store_from_uri
from recrawler.state.records import SETTLE_APPLY, SETTLE_DROP
from recrawler.state.sqlite import SCHEMA_VERSION, SQLiteStateStore, path_from_uri
from tests import statedb

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence
    from pathlib import Path

    from recrawler.state.sql.dialect import Work

SITE = "example.com"
T0 = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
EVENT_KEYS = {"run_id", "action", "url", "key", "content_hash", "status", "at"}


def rec(name: str, site: str = SITE, **fields: Any) -> PageRecord:
    return PageRecord(key=f"{site}/{name}", site=site, url=f"https://{site}/{name}", first_seen=T0, **fields)


def event(run: Run, page: PageRecord, action: str = "new") -> Event:
    return Event(
        run_id=run.id, action=action, url=page.url, key=page.key,
        content_hash=page.content_hash, status=page.status, at=T0,
    )  # fmt: skip


def query(path: Path, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Read through a separate connection: sees only what the store committed."""
    return statedb.rows(path, sql, params)


def pages(path: Path) -> dict[str, tuple[str, int]]:
    return {k: (s, m) for k, s, m in query(path, "SELECT key, status, misses FROM pages")}


def lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def snapshot(path: Path) -> dict[str, bytes]:
    """The bytes of every file in the database's folder (the db and any -wal/-shm/-journal)."""
    return {f.name: f.read_bytes() for f in sorted(path.parent.iterdir())}


@asynccontextmanager
async def opened(path: Path, **kwargs: Any) -> AsyncIterator[SQLiteStateStore]:
    store = SQLiteStateStore(str(path), **kwargs)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def refuse(path: Path, exc_type: type[StateStoreError], **kwargs: Any) -> StateStoreError:
    store = SQLiteStateStore(str(path), **kwargs)
    try:
        with pytest.raises(exc_type) as exc_info:
            await store.open()
    finally:
        await store.close()
    return exc_info.value


@pytest.fixture
def db(tmp_path: Path) -> Path:
    folder = tmp_path / "db"
    folder.mkdir()
    return folder / "state.db"


@pytest.fixture
def events_path(tmp_path: Path) -> Path:
    return tmp_path / "events.jsonl"


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
        await store.store_embeddings(rows)
        await store.store_embeddings([*rows[:5], ("hashing:v1:4", "h000", b"\xff" * 16)])  # kept
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
        assert await store.missing_for("hashing:v1:4", ["h001", "h299", "h300"]) == ["h300"]
    ((sql,),) = query(db, TABLE_SQL, ("embeddings",))
    assert "WITHOUT ROWID" not in sql.upper()
    assert query(db, "SELECT embedder, text_hash, vector FROM embeddings ORDER BY text_hash") == rows
    assert query(db, "SELECT MAX(version) FROM schema_version") == [(SCHEMA_VERSION,)]


def test_processes_opening_one_new_database_at_once_all_open_it(tmp_path: Path) -> None:
    """Two workers starting together on a new file: the second one to take the write lock used to
    find the first one's schema_version table and call the database corrupt; and one switching
    the file to WAL while another read it got "database is locked" at once (about 1 round in 50)."""
    import threading

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
        assert query(path, "SELECT COUNT(*), MAX(version) FROM schema_version") == [
            (SCHEMA_VERSION, SCHEMA_VERSION)
        ]


@deferred_f_from_coro_f
async def test_reopen_is_idempotent_and_keeps_data(db: Path) -> None:
    async with opened(db) as store:
        await store.open()  # a second open of the same store is a no-op
        run = await store.begin_run("docs", SITE, T0, lease_secs=0)
        await store.record(run, rec("a", content_hash="h"), [])
    async with opened(db) as store:
        got = await store.get(f"{SITE}/a")
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
        list(SQLiteStateStore(str(db)).iter_pages())


@deferred_f_from_coro_f
async def test_newer_schema_is_refused_and_left_untouched(db: Path) -> None:
    async with opened(db) as store:
        run = await store.begin_run("docs", SITE, T0, lease_secs=0)
        await store.record(run, rec("a"), [])
    with statedb.editing(db) as conn:
        conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    before = snapshot(db)
    exc = await refuse(db, SchemaVersionError)
    assert "newer" in str(exc)
    assert snapshot(db) == before
    # the CLI readers refuse it too
    with pytest.raises(SchemaVersionError, match="newer"):
        list(SQLiteStateStore(str(db)).iter_pages())
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
        await store.begin_run("docs", SITE, T0, lease_secs=0)
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
        list(SQLiteStateStore(str(db)).iter_runs())
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
        run = await store.begin_run("docs", SITE, T0, lease_secs=0)
        with closing(sqlite3.connect(db, isolation_level=None)) as other:
            other.execute("BEGIN EXCLUSIVE")
            with pytest.raises(StateStoreUnavailable, match="locked"):
                await store.record(run, rec("a"), [])
            other.execute("ROLLBACK")
        await store.record(run, rec("a"), [])  # and it recovers once the lock is gone
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
                    await store.begin_run("docs", SITE, T0, lease_secs=0)
        finally:
            other.execute("ROLLBACK")


# --- records ---------------------------------------------------------------------------------


@deferred_f_from_coro_f
async def test_record_get_round_trip(db: Path) -> None:
    page = rec(
        "guide/intro",
        etag='W/"abc"',
        last_modified="Thu, 01 Jan 2026 00:00:00 GMT",
        lastmod="2026-01-01T10:00:00+02:00",
        content_hash="0" * 64,
        fuzzy_hash="T1ABC",
        title="Intro \u00e9",
        status="quarantined",
        misses=1,
        last_checked=T0 + timedelta(minutes=1),
        last_changed=T0 - timedelta(days=3),
    )
    async with opened(db) as store:
        assert await store.get(page.key) is None
        run = await store.begin_run("docs", SITE, T0, lease_secs=0)
        await store.record(run, page, [])
        got = await store.get(page.key)
    assert got == dataclasses.replace(page, last_seen_run=run.id)
    assert got is not None
    assert got.first_seen.tzinfo is not None
    assert got.last_checked is not None
    assert got.last_checked.utcoffset() == timedelta(0)


@deferred_f_from_coro_f
async def test_record_updates_in_place_but_keeps_first_seen(db: Path) -> None:
    async with opened(db) as store:
        run = await store.begin_run("docs", SITE, T0, lease_secs=0)
        await store.record(run, rec("a", content_hash="h1", etag='"1"'), [])
        later = dataclasses.replace(rec("a", content_hash="h2"), first_seen=T0 + timedelta(days=1))
        await store.record(run, later, [])
        got = await store.get(f"{SITE}/a")
    assert got is not None
    assert (got.content_hash, got.etag, got.first_seen) == ("h2", None, T0)
    assert query(db, "SELECT COUNT(*) FROM pages") == [(1,)]


@deferred_f_from_coro_f
async def test_group_commit(db: Path) -> None:
    async with opened(db, batch_size=3, commit_secs=3600) as store:
        run = await store.begin_run("docs", SITE, T0, lease_secs=0)
        await store.record(run, rec("a"), [])
        await store.record(run, rec("b"), [])
        assert pages(db) == {}
        # the store itself reads its own pending writes
        assert await store.get(f"{SITE}/b") is not None
        await store.record(run, rec("c"), [])
        assert set(pages(db)) == {f"{SITE}/a", f"{SITE}/b", f"{SITE}/c"}
        await store.record(run, rec("d"), [])
        assert f"{SITE}/d" not in pages(db)
        await store.flush()
        assert f"{SITE}/d" in pages(db)


@deferred_f_from_coro_f
async def test_close_commits_pending_writes(db: Path) -> None:
    async with opened(db, batch_size=100, commit_secs=3600) as store:
        run = await store.begin_run("docs", SITE, T0, lease_secs=0)
        await store.record(run, rec("a"), [])
        assert pages(db) == {}
    assert pages(db) == {f"{SITE}/a": ("live", 0)}


@deferred_f_from_coro_f
async def test_commit_secs_bounds_the_wait_of_a_lone_write(db: Path) -> None:
    async with opened(db, batch_size=100, commit_secs=0.05) as store:
        run = await store.begin_run("docs", SITE, T0, lease_secs=0)
        await store.record(run, rec("a"), [])
        deadline = time.monotonic() + 1.0
        while not pages(db) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert pages(db) == {f"{SITE}/a": ("live", 0)}


# --- outbox ----------------------------------------------------------------------------------


@deferred_f_from_coro_f
async def test_events_are_delivered_after_commit(db: Path, events_path: Path) -> None:
    sink = JsonLinesSink(str(events_path))
    async with opened(db, batch_size=3, commit_secs=3600, sink=sink) as store:
        # each page published as it commits: its events go out with the commit
        run = await store.begin_run("docs", SITE, T0, lease_secs=0, publish_each_page=True)
        a, b = rec("a", content_hash="ha"), rec("b", content_hash="hb")
        await store.record(run, a, [event(run, a)])
        await store.record(run, b, [event(run, b), event(run, b, "restored")])
        assert lines(events_path) == []
        await store.record(run, rec("c"), [])
        delivered = lines(events_path)
        assert [(e["key"], e["action"]) for e in delivered] == [
            (a.key, "new"), (b.key, "new"), (b.key, "restored"),
        ]  # fmt: skip
        for e in delivered:
            assert set(e) >= EVENT_KEYS
            assert e["run_id"] == run.id
            assert e["status"] == "live"
            assert datetime.fromisoformat(e["at"]) == T0
        assert delivered[0]["content_hash"] == "ha"
        assert delivered[0]["url"] == "https://example.com/a"
        # delivered events stay in the log, marked
        assert query(db, "SELECT COUNT(*), SUM(delivered) FROM outbox") == [(3, 3)]
        d = rec("d", content_hash=None)
        await store.record(run, d, [event(run, d)])
        assert len(lines(events_path)) == 3
        await store.flush()
    assert lines(events_path)[3]["key"] == d.key
    assert lines(events_path)[3]["content_hash"] is None  # kept as null, not dropped


@deferred_f_from_coro_f
async def test_no_sink_keeps_the_log_and_nothing_waits(db: Path) -> None:
    """RECRAWLER_EVENTS_URI=None: events are still logged (``recrawler changes`` reads them), marked
    delivered, so nothing waits for a sink configured later."""
    async with opened(db, batch_size=1) as store:
        run = await store.begin_run("docs", SITE, T0, lease_secs=0)
        a = rec("a", content_hash="h")
        await store.record(run, a, [event(run, a)])
        await store.record_miss(await store.begin_run("docs", SITE, T0, lease_secs=0), a.key, 410)
        assert await store.pending_events() == 0
    assert query(db, "SELECT key, action, delivered FROM outbox") == [(a.key, "new", 1)]
    assert pages(db) == {a.key: ("live", 0)}


class FailingSink(JsonLinesSink):
    """A sink whose disk is full."""

    def deliver(self, lines: Sequence[str]) -> None:
        raise OSError(28, "No space left on device")


@deferred_f_from_coro_f
async def test_sink_failure_keeps_events_in_the_outbox(db: Path, events_path: Path) -> None:
    store = SQLiteStateStore(str(db), batch_size=1, sink=FailingSink(str(events_path)))
    await store.open()
    try:
        run = await store.begin_run("docs", SITE, T0, lease_secs=0)
        a = rec("a")
        await store.record(run, a, [event(run, a)])  # a failed delivery does not fail the page
    finally:
        await store.close()
    # the page committed; its event waits in the outbox for the next delivery
    assert pages(db) == {f"{SITE}/a": ("live", 0)}
    assert len(query(db, "SELECT payload FROM outbox")) == 1


class FailingOutboxStore(SQLiteStateStore):
    """Fails a page write after its page row was written, inside the page's savepoint."""

    fail = False

    def _outbox(self, events: Sequence[Event]) -> Work[None]:
        yield from super()._outbox(events)
        if self.fail:
            raise sqlite3.IntegrityError("injected failure")


@deferred_f_from_coro_f
async def test_failed_page_write_leaves_earlier_state_and_no_event(db: Path, events_path: Path) -> None:
    store = FailingOutboxStore(str(db), batch_size=3, commit_secs=3600, sink=JsonLinesSink(str(events_path)))
    await store.open()
    try:
        run = await store.begin_run("docs", SITE, T0, lease_secs=0, publish_each_page=True)
        a, b = rec("a", content_hash="h1"), rec("b")
        await store.record(run, a, [event(run, a)])
        await store.record(run, b, [])  # same group transaction, still uncommitted
        store.fail = True
        changed = rec("a", content_hash="h2")
        with pytest.raises(StateStoreError, match="injected failure") as exc_info:
            await store.record(run, changed, [event(run, changed, "changed")])
        assert isinstance(exc_info.value.__cause__, sqlite3.IntegrityError)
        store.fail = False
        got = await store.get(a.key)
        assert got is not None
        assert got.content_hash == "h1"
        await store.flush()
    finally:
        await store.close()
    # the failed page rolled back alone: the rest of its group committed
    assert set(pages(db)) == {a.key, b.key}
    assert query(db, "SELECT content_hash FROM pages WHERE key = ?", (a.key,)) == [("h1",)]
    assert [(e["key"], e["action"]) for e in lines(events_path)] == [(a.key, "new")]


@deferred_f_from_coro_f
async def test_check_constraint_violation_is_a_state_store_error(db: Path, events_path: Path) -> None:
    async with opened(db, batch_size=1, sink=JsonLinesSink(str(events_path))) as store:
        run = await store.begin_run("docs", SITE, T0, lease_secs=0, publish_each_page=True)
        a = rec("a", content_hash="h1")
        await store.record(run, a, [event(run, a)])
        bogus = rec("a", content_hash="h2", status="bogus")
        with pytest.raises(StateStoreError, match="CHECK constraint"):
            await store.record(run, bogus, [event(run, bogus, "changed")])
        got = await store.get(a.key)
        assert got is not None
        assert (got.status, got.content_hash) == ("live", "h1")
        # the store carries on after a failed page
        await store.record(run, rec("b"), [])
    assert set(pages(db)) == {a.key, f"{SITE}/b"}
    assert [e["action"] for e in lines(events_path)] == ["new"]


# --- misses and reconciliation -------------------------------------------------------------


async def seed(store: SQLiteStateStore, *names: str, site: str = SITE) -> Run:
    run = await store.begin_run("docs", site, T0, lease_secs=0)
    for name in names:
        await store.record(run, rec(name, site=site, content_hash=f"h-{name}"), [])
    await store.flush()
    return run


async def reconcile(store: SQLiteStateStore, run: Run, *, apply: bool = True) -> Any:
    """What a run's end does: its misses settled, applied as it is published (or dropped)."""
    settled = await store.settle_misses(run, SETTLE_APPLY if apply else SETTLE_DROP)
    result, _ = await store.publish_run(run, at=T0 + timedelta(hours=1), gone_after=2, gone_statuses=[410])
    return (
        result if apply else dataclasses.replace(result, applied=False, skipped_misses=settled.skipped_misses)
    )


@deferred_f_from_coro_f
async def test_record_miss_outcomes(db: Path) -> None:
    async with opened(db) as store:
        await seed(store, "live", "quarantined", "gone")
        await store.record(
            await store.begin_run("docs", SITE, T0, lease_secs=0),
            rec("quarantined", status="quarantined"),
            [],
        )
        await store.record(
            await store.begin_run("docs", SITE, T0, lease_secs=0), rec("gone", status="gone"), []
        )
        run = await store.begin_run("docs", SITE, T0, lease_secs=0)
        assert await store.record_miss(run, f"{SITE}/live", 404) == "staged"
        assert await store.record_miss(run, f"{SITE}/quarantined", 404) == "staged"
        assert await store.record_miss(run, f"{SITE}/gone", 404) == "tombstone"
        assert await store.record_miss(run, f"{SITE}/never-stored", 404) == "unknown"
        await store.flush()
    staged = query(db, "SELECT key, http_status FROM run_misses WHERE run_id = ?", (run.id,))
    assert sorted(staged) == [(f"{SITE}/live", 404), (f"{SITE}/quarantined", 404)]


@deferred_f_from_coro_f
async def test_reconcile_quarantines_then_marks_gone(db: Path, events_path: Path) -> None:
    a, b, c = f"{SITE}/a", f"{SITE}/b", f"{SITE}/c"
    async with opened(db, sink=JsonLinesSink(str(events_path))) as store:
        await seed(store, "a", "b", "c")

        run2 = await store.begin_run("docs", SITE, T0, lease_secs=0)
        assert await store.record_miss(run2, a, 404) == "staged"
        assert await store.record_miss(run2, b, 410) == "staged"
        result = await reconcile(store, run2)
        assert (result.applied, result.quarantined, result.gone) == (True, 1, {"http_410": 1})
        assert pages(db) == {a: ("quarantined", 1), b: ("gone", 1), c: ("live", 0)}

        run3 = await store.begin_run("docs", SITE, T0, lease_secs=0)
        assert await store.record_miss(run3, a, 404) == "staged"
        assert await store.record_miss(run3, b, 410) == "tombstone"
        result = await reconcile(store, run3)
        assert (result.quarantined, result.gone) == (0, {"http_404": 1})
        assert pages(db) == {a: ("gone", 2), b: ("gone", 1), c: ("live", 0)}
        got = await store.get(a)
        assert got is not None
        assert got.last_checked == T0 + timedelta(hours=1)
    events = [(e["run_id"], e["key"], e["action"], e["reason"]) for e in lines(events_path)]
    assert events == [
        (run2.id, a, "quarantined", "http_404"),
        (run2.id, b, "gone", "http_410"),
        (run3.id, a, "gone", "http_404"),
    ]
    assert {e["content_hash"] for e in lines(events_path)} == {"h-a", "h-b"}


@deferred_f_from_coro_f
async def test_a_page_seen_again_in_the_same_run_lifts_its_miss(db: Path) -> None:
    async with opened(db) as store:
        await seed(store, "a")
        run = await store.begin_run("docs", SITE, T0, lease_secs=0)
        assert await store.record_miss(run, f"{SITE}/a", 410) == "staged"
        await store.record(run, rec("a", content_hash="h-a"), [])
        result = await reconcile(store, run)
        assert (result.quarantined, result.gone) == (0, {})
    assert pages(db) == {f"{SITE}/a": ("live", 0)}


@deferred_f_from_coro_f
async def test_reconcile_without_apply_changes_nothing(db: Path, events_path: Path) -> None:
    async with opened(db, sink=JsonLinesSink(str(events_path))) as store:
        await seed(store, "a", "b", "c")
        before = pages(db)
        run = await store.begin_run("docs", SITE, T0, lease_secs=0)
        await store.record_miss(run, f"{SITE}/a", 404)
        await store.record_miss(run, f"{SITE}/b", 410)
        result = await reconcile(store, run, apply=False)
        assert (result.applied, result.skipped_misses) == (False, 2)
        assert (result.quarantined, result.gone) == (0, {})
        assert pages(db) == before
        # the staged misses are dropped, not kept for a later reconcile
        assert query(db, "SELECT COUNT(*) FROM run_misses") == [(0,)]
        again = await reconcile(store, run)
        assert (again.quarantined, again.gone) == (0, {})
    assert pages(db) == before
    assert lines(events_path) == []


@deferred_f_from_coro_f
async def test_unseen_returns_each_unreached_page_of_the_site_once(db: Path) -> None:
    async with opened(db) as store:
        await seed(store, "a", "b", "c", "d", "e", "gone")
        await seed(store, "x", site="other.org")
        await store.record(
            await store.begin_run("docs", SITE, T0, lease_secs=0), rec("gone", status="gone"), []
        )
        run = await store.begin_run("docs", SITE, T0, lease_secs=0)
        await store.record(run, rec("a"), [])
        assert await store.record_miss(run, f"{SITE}/b", 404) == "staged"
        first = await store.unseen(run, 2)
        assert first == [(f"{SITE}/c", "https://example.com/c", 0), (f"{SITE}/d", "https://example.com/d", 0)]
        assert await store.unseen(run, 10) == [(f"{SITE}/e", "https://example.com/e", 0)]
        assert await store.unseen(run, 10) == []
        # a new run starts over; the sync form has the same semantics
        run2 = await store.begin_run("docs", SITE, T0, lease_secs=0)
        await store.record(run2, rec("c"), [])
        assert [k for k, _, _ in store.unseen_sync(run2, 10)] == [
            f"{SITE}/a", f"{SITE}/b", f"{SITE}/d", f"{SITE}/e",
        ]  # fmt: skip
        assert store.unseen_sync(run2, 10) == []
        assert await store.unseen(await store.begin_run("docs", None, T0, lease_secs=0), 10) == []


# --- readers ---------------------------------------------------------------------------------


@deferred_f_from_coro_f
async def test_iter_pages_filters_by_status(db: Path) -> None:
    async with opened(db) as store:
        run = await store.begin_run("docs", SITE, T0, lease_secs=0)
        for name, status in [("c", "live"), ("a", "live"), ("q", "quarantined"), ("g", "gone")]:
            await store.record(run, rec(name, status=status), [])
    reader = SQLiteStateStore(str(db))
    assert [p.key for p in reader.iter_pages()] == [f"{SITE}/{n}" for n in "acgq"]
    assert [p.key for p in reader.iter_pages(status="live")] == [f"{SITE}/a", f"{SITE}/c"]
    assert [p.key for p in reader.iter_pages(status="quarantined")] == [f"{SITE}/q"]
    assert [(p.key, p.status) for p in reader.iter_pages(status="gone")] == [(f"{SITE}/g", "gone")]
    assert list(reader.iter_pages(status="nope")) == []


@deferred_f_from_coro_f
async def test_finish_run_counts_are_visible_in_iter_runs(db: Path) -> None:
    counts = {"crawled": 3, "new": 1, "changed": 1, "unchanged": 1, "gone": 0, "errors": 0}
    async with opened(db) as store:
        first = await store.begin_run("docs", SITE, T0, lease_secs=0)
        await store.finish_run(
            first, reason="finished", at=T0 + timedelta(minutes=5), report={"counts": counts}
        )
        second = await store.begin_run("other", None, T0 + timedelta(hours=1), lease_secs=0)
    runs = list(SQLiteStateStore(str(db)).iter_runs())
    assert [r["id"] for r in runs] == [second.id, first.id]
    assert runs[0]["finish_reason"] is None
    assert runs[0]["counts"] is None
    assert runs[0]["site"] is None
    assert runs[1]["counts"] == counts
    assert runs[1]["finish_reason"] == "finished"
    assert runs[1]["spider"] == "docs"
    assert datetime.fromisoformat(runs[1]["finished_at"]) == T0 + timedelta(minutes=5)
    report = json.loads(query(db, "SELECT report FROM runs WHERE id = ?", (first.id,))[0][0])
    assert report == {"counts": counts}


@deferred_f_from_coro_f
async def test_begin_run_counts_prior_pages_of_its_site(db: Path) -> None:
    async with opened(db) as store:
        await seed(store, "a", "b", "g")
        await seed(store, "x", site="other.org")
        await store.record(await store.begin_run("docs", SITE, T0, lease_secs=0), rec("g", status="gone"), [])
        run = await store.begin_run("docs", SITE, T0, lease_secs=0)
        assert run.prior_pages == 2
        assert (await store.begin_run("docs", "new.org", T0, lease_secs=0)).prior_pages == 0


@pytest.mark.parametrize("folder", ["a#b", "q?x"])
@deferred_f_from_coro_f
async def test_readers_handle_uri_characters_in_the_path(tmp_path: Path, folder: str) -> None:
    path = tmp_path / folder / "state.db"
    path.parent.mkdir()
    async with opened(path) as store:
        run = await store.begin_run("docs", SITE, T0, lease_secs=0)
        await store.record(run, rec("a"), [])
    before = sorted(p.name for p in tmp_path.iterdir())
    try:
        keys = [p.key for p in SQLiteStateStore(str(path)).iter_pages()]
    finally:
        assert sorted(p.name for p in tmp_path.iterdir()) == before  # no stray file created
    assert keys == [f"{SITE}/a"]
