"""The search index's write side: the vector blocks SQLite's exact search reads
(:mod:`recrawler.state.sqlite.vectors` reads them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from recrawler.state.sql.dialect import count, many, one, rows

if TYPE_CHECKING:
    import numpy as np

    from recrawler.state.sql.database import Database
    from recrawler.state.sql.dialect import Work

__all__ = ["BLOCK", "SQLSearchIndex", "build_blocks", "encode_columns"]

#: cached vectors per block: one column of a block is 16 KB of int8 (and its scale)
BLOCK = 16_384


#: rows read at a time (a block's rows are read twice: for its scales, then for its numbers)
_PAGE = 256
#: columns written a statement
_COLUMNS = 64


def _scales(max_abs: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Each column's scale: its largest magnitude / 127, as float32."""
    import numpy as np

    return (max_abs / np.float32(127.0)).astype("<f4")


def _quantize(columns: np.ndarray[Any, Any], scales: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """*columns* (float32, a row per dimension) over their *scales*, rounded to int8."""
    import numpy as np

    safe = np.where(scales > 0, scales, np.float32(1.0))[:, None]
    return np.clip(np.rint(columns / safe), -127, 127).astype(np.int8)


def encode_columns(matrix: np.ndarray[Any, Any]) -> list[bytes]:
    """The columns of a block's vectors (*matrix*: one row per vector), each as its scale
    (float32: the column's largest magnitude / 127) then its numbers over that scale rounded to
    int8: a number read back is within half the scale of the stored one."""
    import numpy as np

    columns = np.ascontiguousarray(matrix.T, dtype=np.float32)
    scales = _scales(np.abs(columns).max(axis=1))
    quantized = _quantize(columns, scales)
    return [scales[d].tobytes() + quantized[d].tobytes() for d in range(columns.shape[0])]


def _page(embedder: str, after: int, limit: int) -> Work[tuple[list[Any], np.ndarray[Any, Any]]]:
    """Up to *limit* of the embedder's cached vectors after rowid *after*: their rows (rowid, text
    hash, vector) and their vectors as float32 rows."""
    import numpy as np

    found: list[Any] = yield rows(
        # +embedder: walk the table from the rowid on (the key index would read every row)
        "SELECT rowid, text_hash, vector FROM embeddings WHERE rowid > ? AND +embedder = ? "
        "ORDER BY rowid LIMIT ?",
        (after, embedder, limit),
    )
    if not found:
        return found, np.empty((0, 0), dtype="<f4")
    vectors = np.frombuffer(b"".join(bytes(r[2]) for r in found), dtype="<f4").reshape(len(found), -1)
    return found, vectors


def _block(
    embedder: str, after: int
) -> Work[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any], str] | None]:
    """The next block after rowid *after* as :func:`encode_columns` makes it (its scales and its
    int8 columns), with its rowids and its last text hash; None when fewer than a block's vectors
    follow. Its rows are read a page at a time, twice (the columns' largest magnitudes, then their
    numbers over the scales), in the caller's transaction: what is held is the block's int8
    columns and a page of rows, never its float32 vectors."""
    import numpy as np

    ids = np.empty(BLOCK, dtype="<i8")
    max_abs: np.ndarray[Any, Any] | None = None
    n, last, last_hash = 0, after, ""
    while n < BLOCK:
        found, vectors = yield from _page(embedder, last, min(_PAGE, BLOCK - n))
        if not found:
            return None
        page_max = np.abs(vectors).max(axis=0)
        max_abs = page_max if max_abs is None else np.maximum(max_abs, page_max)
        ids[n : n + len(found)] = [r[0] for r in found]
        n, last, last_hash = n + len(found), int(found[-1][0]), str(found[-1][1])
    assert max_abs is not None
    scales = _scales(max_abs)
    quantized = np.empty((len(scales), BLOCK), dtype=np.int8)
    n, last = 0, after
    while n < BLOCK:
        found, vectors = yield from _page(embedder, last, min(_PAGE, BLOCK - n))
        quantized[:, n : n + len(found)] = _quantize(np.ascontiguousarray(vectors.T), scales)
        n, last = n + len(found), int(found[-1][0])
    return scales, quantized, ids, last_hash


def build_blocks(embedder: str) -> Work[int]:
    """Write the embedder's full blocks of cached vectors that are not written yet; return how many.

    Idempotent and crash-safe in the caller's transaction: a block is written whole with its row
    in ``vector_blocks``, and the next call starts after the last block's last rowid. Blocks
    written as float16 columns (before int8 columns) are written again, in the same transaction.
    """
    legacy = yield one(
        "SELECT 1 FROM vector_columns WHERE embedder = ? AND block = 0 AND length(data) = ? LIMIT 1",
        (embedder, 2 * BLOCK),
    )
    if legacy is not None:
        yield count("DELETE FROM vector_columns WHERE embedder = ?", (embedder,))
        yield count("DELETE FROM vector_blocks WHERE embedder = ?", (embedder,))
    last = yield one(
        "SELECT block, last_row FROM vector_blocks WHERE embedder = ? ORDER BY block DESC LIMIT 1",
        (embedder,),
    )
    block, after = (int(last[0]) + 1, int(last[1])) if last is not None else (0, 0)
    top = yield one("SELECT MAX(rowid) FROM embeddings")
    # rowids are dense: fewer new rows than a block in all (any embedder) cannot fill one
    if top is None or top[0] is None or int(top[0]) - after < BLOCK:
        return 0
    written = 0
    while True:
        encoded = yield from _block(embedder, after)
        if encoded is None:
            return written
        scales, quantized, ids, last_hash = encoded
        for start in range(0, len(scales), _COLUMNS):
            yield many(
                "INSERT INTO vector_columns (embedder, dim, block, data) VALUES (?, ?, ?, ?)",
                [
                    (embedder, d, block, scales[d].tobytes() + quantized[d].tobytes())
                    for d in range(start, min(start + _COLUMNS, len(scales)))
                ],
            )
        yield count(
            "INSERT INTO vector_blocks (embedder, block, last_row, last_hash, rowids) VALUES (?, ?, ?, ?, ?)",
            (embedder, block, int(ids[-1]), last_hash, ids.tobytes()),
        )
        after = int(ids[-1])
        block += 1
        written += 1


class SQLSearchIndex:
    """Writes the blocks of cached vectors that SQLite's search reads (PostgreSQL searches with
    pgvector's index: nothing to write there)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def index_vectors(self, embedder: str) -> int:
        """Write the embedder's full blocks not written yet, in one transaction; how many."""
        if self.db.dialect.name != "sqlite":
            return 0
        return await self.db.transaction(build_blocks(embedder))
