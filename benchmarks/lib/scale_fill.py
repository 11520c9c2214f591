"""A knowledge base filled directly with synthetic published chunks and their hashing embeddings
(SQLite by plain inserts, PostgreSQL by COPY), and questions in the generated site's words."""

from __future__ import annotations

import hashlib
import sqlite3
import time
from typing import TYPE_CHECKING, Any

from benchmarks.lib.pg_copy import EMBEDDINGS_COPY, binary_embeddings
from benchmarks.lib.scale_servers import database_size
from benchmarks.lib.sites import GLUE, VERBS, WORDS

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    import numpy as np

CHUNKS_PER_PAGE = 10
FILL_BATCH = 20_000
SITE = "docs.bench.example"
BASE_URL = f"https://{SITE}"
STAMP = "2026-01-01T00:00:00+00:00"


def vocabulary() -> list[str]:
    """The generated site's words."""
    return sorted(set(WORDS) | set(VERBS) | set(GLUE))


def chunk_batches(n: int, seed: int) -> Iterator[tuple[int, list[str], list[str], np.ndarray]]:
    """(first id, texts, sha256 hashes, hashing vectors) for chunks 1..n, in batches."""
    import numpy as np

    from recrawler.kb.embedders import HashingEmbedder

    embedder = HashingEmbedder()
    words = np.array(vocabulary())
    rng = np.random.default_rng(seed)
    for start in range(0, n, FILL_BATCH):
        b = min(FILL_BATCH, n - start)
        lengths = rng.integers(30, 90, size=b)
        picks = rng.integers(0, len(words), size=(b, 90))
        texts = [
            f"Part {start + i + 1}: " + " ".join(words[picks[i, : lengths[i]]].tolist()) + "."
            for i in range(b)
        ]
        hashes = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
        yield start + 1, texts, hashes, embedder.embed(texts)


def page_of(chunk_id: int) -> tuple[str, int]:
    """The page key and chunk index of chunk *chunk_id* (1-based; CHUNKS_PER_PAGE chunks a page)."""
    page, index = divmod(chunk_id - 1, CHUNKS_PER_PAGE)
    return f"{BASE_URL}/docs/p{page:07d}.html", index


def _run_row(dialect: str) -> tuple[str, tuple[Any, ...]]:
    p = "?" if dialect == "sqlite" else "%s"
    sql = (
        "INSERT INTO runs (id, spider, site, started_at, finished_at, finish_reason, state, published_at, "
        "embedder) "
        f"VALUES ({', '.join([p] * 9)})"
    )
    return sql, (1, "docs", SITE, STAMP, STAMP, "finished", "published", STAMP, "hashing")


class SQLiteFill:
    """Fills a SQLite knowledge base by plain inserts (the store's schema, its migrations)."""

    def __init__(self, path: Path) -> None:
        from recrawler.state.sqlite.versions import migrate

        self.uri = f"sqlite:///{path}"
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        migrate(self.conn, str(path), dry_run=False)
        self.conn.execute("PRAGMA synchronous = OFF")
        self.conn.execute("BEGIN")
        self.conn.execute(*_run_row("sqlite"))
        self.seconds = 0.0

    def add(
        self, first: int, texts: list[str], hashes: list[str], vectors: np.ndarray, embedder_id: str
    ) -> None:
        t0 = time.perf_counter()
        chunks, pages = [], []
        for i, (text, h) in enumerate(zip(texts, hashes, strict=True)):
            cid = first + i
            key, index = page_of(cid)
            if index == 0:
                pages.append(
                    (key, SITE, key, f"Page {cid // CHUNKS_PER_PAGE}", STAMP, STAMP, 1, CHUNKS_PER_PAGE)
                )
            chunks.append((cid, key, index, h, key, f"Section {index}", text, 1))
        self.conn.executemany(
            "INSERT INTO pages (key, site, url, title, first_seen, last_checked, last_seen_run, chunks) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            pages,
        )
        self.conn.executemany(
            "INSERT INTO chunks (id, key, chunk_index, chunk_hash, url, heading, text, added_run) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            chunks,
        )
        blobs = vectors.astype("<f4")
        self.conn.executemany(
            "INSERT INTO embeddings (embedder, text_hash, vector) VALUES (?, ?, ?)",
            ((embedder_id, h, blobs[i].tobytes()) for i, h in enumerate(hashes)),
        )
        self.seconds += time.perf_counter() - t0

    def finish(self) -> dict[str, Any]:
        t0 = time.perf_counter()
        self.conn.execute("COMMIT")
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.conn.close()
        self.seconds += time.perf_counter() - t0
        return {"fill_s": self.seconds, "index_s": None, "db_bytes": database_size(self.uri)}


