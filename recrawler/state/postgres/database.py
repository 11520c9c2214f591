"""The PostgreSQL connection every role shares: psycopg's async pool, group commits, the outbox."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from recrawler.exceptions import PageWriteError, StateStoreError, StateStoreUnavailable
from recrawler.redact import redact_text, redact_url
from recrawler.state.postgres.versions import FIRST_VERSION, check_schema, migrate
from recrawler.state.sql.database import (
    insert_embeddings,
    insert_outbox,
    log_migrations,
    store_options,
    undelivered_sql,
)
from recrawler.state.sql.dialect import ALL, COUNT, MANY, ONE, POSTGRES, Row, count, drive, one
from recrawler.state.sql.visibility import visible_run

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from scrapy.settings import BaseSettings

    from recrawler.events import EventSink
    from recrawler.state.records import Event
    from recrawler.state.sql.dialect import Dialect, Op, Work

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

# pgvector's HNSW index takes vectors of up to 2,000 dimensions; larger ones are searched exactly
_HNSW_MAX_DIMS = 2000


def binary_vectors(conn: psycopg.BaseConnection[Any]) -> None:
    """Send numpy arrays on *conn* in pgvector's binary form (pgvector-python's dumper). The
    parameter's type comes from its ``CAST(... AS vector)``, so no type lookup is needed, and the
    connection may open before the migration creates the extension."""
    from pgvector.psycopg.vector import VectorBinaryDumper

    conn.adapters.register_dumper("numpy.ndarray", VectorBinaryDumper)


async def _configure(conn: psycopg.AsyncConnection[Any]) -> None:
    binary_vectors(conn)


def pg_row(cursor: Any) -> Any:
    """psycopg row factory: rows readable by position and by name, as ``sqlite3.Row``."""
    desc = cursor.description
    index = {c.name: i for i, c in enumerate(desc or ())}
    return lambda values: Row(values, index)


def _statement(op: Op) -> tuple[str, bool]:
    """*op*'s statement as psycopg takes it, and whether it goes through a raw cursor: positional
    parameters are sent in PostgreSQL's own numbered spelling, named ones psycopg rewrites."""
    first = op.params[0] if op.kind is MANY else op.params
    if isinstance(first, Mapping):
        return POSTGRES.sql(op.sql), False
    return POSTGRES.numbered_sql(op.sql), True


async def _execute(conn: psycopg.AsyncConnection[Any], op: Op) -> Any:
    if op.kind is MANY and not op.params:
        return 0
    sql, raw = _statement(op)
    async with psycopg.AsyncRawCursor(conn) if raw else conn.cursor() as cur:
        if op.kind is MANY:
            await cur.executemany(sql, op.params)
            return cur.rowcount
        await cur.execute(sql, op.params)
        if op.kind is ONE:
            return await cur.fetchone()
        if op.kind is ALL:
            return await cur.fetchall()
        if op.kind is COUNT:
            return cur.rowcount
    raise ValueError(f"unknown statement kind {op.kind!r}")


def _execute_sync(conn: psycopg.Connection[Any], op: Op) -> Any:
    if op.kind is MANY and not op.params:
        return 0
    sql, raw = _statement(op)
    with psycopg.RawCursor(conn) if raw else conn.cursor() as cur:
        if op.kind is MANY:
            cur.executemany(sql, op.params)
            return cur.rowcount
        cur.execute(sql, op.params)
        if op.kind is ONE:
            return cur.fetchone()
        if op.kind is ALL:
            return cur.fetchall()
        return cur.rowcount


async def _drive(conn: psycopg.AsyncConnection[Any], work: Work[_T]) -> _T:
    try:
        op = next(work)
        while True:
            op = work.send(await _execute(conn, op))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]  # the generator's declared return type


#: the lock (held to the end of its transaction) of whoever creates an embeddings index
INDEX_LOCK_KEY = "recrawler embeddings index"


