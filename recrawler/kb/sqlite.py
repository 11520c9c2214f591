"""Search over the published chunks of a SQLite knowledge base: exact vectors, FTS5 words, fused."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from recrawler.exceptions import (
    ConfigurationError,
    SchemaVersionError,
    StateStoreError,
    StateStoreUnavailable,
)
from recrawler.kb.changes import ChangeBatch, read_changes
from recrawler.kb.embedders import Embedder, embedder_from_spec
from recrawler.kb.ranking import (
    MODES,
    Ranked,
    bm25,
    candidates,
    fuse,
    similarity_floor,
    similarity_order,
    term_limit,
)
from recrawler.kb.records import ChunkRow, Hit, Slice
from recrawler.kb.vectors import VectorScan
from recrawler.state import DAMAGED, UNREADABLE, database_errors
from recrawler.state.sql.search import BLOCK
from recrawler.state.sql.visibility import published_pages, visible_from, visible_where
from recrawler.words import keyword_terms

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import TracebackType

_PUBLISHED = "SELECT COALESCE(MAX(id), 0) FROM runs WHERE state = 'published'"
_DOCS = "SELECT COUNT(*) FROM (SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? LIMIT ?)"


def embedder_spec(stored: str | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The embedder spec and options a run recorded (``runs.embedder``), caller's options first."""
    if not stored:
        return "hashing", options
    try:
        data = json.loads(stored)
    except ValueError:
        return stored, options
    merged = dict(options)
    if data.get("base_url") and "base_url" not in merged:
        merged["base_url"] = data["base_url"]
    return str(data.get("spec") or "hashing"), merged


