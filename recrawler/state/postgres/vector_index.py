"""pgvector's HNSW indexes over the stored embeddings: which embedders get one, its name and
statement, and building it once enough vectors of a size are stored."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from recrawler.state.postgres.cursors import _execute_sync
from recrawler.state.sql.dialect import POSTGRES, count, drive, one

if TYPE_CHECKING:
    import psycopg

    from recrawler.state.sql.dialect import Work

# pgvector's HNSW index takes vectors of up to 2,000 dimensions; larger ones are searched exactly
_HNSW_MAX_DIMS = 2000


#: the lock (held to the end of its transaction) of whoever creates an embeddings index
INDEX_LOCK_KEY = "recrawler embeddings index"


def exact_only(embedder: str) -> bool:
    """True for the vectors of an embedder searched exactly, never through an HNSW index: the
    lexical hashing embedder's short, sparse queries find 0.16-0.44 of the exact top 10 through
    the graph (benchmarks/bench_pgvector.py), and no search setting brings that to 0.95."""
    return embedder.startswith("hashing:")


def vector_index_name(dims: int, embedder: str) -> str:
    """The name of the HNSW index over *embedder*'s stored vectors of *dims* dimensions."""
    return f"embeddings_hnsw_{dims}_{hashlib.sha256(embedder.encode()).hexdigest()[:12]}"


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def hnsw_index(dims: int, embedder: str) -> str:
    """The HNSW (cosine) index over *embedder*'s stored vectors of *dims* dimensions: one embedder's
    vectors only, so that a search never wades through another's."""
    return (
        f"CREATE INDEX IF NOT EXISTS {vector_index_name(dims, embedder)} ON embeddings "
        f"USING hnsw ((CAST(embedding AS vector({dims}))) vector_cosine_ops) "
        f"WHERE embedder = {_literal(embedder)} AND vector_dims(embedding) = {dims}"
    )


def vector_index_work(dims: int, embedder: str, min_rows: int) -> Work[bool]:
    """Build the HNSW index over *embedder*'s vectors of *dims* dimensions once at least
    *min_rows* are stored (fewer are searched exactly, and cost nothing to store); True when it
    was built now. An :func:`exact_only` embedder's vectors get none.

    One build after the vectors are in costs a fraction of keeping the index up to date row by
    row while a first run stores them. The builder holds a lock to the end of its transaction:
    two runs building at once otherwise deadlocked.
    """
    if exact_only(embedder) or not 0 < dims <= _HNSW_MAX_DIMS:
        return False
    name = vector_index_name(dims, embedder)
    row = yield one("SELECT to_regclass(?) IS NOT NULL AS present", (name,))
    if row[0]:
        return False
    row = yield one(
        "SELECT COUNT(*) AS n FROM (SELECT 1 FROM embeddings WHERE embedder = ? "
        "AND vector_dims(embedding) = ? LIMIT ?) AS counted",
        (embedder, dims, max(min_rows, 1)),
    )
    if int(row[0]) < min_rows:
        return False
    yield one(str(POSTGRES.lock_sql), (INDEX_LOCK_KEY,))
    yield count(hnsw_index(dims, embedder))
    return True


def ensure_vector_index(conn: psycopg.Connection[Any], dims: int, embedder: str, *, min_rows: int) -> bool:
    """:func:`vector_index_work` in a transaction of its own on *conn* (a bulk load's last step)."""
    with conn.transaction():
        return drive(vector_index_work(dims, embedder, min_rows), lambda op: _execute_sync(conn, op))
