"""Vector search over the published chunks of a PostgreSQL knowledge base (pgvector's HNSW index)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from recrawler.embedders import Embedder, embedder_from_spec
from recrawler.exceptions import StateStoreError, StateStoreUnavailable
from recrawler.index.records import ChunkRow, Hit
from recrawler.index.visibility import published_pages, visible_from, visible_where
from recrawler.redact import redact_text, redact_url

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import TracebackType

_PUBLISHED = "SELECT COALESCE(MAX(id), 0) FROM runs WHERE state = 'published'"
_CHUNK = "c.id, c.key, c.url, c.chunk_index, c.heading, c.text, c.chunk_hash"


def _dt(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


class PostgreSQLKnowledgeBase:
    """Reads the published knowledge base from PostgreSQL; nearest chunks by cosine distance.

    ``ORDER BY embedding <=> query LIMIT k`` over the vectors of the query's size, served by the
    HNSW index the store builds per vector size (iterative scans keep *k* hits when few chunks
    pass the visibility or site filter). Scores are ``1 - cosine distance``, as the SQLite reader's.
    """

    def __init__(self, uri: str, *, embedder: Embedder | str | None = None, **embedder_options: Any) -> None:
        import psycopg

        from recrawler.index.sqlite import embedder_spec
        from recrawler.state.postgres.database import pg_row
        from recrawler.state.postgres.versions import check_schema
        from recrawler.state.sql.dialect import drive

        self.label = redact_url(uri)
        try:
            self._conn = psycopg.connect(uri, row_factory=pg_row, autocommit=True)
        except psycopg.Error as exc:
            msg = f"cannot reach knowledge base {self.label!r}: {redact_text(str(exc).strip())}"
            raise StateStoreUnavailable(msg) from None
        self._psycopg_error = psycopg.Error
        try:
            from recrawler.state.postgres.database import _execute_sync

            applied = drive(check_schema(self.label), lambda op: _execute_sync(self._conn, op))
            if not applied:
                raise StateStoreUnavailable(f"no knowledge base at {self.label!r} (run a crawl first)")
            # exact order among the index's candidates, and more candidates when filters drop some
            self._conn.execute("SET hnsw.iterative_scan = strict_order")
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

    def search(self, query: str, k: int = 5, *, site: str | None = None) -> list[Hit]:
        """Return the *k* published chunks nearest to *query* (cosine), best first; only chunks of
        *site*'s pages when given."""
        if k <= 0 or not query.strip():
            return []
        q = np.asarray(self.embedder.embed([query])[0], dtype=np.float32)
        dims = int(q.shape[0])
        vector = "[" + ",".join(repr(float(x)) for x in q) + "]"
        where = f"e.embedder = %(emb)s AND vector_dims(e.embedding) = {dims} AND {visible_where('c')}"
        params: dict[str, Any] = {"emb": self.embedder.id, "q": vector, "k": k}
        if site is not None:
            where += " AND p.site = %(site)s"
            params["site"] = site
        distance = f"CAST(e.embedding AS vector({dims})) <=> CAST(%(q)s AS vector({dims}))"
        sql = f"""SELECT {_CHUNK}, p.title, p.last_checked, p.last_changed, {distance} AS distance
                  FROM embeddings e JOIN chunks c ON c.chunk_hash = e.text_hash
                  {visible_from("c")} LEFT JOIN {published_pages()} p ON p.key = c.key
                  WHERE {where} ORDER BY {distance} LIMIT %(k)s"""
        try:
            found = self._conn.execute(sql, params).fetchall()
        except self._psycopg_error as exc:
            raise StateStoreError(f"knowledge base {self.label!r}: {redact_text(str(exc))}") from exc
        return [
            Hit(
                score=1.0 - float(r["distance"]),
                chunk=_chunk(r),
                title=r["title"],
                last_checked=_dt(r["last_checked"]),
                last_changed=_dt(r["last_changed"]),
            )
            for r in found
            if r["distance"] is not None and not np.isnan(r["distance"])
        ]

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
    )


__all__ = ["PostgreSQLKnowledgeBase"]
