"""The search index's write side: the vector blocks SQLite's exact search reads
(:mod:`recrawler.kb.vectors` reads them)."""

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


def encode_columns(matrix: np.ndarray[Any, Any]) -> list[bytes]:
    """The columns of a block's vectors (*matrix*: one row per vector), each as its scale
    (float32: the column's largest magnitude / 127) then its numbers over that scale rounded to
    int8: a number read back is within half the scale of the stored one."""
    import numpy as np

    columns = np.ascontiguousarray(matrix.T, dtype=np.float32)
    scales = (np.abs(columns).max(axis=1) / np.float32(127.0)).astype("<f4")
    safe = np.where(scales > 0, scales, np.float32(1.0))[:, None]
    quantized = np.clip(np.rint(columns / safe), -127, 127).astype(np.int8)
    return [scales[d].tobytes() + quantized[d].tobytes() for d in range(columns.shape[0])]


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
        found = yield rows(
            # +embedder: walk the table from the rowid on (the key index would read every row)
            "SELECT rowid, text_hash, vector FROM embeddings WHERE rowid > ? AND +embedder = ? "
            "ORDER BY rowid LIMIT ?",
            (after, embedder, BLOCK),
        )
        if len(found) < BLOCK:
            return written
        import numpy as np

        ids = np.fromiter((r[0] for r in found), dtype="<i8", count=BLOCK)
        matrix = np.frombuffer(b"".join(bytes(r[2]) for r in found), dtype="<f4").reshape(BLOCK, -1)
        yield many(
            "INSERT INTO vector_columns (embedder, dim, block, data) VALUES (?, ?, ?, ?)",
            [(embedder, d, block, data) for d, data in enumerate(encode_columns(matrix))],
        )
        yield count(
            "INSERT INTO vector_blocks (embedder, block, last_row, last_hash, rowids) VALUES (?, ?, ?, ?, ?)",
            (embedder, block, int(ids[-1]), found[-1][1], ids.tobytes()),
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
