"""pgvector's HNSW indexes over the stored embeddings: which embedders get one, its name and
statement, and building it once enough vectors of a size are stored."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from recrawler.exceptions import ConfigurationError
from recrawler.state.postgres.cursors import _execute_sync
from recrawler.state.sql.dialect import POSTGRES, count, drive, one, rows

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


#: pgvector's own build options: an index built with them keeps the name it had before they were
#: settings (``RECRAWLER_DB_HNSW_M``, ``RECRAWLER_DB_HNSW_EF_CONSTRUCTION``)
PGVECTOR_M, PGVECTOR_EF_CONSTRUCTION = 16, 64


def default_build() -> tuple[int, int]:
    """The (m, ef_construction) a store builds with unless its settings say otherwise."""
    from recrawler import default_settings

    return default_settings.RECRAWLER_DB_HNSW_M, default_settings.RECRAWLER_DB_HNSW_EF_CONSTRUCTION


def hnsw_options(m: int, ef_construction: int) -> tuple[int, int]:
    """*m* and *ef_construction* checked against pgvector's bounds; ConfigurationError names the
    setting that is out of them."""
    if not 2 <= m <= 100:
        raise ConfigurationError(f"RECRAWLER_DB_HNSW_M: bad value {m!r} (pgvector takes 2 to 100)")
    if not 2 * m <= ef_construction <= 1000:
        raise ConfigurationError(
            f"RECRAWLER_DB_HNSW_EF_CONSTRUCTION: bad value {ef_construction!r} "
            f"(pgvector takes twice RECRAWLER_DB_HNSW_M, {2 * m}, to 1000)"
        )
    return m, ef_construction


def _base_name(dims: int, embedder: str) -> str:
    return f"embeddings_hnsw_{dims}_{hashlib.sha256(embedder.encode()).hexdigest()[:12]}"


def vector_index_name(
    dims: int, embedder: str, m: int = PGVECTOR_M, ef_construction: int = PGVECTOR_EF_CONSTRUCTION
) -> str:
    """The name of the HNSW index over *embedder*'s stored vectors of *dims* dimensions, built
    with *m* and *ef_construction* (which pgvector's own defaults leave out of the name)."""
    base = _base_name(dims, embedder)
    if (m, ef_construction) == (PGVECTOR_M, PGVECTOR_EF_CONSTRUCTION):
        return base
    return f"{base}_m{m}_ef{ef_construction}"


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def hnsw_index(
    dims: int, embedder: str, m: int = PGVECTOR_M, ef_construction: int = PGVECTOR_EF_CONSTRUCTION
) -> str:
    """The HNSW (cosine) index over *embedder*'s stored vectors of *dims* dimensions: one embedder's
    vectors only, so that a search never wades through another's."""
    return (
        f"CREATE INDEX IF NOT EXISTS {vector_index_name(dims, embedder, m, ef_construction)} ON embeddings "
        f"USING hnsw ((CAST(embedding AS vector({dims}))) vector_cosine_ops) "
        f"WITH (m = {int(m)}, ef_construction = {int(ef_construction)}) "
        f"WHERE embedder = {_literal(embedder)} AND vector_dims(embedding) = {dims}"
    )


def vector_index_work(
    dims: int,
    embedder: str,
    min_rows: int,
    m: int = PGVECTOR_M,
    ef_construction: int = PGVECTOR_EF_CONSTRUCTION,
) -> Work[bool]:
    """Build the HNSW index over *embedder*'s vectors of *dims* dimensions (with *m* and
    *ef_construction*) once at least *min_rows* are stored (fewer are searched exactly, and cost
    nothing to store); True when it was built now. An index of the same vectors built with other
    options is dropped once this one is built: changed build settings take effect at the next
    run that stores vectors. An :func:`exact_only` embedder's vectors get none.

    One build after the vectors are in costs a fraction of keeping the index up to date row by
    row while a first run stores them. The builder holds a lock to the end of its transaction:
    two runs building at once otherwise deadlocked.
    """
    if exact_only(embedder) or not 0 < dims <= _HNSW_MAX_DIMS:
        return False
    name = vector_index_name(dims, embedder, m, ef_construction)
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
    yield count(hnsw_index(dims, embedder, m, ef_construction))
    base = _base_name(dims, embedder)
    stale = yield rows(
        "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'embeddings' "
        "AND (indexname = ? OR left(indexname, ?) = ?) AND indexname <> ?",
        (base, len(base) + 2, f"{base}_m", name),
    )
    for (old,) in stale:
        yield count(f'DROP INDEX IF EXISTS "{old}"')
    return True


def ensure_vector_index(
    conn: psycopg.Connection[Any],
    dims: int,
    embedder: str,
    *,
    min_rows: int,
    hnsw: tuple[int, int] | None = None,
) -> bool:
    """:func:`vector_index_work` in a transaction of its own on *conn* (a bulk load's last step),
    built with *hnsw* (m, ef_construction; None: a store's defaults, :func:`default_build`)."""
    with conn.transaction():
        work = vector_index_work(dims, embedder, min_rows, *(hnsw or default_build()))
        return drive(work, lambda op: _execute_sync(conn, op))