def exact_only(embedder: str) -> bool:
    """True for the vectors of an embedder searched exactly, never through an HNSW index: the
    lexical hashing embedder's short, sparse queries find 0.16-0.44 of the exact top 10 through
    the graph (benchmarks/bench_pgvector.py), and no search setting brings that to 0.95."""
    return embedder.startswith("hashing:")


def vector_index_name(dims: int, embedder: str) -> str:
    """The name of the HNSW index over *embedder*'s stored vectors of *dims* dimensions."""
    return f"embeddings_hnsw_{dims}_{hashlib.sha256(embedder.encode()).hexdigest()[:12]}"


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def hnsw_index(dims: int, embedder: str) -> str:
    """The HNSW (cosine) index over *embedder*'s stored vectors of *dims* dimensions: one embedder's
    vectors only, so that a search never wades through another's."""
    return (
        f"CREATE INDEX IF NOT EXISTS {vector_index_name(dims, embedder)} ON embeddings "
        f"USING hnsw ((CAST(embedding AS vector({dims}))) vector_cosine_ops) "
        f"WHERE embedder = {_literal(embedder)} AND vector_dims(embedding) = {dims}"
    )


def vector_index_work(dims: int, embedder: str, min_rows: int) -> Work[bool]:
    """Build the HNSW index over *embedder*'s vectors of *dims* dimensions once at least
    *min_rows* are stored (fewer are searched exactly, and cost nothing to store); True when it
    was built now. An :func:`exact_only` embedder's vectors get none.

    One build after the vectors are in costs a fraction of keeping the index up to date row by
    row while a first run stores them. The builder holds a lock to the end of its transaction:
    two runs building at once otherwise deadlocked.
    """
    if exact_only(embedder) or not 0 < dims <= _HNSW_MAX_DIMS:
        return False
    name = vector_index_name(dims, embedder)
    row = yield one("SELECT to_regclass(?) IS NOT NULL AS present", (name,))
    if row[0]:
        return False
    row = yield one(
        "SELECT COUNT(*) AS n FROM (SELECT 1 FROM embeddings WHERE embedder = ? "
        "AND vector_dims(embedding) = ? LIMIT ?) AS counted",
        (embedder, dims, max(min_rows, 1)),
    )
    if int(row[0]) < min_rows:
        return False
    yield one(str(POSTGRES.lock_sql), (INDEX_LOCK_KEY,))
    yield count(hnsw_index(dims, embedder))
    return True


def ensure_vector_index(conn: psycopg.Connection[Any], dims: int, embedder: str, *, min_rows: int) -> bool:
    """:func:`vector_index_work` in a transaction of its own on *conn* (a bulk load's last step)."""
    with conn.transaction():
        return drive(vector_index_work(dims, embedder, min_rows), lambda op: _execute_sync(conn, op))


class PostgreSQLReader:
    """A connection of its own for the synchronous readers: never commits (rolled back at close)."""

    dialect: Dialect = POSTGRES

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    def run(self, work: Work[_T]) -> _T:
        """Run *work* on this connection."""
        return drive(work, lambda op: _execute_sync(self.conn, op))

    def iter(self, sql: str, params: Any = ()) -> Iterator[Any]:
        """Stream the rows of a query through a server-side cursor."""
        with self.conn.cursor(name="recrawler_reader") as cur:
            cur.execute(POSTGRES.sql(sql), params)
            yield from cur

    def damage(self) -> list[str]:
        """Nothing: PostgreSQL checksums and checks its own pages (amcheck, for an operator)."""
        return []


