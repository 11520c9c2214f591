"""The SQLite connection every role shares: the file opened (checked, WAL, migrated) on the store's
worker thread, and the readers' read-only connections."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Self

from recrawler.exceptions import (
    ConfigurationError,
    SchemaVersionError,
    StateStoreError,
    StateStoreLost,
    StateStoreUnavailable,
)
from recrawler.state.sql.database import store_options
from recrawler.state.sqlite.connection import (
    SQLiteReader,
    connect,
    enable_wal,
    open_error,
    refuse_empty,
)
from recrawler.state.sqlite.files import file_identity
from recrawler.state.sqlite.transactions import SQLiteTransactions
from recrawler.state.sqlite.versions import (
    SCHEMA_VERSION,
    check_integrity,
    check_schema,
    migrate,
    schema_version,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from scrapy.settings import BaseSettings

    from recrawler.events import EventSink
    from recrawler.state.roles.blocks import BlockModel

#: the write connection's page cache, in KiB (per connection, at most this much)
_CACHE_KIB = 16384


class SQLiteDatabase(SQLiteTransactions):
    """State in one SQLite file (WAL, ``synchronous=NORMAL``).

    Every call runs on one dedicated worker thread that owns the connection, so the reactor never
    blocks. Page writes are savepoints inside a group transaction committed every
    ``RECRAWLER_DB_BATCH_SIZE`` pages or ``RECRAWLER_DB_COMMIT_SECS`` seconds: each page is atomic,
    and a kill loses at most the uncommitted tail, which the next run simply checks again.
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
        integrity_check: bool = True,
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
        #: refuse a database that fails ``PRAGMA integrity_check`` when it opens (readers: ``quick_check``)
        self.integrity_check = integrity_check
        self._verified = False
        self._open_lock = threading.Lock()

    @classmethod
    def from_settings(cls, uri: str, settings: BaseSettings) -> Self:
        """Build the store from a crawler's settings."""
        return cls(uri, **store_options(settings))

    def _open(self) -> None:
        with self._open_lock:
            if self._conn is not None:
                return
            if self.readonly:
                msg = (
                    f"RECRAWLER_DB_URI: {self.uri!r} is read-only (?mode=ro) and this writes to it; "
                    "drop ?mode=ro (the commands that only read open the database read-only anyway)"
                )
                raise ConfigurationError(msg)
            if self.dry_run and self.path != ":memory:" and not Path(self.path).exists():
                # a dry run against no database compares with empty state and creates no file
                self.path = ":memory:"
            existed = self.path != ":memory:" and Path(self.path).exists()
            conn = connect(self.path, timeout_secs=self.timeout_secs)
            try:
                # check the schema before anything writes: a refused file stays byte-identical
                version = check_schema(conn, self.path)
                if version and self.integrity_check:
                    check_integrity(conn, self.path)
                # checked, or new: the readers of this store (the run's own) need not check it again
                self._verified = True
                if not version and existed:
                    refuse_empty(self.path, timeout_secs=self.timeout_secs)
                if self.dry_run:
                    # one transaction for the whole run, rolled back at close: nothing is written
                    conn.execute("BEGIN IMMEDIATE")
                else:
                    enable_wal(conn, timeout_secs=self.timeout_secs)
                    # WAL + NORMAL: a commit is atomic and consistent; only the last commits
                    # before a power loss may roll back, which the next run re-checks.
                    conn.execute("PRAGMA synchronous = NORMAL")
                    # a bounded page cache, larger than SQLite's 2 MiB: the block statistics'
                    # upserts land at random keys, and each cache miss is a read
                    conn.execute(f"PRAGMA cache_size = -{_CACHE_KIB}")
                migrate(conn, self.path, self.dry_run, self.blocks)
            except sqlite3.DatabaseError as exc:
                conn.close()
                raise open_error(self.path, exc) from exc
            except StateStoreError:
                conn.close()
                raise
            if self.path != ":memory:":
                try:
                    self._identity = file_identity(self.path)
                except OSError as exc:
                    # deleted (or its directory) between the connect and now
                    conn.close()
                    msg = f"state database {self.path!r} was deleted while it was being opened"
                    raise StateStoreUnavailable(msg) from exc
            self._conn = conn
        self._deliver()

    async def open(self) -> None:
        """Connect, enable WAL and apply migrations; refuse newer or foreign databases."""
        await self._call(self._open)

    def open_sync(self) -> None:
        """Blocking :meth:`open`, for startup checks before the crawl begins."""
        self.call_sync(self._open)

    @contextlib.contextmanager
    def reader(self) -> Iterator[SQLiteReader]:
        """A read-only connection of its own (refused on a newer schema), closed after use."""
        if self._lost is not None:
            raise StateStoreLost(self._lost)
        conn = self._reader()
        try:
            yield SQLiteReader(conn)
        except sqlite3.Error as exc:
            raise StateStoreError(f"state database {self.path!r}: {exc}") from exc
        finally:
            conn.close()

    def _reader(self) -> sqlite3.Connection:
        conn = connect(self.path, timeout_secs=self.timeout_secs, readonly=True)
        try:
            version = schema_version(conn, self.path)
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise open_error(self.path, exc) from exc
        if version and self.integrity_check and not self._verified:
            # a command that only reads (pages, runs, ...) answers from an undamaged file, or says
            # it is damaged, as a crawl refuses it: once per store, not once per read
            try:
                check_integrity(conn, self.path, quick=True)
            except SchemaVersionError:
                conn.close()
                raise
            self._verified = True
        if not version:
            # an empty file (a 0-byte one, say): nothing to read, and readers never create a schema
            conn.close()
            msg = f"state database {self.path!r} is empty (no recrawler schema): run a crawl first"
            raise StateStoreUnavailable(msg)
        if version > SCHEMA_VERSION:
            conn.close()
            msg = (
                f"state database {self.path!r} has schema version {version}, newer than this "
                f"recrawler's {SCHEMA_VERSION}; upgrade recrawler"
            )
            raise SchemaVersionError(msg)
        if version < SCHEMA_VERSION and self.readonly:
            conn.close()
            msg = (
                f"state database {self.path!r} has schema version {version}, older than this "
                f"recrawler's {SCHEMA_VERSION}, and ?mode=ro forbids upgrading it: run a crawl first"
            )
            raise SchemaVersionError(msg)
        if version < SCHEMA_VERSION:
            # an older schema (recrawler was upgraded, no crawl ran since): migrated forward
            # first, as the next crawl would, so readers see the columns they read
            conn.close()
            rw = connect(self.path, timeout_secs=self.timeout_secs)
            try:
                migrate(rw, self.path, False, self.blocks)
            except sqlite3.DatabaseError as exc:
                raise open_error(self.path, exc) from exc
            finally:
                rw.close()
            conn = connect(self.path, timeout_secs=self.timeout_secs, readonly=True)
        return conn