def _dt(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


class SQLiteKnowledgeBase:
    """Reads the published knowledge base with a read-only connection (a bot never locks a crawl).

    Vector search is exact without loading the vectors (:mod:`recrawler.kb.vectors`: the cached
    vectors in blocks a dimension at a time, read where the query vector is not zero); keyword
    search is SQLite's FTS5 (BM25); the two lists are fused (:mod:`recrawler.kb.ranking`). Every
    search reads one snapshot, and only the chunks the bot sees
    (:mod:`recrawler.state.sql.visibility`).

    A process that searches again keeps the vector columns it read, up to *cache_mb* MiB (None:
    ``RECRAWLER_SEARCH_CACHE_MB``; 0: none kept), for as long as the database is unchanged.
    """

    def __init__(
        self,
        path: str,
        *,
        embedder: Embedder | str | None = None,
        cache_mb: float | None = None,
        default_version: str | None = None,
        min_similarity: float | None = None,
        **embedder_options: Any,
    ) -> None:
        #: the version :meth:`search` shows when none is asked for (None: every version)
        self.default_version = default_version
        # imported here: the store's package imports this module (recrawler check reads VISIBLE)
        from recrawler.state.sqlite.versions import check_integrity, check_schema

        if cache_mb is None:
            from recrawler.default_settings import RECRAWLER_SEARCH_CACHE_MB

            cache_mb = RECRAWLER_SEARCH_CACHE_MB
        if cache_mb < 0:
            raise ConfigurationError(f"RECRAWLER_SEARCH_CACHE_MB: expected 0 or more (MiB), got {cache_mb!r}")
        self.path = path
        if path != ":memory:" and not Path(path).exists():
            raise StateStoreUnavailable(f"no knowledge base at {path!r} (run a crawl first, or pass --db)")
        conn = None
        try:
            with database_errors(path, failing=UNREADABLE):
                conn = self._conn = sqlite3.connect(
                    Path(path).resolve().as_uri() + "?mode=ro", uri=True, check_same_thread=False
                )
                self._conn.row_factory = sqlite3.Row
                tables = {
                    r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
                }
                # the same checks the store makes: a newer, foreign or damaged database is refused,
                # untouched (quick_check: every page and record, once when the knowledge base opens)
                check_schema(self._conn, path)
                check_integrity(self._conn, path, quick=True)
        except SchemaVersionError:
            if conn is not None:
                conn.close()
            raise
        if "chunks" not in tables or "vector_blocks" not in tables:
            self._conn.close()
            raise SchemaVersionError(
                f"{path!r} has no search index yet (schema older than 11): run a crawl to upgrade it"
            )
        if embedder is None:
            row = self._conn.execute(
                "SELECT embedder FROM runs WHERE state = 'published' AND embedder IS NOT NULL "
                "ORDER BY id DESC LIMIT 1"
            ).fetchone()
            embedder, embedder_options = embedder_spec(row[0] if row else None, embedder_options)
        self.embedder: Embedder = (
            embedder_from_spec(embedder, **embedder_options) if isinstance(embedder, str) else embedder
        )
        #: the cosine a chunk must exceed to be a vector hit (:func:`recrawler.kb.ranking.similarity_floor`)
        self.min_similarity = similarity_floor(self.embedder, min_similarity)
        self._scan = VectorScan(self._conn, self.embedder.id, cache_bytes=int(cache_mb * 2**20))
        self._df: dict[str, int] = {}
        self._df_version: Any = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()
        self.embedder.close()

    def published_run(self) -> int:
        """The last published run's id (0: nothing published yet)."""
        return int(self._conn.execute(_PUBLISHED).fetchone()[0])

    def search(
        self,
        query: str,
        k: int = 5,
        *,
        site: str | None = None,
        mode: str = "hybrid",
        version: str | None = None,
        lang: str | None = None,
    ) -> list[Hit]:
        """Return at most *k* published chunks that match *query*, best first; only chunks of
        *site*'s pages when given, of *version* (None: ``default_version``; ``"*"``: any) and of
        *lang* (``en`` finds ``en-us`` too); pages with no version or language are in every one.
        *mode*: ``hybrid`` (keyword and vector lists fused), ``vector`` (cosine, exact) or
        ``keyword`` (FTS5's BM25). No chunk is a hit that neither list has: a query with no word
        of the pages and no chunk similar above the floor (``min_similarity``) finds nothing."""
        if mode not in MODES:
            raise ValueError(f"search mode {mode!r}: expected one of {', '.join(MODES)}")
        scope = Slice.of(site, version, lang, self.default_version)
        if k <= 0 or not query.strip():
            return []
        # the vector list alone needs k chunks; fused lists need more of each
        n = k if mode == "vector" else candidates(k)
        q = None
        if mode != "keyword":
            q = np.asarray(self.embedder.embed([query])[0], dtype=np.float32)
        with database_errors(self.path):
            # one snapshot: the lists and the rows come from the same published state
            self._conn.execute("BEGIN")
            try:
                vector = self._vector(q, n, scope) if q is not None else []
                keyword = self._keyword(query, n, scope) if mode != "vector" else []
                ranked = fuse(vector, keyword, mode, k)
                return self._hits(ranked)
            finally:
                self._conn.execute("COMMIT")

    def _visible(self, where: str, params: list[Any], scope: Slice, source: str = "chunks c") -> str:
        site_join = "JOIN pages sp ON sp.key = c.key" if scope.site is not None else ""
        if scope.site is not None:
            params.append(scope.site)
        sliced, values = scope.where("c")
        params.extend(values)
        of_site = "AND sp.site = ?" if scope.site is not None else ""
        return f"""FROM {source} {visible_from("c")} {site_join}
                   WHERE {where} AND {visible_where("c")} {of_site} {sliced}"""

    def _resolve(self, rowids: list[int], scope: Slice) -> dict[int, list[Ranked]]:
        """The visible chunks (of *scope*) whose text is each of the cached vectors *rowids*."""
        found: dict[int, list[Ranked]] = {}
        for start in range(0, len(rowids), 500):
            part = rowids[start : start + 500]
            params: list[Any] = list(part)
            sql = "SELECT e.rowid AS rid, c.id, c.key, c.chunk_index " + self._visible(
                f"e.rowid IN ({','.join('?' * len(part))})",
                params,
                scope,
                "embeddings e CROSS JOIN chunks c ON c.chunk_hash = e.text_hash",
            )
            for r in self._conn.execute(sql, params):
                found.setdefault(r["rid"], []).append(Ranked(r["id"], r["key"], r["chunk_index"]))
        return found

    def _allowed(self, scope: Slice) -> set[int]:
        """Every cached vector (rowid) of a visible chunk in *scope* (for filters few chunks pass)."""
        params: list[Any] = [self.embedder.id]
        sql = "SELECT DISTINCT e.rowid " + self._visible(
            "1 = 1",
            params,
            scope,
            "chunks c JOIN embeddings e ON e.embedder = ? AND e.text_hash = c.chunk_hash",
        )
        return {r[0] for r in self._conn.execute(sql, params)}

    def _vector(self, q: np.ndarray[Any, np.dtype[np.float32]], n: int, scope: Slice) -> list[Ranked]:
        """The *n* visible chunks of highest cosine above the floor, exact, best first."""
        scores, errors = self._scan.scores(q)
        total = len(scores)
        if not total:
            return []
        if self._scan.dims is not None and q.shape[0] != self._scan.dims:
            msg = (
                f"the query vector has {q.shape[0]} dimensions, the index {self._scan.dims}: "
                f"search with the embedder the knowledge base was built with"
            )
            raise StateStoreError(msg)
        # the most each exact cosine can be; a block's error is the same for all its rows
        n_blocks = (len(errors) - 1) * BLOCK
        upper = scores
        upper[:n_blocks].reshape(-1, BLOCK)[...] += errors[:-1, None]
        hits: list[Ranked] = []
        # positive exact cosines (rowid, cosine) not resolved to chunks yet, best first
        pending: list[tuple[int, float]] = []
        looked = np.zeros(total, dtype=bool)
        wanted = min(total, n + 32)
        masked = False
        minimum = self.min_similarity
        floor = minimum
        while True:
            top = _best(upper, wanted)
            # a vector whose bound is no more than the floor, or below the n-th hit, cannot rank
            least = max(minimum, floor - 1e-6) if len(hits) >= n else minimum
            fresh = top[(upper[top] > least) & ~looked[top]].astype(np.int64)
            looked[fresh] = True
            if len(fresh):
                # exact cosines from the stored vectors before anything else: the bound is no
                # longer needed for those, and only the best of them are resolved to chunks
                rowids = self._scan.rowids(fresh)
                exact = self._scan.exact(list(dict.fromkeys(rowids.tolist())), q)
                pending.extend((r, s) for r, s in exact.items() if s > minimum)
                pending.sort(key=lambda t: -t[1])
            floor = self._take(hits, pending, n, scope)
            # every vector not looked at yet scores at most this
            frontier = float(upper[top[-1]]) if wanted < total and len(top) else -np.inf
            # rounded as the ranking rounds (6 decimals): a vector below it cannot tie with the n-th
            if frontier <= minimum or (len(hits) >= n and frontier < floor - 1e-6):
                break
            if wanted >= 16 * 4096 and not masked:
                # few cached vectors pass the filter (a small site, an old cache): score only those
                allowed = self._allowed(scope)
                all_rows = self._scan.rowids(np.arange(total, dtype=np.int64))
                keep = np.isin(all_rows, np.fromiter(allowed, dtype=np.int64, count=len(allowed)))
                upper = np.where(keep, upper, -np.inf)
                masked = True
            wanted = min(total, wanted * 4)
        return hits[:n]

    def _take(self, hits: list[Ranked], pending: list[tuple[int, float]], n: int, scope: Slice) -> float:
        """Resolve the best *pending* cosines to visible chunks into *hits* (kept in ranking
        order) while they may rank among the first *n*; the n-th hit's cosine (0: fewer hits)."""
        floor = 0.0
        while pending:
            if len(hits) >= n:
                floor = float(hits[n - 1].similarity or 0.0)
                # equal to 6 decimals, a chunk may still come first by page key
                if round(pending[0][1], 6) < round(floor, 6):
                    break
            size = max(n - len(hits), 8)
            part, pending[:size] = pending[:size], []
            cosine = dict(part)
            for rowid, found in self._resolve(list(cosine), scope).items():
                hits.extend(Ranked(r.id, r.key, r.chunk_index, cosine[rowid]) for r in found)
            hits.sort(key=similarity_order)
        return float(hits[n - 1].similarity or 0.0) if len(hits) >= n else 0.0

    def _keyword(self, query: str, n: int, scope: Slice) -> list[Ranked]:
        """The *n* visible chunks that best match *query*'s words, best first: FTS5 finds the
        best few times *n* matches, :func:`~recrawler.kb.ranking.bm25` ranks them (as on
        PostgreSQL)."""
        terms = keyword_terms(query)
        if not terms:
            return []
        size = int(self._conn.execute("SELECT COALESCE(MAX(id), 0) FROM chunks").fetchone()[0])
        limit = term_limit(size)
        # a word's chunk count, counted no further than the limit (a common word's whole posting
        # list is milliseconds at a million chunks): kept while the database is unchanged
        version = self._conn.execute("PRAGMA data_version").fetchone()[0]
        if version != self._df_version or len(self._df) > 100_000:
            self._df, self._df_version = {}, version
        df: dict[str, int] = {}
        for term in terms:
            if term not in self._df:
                self._df[term] = int(self._conn.execute(_DOCS, (f'"{term}"', limit + 1)).fetchone()[0])
            if 0 < self._df[term] <= limit:
                df[term] = self._df[term]
        if not df:
            return []
        match = " OR ".join(f'"{t}"' for t in df)
        pool: list[tuple[Ranked, str, str]] = []
        offset, page = 0, 4 * n
        while len(pool) < 4 * n:
            ids = [
                r[0]
                for r in self._conn.execute(
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
            pool.extend(
                (Ranked(r["id"], r["key"], r["chunk_index"]), r["heading"], r["text"])
                for r in self._conn.execute(sql, params)
            )
            offset += page
            page *= 4
        return bm25(pool, df, size, n)

    def _hits(self, ranked: list[tuple[Ranked, float]]) -> list[Hit]:
        if not ranked:
            return []
        ids = [r.id for r, _ in ranked]
        marks = ",".join("?" * len(ids))
        # a damaged file (text that no longer decodes): one line, no traceback
        with database_errors(self.path, failing=DAMAGED):
            rows = {
                r["id"]: r
                for r in self._conn.execute(
                    f"""SELECT id, key, url, chunk_index, heading, text, chunk_hash, version, lang FROM chunks
                        WHERE id IN ({marks})""",
                    ids,
                )
            }
            # the hits' pages only: joined to the chunks, the pages' view is built whole per query
            pages = {
                r["key"]: r
                for r in self._conn.execute(
                    f"""SELECT p.key, p.title, p.last_checked, p.last_changed FROM {published_pages()} p
                        WHERE p.key IN (SELECT key FROM chunks WHERE id IN ({marks}))""",
                    ids,
                )
            }
        hits = []
        for r, score in ranked:
            row = rows[r.id]
            page = pages.get(row["key"])
            hits.append(
                Hit(
                    score=score,
                    chunk=_chunk(row),
                    title=page["title"] if page is not None else None,
                    last_checked=_dt(page["last_checked"]) if page is not None else None,
                    last_changed=_dt(page["last_changed"]) if page is not None else None,
                    similarity=r.similarity,
                )
            )
        return hits

    def changes(
        self,
        since: int | datetime | None = None,
        *,
        cursor: str | None = None,
        limit: int = 100,
        key: str | None = None,
        version: str | None = None,
        lang: str | None = None,
    ) -> ChangeBatch:
        """The pages the published runs after run *since* changed (:mod:`recrawler.kb.changes`),
        of *version* and *lang* when given."""

        def query(sql: str, params: dict[str, Any]) -> list[sqlite3.Row]:
            return self._conn.execute(sql, params).fetchall()

        scope = Slice.of(None, version or "*", lang)
        with database_errors(self.path):
            self._conn.execute("BEGIN")
            try:
                return read_changes(query, since=since, cursor=cursor, limit=limit, key=key, scope=scope)
            finally:
                self._conn.execute("COMMIT")

    def chunks(self) -> Iterator[ChunkRow]:
        """Yield every published chunk by page key and position, streaming."""
        # a damaged file (text that no longer decodes, a malformed page): one line, no traceback
        with database_errors(self.path, failing=DAMAGED):
            cur = self._conn.execute(
                f"""SELECT c.key, c.url, c.chunk_index, c.heading, c.text, c.chunk_hash, c.version, c.lang
                    FROM chunks c
                    {visible_from("c")} WHERE {visible_where("c")} ORDER BY c.key, c.chunk_index"""
            )
            for r in cur:
                yield _chunk(r)


def _best(values: np.ndarray[Any, np.dtype[np.float32]], n: int) -> np.ndarray[Any, np.dtype[np.intp]]:
    """Positions of the *n* largest *values*, largest first (equal values by position)."""
    if n >= len(values):
        return np.argsort(-values, kind="stable")
    # a threshold from every 64th value, kept when at least n values reach it: one pass over a
    # million scores instead of a selection over all of them
    sample = values[::64]
    m = min(len(sample), 2 * (n // 64) + 4)
    threshold = np.partition(sample, len(sample) - m)[len(sample) - m]
    found = np.flatnonzero(values >= threshold)
    if len(found) < n:
        found = np.arange(len(values))
    if len(found) > n:
        # the n-th largest value; of the positions holding it, the first ones
        chosen = values[found]
        nth = np.partition(chosen, len(chosen) - n)[len(chosen) - n]
        above = found[chosen > nth]
        found = np.sort(np.concatenate([above, found[chosen == nth][: n - len(above)]]))
    return found[np.argsort(-values[found], kind="stable")]


def _chunk(r: sqlite3.Row) -> ChunkRow:
    return ChunkRow(
        key=r["key"],
        url=r["url"],
        chunk_index=r["chunk_index"],
        heading=r["heading"],
        text=r["text"],
        chunk_hash=r["chunk_hash"],
        version=r["version"],
        lang=r["lang"],
    )
