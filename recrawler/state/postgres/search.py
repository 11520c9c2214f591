"""Search's read role on PostgreSQL: its own blocking connection and the rows a search, the changes
feed and a dump read (pgvector's HNSW index for the vectors, the full-text index for the words);
ranking them is ``recrawler.kb``'s."""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import psycopg

from recrawler.exceptions import StateStoreUnavailable
from recrawler.redact import redact_url
from recrawler.state.errors import UNREACHABLE, database_errors
from recrawler.state.postgres.cursors import pg_row, run_sync
from recrawler.state.postgres.vector_index import exact_only
from recrawler.state.postgres.versions import check_schema
from recrawler.state.sql.changes import ChangeReads
from recrawler.state.sql.dialect import POSTGRES
from recrawler.state.sql.visibility import (
    PUBLISHED_EMBEDDER,
    PUBLISHED_RUN,
    published_pages,
    visible_from,
    visible_where,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    import numpy as np

    from recrawler.state.slices import Slice

__all__ = ["EF_SEARCH", "NEAREST_MIN", "NEAREST_PER_HIT", "PostgreSQLSearchReads"]

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


class PostgreSQLSearchReads:
    """The published chunks of the PostgreSQL database at *uri*: refused when it holds no
    recrawler database, or a newer or foreign one."""

    def __init__(self, uri: str) -> None:
        self.label = redact_url(uri)
        with database_errors(self.label, failing=UNREACHABLE):
            self.conn = psycopg.connect(uri, row_factory=pg_row, autocommit=True)
        try:
            applied = run_sync(self.conn, check_schema(self.label))
            if not applied:
                raise StateStoreUnavailable(f"no knowledge base at {self.label!r} (run a crawl first)")
            # exact order among the index's candidates, more candidates when filters drop some,
            # and a wider candidate list than pgvector's 40
            self.conn.execute("SET hnsw.iterative_scan = strict_order")
            self.conn.execute(f"SET hnsw.ef_search = {EF_SEARCH}")
        except BaseException:
            self.conn.close()
            raise

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()

    def published_run(self) -> int:
        """The last published run's id, of any site (0: nothing published yet)."""
        row = self.conn.execute(PUBLISHED_RUN).fetchone()
        return int(row[0]) if row is not None else 0

    def published_embedder(self) -> str | None:
        """The embedder the last published run that names one indexed with (``runs.embedder``)."""
        row = self.conn.execute(PUBLISHED_EMBEDDER).fetchone()
        return row[0] if row else None

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """One repeatable-read transaction: every row read inside comes from the same published state."""
        with database_errors(self.label), self.conn.transaction():
            self.conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            yield

    def nearest(self, q: np.ndarray[Any, Any], k: int, scope: Slice, embedder: str) -> list[Any]:
        """The *k* visible chunk rows (of *scope*) nearest to *q* among *embedder*'s vectors,
        with their distance.

        The embedder's nearest vectors come first, then the visibility and site filters keep the
        published chunks among them: when fewer than *k* pass, the search goes on with eight
        times as many vectors, up to all of them. The vectors are ranked by an exact scan for the
        hashing embedder, else by its HNSW index (iterative scans go past ``hnsw.ef_search``).
        """
        dims = int(q.shape[0])
        if exact_only(embedder):
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
            "emb": embedder,
            "q": "[" + ",".join(repr(float(x)) for x in q) + "]",
            "k": k,
            "site": scope.site,
            **slice_params,
        }
        n = max(NEAREST_MIN, NEAREST_PER_HIT * k)
        while True:
            params["n"] = n
            found = self.conn.execute(sql, params).fetchall()
            if len(found) >= k or n >= self._vectors(embedder, dims):
                return found
            n *= 8

    def _vectors(self, embedder: str, dims: int) -> int:
        """How many vectors of *dims* dimensions the embedder has stored (an upper bound for a search)."""
        row = self.conn.execute(
            "SELECT COUNT(*) FROM embeddings WHERE embedder = %s AND vector_dims(embedding) = %s",
            (embedder, dims),
        ).fetchone()
        return int(row[0]) if row is not None else 0

    def chunk_count(self) -> int:
        """The highest chunk id: how many chunks were ever written (a bound on the live ones)."""
        top = self.conn.execute("SELECT COALESCE(MAX(id), 0) FROM chunks").fetchone()
        return int(top[0]) if top is not None else 0

    def term_counts(self, terms: list[str], limit: int) -> dict[str, int]:
        """Each word's chunk count, counted no further than *limit* + 1."""
        counts: dict[str, int] = {}
        for term in terms:
            row = self.conn.execute(
                f"SELECT COUNT(*) FROM (SELECT 1 FROM chunks c WHERE {_WORDS} @@ to_tsquery('simple', %(t)s) "
                "LIMIT %(limit)s) m",
                {"t": f"'{term}'", "limit": limit + 1},
            ).fetchone()
            counts[term] = int(row[0]) if row is not None else 0
        return counts

    def keyword_rows(self, terms: list[str], want: int, scope: Slice) -> list[Any]:
        """The *want* visible chunks of *scope* (id, key, chunk_index, heading, text) that have
        one of *terms*, best first by ``ts_rank_cd`` (a heading counting more)."""
        params: dict[str, Any] = {"q": " | ".join(f"'{t}'" for t in terms), "n": want}
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
        sql = f"""SELECT c.id, c.key, c.chunk_index, c.heading, c.text, {rank} AS rank
                  FROM chunks c {visible_from("c")} LEFT JOIN {published_pages()} p ON p.key = c.key
                  WHERE {where} ORDER BY rank DESC, c.key, c.chunk_index LIMIT %(n)s"""
        return self.conn.execute(sql, params).fetchall()

    def hit_rows(self, ids: list[int]) -> dict[int, Any]:
        """The chunk rows of *ids* with their published page's title, last_checked and
        last_changed, by id."""
        return {
            r["id"]: r
            for r in self.conn.execute(
                f"""SELECT {_CHUNK}, p.title, p.last_checked, p.last_changed
                    FROM chunks c LEFT JOIN {published_pages()} p ON p.key = c.key
                    WHERE c.id = ANY(%(ids)s)""",
                {"ids": ids},
            )
        }

    def changes(self) -> ChangeReads:
        """The changes feed's queries (inside :meth:`snapshot`)."""

        def query(sql: str, params: dict[str, Any]) -> list[Any]:
            return self.conn.execute(POSTGRES.sql(sql), params).fetchall()

        return ChangeReads(query)

    def chunks(self) -> Iterator[Any]:
        """Every visible chunk row by page key and position, streaming (a server-side cursor)."""
        with self.conn.transaction(), self.conn.cursor(name="recrawler_chunks") as cur:
            cur.execute(
                f"""SELECT {_CHUNK} FROM chunks c {visible_from("c")}
                    WHERE {visible_where("c")} ORDER BY c.key, c.chunk_index"""
            )
            yield from cur
