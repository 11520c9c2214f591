"""The schedule role on SQLite: revisit state, what a run's listing decided, audit samples."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from recrawler.schedule import Revisit, audit_count
from recrawler.state.records import (
    LIVE,
    Run,
    ScheduledPage,
)
from recrawler.state.sqlite.rows import _SCHEDULE_COLUMNS, _at, _row_to_revisit, _row_to_scheduled

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Callable, Sequence

    from recrawler.state.sqlite.database import SQLiteDatabase


class SQLiteSchedule:
    """The schedule role on SQLite: revisit state, what a run's listing decided, audit samples."""

    def __init__(self, db: SQLiteDatabase) -> None:
        self.db = db

    async def scheduled(self, keys: Sequence[str]) -> dict[str, ScheduledPage]:
        """The schedule's view of the stored pages among *keys* (one query for the batch)."""

        def work() -> dict[str, ScheduledPage]:
            rows = self.db.conn.execute(
                f"SELECT {_SCHEDULE_COLUMNS} FROM pages WHERE key IN (SELECT value FROM json_each(?))",
                (json.dumps(list(keys)),),
            ).fetchall()
            return {r["key"]: _row_to_scheduled(r) for r in rows}

        return await self.db._call(self.db._guard, work)

    async def mark_listed(self, run: Run, decided: Sequence[tuple[str, str | None]]) -> None:
        """Note that this run's listing decided these (key, skipping layer or None: requested)."""

        def work(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "UPDATE pages SET listed_run = ?, listed_skip = ? WHERE key = ?",
                [(run.id, skip, key) for key, skip in decided],
            )

        if decided:
            await self.db._page_write(work)

    async def revisit(self, key: str) -> Revisit | None:
        """The revisit state of *key*, or None for an unknown page."""

        return await self.db._call(self.db._guard, lambda: self._revisit(key))

    async def update_revisit(
        self,
        key: str,
        update: Callable[[Revisit | None], Revisit],
        *,
        found_via: str | None = None,
        found_from: str | None = None,
    ) -> tuple[Revisit | None, Revisit]:
        """Read a page's revisit state, store ``update(state)`` in its place; one round trip.

        Returns (before, after). *update* runs on the worker thread: it must be quick and pure.
        """

        def work(conn: sqlite3.Connection) -> tuple[Revisit | None, Revisit]:
            before = self._revisit(key)
            after = update(before)
            self._write_revisit(conn, key, after, found_via, found_from)
            return before, after

        return await self.db._page_write(work)

    def _revisit(self, key: str) -> Revisit | None:
        # the schedule's own clock only: a page checked before schema 4 starts a fresh history
        row = self.db.conn.execute(
            "SELECT last_check_at, next_check_at, check_interval, check_count, change_count, "
            "checked_secs, change_rate FROM pages WHERE key = ?",
            (key,),
        ).fetchone()
        return _row_to_revisit(row) if row is not None else None

    async def record_revisit(
        self, key: str, revisit: Revisit, *, found_via: str | None = None, found_from: str | None = None
    ) -> None:
        """Store a page's revisit state after a check (and how it was found, if not known yet)."""

        def work(conn: sqlite3.Connection) -> None:
            self._write_revisit(conn, key, revisit, found_via, found_from)

        await self.db._page_write(work)

    @staticmethod
    def _write_revisit(
        conn: sqlite3.Connection, key: str, revisit: Revisit, found_via: str | None, found_from: str | None
    ) -> None:
        conn.execute(
            """UPDATE pages SET last_check_at = ?3, next_check_at = ?4, check_interval = ?5,
                 check_count = ?6, change_count = ?7, checked_secs = ?8, change_rate = ?9,
                 found_via = COALESCE(found_via, ?1),
                 found_from = CASE WHEN found_via IS NULL AND ?1 IS NOT NULL THEN ?2 ELSE found_from END
               WHERE key = ?10""",
            (
                found_via,
                found_from,
                _at(revisit.last_check_at),
                _at(revisit.next_check_at),
                revisit.interval,
                revisit.checks,
                revisit.changes,
                revisit.checked_secs,
                revisit.rate,
                key,
            ),
        )

    async def audit_sample(self, run: Run, sample: float) -> list[str]:
        """Draw this run's self-audit sample among the site's live pages; return their keys.

        A ``float`` ``sample`` is a share, an ``int`` a count. Immutable pages are left out.
        """

        def work() -> list[str]:
            conn = self.db.conn
            where = """site = :site AND status = :live AND content_hash IS NOT NULL
                       AND key NOT IN (SELECT page_key FROM deltafetch WHERE page_key IS NOT NULL)"""
            params = {"site": run.site, "live": LIVE, "run": run.id}
            population = conn.execute(f"SELECT COUNT(*) FROM pages WHERE {where}", params).fetchone()[0]
            n = audit_count(sample, int(population))
            if not n:
                return []
            self.db._begin()
            rows = conn.execute(
                f"""UPDATE pages SET audit_run = :run WHERE key IN (
                      SELECT key FROM pages WHERE {where} ORDER BY random() LIMIT :n)
                    RETURNING key""",
                {**params, "n": n},
            ).fetchall()
            self.db._commit()
            return sorted(r[0] for r in rows)

        if run.site is None or sample <= 0:
            return []
        return await self.db._call(self.db._guard, work)
