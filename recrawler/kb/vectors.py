"""Exact vector search on SQLite without loading every vector: the cache in blocks stored a dimension
at a time, read only where the query vector is not zero, and exact scores for the few that may rank.

The embedding cache (``embeddings``) only ever grows, in rowid order. Each full run of
:data:`BLOCK` vectors of an embedder becomes a block (``vector_blocks``: its rowids; and
``vector_columns``: one int8 column per dimension, with its scale), written when a run publishes;
the vectors after the last block (the tail) are read as they are. A query's score for every
cached vector is the sum, over the dimensions where the query is not zero, of query value times
column: the hashing embedder's query vectors have a few dozen such dimensions out of 384, so a
query reads a few dozen columns (16 KB each per block), not the whole cache. A column's numbers
are rounded to half its scale at most, so a block score is within a bound known per block and
query (half the scales, weighted by the query's values) of the exact one: every vector whose
rounded score is within that bound of a hit is scored again exactly from its stored float32
vector, and the ranking is the exact one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from recrawler.state.sql.search import BLOCK

if TYPE_CHECKING:
    import sqlite3

    from numpy.typing import NDArray

__all__ = ["F16_ERROR", "SLACK", "VectorScan"]

#: the most a float16 column's score (blocks written before int8 columns) differs from the exact
#: one, per unit of the query value: float16 keeps 11 significant bits of a unit vector's numbers
F16_ERROR = 2.0**-11
#: float32 sums and float16's smallest numbers: what a block score may differ by besides rounding
SLACK = 2e-5


@dataclass(slots=True)
class _Block:
    block: int
    last_row: int
    rowids: NDArray[np.int64] | None = None


class VectorScan:
    """Scores a query against every cached vector of one embedder on a SQLite connection.

    Block metadata and the tail (the vectors after the last block, at most about a block) are
    read once per database version (``PRAGMA data_version`` and the highest rowid); the columns
    are read per query from SQLite's pages.
    """

    def __init__(self, conn: sqlite3.Connection, embedder: str) -> None:
        self.conn = conn
        self.embedder = embedder
        self._version: tuple[Any, ...] | None = None
        self._blocks: list[_Block] = []
        self._tail_ids: NDArray[np.int64] = np.empty(0, dtype=np.int64)
        self._tail: NDArray[np.float32] = np.empty((0, 0), dtype=np.float32)
        self.dims: int | None = None

    def _load(self) -> None:
        version = (
            self.conn.execute("PRAGMA data_version").fetchone()[0],
            self.conn.execute("SELECT MAX(rowid) FROM embeddings").fetchone()[0],
            self.conn.execute(
                "SELECT COUNT(*) FROM vector_blocks WHERE embedder = ?", (self.embedder,)
            ).fetchone()[0],
        )
        if version == self._version:
            return
        blocks: list[_Block] = []
        for block, last_row, last_hash in self.conn.execute(
            "SELECT block, last_row, last_hash FROM vector_blocks WHERE embedder = ? ORDER BY block",
            (self.embedder,),
        ):
            # a block is used only while its last row is still the vector it was built from (a
            # database copied over, or rebuilt, leaves blocks that would name other texts)
            same = self.conn.execute(
                "SELECT text_hash FROM embeddings WHERE rowid = ?", (last_row,)
            ).fetchone()
            if same is None or same[0] != last_hash or block != len(blocks):
                break
            blocks.append(_Block(block, last_row))
        after = blocks[-1].last_row if blocks else 0
        ids, vectors = [], []
        for rowid, blob in self.conn.execute(
            "SELECT rowid, vector FROM embeddings WHERE rowid > ? AND +embedder = ? ORDER BY rowid",
            (after, self.embedder),
        ):
            ids.append(rowid)
            vectors.append(blob)
        self._blocks = blocks
        self._tail_ids = np.array(ids, dtype=np.int64)
        # the tail a dimension at a time too: a query touches the rows of its own dimensions
        self._tail = (
            np.ascontiguousarray(np.frombuffer(b"".join(vectors), dtype="<f4").reshape(len(vectors), -1).T)
            if vectors
            else np.empty((0, 0), dtype=np.float32)
        )
        self.dims = None
        if self._tail.size:
            self.dims = int(self._tail.shape[0])
        elif blocks:
            self.dims = int(
                self.conn.execute(
                    "SELECT COUNT(*) FROM vector_columns WHERE embedder = ? AND block = 0", (self.embedder,)
                ).fetchone()[0]
            )
        self._version = version

    @property
    def size(self) -> int:
        """Cached vectors of the embedder (after :meth:`scores`)."""
        return len(self._blocks) * BLOCK + len(self._tail_ids)

    def scores(self, q: NDArray[np.float32]) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
        """(scores, errors) of *q* against every cached vector, blocks first, then the tail: a
        score is within its block's error (``errors[position // BLOCK]``) of the exact cosine;
        the tail's scores are exact (its error is 0)."""
        self._load()
        n_blocks = len(self._blocks) * BLOCK
        out = np.zeros(n_blocks + len(self._tail_ids), dtype=np.float32)
        # per block: half a quantization step of every column read, weighted by the query
        block_errors = np.zeros(len(self._blocks), dtype=np.float64)
        used = np.flatnonzero(q)
        if n_blocks:
            # a block at a time: the columns of the query's dimensions as one matrix, one product
            # (256 dimensions a statement at most: a dense query, a model's, reads every column)
            for start in range(0, len(used), 256):
                dims = [int(d) for d in used[start : start + 256]]
                sql = f"""SELECT dim, data FROM vector_columns
                          WHERE embedder = ? AND block = ? AND dim IN ({",".join("?" * len(dims))})"""
                for block in range(len(self._blocks)):
                    found = self.conn.execute(sql, (self.embedder, block, *dims)).fetchall()
                    if not found:
                        continue
                    weights = q[[d for d, _ in found]].astype(np.float64)
                    data = b"".join(d for _, d in found)
                    part = out[block * BLOCK : (block + 1) * BLOCK]
                    if len(found[0][1]) == 2 * BLOCK:
                        # float16 columns (written before int8 columns; written again at the next publish)
                        matrix = np.frombuffer(data, dtype="<f2").reshape(len(found), BLOCK)
                        part += weights.astype(np.float32) @ matrix.astype(np.float32)
                        block_errors[block] += F16_ERROR * float(np.abs(weights).sum())
                        continue
                    # each column: its scale (float32), then BLOCK int8 numbers
                    rows = np.frombuffer(data, dtype=np.uint8).reshape(len(found), BLOCK + 4)
                    scales = rows[:, :4].copy().view("<f4").ravel().astype(np.float64)
                    matrix = rows[:, 4:].view(np.int8).astype(np.float32)
                    part += (weights * scales).astype(np.float32) @ matrix
                    block_errors[block] += 0.5 * float(np.abs(weights) @ scales)
        # plus float32 sums and rounding: a few units in the last place of a cosine; the tail's: 0
        errors = np.append(block_errors + SLACK, 0.0).astype(np.float32)
        if len(self._tail_ids):
            # a sum of scaled rows, no BLAS call: a few dozen dimensions for a hashing query
            tail = out[n_blocks:]
            for d in used.tolist():
                tail += np.float32(q[d]) * self._tail[d]
        return out, errors

    def rowids(self, positions: NDArray[np.int64]) -> NDArray[np.int64]:
        """The embeddings rowids of score *positions*."""
        n_blocks = len(self._blocks) * BLOCK
        found = np.empty(len(positions), dtype=np.int64)
        for i, pos in enumerate(positions.tolist()):
            if pos >= n_blocks:
                found[i] = self._tail_ids[pos - n_blocks]
                continue
            b = self._blocks[pos // BLOCK]
            if b.rowids is None:
                blob = self.conn.execute(
                    "SELECT rowids FROM vector_blocks WHERE embedder = ? AND block = ?",
                    (self.embedder, b.block),
                ).fetchone()[0]
                b.rowids = np.frombuffer(blob, dtype="<i8").astype(np.int64)
            found[i] = b.rowids[pos % BLOCK]
        return found

    def exact(self, rowids: list[int], q: NDArray[np.float32]) -> dict[int, float]:
        """Exact cosine of *q* with the stored float32 vectors of *rowids*."""
        found: dict[int, float] = {}
        for start in range(0, len(rowids), 500):
            part = rowids[start : start + 500]
            for rowid, blob in self.conn.execute(
                f"SELECT rowid, vector FROM embeddings WHERE rowid IN ({','.join('?' * len(part))})", part
            ):
                found[rowid] = float(np.frombuffer(blob, dtype="<f4") @ q)
        return found
