"""The PostgreSQL store's writes: one pooled connection in turn, page writes as savepoints in group
transactions, the commits that end them and the outbox delivered after each."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from recrawler.exceptions import PageWriteError, StateStoreError, StateStoreUnavailable
from recrawler.redact import redact_text, redact_url
from recrawler.state.postgres.cursors import _drive
from recrawler.state.sql.database import insert_outbox, undelivered_sql
from recrawler.state.sql.dialect import POSTGRES
from recrawler.state.sql.visibility import visible_run

if TYPE_CHECKING:
    from collections.abc import Sequence

    from recrawler.events import EventSink
    from recrawler.state.records import Event
    from recrawler.state.sql.dialect import Dialect, Work

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


class PostgreSQLTransactions:
    """The store's connection as its writers see it: the group transaction its page writes join
    (committed every ``RECRAWLER_DB_BATCH_SIZE`` pages or ``RECRAWLER_DB_COMMIT_SECS`` seconds),
    transactions of their own, and the outbox events delivered once committed."""

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

    # -- errors ---------------------------------------------------------------------------------

    def _error(self, exc: BaseException, what: str = "") -> StateStoreError:
        # one line: libpq's messages go on over several (a hint, the statement's position)
        text = " ".join(redact_text(str(exc)).split())
        if isinstance(exc, psycopg.OperationalError | PoolTimeout):
            return StateStoreUnavailable(f"cannot reach state database {self.label!r}{what}: {text}")
        return StateStoreError(f"state database {self.label!r}{what}: {text}")

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

    # -- the outbox -----------------------------------------------------------------------------

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