class PostgreSQLDatabase:
    """State in PostgreSQL through psycopg's async pool: the reactor never waits on the database.

    One pooled connection carries the store's work in turn (as SQLite's worker thread does), so
    page writes are savepoints inside a group transaction committed every
    ``RECRAWLER_DB_BATCH_SIZE`` pages or ``RECRAWLER_DB_COMMIT_SECS`` seconds; a lease heartbeat
    takes another pooled connection, so it never waits behind a long transaction.
    """

    def __init__(
        self,
        uri: str,
        *,
        batch_size: int = 1000,
        commit_secs: float = 2.0,
        timeout_secs: float = 10.0,
        sink: EventSink | None = None,
        dry_run: bool = False,
        deliver_on_commit: bool = True,
        vector_index_min_rows: int = 10_000,
    ) -> None:
        self.uri = uri
        #: the URI as messages show it: never its password
        self.label = redact_url(uri)
        self.dialect: Dialect = POSTGRES
        self.deliver_on_commit = deliver_on_commit
        self.dry_run = dry_run
        self.batch_size = max(1, batch_size)
        self.commit_secs = commit_secs
        self.timeout_secs = timeout_secs
        self.sink = sink
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] | None = None
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._lock = asyncio.Lock()
        self._in_txn = False
        #: the last page write's savepoint is still open (released with the next one's opening)
        self._unit_open = False
        self._pending = 0
        self._txn_since = 0.0
        self._group: list[str] = []
        self.outcomes: Counter[str] = Counter()
        self.lost: Counter[str] = Counter()
        self._timer: asyncio.TimerHandle | None = None
        self._background: set[asyncio.Future[None]] = set()
        #: stored vectors of a size get their HNSW index once there are this many
        self.vector_index_min_rows = vector_index_min_rows
        #: (embedder, vector size) this store stored: their index is seen to when it closes
        self._vector_kinds: set[tuple[str, int]] = set()

    @classmethod
    def from_settings(cls, uri: str, settings: BaseSettings) -> Self:
        """Build the store from a crawler's settings."""
        return cls(
            uri,
            **store_options(settings),
            vector_index_min_rows=settings.getint("RECRAWLER_DB_VECTOR_INDEX_MIN_ROWS"),
        )

    # -- errors ---------------------------------------------------------------------------------

    def _error(self, exc: BaseException, what: str = "") -> StateStoreError:
        # one line: libpq's messages go on over several (a hint, the statement's position)
        text = " ".join(redact_text(str(exc)).split())
        if isinstance(exc, psycopg.OperationalError | PoolTimeout):
            return StateStoreUnavailable(f"cannot reach state database {self.label!r}{what}: {text}")
        return StateStoreError(f"state database {self.label!r}{what}: {text}")

    # -- opening and closing --------------------------------------------------------------------

    async def open(self) -> None:
        """Connect, apply migrations (creating pgvector's extension); refuse newer or foreign databases."""
        async with self._lock:
            if self._conn is not None:
                return
            pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] = AsyncConnectionPool(
                self.uri,
                min_size=1,
                max_size=2,
                open=False,
                timeout=self.timeout_secs,
                kwargs={"autocommit": True, "row_factory": pg_row},
                configure=_configure,
                name="recrawler",
            )
            try:
                await pool.open(wait=True, timeout=self.timeout_secs)
                conn = await pool.getconn()
            except PoolTimeout:
                await pool.close()
                # the pool only says it timed out: one direct attempt says why
                try:
                    probe = await psycopg.AsyncConnection.connect(self.uri, connect_timeout=5)
                except psycopg.Error as exc:
                    raise self._error(exc) from None
                await probe.close()
                raise StateStoreUnavailable(f"cannot reach state database {self.label!r}") from None
            try:
                async with conn.transaction():
                    applied = await _drive(conn, migrate(self.label))
                if self.dry_run:
                    # one transaction for the whole run, rolled back at close: nothing is written
                    await conn.execute("BEGIN")
                    self._in_txn = True
            except psycopg.Error as exc:
                await pool.putconn(conn)
                await pool.close()
                raise self._error(exc) from exc
            except BaseException:
                await pool.putconn(conn)
                await pool.close()
                raise
            # the first migration creates the schema: a new database
            log_migrations(
                self.label, 0 if FIRST_VERSION in applied else min(applied, default=1) - 1, applied
            )
            self._pool, self._conn = pool, conn
            await self._deliver()

    def open_sync(self) -> None:
        """Blocking :meth:`open`'s checks and migrations, for startup before the crawl begins."""
        with self._sync_conn() as conn, conn.transaction():
            drive(migrate(self.label), lambda op: _execute_sync(conn, op))

    async def close(self) -> None:
        """Commit, deliver events, return the connection and close the pool."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        async with self._lock:
            conn, pool = self._conn, self._pool
            if conn is None or pool is None:
                return
            try:
                if self.dry_run:
                    with contextlib.suppress(psycopg.Error):
                        await conn.execute("ROLLBACK")
                    self._ended()
                else:
                    await self._commit()
                    await self._deliver()
                    await self._index_vectors(conn)
            finally:
                self._conn = self._pool = None
                await pool.putconn(conn)
                await pool.close()
                if self.sink is not None:
                    self.sink.close()

    async def _index_vectors(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Build the HNSW index of each embedder's vectors this store stored, once there are enough."""
        for embedder, dims in sorted(self._vector_kinds):
            t0 = time.monotonic()
            try:
                async with conn.transaction():
                    work = vector_index_work(dims, embedder, self.vector_index_min_rows)
                    built = await _drive(conn, work)
            except psycopg.Error as exc:
                # search stays exact (and slower) until a later run builds it
                logger.error(
                    "could not build the vector index of %(uri)s: %(exc)s",
                    {"uri": self.label, "exc": redact_text(str(exc).strip())},
                )
                continue
            if built:
                logger.info(
                    "built the vector index of %(uri)s (%(embedder)s) in %(secs).1f s",
                    {"uri": self.label, "embedder": embedder, "secs": time.monotonic() - t0},
                )
        self._vector_kinds.clear()

    @contextlib.contextmanager
    def _sync_conn(self) -> Iterator[psycopg.Connection[Any]]:
        try:
            conn = psycopg.connect(
                self.uri, row_factory=pg_row, connect_timeout=max(1, int(self.timeout_secs))
            )
        except psycopg.Error as exc:
            raise self._error(exc) from None
        binary_vectors(conn)
        try:
            yield conn
        except psycopg.Error as exc:
            raise self._error(exc) from exc
        finally:
            conn.close()

    @contextlib.contextmanager
    def reader(self) -> Iterator[PostgreSQLReader]:
        """A connection of its own (refused on a newer schema), rolled back and closed after use."""
        with self._sync_conn() as conn:
            reader = PostgreSQLReader(conn)
            if not reader.run(check_schema(self.label)):
                msg = f"no recrawler state in {self.label!r} (run a crawl first, or pass --db)"
                raise StateStoreUnavailable(msg)
            try:
                yield reader
            finally:
                conn.rollback()

    # -- transactions ---------------------------------------------------------------------------

    def _writer(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is None:
            raise StateStoreError(f"state store {self.label!r} is not open")
        return self._conn

    async def _begin(self) -> None:
        if not self._in_txn:
            await self._writer().execute("BEGIN")
            self._began()

    def _began(self) -> None:
        self._in_txn = True
        self._txn_since = time.monotonic()
        self._pending = 0

    def _ended(self) -> None:
        self._in_txn = self._unit_open = False

    async def _open_unit(self) -> None:
        """Open a page write's savepoint in the round trip that begins the group or releases the
        last write's (the commit releases a group's last one): no round trip of its own."""
        opening = "SAVEPOINT page"
        if self._unit_open:
            opening = f"RELEASE SAVEPOINT page; {opening}"
        if not self._in_txn:
            await self._writer().execute(f"BEGIN; {opening}")
            self._began()
        else:
            await self._writer().execute(opening)
        self._unit_open = True

    async def _maybe_commit(self, units: int = 1) -> None:
        self._pending += units
        if self._pending >= self.batch_size or time.monotonic() - self._txn_since >= self.commit_secs:
            await self._commit()

    async def _commit(self) -> None:
        if self.dry_run:
            return
        if self._in_txn:
            try:
                await self._writer().execute("COMMIT")
            except psycopg.Error as exc:
                # the whole group is lost: undo it for sure, and count it as lost
                with contextlib.suppress(psycopg.Error):
                    await self._writer().execute("ROLLBACK")
                self._ended()
                self.lost.update(self._group)
                self._group.clear()
                self._pending = 0
                raise self._error(exc, ": commit failed") from exc
            self._ended()
        self.outcomes.update(self._group)
        self._group.clear()
        self._pending = 0
        if self.deliver_on_commit:
            await self._deliver()

    async def _rollback_group(self) -> None:
        """A statement failed in the group transaction (PostgreSQL aborts all of it): undo it."""
        if self._in_txn and not self.dry_run:
            with contextlib.suppress(psycopg.Error):
                await self._writer().execute("ROLLBACK")
            self._ended()
            self.lost.update(self._group)
            self._group.clear()
            self._pending = 0

    async def run(self, work: Work[_T], *, flush: bool = False) -> _T:
        """Run *work* on the store's connection, in the open group transaction if any (after
        committing it: *flush*)."""
        async with self._lock:
            if flush:
                await self._commit()
            try:
                return await _drive(self._writer(), work)
            except psycopg.Error as exc:
                await self._rollback_group()
                raise self._error(exc) from exc

    async def page_write(self, work: Work[_T], outcome: Sequence[str] = (), *, units: int = 1) -> _T:
        """Run *work* as one page write (of *units* pages): a savepoint in the group transaction.

        A write that fails is lost, its *outcome* counted once in :attr:`lost` (never a verdict).
        """
        async with self._lock:
            try:
                result = await self._write_unit(work, units)
            except StateStoreError:
                # never written (a write that reached the group counts with the group if it is lost)
                self.lost.update(outcome)
                raise
            if self.dry_run:
                self.outcomes.update(outcome)
            else:
                self._group.extend(outcome)
            await self._maybe_commit(units)
            pending = self._in_txn and not self.dry_run
        if self._timer is None and pending:
            # bound the wait of the group's last page: commit within commit_secs
            self._timer = asyncio.get_running_loop().call_later(self.commit_secs, self._timed_flush)
        return result

    async def _write_unit(self, work: Work[_T], units: int) -> _T:
        conn = self._writer()
        if self._in_txn and self._pending and self._pending + units > self.batch_size:
            # a group holds at most batch_size pages: commit it before a unit it has no room for
            # (if that fails, the unit's pages are lost with it: never written)
            await self._commit()
        try:
            await self._open_unit()
        except psycopg.Error as exc:
            await self._rollback_group()
            raise self._error(exc, ": page write failed") from exc
        try:
            return await _drive(conn, work)
        except BaseException as exc:
            undone = True
            try:
                # (the savepoint stays open: released with the next write's)
                await conn.execute("ROLLBACK TO SAVEPOINT page")
            except psycopg.Error:
                await self._rollback_group()
                undone = False
            if isinstance(exc, psycopg.Error):
                error = self._error(exc, ": page write failed")
                if undone and type(error) is StateStoreError:
                    # the write's own statements: undone, the group stands
                    error = PageWriteError(str(error))
                raise error from exc
            raise

    async def transaction(self, work: Work[_T], *, concurrent: bool = False) -> _T:
        """Commit the group, run *work* as one transaction of its own and commit it.

        *concurrent* work (a lease heartbeat) takes a pooled connection of its own instead of
        waiting for the store's connection.
        """
        if concurrent and self._pool is not None and not self.dry_run:
            try:
                async with self._pool.connection() as conn, conn.transaction():
                    return await _drive(conn, work)
            except (psycopg.Error, PoolTimeout) as exc:
                raise self._error(exc) from exc
        async with self._lock:
            await self._commit()
            conn = self._writer()
            try:
                await self._begin()
                await conn.execute("SAVEPOINT unit")
                result = await _drive(conn, work)
                await conn.execute("RELEASE SAVEPOINT unit")
            except BaseException as exc:
                if self.dry_run:
                    with contextlib.suppress(psycopg.Error):
                        await conn.execute("ROLLBACK TO SAVEPOINT unit")
                else:
                    await self._rollback_group()
                if isinstance(exc, psycopg.Error):
                    raise self._error(exc) from exc
                raise
            await self._commit()
            return result

    def transaction_sync(self, work: Work[_T]) -> _T:
        """Blocking :meth:`transaction` on a connection of its own (it sees committed state only)."""
        with self._sync_conn() as conn, conn.transaction():
            return drive(work, lambda op: _execute_sync(conn, op))

    async def flush(self) -> None:
        """Commit pending writes and deliver their events."""
        async with self._lock:
            if self._conn is not None:
                await self._commit()

    def _timed_flush(self) -> None:
        self._timer = None
        task = asyncio.ensure_future(self.flush())
        self._background.add(task)
        task.add_done_callback(self._flush_done)

    def _flush_done(self, task: asyncio.Future[None]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error(
                "timed commit to %(uri)s failed: %(exc)s", {"uri": self.label, "exc": task.exception()}
            )

    # -- the outbox and the embeddings cache ----------------------------------------------------

    async def deliver(self) -> None:
        """Commit and deliver every committed event now (the end of a run published as a whole)."""
        async with self._lock:
            await self._commit()
            await self._deliver(asked=True)

    async def pending_events(self) -> int:
        """How many committed events of published runs wait in the outbox for delivery."""
        async with self._lock:
            await self._commit()
            try:
                cur = await self._writer().execute(
                    "SELECT COUNT(*) FROM outbox WHERE delivered = 0 AND " + visible_run("run_id")
                )
                row = await cur.fetchone()
            except psycopg.Error as exc:
                raise self._error(exc, ": counting the outbox failed") from exc
            return int(row[0]) if row else 0

    async def _deliver(self, *, asked: bool = False) -> None:
        """Send committed outbox events of published runs to the sink, a batch at a time, then mark
        them delivered (at-least-once). Rows are claimed with ``SKIP LOCKED``: two crawls on one
        database never send one event twice. A sink that is not ``immediate`` (a webhook) is only
        called when a delivery is *asked* for."""
        if self.sink is None or self._in_txn or not (asked or self.sink.immediate):
            return
        conn = self._writer()
        while True:
            try:
                async with conn.transaction():
                    cur = await conn.execute(
                        self.dialect.sql(undelivered_sql(self.dialect)), (self.sink.batch_size,)
                    )
                    found = await cur.fetchall()
                    if not found:
                        return
                    try:
                        await asyncio.to_thread(self.sink.deliver, [r[1] for r in found])
                    except OSError as exc:
                        logger.error(
                            "event delivery to %(sink)s failed, kept in the outbox: %(exc)s",
                            {"sink": getattr(self.sink, "path", self.sink), "exc": exc},
                        )
                        return
                    await conn.execute(
                        "UPDATE outbox SET delivered = 1 WHERE id = ANY(%s)", ([r[0] for r in found],)
                    )
            except psycopg.Error as exc:
                raise self._error(exc, ": event delivery failed") from exc

    def _outbox(self, events: Sequence[Event]) -> Work[None]:
        return insert_outbox(self.sink, events)

    def embeddings_work(self, rows: Sequence[tuple[str, str, bytes]]) -> Work[None]:
        """Add (embedder, text hash, vector) rows to the cache; their size's HNSW index is built
        when the store closes, once there are ``RECRAWLER_DB_VECTOR_INDEX_MIN_ROWS`` of them."""
        self._vector_kinds.update((embedder, len(v) // 4) for embedder, _, v in rows)
        yield from insert_embeddings(self.dialect, rows)
