"""The frontier role on SQLite: what sitemap files listed, and a run's page requests on disk."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from recrawler.state.records import ListedEntry, PageRecord, Run, SitemapFile
from recrawler.state.sqlite.rows import _PAGE_COLUMNS, _row_to_record, _ts

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Sequence
    from datetime import datetime

    from recrawler.state.sqlite.database import SQLiteDatabase


class SQLiteFrontier:
    """The frontier role on SQLite: sitemap files' validators and listings, a run's frontier."""

    def __init__(self, db: SQLiteDatabase) -> None:
        self.db = db
        #: the arrival counter of each run's frontier (runs on the worker thread only)
        self._seq: dict[int, int] = {}

    async def sitemap_file(self, url: str) -> SitemapFile | None:
        """The sitemap file as last read (validators, page count), or None."""

        def work() -> SitemapFile | None:
            row = self.db.conn.execute(
                "SELECT url, etag, last_modified, urls FROM sitemap_files WHERE url = ?", (url,)
            ).fetchone()
            if row is None:
                return None
            return SitemapFile(
                url=row["url"], etag=row["etag"], last_modified=row["last_modified"], urls=row["urls"]
            )

        return await self.db._call(self.db._guard, work)

    async def add_listing(self, run: Run, sitemap: str, entries: Sequence[ListedEntry]) -> None:
        """Store entries of *sitemap* read this run (a batch; the file's read goes on)."""

        def work(conn: sqlite3.Connection) -> None:
            conn.executemany(
                """INSERT INTO sitemap_entries (sitemap, url, kind, lastmod, run_id, pos)
                   VALUES (?, ?, ?, ?, ?, ?)
                   ON CONFLICT (sitemap, url) DO UPDATE SET kind = excluded.kind,
                     lastmod = excluded.lastmod, run_id = excluded.run_id, pos = excluded.pos""",
                [(sitemap, e.url, e.kind, e.lastmod, run.id, e.pos) for e in entries],
            )

        if entries:
            await self.db._page_write(work)

    async def listing_read(self, run: Run, file: SitemapFile, at: datetime) -> None:
        """The read of *file* is complete: store its validators, drop entries it no longer lists."""

        def work(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM sitemap_entries WHERE sitemap = ? AND run_id != ?", (file.url, run.id))
            conn.execute(
                """INSERT INTO sitemap_files (url, etag, last_modified, urls, parsed_run, fetched_at)
                   VALUES (?, ?, ?, ?, ?, ?)
                   ON CONFLICT (url) DO UPDATE SET etag = excluded.etag,
                     last_modified = excluded.last_modified, urls = excluded.urls,
                     parsed_run = excluded.parsed_run, fetched_at = excluded.fetched_at""",
                (file.url, file.etag, file.last_modified, file.urls, run.id, _ts(at)),
            )

        await self.db._page_write(work)

    async def listing(self, sitemap: str, *, after: int, limit: int) -> list[ListedEntry]:
        """Up to *limit* stored entries of *sitemap* in the file's order, after position *after*."""

        def work() -> list[ListedEntry]:
            rows = self.db.conn.execute(
                """SELECT url, kind, lastmod, pos FROM sitemap_entries
                   WHERE sitemap = ? AND pos > ? ORDER BY pos LIMIT ?""",
                (sitemap, after, limit),
            ).fetchall()
            return [
                ListedEntry(url=r["url"], kind=r["kind"], lastmod=r["lastmod"], pos=r["pos"]) for r in rows
            ]

        return await self.db._call(self.db._guard, work)

    def _last_seq(self, conn: sqlite3.Connection, run: Run) -> int:
        seq = self._seq.get(run.id)
        if seq is None:
            # a new run: earlier runs' rows are stale (a killed run leaves its frontier behind)
            conn.execute("DELETE FROM frontier WHERE run_id != ?", (run.id,))
            seq = int(
                conn.execute(
                    "SELECT COALESCE(MAX(seq), 0) FROM frontier WHERE run_id = ?", (run.id,)
                ).fetchone()[0]
            )
            self._seq[run.id] = seq
        return seq

    async def frontier_add(self, run: Run, requests: Sequence[tuple[str, int, bytes]]) -> int:
        """Queue (key, priority, serialised request) rows; a key already queued this run is
        ignored. Returns how many were new."""

        def work(conn: sqlite3.Connection) -> int:
            seq = self._last_seq(conn, run)
            before = conn.total_changes
            conn.executemany(
                "INSERT OR IGNORE INTO frontier (run_id, key, rank, seq, request) VALUES (?, ?, ?, ?, ?)",
                [(run.id, key, -prio, seq + i, blob) for i, (key, prio, blob) in enumerate(requests, 1)],
            )
            self._seq[run.id] = seq + len(requests)
            return conn.total_changes - before

        if not requests:
            return 0
        return await self.db._page_write(work)

    async def frontier_claim(self, run: Run, key: str) -> bool:
        """Mark page *key* as fetched this run outside the frontier (a redirect reached it); False
        when the frontier already holds it (queued or fed): it is fetched from there."""

        def work(conn: sqlite3.Connection) -> bool:
            seq = self._last_seq(conn, run) + 1
            self._seq[run.id] = seq
            cur = conn.execute(
                """INSERT OR IGNORE INTO frontier (run_id, key, rank, seq, request, fed)
                   VALUES (?, ?, 0, ?, x'', 1)""",
                (run.id, key, seq),
            )
            return cur.rowcount == 1

        return await self.db._page_write(work)

    async def records(self, keys: Sequence[str]) -> dict[str, PageRecord]:
        """The stored records of the pages among *keys* (a fed batch's, in one round trip)."""

        def work() -> dict[str, PageRecord]:
            rows = self.db.conn.execute(
                f"SELECT {_PAGE_COLUMNS} FROM pages WHERE key IN (SELECT value FROM json_each(?))",
                (json.dumps(list(keys)),),
            ).fetchall()
            return {r["key"]: _row_to_record(r) for r in rows}

        return await self.db._call(self.db._guard, work)

    def _next(self, run: Run, limit: int) -> list[bytes]:
        self.db._begin()
        rows = self.db.conn.execute(
            """UPDATE frontier SET fed = 1 WHERE run_id = :run AND key IN (
                 SELECT key FROM frontier WHERE run_id = :run AND fed = 0 ORDER BY rank, seq LIMIT :n)
               RETURNING rank, seq, request""",
            {"run": run.id, "n": limit},
        ).fetchall()
        # the group transaction commits it: a kill re-feeds at most the uncommitted batch
        self.db._maybe_commit()
        return [r["request"] for r in sorted(rows, key=lambda r: (r["rank"], r["seq"]))]

    async def frontier_next(self, run: Run, limit: int) -> list[bytes]:
        """Take up to *limit* queued requests of the run: highest priority first, then oldest."""
        return await self.db._call(self.db._guard, lambda: self._next(run, limit))

    def frontier_next_sync(self, run: Run, limit: int) -> list[bytes]:
        """Blocking :meth:`frontier_next`, for ``spider_idle`` handlers."""
        return self.db.call_sync(self.db._guard, lambda: self._next(run, limit))
