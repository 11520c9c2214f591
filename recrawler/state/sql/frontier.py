"""The frontier role: what sitemap files listed (asked conditionally), and a run's page requests on disk."""

from __future__ import annotations

from typing import TYPE_CHECKING

from recrawler.state.records import ListedEntry, PageRecord, SitemapFile
from recrawler.state.sql.dialect import count, one, rows, values
from recrawler.state.sql.rows import _PAGE_SELECT, _row_to_record, _ts

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    from recrawler.state.records import Run
    from recrawler.state.sql.database import Database
    from recrawler.state.sql.dialect import Work


class SQLFrontier:
    """The frontier role: sitemap files' validators and listings, a run's frontier."""

    def __init__(self, db: Database) -> None:
        self.db = db
        #: the arrival counter of each run's frontier (one store, one run at a time)
        self._seq: dict[int, int] = {}

    async def sitemap_file(self, url: str) -> SitemapFile | None:
        """The sitemap file as last read (validators, page count), or None."""

        def work() -> Work[SitemapFile | None]:
            row = yield one("SELECT url, etag, last_modified, urls FROM sitemap_files WHERE url = ?", (url,))
            if row is None:
                return None
            return SitemapFile(
                url=row["url"], etag=row["etag"], last_modified=row["last_modified"], urls=row["urls"]
            )

        return await self.db.run(work())

    async def add_listing(self, run: Run, sitemap: str, entries: Sequence[ListedEntry]) -> tuple[int, int]:
        """Store entries of *sitemap* read this run (a batch; the file's read goes on). Returns how
        many of them the file did not list when last read, and how many moved their lastmod (0, 0
        for a file never read to its end before)."""

        d = self.db.dialect

        def work() -> Work[tuple[int, int]]:
            # a URL the file lists twice is stored as its last listing says (one statement may
            # hold the whole batch, and a row is updated once a statement)
            listed = {e.url: (sitemap, e.url, e.kind, e.lastmod, run.id, e.pos) for e in entries}
            known = yield one("SELECT 1 FROM sitemap_files WHERE url = ?", (sitemap,))
            added = moved = 0
            if known is not None:
                before = yield rows(
                    f"""SELECT url, lastmod, run_id FROM sitemap_entries
                        WHERE sitemap = ? AND url {d.in_list("?")}""",
                    (sitemap, d.list_param(list(listed))),
                )
                stored = {r["url"]: (r["lastmod"], r["run_id"]) for r in before}
                for url, row in listed.items():
                    old = stored.get(url)
                    if old is None:
                        added += 1
                    elif old[1] != run.id and (old[0] or None) != (row[3] or None):
                        moved += 1
            yield from values(
                "INSERT INTO sitemap_entries (sitemap, url, kind, lastmod, run_id, pos)",
                list(listed.values()),
                """ ON CONFLICT (sitemap, url) DO UPDATE SET kind = excluded.kind,
                     lastmod = excluded.lastmod, run_id = excluded.run_id, pos = excluded.pos""",
                types=("text", "text", "text", "text", "int8", "int8"),
            )
            return added, moved

        if not entries:
            return 0, 0
        return await self.db.page_write(work())

    async def listing_read(self, run: Run, file: SitemapFile, at: datetime) -> int:
        """The read of *file* is complete: store its validators, drop entries it no longer lists;
        returns how many it dropped."""

        def work() -> Work[int]:
            removed = yield count(
                "DELETE FROM sitemap_entries WHERE sitemap = ? AND run_id != ?", (file.url, run.id)
            )
            yield count(
                """INSERT INTO sitemap_files (url, etag, last_modified, urls, parsed_run, fetched_at)
                   VALUES (?, ?, ?, ?, ?, ?)
                   ON CONFLICT (url) DO UPDATE SET etag = excluded.etag,
                     last_modified = excluded.last_modified, urls = excluded.urls,
                     parsed_run = excluded.parsed_run, fetched_at = excluded.fetched_at""",
                (file.url, file.etag, file.last_modified, file.urls, run.id, _ts(at)),
            )
            return int(removed)

        return await self.db.page_write(work())

    async def listing(self, sitemap: str, *, after: int, limit: int) -> list[ListedEntry]:
        """Up to *limit* stored entries of *sitemap* in the file's order, after position *after*."""

        def work() -> Work[list[ListedEntry]]:
            found = yield rows(
                """SELECT url, kind, lastmod, pos FROM sitemap_entries
                   WHERE sitemap = ? AND pos > ? ORDER BY pos LIMIT ?""",
                (sitemap, after, limit),
            )
            return [
                ListedEntry(url=r["url"], kind=r["kind"], lastmod=r["lastmod"], pos=r["pos"]) for r in found
            ]

        return await self.db.run(work())

    def _last_seq(self, run: Run) -> Work[int]:
        seq = self._seq.get(run.id)
        if seq is None:
            # a new run: earlier runs' rows are stale (a killed run leaves its frontier behind)
            yield count("DELETE FROM frontier WHERE run_id != ?", (run.id,))
            row = yield one("SELECT COALESCE(MAX(seq), 0) AS seq FROM frontier WHERE run_id = ?", (run.id,))
            seq = int(row["seq"])
            self._seq[run.id] = seq
        return seq

    async def frontier_has(self, run: Run, keys: Sequence[str]) -> set[str]:
        """Those of *keys* this run's frontier holds (its listing named them)."""

        d = self.db.dialect

        def work() -> Work[set[str]]:
            found = yield rows(
                f"SELECT key FROM frontier WHERE run_id = ? AND key {d.in_list('?')}",
                (run.id, d.list_param(keys)),
            )
            return {r[0] for r in found}

        if not keys:
            return set()
        return await self.db.run(work())

    async def frontier_add(self, run: Run, requests: Sequence[tuple[str, int, bytes]]) -> int:
        """Queue (key, priority, serialised request) rows; a key already queued this run is
        ignored. Returns how many were new."""

        def work() -> Work[int]:
            seq = yield from self._last_seq(run)
            self._seq[run.id] = seq + len(requests)
            added = yield from values(
                "INSERT INTO frontier (run_id, key, rank, seq, request)",
                [(run.id, key, -prio, seq + i, blob) for i, (key, prio, blob) in enumerate(requests, 1)],
                " ON CONFLICT (run_id, key) DO NOTHING",
                types=("int8", "text", "int8", "int8", "bytea"),
            )
            return int(added)

        if not requests:
            return 0
        return await self.db.page_write(work())

    async def frontier_add_listed(
        self, run: Run, requests: Sequence[tuple[str, int, bytes]]
    ) -> tuple[int, int]:
        """Queue rows a listing named, as :meth:`frontier_add` does; returns (how many were new
        to the frontier, how many pages no listing had named this run before: those new and those
        a link or a redirect queued first)."""

        def work() -> Work[tuple[int, int]]:
            d = self.db.dialect
            named = yield count(
                f"UPDATE frontier SET listed = 1 WHERE run_id = ? AND listed = 0 AND key {d.in_list('?')}",
                (run.id, d.list_param([key for key, _, _ in requests])),
            )
            seq = yield from self._last_seq(run)
            self._seq[run.id] = seq + len(requests)
            added = yield from values(
                "INSERT INTO frontier (run_id, key, rank, seq, request, listed)",
                [(run.id, key, -prio, seq + i, blob, 1) for i, (key, prio, blob) in enumerate(requests, 1)],
                " ON CONFLICT (run_id, key) DO NOTHING",
                types=("int8", "text", "int8", "int8", "bytea", "int4"),
            )
            return int(added), int(added) + int(named)

        if not requests:
            return 0, 0
        return await self.db.page_write(work())

    async def frontier_claim(self, run: Run, key: str) -> bool:
        """Mark page *key* as fetched this run outside the frontier (a redirect reached it); False
        when the frontier already holds it (queued or fed): it is fetched from there."""

        def work() -> Work[bool]:
            seq = (yield from self._last_seq(run)) + 1
            self._seq[run.id] = seq
            n = yield count(
                "INSERT INTO frontier (run_id, key, rank, seq, request, fed) VALUES (?, ?, 0, ?, ?, 1) "
                "ON CONFLICT (run_id, key) DO NOTHING",
                (run.id, key, seq, b""),
            )
            return bool(n == 1)

        return await self.db.page_write(work())

    def _next(self, run: Run, limit: int) -> Work[list[tuple[bytes, PageRecord | None]]]:
        taken = yield rows(
            """UPDATE frontier SET fed = 1 WHERE run_id = :run AND key IN (
                 SELECT key FROM frontier WHERE run_id = :run AND fed = 0 ORDER BY rank, seq LIMIT :n)
               RETURNING key, rank, seq, request""",
            {"run": run.id, "n": limit},
        )
        if not taken:
            return []
        d = self.db.dialect
        found = yield rows(
            f"SELECT {_PAGE_SELECT} FROM pages WHERE key {d.in_list('?')}",
            (d.list_param([r["key"] for r in taken]),),
        )
        records = {r["key"]: _row_to_record(r) for r in found}
        taken = sorted(taken, key=lambda r: (r["rank"], r["seq"]))
        return [(bytes(r["request"]), records.get(r["key"])) for r in taken]

    async def frontier_next(self, run: Run, limit: int) -> list[tuple[bytes, PageRecord | None]]:
        """Take up to *limit* queued requests of the run (highest priority first, then oldest),
        each with its page's stored record (None: none): one wait for the store, however many
        page writes queue for it meanwhile."""
        # in the group transaction: a kill re-feeds at most the uncommitted batch
        return await self.db.page_write(self._next(run, limit))


__all__ = ["SQLFrontier"]
