"""The SQLite store's writes on its one worker thread: page writes as savepoints in group
transactions, the commits that end them, the outbox delivered after each, and the last commit at
close; a file deleted or made unwritable under it stops it."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import sqlite3
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from recrawler.exceptions import PageWriteError, StateStoreError, StateStoreLost
from recrawler.state.sql.database import insert_embeddings, insert_outbox
from recrawler.state.sql.dialect import SQLITE, drive
from recrawler.state.sql.visibility import visible_run
from recrawler.state.sqlite.connection import deliver_outbox, open_error
from recrawler.state.sqlite.files import abandon, file_trouble
from recrawler.state.sqlite.versions import _execute, sqlite_target

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from recrawler.events import EventSink
    from recrawler.state.records import Event
    from recrawler.state.sql.dialect import Dialect, Work

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
_P = ParamSpec("_P")


class SQLiteTransactions:
    """The store's connection as its writers see it, owned by one worker thread: the group
    transaction its page writes join (committed every ``RECRAWLER_DB_BATCH_SIZE`` pages or
    ``RECRAWLER_DB_COMMIT_SECS`` seconds), transactions of their own, and the outbox events
    delivered once committed."""

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
    ) -> None:
        self.uri = uri
        self.dialect: Dialect = SQLITE
        #: deliver events after each commit; off when the run publishes as a whole, so events go
        #: out with the run (and a change the run takes back is never announced)
        self.deliver_on_commit = deliver_on_commit
        #: ``?mode=ro``: readers only; opening it to write is refused
        self.path, self.readonly = sqlite_target(uri)
        self.label = self.path
        self.dry_run = dry_run
        self.batch_size = max(1, batch_size)
        self.commit_secs = commit_secs
        self.timeout_secs = timeout_secs
        self.sink = sink
        self._conn: sqlite3.Connection | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._pending = 0
        self._txn_since = 0.0
        #: outcome labels of the page writes in the open group transaction
        self._group: list[str] = []
        #: outcome labels of page writes that committed, and of those a failed commit lost
        self.outcomes: Counter[str] = Counter()
        self.lost: Counter[str] = Counter()
        self._timer: asyncio.TimerHandle | None = None
        self._background: set[asyncio.Future[None]] = set()
        #: (st_dev, st_ino) of the file as opened, and why it can no longer be used (None: it can)
        self._identity: tuple[int, int] | None = None
        self._lost: str | None = None

    async def _call(self, func: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="recrawler-sqlite")
        fut = self._executor.submit(self._checked, func, functools.partial(func, *args, **kwargs))
        return await asyncio.wrap_future(fut)

    def call_sync(self, func: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """Run *func* on the worker thread and wait: before the crawl or outside it, never on the reactor."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="recrawler-sqlite")
        return self._executor.submit(self._checked, func, functools.partial(func, *args, **kwargs)).result()

    def _checked(self, func: object, call: Callable[[], _T]) -> _T:
        """Run *call* (of *func*) unless the database file is gone or can no longer be written."""
        if self._conn is not None and self._lost is None:
            self._lost = file_trouble(self.path, self._identity) if self._identity else None
            if self._lost is not None:
                self._abandon()
        if self._lost is not None and func != self._close:
            raise StateStoreLost(self._lost)
        return call()

    def _abandon(self) -> None:
        """Stop using a connection whose files were deleted or made unwritable (see
        :func:`~recrawler.state.sqlite.files.file_trouble`): what the open group holds is lost
        (counted so), and the connection is never closed."""
        self.lost.update(self._group)
        self._group.clear()
        self._pending = 0
        logger.error("%(why)s: nothing more is written; this run is not published", {"why": self._lost})
        conn, self._conn = self._conn, None
        if conn is not None:
            abandon(conn)

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StateStoreError(f"state store {self.path!r} is not open")
        return self._conn

    def _begin(self) -> None:
        conn = self.conn
        if not conn.in_transaction:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise open_error(self.path, exc) from exc
            self._txn_since = time.monotonic()
            self._pending = 0

    def _maybe_commit(self, units: int = 1) -> None:
        self._pending += units
        if self._pending >= self.batch_size or time.monotonic() - self._txn_since >= self.commit_secs:
            self._commit()

    def _commit(self) -> None:
        conn = self.conn
        if self.dry_run:
            return
        if conn.in_transaction:
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                # the whole group is lost (a full disk): undo it for sure, and count it as lost, so
                # nothing claims pages that were never stored
                with contextlib.suppress(sqlite3.Error):
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                self.lost.update(self._group)
                self._group.clear()
                self._pending = 0
                raise StateStoreError(f"commit to {self.path!r} failed: {exc}") from exc
        self.outcomes.update(self._group)
        self._group.clear()
        self._pending = 0
        if self.deliver_on_commit:
            self._deliver()

    async def deliver(self) -> None:
        """Commit and deliver every committed event now (the end of a run published as a whole)."""

        def work() -> None:
            self._commit()
            self._deliver(asked=True)

        await self._call(self._guard, work)

    async def pending_events(self) -> int:
        """How many committed events of published runs wait in the outbox for delivery."""

        def work() -> int:
            self._commit()
            return int(
                self.conn.execute(
                    "SELECT COUNT(*) FROM outbox WHERE delivered = 0 AND " + visible_run("run_id")
                ).fetchone()[0]
            )

        return await self._call(self._guard, work)

    def _deliver(self, *, asked: bool = False) -> None:
        """Deliver the committed events of published runs (:func:`deliver_outbox`)."""
        deliver_outbox(self.conn, self.sink, self.dialect, asked=asked)

    def _drive(self, work: Work[_T]) -> _T:
        conn = self.conn
        return drive(work, lambda op: _execute(conn, op))

    def _page_txn(self, work: Work[_T], outcome: Sequence[str] = (), units: int = 1) -> _T:
        """Run *work* as one atomic page write (of *units* pages) inside the group transaction;
        its *outcome* labels count as committed only once the group commits. A write that fails
        is lost, its *outcome* counted once in :attr:`lost` (never a verdict)."""
        try:
            result = self._write_unit(work, units)
        except StateStoreError:
            # never written (a write that reached the group counts with the group if it is lost)
            self.lost.update(outcome)
            raise
        if self.dry_run:
            # nothing is ever committed: count what would have been
            self.outcomes.update(outcome)
        else:
            self._group.extend(outcome)
        self._maybe_commit(units)
        return result

    def _write_unit(self, work: Work[_T], units: int) -> _T:
        if self._pending and self._pending + units > self.batch_size:
            # a group holds at most batch_size pages: commit it before a unit it has no room for
            # (if that fails, the unit's pages are lost with it: never written)
            self._commit()
        self._begin()
        conn = self.conn
        conn.execute("SAVEPOINT page")
        try:
            result = self._drive(work)
        except sqlite3.Error as exc:
            conn.execute("ROLLBACK TO page")
            conn.execute("RELEASE page")
            raise PageWriteError(f"page write to {self.path!r} failed: {exc}") from exc
        except BaseException:
            conn.execute("ROLLBACK TO page")
            conn.execute("RELEASE page")
            raise
        conn.execute("RELEASE page")
        return result

    def _outbox(self, events: Sequence[Event]) -> Work[None]:
        return insert_outbox(self.sink, events)

    def embeddings_work(self, rows: Sequence[tuple[str, str, bytes]]) -> Work[None]:
        """Add (embedder, text hash, vector) rows to the embeddings cache."""
        return insert_embeddings(self.dialect, rows)

    async def run(self, work: Work[_T], *, flush: bool = False) -> _T:
        """Run *work* on the worker thread, in the open group transaction if any (after committing
        it: *flush*)."""

        def call() -> _T:
            if flush:
                self._commit()
            return self._drive(work)

        return await self._call(self._guard, call)

    async def page_write(self, work: Work[_T], outcome: Sequence[str] = (), *, units: int = 1) -> _T:
        """Run *work* as one page write (of *units* pages): a savepoint in the group transaction."""
        return await self._page_write(work, outcome, units)

    def _transaction(self, work: Work[_T]) -> _T:
        conn = self.conn
        self._commit()
        self._begin()
        # a dry run is one transaction: a failed unit rolls back to its savepoint only
        conn.execute("SAVEPOINT unit")
        try:
            result = self._drive(work)
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK TO unit")
                conn.execute("RELEASE unit")
                if not self.dry_run and conn.in_transaction:
                    conn.execute("ROLLBACK")
            raise
        conn.execute("RELEASE unit")
        self._commit()
        return result

    async def transaction(self, work: Work[_T], *, concurrent: bool = False) -> _T:
        """Commit the group, run *work* as one transaction of its own and commit it (one
        connection: *concurrent* work runs in turn too)."""
        return await self._call(self._guard, self._transaction, work)

    def transaction_sync(self, work: Work[_T]) -> _T:
        """Blocking :meth:`transaction`."""
        return self.call_sync(self._guard, self._transaction, work)

    async def flush(self) -> None:
        """Commit pending writes and deliver their events."""
        await self._call(self._flush)

    def _flush(self) -> None:
        if self._conn is not None:
            self._commit()

    async def _page_write(self, work: Work[_T], outcome: Sequence[str] = (), units: int = 1) -> _T:
        result = await self._call(self._page_txn, work, outcome, units)
        if self._timer is None and self._conn is not None and self._conn.in_transaction:
            # bound the wait of the group's last page: commit within commit_secs even if no
            # further write comes to trigger it
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self.commit_secs, self._timed_flush)
        return result

    def _timed_flush(self) -> None:
        self._timer = None
        if self._executor is not None:
            task = asyncio.ensure_future(self._call(self._guard, self._flush))
            self._background.add(task)
            task.add_done_callback(self._flush_done)

    def _flush_done(self, task: asyncio.Future[None]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # a lost database was said once, when it was noticed
            level = logging.DEBUG if isinstance(task.exception(), StateStoreLost) else logging.ERROR
            logger.log(
                level,
                "timed commit to %(path)s failed: %(exc)s",
                {"path": self.path, "exc": task.exception()},
            )

    async def close(self) -> None:
        """Commit, deliver events and close the connection and the worker thread."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._executor is None:
            return
        try:
            await self._call(self._close)
        finally:
            self._executor.shutdown(wait=True)
            self._executor = None

    def _close(self) -> None:
        if self._conn is None:
            return
        try:
            if self.dry_run and self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            else:
                self._commit()
                self._deliver()
        finally:
            self._conn.close()
            self._conn = None
            if self.sink is not None:
                self.sink.close()

    def _guard(self, work: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return work(*args, **kwargs)
        except sqlite3.Error as exc:
            text = str(exc)
            if "locked" in text or "busy" in text:
                raise open_error(self.path, exc) from exc
            raise StateStoreError(f"state database {self.path!r}: {exc}") from exc
