"""Search over the published chunks of a SQLite knowledge base: exact vectors, FTS5 words, fused."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from recrawler.exceptions import ConfigurationError, StateStoreError
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
from recrawler.state import open_sqlite_search
from recrawler.words import keyword_terms

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import TracebackType


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

    Vector search is exact without loading the vectors (:mod:`recrawler.state.sqlite.vectors`: the cached
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
        if cache_mb is None:
            from recrawler.default_settings import RECRAWLER_SEARCH_CACHE_MB

            cache_mb = RECRAWLER_SEARCH_CACHE_MB
        if cache_mb < 0:
            raise ConfigurationError(f"RECRAWLER_SEARCH_CACHE_MB: expected 0 or more (MiB), got {cache_mb!r}")
        #: the database's read role (:class:`recrawler.state.sqlite.search.SQLiteSearchReads`)
        self.reads = open_sqlite_search(path)
        self.path = self.reads.path
        if embedder is None:
            embedder, embedder_options = embedder_spec(self.reads.published_embedder(), embedder_options)
        self.embedder: Embedder = (
            embedder_from_spec(embedder, **embedder_options) if isinstance(embedder, str) else embedder
        )
        #: the cosine a chunk must exceed to be a vector hit (:func:`recrawler.kb.ranking.similarity_floor`)
        self.min_similarity = similarity_floor(self.embedder, min_similarity)
        self._scan = self.reads.vector_scan(self.embedder.id, cache_bytes=int(cache_mb * 2**20))

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection."""
        self.reads.close()
        self.embedder.close()

    def published_run(self) -> int:
        """The last published run's id (0: nothing published yet)."""
        return self.reads.published_run()

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
        # one snapshot: the lists and the rows come from the same published state
        with self.reads.snapshot():
            vector = self._vector(q, n, scope) if q is not None else []
            keyword = self._keyword(query, n, scope) if mode != "vector" else []
            ranked = fuse(vector, keyword, mode, k)
            return self._hits(ranked)

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
        block = self._scan.block
        n_blocks = (len(errors) - 1) * block
        upper = scores
        upper[:n_blocks].reshape(-1, block)[...] += errors[:-1, None]
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
                allowed = self.reads.allowed(self.embedder.id, scope)
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
            for rowid, found in self.reads.resolve(list(cosine), scope).items():
                hits.extend(Ranked(i, key, index, cosine[rowid]) for i, key, index in found)
            hits.sort(key=similarity_order)
        return float(hits[n - 1].similarity or 0.0) if len(hits) >= n else 0.0

    def _keyword(self, query: str, n: int, scope: Slice) -> list[Ranked]:
        """The *n* visible chunks that best match *query*'s words, best first: FTS5 finds the
        best few times *n* matches, :func:`~recrawler.kb.ranking.bm25` ranks them (as on
        PostgreSQL)."""
        terms = keyword_terms(query)
        if not terms:
            return []
        size = self.reads.chunk_count()
        limit = term_limit(size)
        df = {t: c for t, c in self.reads.term_counts(terms, limit).items() if 0 < c <= limit}
        if not df:
            return []
        pool = [
            (Ranked(r["id"], r["key"], r["chunk_index"]), r["heading"], r["text"])
            for r in self.reads.keyword_rows(list(df), 4 * n, scope)
        ]
        return bm25(pool, df, size, n)

    def _hits(self, ranked: list[tuple[Ranked, float]]) -> list[Hit]:
        if not ranked:
            return []
        rows, pages = self.reads.hit_rows([r.id for r, _ in ranked])
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

        scope = Slice.of(None, version or "*", lang)
        with self.reads.snapshot():
            return read_changes(
                self.reads.changes(), since=since, cursor=cursor, limit=limit, key=key, scope=scope
            )

    def chunks(self) -> Iterator[ChunkRow]:
        """Yield every published chunk by page key and position, streaming."""
        for r in self.reads.chunks():
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


def _chunk(r: Any) -> ChunkRow:
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
