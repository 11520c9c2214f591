"""Exact vector search over the published chunks of a SQLite knowledge base (numpy, no extension)."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from recrawler.embedders import Embedder, embedder_from_spec
from recrawler.exceptions import SchemaVersionError, StateStoreError, StateStoreUnavailable
from recrawler.index.records import ChunkRow, Hit
from recrawler.index.visibility import published_pages, visible_from, visible_where

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import TracebackType

_PUBLISHED = "SELECT COALESCE(MAX(id), 0) FROM runs WHERE state = 'published'"


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

    Vectors of the published chunks are loaded once into one float32 matrix and searched exactly
    (cosine on normalised vectors); the matrix is reloaded only when another connection committed
    (``PRAGMA data_version``), so searches between runs cost one matrix product.
    """

    def __init__(self, path: str, *, embedder: Embedder | str | None = None, **embedder_options: Any) -> None:
        # imported here: the store's package imports this module (recrawler check reads VISIBLE)
        from recrawler.state.sqlite.versions import check_schema

        self.path = path
        if path != ":memory:" and not Path(path).exists():
            raise StateStoreUnavailable(f"no knowledge base at {path!r} (run a crawl first, or pass --db)")
        try:
            self._conn = sqlite3.connect(
                Path(path).resolve().as_uri() + "?mode=ro", uri=True, check_same_thread=False
            )
            self._conn.row_factory = sqlite3.Row
            tables = {r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            # the same check the store makes: a newer or foreign database is refused, untouched
            check_schema(self._conn, path)
        except sqlite3.DatabaseError as exc:
            raise SchemaVersionError(f"{path!r} is not a readable recrawler database ({exc})") from exc
        except SchemaVersionError:
            self._conn.close()
            raise
        if "chunks" not in tables:
            self._conn.close()
            raise SchemaVersionError(
                f"{path!r} has no knowledge base yet (schema older than 2): run a crawl to upgrade it"
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
        self._version: tuple[int, int] | None = None
        self._ids = np.empty(0, dtype=np.int64)
        self._matrix = np.empty((0, 0), dtype=np.float32)
        #: chunk ids of one site's pages, per site searched (dropped on reload)
        self._site_ids: dict[str, np.ndarray[Any, np.dtype[np.int64]]] = {}

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection and drop the vectors."""
        self._conn.close()
        self._matrix = np.empty((0, 0), dtype=np.float32)
        self.embedder.close()

    def published_run(self) -> int:
        """The last published run's id (0: nothing published yet)."""
        return int(self._conn.execute(_PUBLISHED).fetchone()[0])

    def _load(self) -> None:
        version = (self._conn.execute("PRAGMA data_version").fetchone()[0], self.published_run())
        if version == self._version:
            return
        # one read transaction: the watermark, the count and the rows come from one snapshot
        self._conn.execute("BEGIN")
        try:
            # embeddings first: one sequential pass over the embedder's vectors, one indexed
            # lookup per vector (3-4x faster than SQLite's own chunks-first plan; see
            # benchmarks/bench_vector.py)
            source = f"""FROM embeddings e CROSS JOIN chunks c ON c.chunk_hash = e.text_hash
                         {visible_from("c")}
                         WHERE e.embedder = :emb AND {visible_where("c")}"""
            params = {"emb": self.embedder.id}
            n = self._conn.execute(f"SELECT COUNT(*) {source}", params).fetchone()[0]
            cur = self._conn.execute(f"SELECT c.id, e.vector {source}", params)
            ids = np.empty(n, dtype=np.int64)
            matrix: np.ndarray[Any, np.dtype[np.float32]] | None = None
            i = 0
            # stream the rows into one preallocated matrix: peak memory is the matrix itself
            while i < n and (batch := cur.fetchmany(4096)):
                for cid, blob in batch:
                    if matrix is None:
                        matrix = np.empty((n, len(blob) // 4), dtype=np.float32)
                    matrix[i] = np.frombuffer(blob, dtype="<f4")
                    ids[i] = cid
                    i += 1
        finally:
            self._conn.execute("COMMIT")
        if matrix is not None and i:
            self._matrix, self._ids = matrix[:i], ids[:i]
        else:
            self._matrix = np.empty((0, 0), dtype=np.float32)
            self._ids = np.empty(0, dtype=np.int64)
        self._site_ids = {}
        self._version = version

    def _in_site(self, site: str) -> np.ndarray[Any, np.dtype[np.bool_]]:
        """Which loaded vectors belong to chunks of *site*'s pages."""
        if site not in self._site_ids:
            ids = [
                r[0]
                for r in self._conn.execute(
                    "SELECT c.id FROM chunks c JOIN pages p ON p.key = c.key WHERE p.site = ?", (site,)
                )
            ]
            self._site_ids[site] = np.array(ids, dtype=np.int64)
        return np.isin(self._ids, self._site_ids[site])

    def search(self, query: str, k: int = 5, *, site: str | None = None) -> list[Hit]:
        """Return the *k* published chunks most similar to *query* (cosine), best first; only
        chunks of *site*'s pages when given."""
        try:
            self._load()
            mask = self._in_site(site) if site is not None else None
        except sqlite3.Error as exc:
            raise StateStoreError(f"knowledge base {self.path!r}: {exc}") from exc
        if k <= 0 or not len(self._ids) or not query.strip():
            return []
        q = self.embedder.embed([query])[0].astype(np.float32)
        if q.shape[0] != self._matrix.shape[1]:
            msg = (
                f"the query vector has {q.shape[0]} dimensions, the index {self._matrix.shape[1]}: "
                f"search with the embedder the knowledge base was built with"
            )
            raise StateStoreError(msg)
        scores = self._matrix @ q
        if mask is not None:
            scores = np.where(mask, scores, -np.inf)
            k = min(k, int(mask.sum()))
            if not k:
                return []
        k = min(k, len(scores))
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        ids = [int(self._ids[i]) for i in top]
        rows = {
            r["id"]: r
            for r in self._conn.execute(
                f"""SELECT c.id, c.key, c.url, c.chunk_index, c.heading, c.text, c.chunk_hash,
                           p.title, p.last_checked, p.last_changed
                    FROM chunks c LEFT JOIN {published_pages()} p ON p.key = c.key
                    WHERE c.id IN ({",".join("?" * len(ids))})""",
                ids,
            )
        }
        hits = []
        for i, cid in zip(top, ids, strict=True):
            r = rows.get(cid)
            if r is None:  # retired by a commit between load and lookup: next search reloads
                continue
            hits.append(
                Hit(
                    score=float(scores[i]),
                    chunk=_chunk(r),
                    title=r["title"],
                    last_checked=_dt(r["last_checked"]),
                    last_changed=_dt(r["last_changed"]),
                )
            )
        return hits

    def chunks(self) -> Iterator[ChunkRow]:
        """Yield every published chunk by page key and position, streaming."""
        cur = self._conn.execute(
            f"""SELECT c.key, c.url, c.chunk_index, c.heading, c.text, c.chunk_hash FROM chunks c
                {visible_from("c")} WHERE {visible_where("c")} ORDER BY c.key, c.chunk_index"""
        )
        for r in cur:
            yield _chunk(r)


def _chunk(r: sqlite3.Row) -> ChunkRow:
    return ChunkRow(
        key=r["key"],
        url=r["url"],
        chunk_index=r["chunk_index"],
        heading=r["heading"],
        text=r["text"],
        chunk_hash=r["chunk_hash"],
    )
