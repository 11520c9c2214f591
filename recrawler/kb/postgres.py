"""Search over the published chunks of a PostgreSQL knowledge base: pgvector's HNSW index for the
vectors, the full-text index for the words, fused as on SQLite."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Self

import numpy as np

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
from recrawler.state import open_postgres_search
from recrawler.words import keyword_terms

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import TracebackType


def _dt(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


class PostgreSQLKnowledgeBase:
    """Reads the published knowledge base from PostgreSQL; nearest chunks by cosine distance.

    ``ORDER BY embedding <=> query LIMIT k`` over the embedder's vectors of the query's size:
    exact for the hashing embedder (no index finds its nearest chunks), else served by the HNSW
    index the store builds per embedder and vector size (``hnsw.ef_search`` 1,000; iterative scans
    keep *k* hits when few chunks pass the visibility or site filter). Scores are
    ``1 - cosine distance``, as the SQLite reader's.
    """

    def __init__(
        self,
        uri: str,
        *,
        embedder: Embedder | str | None = None,
        default_version: str | None = None,
        min_similarity: float | None = None,
        **embedder_options: Any,
    ) -> None:
        #: the version :meth:`search` shows when none is asked for (None: every version)
        self.default_version = default_version
        from recrawler.kb.sqlite import embedder_spec

        #: the database's read role (:class:`recrawler.state.postgres.search.PostgreSQLSearchReads`)
        self.reads = open_postgres_search(uri)
        self.label = self.reads.label
        if embedder is None:
            try:
                embedder, embedder_options = embedder_spec(self.reads.published_embedder(), embedder_options)
            except BaseException:
                self.reads.close()
                raise
        self.embedder: Embedder = (
            embedder_from_spec(embedder, **embedder_options) if isinstance(embedder, str) else embedder
        )
        #: the cosine a chunk must exceed to be a vector hit (:func:`recrawler.kb.ranking.similarity_floor`)
        self.min_similarity = similarity_floor(self.embedder, min_similarity)

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
        """The last published run's id, of any site (0: nothing published yet)."""
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
        *lang*, as on SQLite. *mode*: ``hybrid`` (keyword and vector lists fused), ``vector``
        (cosine) or ``keyword`` (PostgreSQL full text). No chunk is a hit that neither list has,
        as on SQLite."""
        if mode not in MODES:
            raise ValueError(f"search mode {mode!r}: expected one of {', '.join(MODES)}")
        scope = Slice.of(site, version, lang, self.default_version)
        if k <= 0 or not query.strip():
            return []
        # the vector list alone needs k chunks; fused lists need more of each
        n = k if mode == "vector" else candidates(k)
        # one snapshot: the lists and the rows come from the same published state
        with self.reads.snapshot():
            vector = self._vector(query, n, scope) if mode != "keyword" else []
            keyword = self._keyword(query, n, scope) if mode != "vector" else []
            return self._hits(fuse(vector, keyword, mode, k))

    def _vector(self, query: str, n: int, scope: Slice) -> list[Ranked]:
        """The *n* visible chunks nearest to *query* whose cosine is above the floor, best first."""
        k = n
        q = np.asarray(self.embedder.embed([query])[0], dtype=np.float32)
        # more than the hits asked for: a cut between chunks whose cosines round alike is made as
        # on SQLite (page key and position), not by the last digits of PostgreSQL's sums
        fetch = 2 * k
        while True:
            found = self.reads.nearest(q, fetch, scope, self.embedder.id)
            ranked = [
                Ranked(r["id"], r["key"], r["chunk_index"], 1.0 - float(r["distance"]))
                for r in found
                # a zero vector (no word the embedder knows) has no distance; a cosine at or below
                # the floor is no match
                if r["distance"] is not None
                and not np.isnan(r["distance"])
                and 1.0 - float(r["distance"]) > self.min_similarity
            ]
            ranked.sort(key=similarity_order)
            # rows left out past the cut may tie with the k-th hit: fetch more until none can
            if len(found) < fetch or len(ranked) <= k or fetch >= 65536:
                return ranked[:k]
            last = round(min(r.similarity or 0.0 for r in ranked), 6)
            if last < round(ranked[k - 1].similarity or 0.0, 6):
                return ranked[:k]
            fetch *= 4

    def _keyword(self, query: str, n: int, scope: Slice) -> list[Ranked]:
        """The *n* visible chunks that best match *query*'s words (``ts_rank_cd``, a heading
        counting more), best first; words in too many chunks are left out, as on SQLite."""
        terms = keyword_terms(query)
        if not terms:
            return []
        size = self.reads.chunk_count()
        limit = term_limit(size)
        df = {t: c for t, c in self.reads.term_counts(terms, limit).items() if 0 < c <= limit}
        if not df:
            return []
        # the best few times n matches by PostgreSQL's rank, then ranked as SQLite ranks them
        pool = [
            (Ranked(r["id"], r["key"], r["chunk_index"]), r["heading"], r["text"])
            for r in self.reads.keyword_rows(list(df), 4 * n, scope)
        ]
        return bm25(pool, df, size, n)

    def _hits(self, ranked: list[tuple[Ranked, float]]) -> list[Hit]:
        if not ranked:
            return []
        found = self.reads.hit_rows([r.id for r, _ in ranked])
        return [
            Hit(
                score=score,
                chunk=_chunk(found[r.id]),
                title=found[r.id]["title"],
                last_checked=_dt(found[r.id]["last_checked"]),
                last_changed=_dt(found[r.id]["last_changed"]),
                similarity=r.similarity,
            )
            for r, score in ranked
        ]

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
        """Yield every published chunk by page key and position, streaming (a server-side cursor)."""
        for r in self.reads.chunks():
            yield _chunk(r)


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


__all__ = ["PostgreSQLKnowledgeBase"]