class PostgresFill:
    """Fills a PostgreSQL knowledge base with COPY (the store's schema, its migrations), then
    builds the HNSW index the store would build, after the load (a bulk load's usual order)."""

    def __init__(self, uri: str) -> None:
        import psycopg

        from recrawler.state.postgres.cursors import _execute_sync
        from recrawler.state.postgres.versions import migrate
        from recrawler.state.sql.dialect import drive

        self.uri = uri
        self.conn = psycopg.connect(uri, autocommit=True)
        with self.conn.transaction():
            drive(migrate("bench"), lambda op: _execute_sync(self.conn, op))
        self.conn.execute(*_run_row("postgresql"))
        self.seconds = 0.0

    def add(
        self, first: int, texts: list[str], hashes: list[str], vectors: np.ndarray, embedder_id: str
    ) -> None:
        from recrawler.words import chunk_words

        t0 = time.perf_counter()
        n = len(texts)
        with self.conn.transaction(), self.conn.cursor() as cur:
            with cur.copy(
                "COPY pages (key, site, url, title, first_seen, last_checked, last_seen_run, chunks) "
                "FROM STDIN"
            ) as copy:
                for cid in range(first, first + n):
                    key, index = page_of(cid)
                    if index == 0:
                        copy.write_row(
                            (
                                key,
                                SITE,
                                key,
                                f"Page {cid // CHUNKS_PER_PAGE}",
                                STAMP,
                                STAMP,
                                1,
                                CHUNKS_PER_PAGE,
                            )
                        )
            with cur.copy(
                "COPY chunks (id, key, chunk_index, chunk_hash, url, heading, text, added_run, words) "
                "FROM STDIN"
            ) as copy:
                for i, (text, h) in enumerate(zip(texts, hashes, strict=True)):
                    key, index = page_of(first + i)
                    heading = f"Section {index}"
                    # (letters-and-digits words: their text form is the tsvector's)
                    words = chunk_words(heading, text)
                    copy.write_row((first + i, key, index, h, key, heading, text, 1, words))
            with cur.copy(EMBEDDINGS_COPY) as copy:
                copy.write(binary_embeddings(embedder_id, hashes, vectors))
        self.seconds += time.perf_counter() - t0

    def finish(self, dims: int, embedder_id: str, maintenance_work_mem: str) -> dict[str, Any]:
        from recrawler.state.postgres.vector_index import (
            default_build,
            ensure_vector_index,
            vector_index_name,
        )

        self.conn.execute("ANALYZE")
        t0 = time.perf_counter()
        self.conn.execute(f"SET maintenance_work_mem = '{maintenance_work_mem}'")
        # the store's own build (none for the hashing embedder: its vectors are searched exactly)
        m, ef = default_build()
        built = ensure_vector_index(self.conn, dims, embedder_id, min_rows=0, hnsw=(m, ef))
        index_s = time.perf_counter() - t0
        self.conn.execute("ANALYZE")
        name = vector_index_name(dims, embedder_id, m, ef)
        index_bytes = self.conn.execute("SELECT pg_relation_size(to_regclass(%s))", (name,)).fetchone()[0]
        self.conn.close()
        return {
            "fill_s": self.seconds,
            "index_s": index_s if built else None,
            "index_bytes": int(index_bytes) if index_bytes is not None else None,
            "db_bytes": database_size(self.uri),
        }


def hnsw_scans(uri: str, dims: int, embedder_id: str) -> int:
    """How many scans the HNSW index has served (``pg_stat_user_indexes``)."""
    import psycopg

    from recrawler.state.postgres.vector_index import default_build, vector_index_name

    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
        row = conn.execute(
            "SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = %s",
            (vector_index_name(dims, embedder_id, *default_build()),),
        ).fetchone()
    return int(row[0]) if row else 0


def make_queries(n: int, seed: int) -> list[str]:
    """Short questions in the site's words."""
    import random

    rng = random.Random(f"{seed}:queries")
    forms = ("how do I {v} the {a} {b}", "{a} {b} {c}", "why does {a} {v} fail", "{v} {a} with {b} and {c}")
    return [
        rng.choice(forms).format(
            v=rng.choice(VERBS), a=rng.choice(WORDS), b=rng.choice(WORDS), c=rng.choice(WORDS)
        )
        for _ in range(n)
    ]
