"""Search's read role on SQLite: a read-only connection (a bot never locks a crawl) and the rows a
search, the changes feed and a dump read; ranking them is ``recrawler.kb``'s."""

from __future__ import annotations

import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recrawler.exceptions import SchemaVersionError, StateStoreUnavailable
from recrawler.state.errors import DAMAGED, UNREADABLE, database_errors
from recrawler.state.sql.changes import ChangeReads
from recrawler.state.sql.visibility import (
    PUBLISHED_EMBEDDER,
    PUBLISHED_RUN,
    published_pages,
    visible_from,
    visible_where,
)
from recrawler.state.sqlite.vectors import VectorScan
from recrawler.state.sqlite.versions import check_integrity, check_schema, path_from_uri

if TYPE_CHECKING:
    from collections.abc import Iterator

    from recrawler.state.slices import Slice

__all__ = ["SQLiteSearchReads"]

_DOCS = "SELECT COUNT(*) FROM (SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? LIMIT ?)"


class SQLiteSearchReads:
    """The published chunks of the SQLite database at *target* (a path or a ``sqlite://`` URI),
    read-only: refused when missing, newer, foreign, damaged (``quick_check``, once when opened)
    or without a search index yet."""

    def __init__(self, target: str) -> None:
        path = self.path = path_from_uri(target)
        if path != ":memory:" and not Path(path).exists():
            raise StateStoreUnavailable(f"no knowledge base at {path!r} (run a crawl first, or pass --db)")
        conn = None
        try:
            with database_errors(path, failing=UNREADABLE):
                conn = self.conn = sqlite3.connect(
                    Path(path).resolve().as_uri() + "?mode=ro", uri=True, check_same_thread=False
                )
                self.conn.row_factory = sqlite3.Row
                tables = {
                    r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
                }
                # the same checks the store makes: a newer, foreign or damaged database is refused,
                # untouched (quick_check: every page and record, once when the knowledge base opens)
                check_schema(self.conn, path)
                check_integrity(self.conn, path, quick=True)
        except SchemaVersionError:
            if conn is not None:
                conn.close()
            raise
        if "chunks" not in tables or "vector_blocks" not in tables:
            self.conn.close()
            raise SchemaVersionError(
                f"{path!r} has no search index yet (schema older than 11): run a crawl to upgrade it"
            )
        self._df: dict[str, int] = {}
        self._df_version: Any = None

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()

    def vector_scan(self, embedder: str, *, cache_bytes: int) -> VectorScan:
        """The exact scan of *embedder*'s cached vectors, keeping up to *cache_bytes* of columns."""
        return VectorScan(self.conn, embedder, cache_bytes=cache_bytes)

    def published_run(self) -> int:
        """The last published run's id (0: nothing published yet)."""
        return int(self.conn.execute(PUBLISHED_RUN).fetchone()[0])

    def published_embedder(self) -> str | None:
        """The embedder the last published run that names one indexed with (``runs.embedder``)."""
        row = self.conn.execute(PUBLISHED_EMBEDDER).fetchone()
        return row[0] if row else None

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """One read transaction: every row read inside comes from the same published state."""
        with database_errors(self.path):
            self.conn.execute("BEGIN")
            try:
                yield
            finally:
                self.conn.execute("COMMIT")

    def _visible(self, where: str, params: list[Any], scope: Slice, source: str = "chunks c") -> str:
        site_join = "JOIN pages sp ON sp.key = c.key" if scope.site is not None else ""
        if scope.site is not None:
            params.append(scope.site)
        sliced, values = scope.where("c")
        params.extend(values)
        of_site = "AND sp.site = ?" if scope.site is not None else ""
        return f"""FROM {source} {visible_from("c")} {site_join}
                   WHERE {where} AND {visible_where("c")} {of_site} {sliced}"""

    def resolve(self, rowids: list[int], scope: Slice) -> dict[int, list[tuple[int, str, int]]]:
        """The visible chunks (of *scope*: id, key, position) whose text is each of the cached
        vectors *rowids*."""
        found: dict[int, list[tuple[int, str, int]]] = {}
        for start in range(0, len(rowids), 500):
            part = rowids[start : start + 500]
            params: list[Any] = list(part)
            sql = "SELECT e.rowid AS rid, c.id, c.key, c.chunk_index " + self._visible(
                f"e.rowid IN ({','.join('?' * len(part))})",
                params,
                scope,
                "embeddings e CROSS JOIN chunks c ON c.chunk_hash = e.text_hash",
            )
            for r in self.conn.execute(sql, params):
                found.setdefault(r["rid"], []).append((r["id"], r["key"], r["chunk_index"]))
        return found

    def allowed(self, embedder: str, scope: Slice) -> set[int]:
        """Every cached vector (rowid) of *embedder* of a visible chunk in *scope*."""
        params: list[Any] = [embedder]
        sql = "SELECT DISTINCT e.rowid " + self._visible(
            "1 = 1",
            params,
            scope,
            "chunks c JOIN embeddings e ON e.embedder = ? AND e.text_hash = c.chunk_hash",
        )
        return {r[0] for r in self.conn.execute(sql, params)}

    def chunk_count(self) -> int:
        """The highest chunk id: how many chunks were ever written (a bound on the live ones)."""
        return int(self.conn.execute("SELECT COALESCE(MAX(id), 0) FROM chunks").fetchone()[0])

    def term_counts(self, terms: list[str], limit: int) -> dict[str, int]:
        """Each word's chunk count, counted no further than *limit* + 1 (a common word's whole
        posting list is milliseconds at a million chunks): kept while the database is unchanged."""
        version = self.conn.execute("PRAGMA data_version").fetchone()[0]
        if version != self._df_version or len(self._df) > 100_000:
            self._df, self._df_version = {}, version
        for term in terms:
            if term not in self._df:
                self._df[term] = int(self.conn.execute(_DOCS, (f'"{term}"', limit + 1)).fetchone()[0])
        return {term: self._df[term] for term in terms}

    def keyword_rows(self, terms: list[str], want: int, scope: Slice) -> list[Any]:
        """At least *want* visible chunks of *scope* (id, key, chunk_index, heading, text) that
        have one of *terms*, FTS5's best first (fewer when fewer match)."""
        match = " OR ".join(f'"{t}"' for t in terms)
        pool: list[Any] = []
        offset, page = 0, want
        while len(pool) < want:
            ids = [
                r[0]
                for r in self.conn.execute(
                    "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? "
                    "ORDER BY bm25(chunks_fts, 2.0, 1.0), rowid LIMIT ? OFFSET ?",
                    (match, page, offset),
                )
            ]
            if not ids:
                break
            params: list[Any] = list(ids)
            sql = "SELECT c.id, c.key, c.chunk_index, c.heading, c.text " + self._visible(
                f"c.id IN ({','.join('?' * len(ids))})", params, scope
            )
            pool.extend(self.conn.execute(sql, params))
            offset += page
            page *= 4
        return pool

    def hit_rows(self, ids: list[int]) -> tuple[dict[int, Any], dict[str, Any]]:
        """The chunk rows of *ids* by id, and their published pages (title, last_checked,
        last_changed) by key."""
        marks = ",".join("?" * len(ids))
        # a damaged file (text that no longer decodes): one line, no traceback
        with database_errors(self.path, failing=DAMAGED):
            rows = {
                r["id"]: r
                for r in self.conn.execute(
                    f"""SELECT id, key, url, chunk_index, heading, text, chunk_hash, version, lang FROM chunks
                        WHERE id IN ({marks})""",
                    ids,
                )
            }
            # the hits' pages only: joined to the chunks, the pages' view is built whole per query
            pages = {
                r["key"]: r
                for r in self.conn.execute(
                    f"""SELECT p.key, p.title, p.last_checked, p.last_changed FROM {published_pages()} p
                        WHERE p.key IN (SELECT key FROM chunks WHERE id IN ({marks}))""",
                    ids,
                )
            }
        return rows, pages

    def changes(self) -> ChangeReads:
        """The changes feed's queries (inside :meth:`snapshot`)."""

        def query(sql: str, params: dict[str, Any]) -> list[sqlite3.Row]:
            return self.conn.execute(sql, params).fetchall()

        return ChangeReads(query)

    def chunks(self) -> Iterator[Any]:
        """Every visible chunk row by page key and position, streaming."""
        # a damaged file (text that no longer decodes, a malformed page): one line, no traceback
        with database_errors(self.path, failing=DAMAGED):
            cur = self.conn.execute(
                f"""SELECT c.key, c.url, c.chunk_index, c.heading, c.text, c.chunk_hash, c.version, c.lang
                    FROM chunks c
                    {visible_from("c")} WHERE {visible_where("c")} ORDER BY c.key, c.chunk_index"""
            )
            yield from cur
