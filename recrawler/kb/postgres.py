"""Search over the published chunks of a PostgreSQL knowledge base: pgvector's HNSW index for the
vectors, the full-text index for the words, fused as on SQLite."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from recrawler.exceptions import StateStoreUnavailable
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
from recrawler.redact import redact_url
from recrawler.state import UNREACHABLE, database_errors
from recrawler.state.sql.visibility import published_pages, visible_from, visible_where
from recrawler.words import keyword_terms

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import TracebackType

_PUBLISHED = "SELECT COALESCE(MAX(id), 0) FROM runs WHERE state = 'published'"
#: pgvector's ``hnsw.ef_search`` for indexed searches (at most 1,000: a larger value is ignored).
#: Over a real model's vectors (``bench_pgvector --embedder model``) at 100,000 chunks, the top 10
#: held 0.89 of the exact one at 200 and 0.99 at 800; at a million (the store's m 32 build), 0.987
#: at 800 and 0.996 at 1,000, for a p95 of 84 ms; its default, 40, misses far more
EF_SEARCH = 1000
#: nearest vectors a search takes before the filters (at least, and per hit asked for)
NEAREST_MIN, NEAREST_PER_HIT = 200, 20
_CHUNK = "c.id, c.key, c.url, c.chunk_index, c.heading, c.text, c.chunk_hash, c.version, c.lang"
# a chunk's words, filed by the full-text index (migration 013; see recrawler.words.chunk_words)
_WORDS = "c.words"


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
        import psycopg

        #: the version :meth:`search` shows when none is asked for (None: every version)
        self.default_version = default_version
        from recrawler.kb.sqlite import embedder_spec
        from recrawler.state.postgres.cursors import pg_row, run_sync
        from recrawler.state.postgres.versions import check_schema

        self.label = redact_url(uri)
        with database_errors(self.label, failing=UNREACHABLE):
            self._conn = psycopg.connect(uri, row_factory=pg_row, autocommit=True)
        try:
            applied = run_sync(self._conn, check_schema(self.label))
            if not applied:
                raise StateStoreUnavailable(f"no knowledge base at {self.label!r} (run a crawl first)")
            # exact order among the index's candidates, more candidates when filters drop some,
            # and a wider candidate list than pgvector's 40
            self._conn.execute("SET hnsw.iterative_scan = strict_order")
            self._conn.execute(f"SET hnsw.ef_search = {EF_SEARCH}")
            if embedder is None:
                row = self._conn.execute(
                    "SELECT embedder FROM runs WHERE state = 'published' AND embedder IS NOT NULL "
                    "ORDER BY id DESC LIMIT 1"
                ).fetchone()
                embedder, embedder_options = embedder_spec(row[0] if row else None, embedder_options)
        except BaseException:
            self._conn.close()
            raise
        self.embedder: Embedder = (
            embedder_from_spec(embedder, **embedder_options) if isinstance(embedder, str) else embedder
        )
        #: the cosine a chunk must exceed to be a vector hit (:func:`recrawler.kb.ranking.similarity_floor`)
        self.min_similarity = similarity_floor(self.embedder, min_similarity)
        from recrawler.state.postgres.vector_index import exact_only

        self._exact = exact_only(self.embedder.id)

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
        """The last published run's id, of any site (0: nothing published yet)."""
        row = self._conn.execute(_PUBLISHED).fetchone()
        return int(row[0]) if row is not None else 0

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
        with database_errors(self.label), self._conn.transaction():
            self._conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
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
            found = self._nearest(q, fetch, scope)
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
        top = self._conn.execute("SELECT COALESCE(MAX(id), 0) FROM chunks").fetchone()
        size = int(top[0]) if top is not None else 0
        limit = term_limit(size)
        df: dict[str, int] = {}
        for term in terms:
            row = self._conn.execute(
                f"SELECT COUNT(*) FROM (SELECT 1 FROM chunks c WHERE {_WORDS} @@ to_tsquery('simple', %(t)s) "
                "LIMIT %(limit)s) m",
                {"t": f"'{term}'", "limit": limit + 1},
            ).fetchone()
            if row is not None and 0 < int(row[0]) <= limit:
                df[term] = int(row[0])
        if not df:
            return []
        params: dict[str, Any] = {"q": " | ".join(f"'{t}'" for t in df), "n": 4 * n}
        where = f"{_WORDS} @@ to_tsquery('simple', %(q)s) AND {visible_where('c')}"
        if scope.site is not None:
            where += " AND p.site = %(site)s"
            params["site"] = scope.site
        sliced, slice_params = scope.where_named("c", "%({})s")
        where += sliced
        params.update(slice_params)
        rank = (
            "ts_rank_cd(setweight(to_tsvector('simple', "
            "regexp_replace(c.heading, '[^[:alnum:]]+', ' ', 'g')), 'A') "
            "|| to_tsvector('simple', regexp_replace(c.text, '[^[:alnum:]]+', ' ', 'g')), "
            "to_tsquery('simple', %(q)s), 1)"
        )
        # the best few times n matches by PostgreSQL's rank, then ranked as SQLite ranks them
        sql = f"""SELECT c.id, c.key, c.chunk_index, c.heading, c.text, {rank} AS rank
                  FROM chunks c {visible_from("c")} LEFT JOIN {published_pages()} p ON p.key = c.key
                  WHERE {where} ORDER BY rank DESC, c.key, c.chunk_index LIMIT %(n)s"""
        pool = [
            (Ranked(r["id"], r["key"], r["chunk_index"]), r["heading"], r["text"])
            for r in self._conn.execute(sql, params)
        ]
        return bm25(pool, df, size, n)

    def _hits(self, ranked: list[tuple[Ranked, float]]) -> list[Hit]:
        if not ranked:
            return []
        found = {
            r["id"]: r
            for r in self._conn.execute(
                f"""SELECT {_CHUNK}, p.title, p.last_checked, p.last_changed
                    FROM chunks c LEFT JOIN {published_pages()} p ON p.key = c.key
                    WHERE c.id = ANY(%(ids)s)""",
                {"ids": [r.id for r, _ in ranked]},
            )
        }
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

    def _nearest(self, q: np.ndarray, k: int, scope: Slice) -> list[Any]:
        """The *k* visible chunk rows (of *site*) nearest to *q*, with their distance.

        The embedder's nearest vectors come first, then the visibility and site filters keep the
        published chunks among them: when fewer than *k* pass, the search goes on with eight
        times as many vectors, up to all of them. The vectors are ranked by an exact scan for the
        hashing embedder, else by its HNSW index (iterative scans go past ``hnsw.ef_search``).
        """
        dims = int(q.shape[0])
        if self._exact:
            # the distance over the column itself, which no index serves: an exact scan
            distance = f"e.embedding <=> CAST(%(q)s AS vector({dims}))"
        else:
            # the expression of the embedder's HNSW index (recrawler.state.postgres.vector_index)
            distance = f"CAST(e.embedding AS vector({dims})) <=> CAST(%(q)s AS vector({dims}))"
        sliced, slice_params = scope.where_named("c", "%({})s")
        where = visible_where("c") + (" AND p.site = %(site)s" if scope.site is not None else "") + sliced
        sql = f"""WITH nearest AS MATERIALIZED (
                    SELECT e.text_hash, {distance} AS distance FROM embeddings e
                    WHERE e.embedder = %(emb)s AND vector_dims(e.embedding) = {dims}
                    ORDER BY {distance} LIMIT %(n)s)
                  SELECT {_CHUNK}, p.title, p.last_checked, p.last_changed, n.distance
                  FROM nearest n JOIN chunks c ON c.chunk_hash = n.text_hash
                  {visible_from("c")} LEFT JOIN {published_pages()} p ON p.key = c.key
                  WHERE {where} ORDER BY n.distance, c.key, c.chunk_index LIMIT %(k)s"""
        params: dict[str, Any] = {
            "emb": self.embedder.id,
            "q": "[" + ",".join(repr(float(x)) for x in q) + "]",
            "k": k,
            "site": scope.site,
            **slice_params,
        }
        n = max(NEAREST_MIN, NEAREST_PER_HIT * k)
        while True:
            params["n"] = n
            found = self._conn.execute(sql, params).fetchall()
            if len(found) >= k or n >= self._vectors(dims):
                return found
            n *= 8

    def _vectors(self, dims: int) -> int:
        """How many vectors of *dims* dimensions the embedder has stored (an upper bound for a search)."""
        row = self._conn.execute(
            "SELECT COUNT(*) FROM embeddings WHERE embedder = %s AND vector_dims(embedding) = %s",
            (self.embedder.id, dims),
        ).fetchone()
        return int(row[0]) if row is not None else 0

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
        from recrawler.state.sql.dialect import POSTGRES

        def query(sql: str, params: dict[str, Any]) -> list[Any]:
            return self._conn.execute(POSTGRES.sql(sql), params).fetchall()

        scope = Slice.of(None, version or "*", lang)
        with database_errors(self.label), self._conn.transaction():
            self._conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            return read_changes(query, since=since, cursor=cursor, limit=limit, key=key, scope=scope)

    def chunks(self) -> Iterator[ChunkRow]:
        """Yield every published chunk by page key and position, streaming (a server-side cursor)."""
        with self._conn.transaction(), self._conn.cursor(name="recrawler_chunks") as cur:
            cur.execute(
                f"""SELECT {_CHUNK} FROM chunks c {visible_from("c")}
                    WHERE {visible_where("c")} ORDER BY c.key, c.chunk_index"""
            )
            for r in cur:
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
