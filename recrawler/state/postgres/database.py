"""The PostgreSQL connection every role shares: psycopg's async pool, opened and migrated, closed
with the vector indexes seen to; the synchronous readers' connections."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any, Self, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from recrawler.exceptions import StateStoreUnavailable
from recrawler.redact import redact_text
from recrawler.state.postgres.cursors import (
    PostgreSQLReader,
    _drive,
    _execute_sync,
    binary_vectors,
    configure_connection,
    pg_row,
)
from recrawler.state.postgres.transactions import PostgreSQLTransactions
from recrawler.state.postgres.vector_index import default_build, hnsw_options, vector_index_work
from recrawler.state.postgres.versions import FIRST_VERSION, check_schema, migrate
from recrawler.state.sql.database import insert_embeddings, log_migrations, store_options
from recrawler.state.sql.dialect import drive

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from scrapy.settings import BaseSettings

    from recrawler.events import EventSink
    from recrawler.state.roles.blocks import BlockModel
    from recrawler.state.sql.dialect import Work

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


class PostgreSQLDatabase(PostgreSQLTransactions):
    """State in PostgreSQL through psycopg's async pool: the reactor never waits on the database.

    One pooled connection carries the store's work in turn (as SQLite's worker thread does), so
    page writes are savepoints inside a group transaction committed every
    ``RECRAWLER_DB_BATCH_SIZE`` pages or ``RECRAWLER_DB_COMMIT_SECS`` seconds; a lease heartbeat
    takes another pooled connection, so it never waits behind a long transaction.
    """

    #: the caller's block arithmetic the history role applies (None: block statistics wait)
    blocks: BlockModel | None = None

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
        hnsw: tuple[int, int] | None = None,
    ) -> None:
        super().__init__(
            uri,
            batch_size=batch_size,
            commit_secs=commit_secs,
            timeout_secs=timeout_secs,
            sink=sink,
            dry_run=dry_run,
            deliver_on_commit=deliver_on_commit,
        )
        #: stored vectors of a size get their HNSW index once there are this many
        self.vector_index_min_rows = vector_index_min_rows
        #: the HNSW build's m and ef_construction (``RECRAWLER_DB_HNSW_M``, ``..._EF_CONSTRUCTION``;
        #: None: their defaults)
        self.hnsw = hnsw_options(*(hnsw or default_build()))
        #: (embedder, vector size) this store stored: their index is seen to when it closes
        self._vector_kinds: set[tuple[str, int]] = set()

    @classmethod
    def from_settings(cls, uri: str, settings: BaseSettings) -> Self:
        """Build the store from a crawler's settings."""
        return cls(
            uri,
            **store_options(settings),
            vector_index_min_rows=settings.getint("RECRAWLER_DB_VECTOR_INDEX_MIN_ROWS"),
            hnsw=(
                settings.getint("RECRAWLER_DB_HNSW_M"),
                settings.getint("RECRAWLER_DB_HNSW_EF_CONSTRUCTION"),
            ),
        )

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
                configure=configure_connection,
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
                    work = vector_index_work(dims, embedder, self.vector_index_min_rows, *self.hnsw)
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

    def transaction_sync(self, work: Work[_T]) -> _T:
        """Blocking :meth:`transaction` on a connection of its own (it sees committed state only)."""
        with self._sync_conn() as conn, conn.transaction():
            return drive(work, lambda op: _execute_sync(conn, op))

    def embeddings_work(self, rows: Sequence[tuple[str, str, bytes]]) -> Work[None]:
        """Add (embedder, text hash, vector) rows to the cache; their size's HNSW index is built
        when the store closes, once there are ``RECRAWLER_DB_VECTOR_INDEX_MIN_ROWS`` of them."""
        self._vector_kinds.update((embedder, len(v) // 4) for embedder, _, v in rows)
        yield from insert_embeddings(self.dialect, rows)
