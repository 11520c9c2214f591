"""The pages role: page writes (one atomic unit each) and the run's unseen pages."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import deque
from typing import TYPE_CHECKING

from recrawler.exceptions import PageWriteError, StateStoreError
from recrawler.state.records import (
    GONE,
    LIVE,
    QUARANTINED,
    ChangeRow,
    Event,
    FieldsRow,
    PageRecord,
    Run,
)
from recrawler.state.sql.dialect import count, one, rows
from recrawler.state.sql.page_writes import _PageWrite, write_pages
from recrawler.state.sql.rows import (
    _PAGE_SELECT,
    FOLD_BATCH,
    _at,
    _fold_block_deltas,
    _row_to_record,
)

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    from recrawler.intervals import Revisit
    from recrawler.state.records import Chunk, RevisitUpdate
    from recrawler.state.sql.database import Database
    from recrawler.state.sql.dialect import Work

logger = logging.getLogger(__name__)

#: page writes with a field record between two folds of block deltas during a run: the counters
#: follow the crawl a batch at a time, and the run's reconciliation folds only what the last
#: writes left
FOLD_EVERY = FOLD_BATCH


#: page writes queued together written as one unit at most (see :meth:`SQLPages.record`)
WRITE_BATCH = 200


class SQLPages:
    """The pages role: page writes (one atomic unit each) and the run's unseen pages."""

    def __init__(self, db: Database) -> None:
        self.db = db
        #: per run, the last key the unseen check returned: the next batch starts after it, so
        #: draining a site costs one pass over its pages, not one per batch
        self._unseen_after: dict[int, str] = {}
        #: page writes with a field record since the last fold
        self._unfolded = 0
        #: page writes waiting for the one that is being written, and the task writing them
        self._queue: deque[_PageWrite] = deque()
        self._draining: asyncio.Future[None] | None = None
        #: the page writes being written now
        self._writing: list[_PageWrite] = []

    async def get(self, key: str) -> PageRecord | None:
        """Return the stored record of *key*."""
        return await self.db.run(self._get(key))

    @staticmethod
    def _get(key: str) -> Work[PageRecord | None]:
        row = yield one(f"SELECT {_PAGE_SELECT} FROM pages WHERE key = ?", (key,))
        return _row_to_record(row) if row is not None else None

    async def record(
        self,
        run: Run,
        rec: PageRecord,
        events: Sequence[Event],
        *,
        chunks: Sequence[Chunk] | None = None,
        restore: bool = False,
        revert: bool = False,
        embeddings: Sequence[tuple[str, str, bytes]] = (),
        fields: FieldsRow | None = None,
        change: ChangeRow | None = None,
        outcome: Sequence[str] = (),
        revisit: RevisitUpdate | None = None,
    ) -> Revisit | None:
        """Upsert the page's new state, its events and its knowledge-base rows atomically.

        ``fields`` replaces the page's field-level record (and updates the site's block counts);
        ``change`` appends to the page's history. ``outcome`` labels (``new``, ``changed``, ...)
        are counted in :attr:`outcomes` once the write commits, or in :attr:`lost` if its group
        commit fails.

        ``chunks`` replaces the page's current chunks (old rows retired by this run, new rows
        added by it: search switches when the run publishes); ``restore`` brings back the rows a
        quarantine kept; ``embeddings`` are (embedder, text hash, vector) cache rows.
        Any staged miss of the page is lifted, and any a mass-removal hold keeps. ``revisit`` stores
        the page's next revisit state in the same transaction; the state before it is returned
        (None without ``revisit``).

        A record with ``pending`` set is not published yet: the first such write since the page
        was last published keeps its published state (row and field record) in ``page_before``.
        ``revert`` says the page is back to its published state: what unpublished runs changed of
        it (chunks, field record, history, events) is undone, and it is no longer pending.
        """

        if chunks is not None and rec.chunks != len(chunks):
            # the page's chunk count is written with its row (its chunks are replaced with it)
            rec = dataclasses.replace(rec, chunks=len(chunks))
        write = _PageWrite(
            run=run,
            rec=rec,
            events=events,
            chunks=chunks,
            restore=restore,
            revert=revert,
            embeddings=embeddings,
            fields=fields,
            change=change,
            outcome=outcome,
            revisit=revisit,
            done=asyncio.get_running_loop().create_future(),
        )
        self._queue.append(write)
        if self._draining is None:
            self._draining = asyncio.ensure_future(self._drain())
        before = await write.done
        if fields is not None:
            await self._fold_now_and_then()
        return before

    async def _drain(self) -> None:
        """Write the queued page writes, those queued together as one unit (see :meth:`_write`)."""
        try:
            while self._queue:
                batch = self._take()
                self._writing = batch
                try:
                    await self._write(batch)
                except BaseException as exc:
                    for w in batch:
                        if not w.done.done():
                            w.done.set_exception(exc)
                    if not isinstance(exc, Exception):
                        raise
                finally:
                    self._writing = []
        except BaseException:
            for w in self._queue:
                if not w.done.done():
                    w.done.cancel()
            self._queue.clear()
            raise
        finally:
            self._draining = None

    def _take(self) -> list[_PageWrite]:
        """The next writes in queue order, no page twice, up to :data:`WRITE_BATCH` and the
        store's group size (a group commits within its size, a unit is never split)."""
        batch: list[_PageWrite] = []
        keys: set[str] = set()
        limit = min(WRITE_BATCH, self.db.batch_size)
        while self._queue and len(batch) < limit and self._queue[0].rec.key not in keys:
            w = self._queue.popleft()
            keys.add(w.rec.key)
            batch.append(w)
        return batch

    async def _write(self, batch: list[_PageWrite]) -> None:
        """One page's write alone; several as one unit in a few multi-row statements (each page
        as it would be alone). A unit that fails in its statements is undone and its pages are
        written one by one, so only a failing page fails; a failed group commit fails them all
        (their outcomes are lost with the group, as any write's)."""
        if len(batch) > 1:
            try:
                befores = await self.db.page_write(
                    self._many(batch), [o for w in batch for o in w.outcome], units=len(batch)
                )
            except Exception as exc:
                if isinstance(exc, StateStoreError) and not isinstance(exc, PageWriteError):
                    raise  # the group, not the pages: nothing to retry
            else:
                for w, before in zip(batch, befores, strict=True):
                    if not w.done.done():  # (its caller may have been cancelled meanwhile)
                        w.done.set_result(before)
                return
        for w in batch:
            try:
                (before,) = await self.db.page_write(self._many([w]), w.outcome)
            except Exception as exc:
                if not w.done.done():
                    w.done.set_exception(exc)
            else:
                if not w.done.done():
                    w.done.set_result(before)

    def _many(self, batch: list[_PageWrite]) -> Work[list[Revisit | None]]:
        """The writes of *batch* (distinct pages) as one unit (see :func:`write_pages`)."""
        return write_pages(self.db, batch)

    async def _fold_now_and_then(self) -> None:
        """Every :data:`FOLD_EVERY` page writes with a field record, commit the group and fold a
        batch of block deltas as a transaction of its own, in a thread (SQLite: on its worker
        thread; PostgreSQL: on a connection of its own, beside the page writes, so that the fold's
        own counting and statements never run on the reactor). A failed fold costs no page: its
        deltas wait for the next."""
        self._unfolded += 1
        if self._unfolded < FOLD_EVERY:
            return
        self._unfolded = 0
        blocks = self.db.blocks
        if blocks is None:
            return  # no block arithmetic here: the deltas wait for a store that has it
        # the group first (a group that cannot commit fails this write, as any group commit does)
        await self.db.flush()
        fold = _fold_block_deltas(self.db.dialect, FOLD_BATCH, blocks)
        try:
            if self.db.dry_run:
                # never committed: in the store's own transaction, undone with it
                await self.db.transaction(fold, concurrent=True)
            else:
                await asyncio.to_thread(self.db.transaction_sync, fold)
        except StateStoreError as exc:
            logger.warning("block statistics not folded, left for the next fold: %(exc)s", {"exc": exc})

    async def record_error(self, run: Run, key: str | None, events: Sequence[Event]) -> None:
        """Mark a stored page as reached this run (state untouched) and write its error events."""

        def work() -> Work[None]:
            if key is not None:
                yield count("UPDATE pages SET last_seen_run = ? WHERE key = ?", (run.id, key))
            yield from self.db._outbox(events)

        await self.db.page_write(work())

    async def record_miss(self, run: Run, key: str, http_status: int) -> str:
        """Stage a 404/410 of a stored page for the reconciliation.

        Returns ``"staged"`` (a live or quarantined page), ``"tombstone"`` (already gone) or
        ``"unknown"`` (no record). It lands after the page's writes queued before it (a page write
        lifts the run's staged miss: a miss must not be lifted by content read before it).
        """
        queued = [w.done for w in (*self._writing, *self._queue) if w.rec.key == key]
        if queued:
            await asyncio.wait(queued)

        def work() -> Work[str]:
            row = yield one("SELECT status FROM pages WHERE key = ?", (key,))
            if row is None:
                return "unknown"
            yield count("UPDATE pages SET last_seen_run = ? WHERE key = ?", (run.id, key))
            if row["status"] == GONE:
                return "tombstone"
            # replaces whatever the run staged for the page before (a move included)
            yield count(
                """INSERT INTO run_misses (run_id, key, http_status) VALUES (?, ?, ?)
                   ON CONFLICT (run_id, key) DO UPDATE SET http_status = excluded.http_status,
                     moved_to = NULL""",
                (run.id, key, http_status),
            )
            return "staged"

        return await self.db.page_write(work())

    async def miss_moves(self, run: Run, target: str, *, http_status: int) -> int:
        """The run's staged moves to page *target* become misses of their pages (the target
        answered that it is not there, so the old addresses are missing too); returns how many.
        It lands after the writes queued before it, as :meth:`record_miss` does."""
        queued = [w.done for w in (*self._writing, *self._queue) if w.rec.key == target]
        if queued:
            await asyncio.wait(queued)

        def work() -> Work[int]:
            n: int = yield count(
                "UPDATE run_misses SET moved_to = NULL, http_status = ? WHERE run_id = ? AND moved_to = ?",
                (http_status, run.id, target),
            )
            return n

        return await self.db.page_write(work())

    def _unseen(
        self,
        run: Run,
        limit: int,
        due_at: datetime | None,
        delisted: bool = False,
        deployed: datetime | None = None,
    ) -> Work[list[tuple[str, str, int]]]:
        # Pages the run's listing decided (requested, or skipped by the schedule, lastmod or
        # deltafetch) are not unseen; with *due_at*, neither are pages not due by then, but for
        # quarantined and audited pages, pages whose change or removal waits for a decision,
        # (*delisted*: the listing is whole) pages a listing found that this one no longer names,
        # and (*deployed*) pages no request checked since the site's last detected deploy.
        found = yield rows(
            """UPDATE pages SET verify_run = :run
               WHERE key IN (
                 SELECT key FROM pages
                 WHERE site = :site AND key > :after AND status IN (:live, :quarantined)
                   AND (last_seen_run IS NULL OR last_seen_run != :run)
                   AND (verify_run IS NULL OR verify_run != :run)
                   AND (listed_run IS NULL OR listed_run != :run)
                   AND (CAST(:due AS TEXT) IS NULL OR status = :quarantined OR audit_run = :run
                        OR next_check_at IS NULL OR next_check_at <= :due OR pending = 'changed'
                        OR key IN (SELECT m.key FROM run_misses m WHERE m.kept = 1)
                        OR (:delisted = 1 AND (found_via IS NULL OR found_via != 'link'))
                        OR COALESCE(last_check_at, last_checked, '') < COALESCE(CAST(:deployed AS TEXT), ''))
                 ORDER BY key LIMIT :limit)
               RETURNING key, url, found_depth""",
            {
                "run": run.id,
                "site": run.site,
                "live": LIVE,
                "quarantined": QUARANTINED,
                "due": _at(due_at),
                "limit": limit,
                "after": self._unseen_after.get(run.id, ""),
                "delisted": int(delisted),
                "deployed": _at(deployed),
            },
        )
        if found:
            # a page the scan passed never becomes unseen later in the run: seen, listed and
            # verified marks are only ever set
            self._unseen_after[run.id] = max(r["key"] for r in found)
        return sorted((r["key"], r["url"], r["found_depth"] or 0) for r in found)

    def unseen_sync(
        self,
        run: Run,
        limit: int,
        *,
        due_at: datetime | None = None,
        delisted: bool = False,
        deployed: datetime | None = None,
    ) -> list[tuple[str, str, int]]:
        """Return up to *limit* pages of the run's site not reached this run, marking them.

        Pages the run's listing decided are left out; with *due_at*, so are pages whose next check
        is later (quarantined and audited pages always count). Blocking: for ``spider_idle``
        handlers, which run when nothing else is in flight.
        """
        if run.site is None:
            return []
        return self.db.transaction_sync(self._unseen(run, limit, due_at, delisted, deployed))

    async def unseen(
        self,
        run: Run,
        limit: int,
        *,
        due_at: datetime | None = None,
        delisted: bool = False,
        deployed: datetime | None = None,
    ) -> list[tuple[str, str, int]]:
        """Async form of :meth:`unseen_sync`."""
        if run.site is None:
            return []
        return await self.db.transaction(self._unseen(run, limit, due_at, delisted, deployed))

    async def record_moves(self, run: Run, keys: Sequence[str], target: str, *, http_status: int) -> int:
        """Stage a permanent redirect of stored pages *keys* to page *target*; returns how many.

        The moves apply when the run reconciles, and only if *target* is a live page by then.
        """

        def work() -> Work[int]:
            n = 0
            for key in keys:
                n += yield count(
                    """INSERT INTO run_misses (run_id, key, http_status, moved_to)
                       SELECT ?, key, ?, ? FROM pages WHERE key = ? AND status IN (?, ?)
                       ON CONFLICT (run_id, key) DO UPDATE SET http_status = excluded.http_status,
                         moved_to = excluded.moved_to""",
                    (run.id, http_status, target, key, LIVE, QUARANTINED),
                )
                yield count("UPDATE pages SET last_seen_run = ? WHERE key = ?", (run.id, key))
            return n

        return await self.db.page_write(work())
