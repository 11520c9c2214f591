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
query (half the scales, weighted by the query's values) of the exact one: the vectors whose
rounded score is within that bound of a hit are scored again exactly from their stored float32
vectors, and the ranking is the exact one.

A process that searches again keeps the columns it read (every block of a dimension together,
the least recently used dropped first) up to a bound in bytes: a warm search reads from SQLite
only the dimensions it has not met lately.
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from recrawler.state.sql.search import BLOCK

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Iterator

    from numpy.typing import NDArray

__all__ = ["F16_ERROR", "SLACK", "VectorScan"]

#: the most a float16 column's number (blocks written before int8 columns) differs from the exact
#: one: float16 keeps 11 significant bits of a unit vector's numbers
F16_ERROR = 2.0**-11
#: float32 sums and float16's smallest numbers: what a block score may differ by besides rounding
SLACK = 2e-5
#: columns read from SQLite by one statement (a dense query, a model's, reads every column)
GROUP = 32


@dataclass(slots=True)
class _Block:
    block: int
    last_row: int
    rowids: NDArray[np.int64] | None = None


@dataclass(slots=True)
class _Column:
    """One dimension of every block: int8 numbers (a row per block), the scale of each block's
    numbers, and how far a number read back may be from the stored float32 one (per block)."""

    data: NDArray[np.int8]
    scales: NDArray[np.float32]
    errors: NDArray[np.float64]

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes + self.scales.nbytes + self.errors.nbytes)


class VectorScan:
    """Scores a query against every cached vector of one embedder on a SQLite connection.

    Block metadata and the tail (the vectors after the last block, at most about a block) are
    read once per database version (``PRAGMA data_version``, the highest rowid and the block
    count); the columns a query uses are read from SQLite's pages and kept, up to
    *cache_bytes* (0: none kept), for the next queries of the same version.
    """

    def __init__(self, conn: sqlite3.Connection, embedder: str, *, cache_bytes: int = 0) -> None:
        self.conn = conn
        self.embedder = embedder
        self.cache_bytes = cache_bytes
        self._version: tuple[Any, ...] | None = None
        self._blocks: list[_Block] = []
        self._tail_ids: NDArray[np.int64] = np.empty(0, dtype=np.int64)
        self._tail: NDArray[np.float32] = np.empty((0, 0), dtype=np.float32)
        self._columns: OrderedDict[int, _Column] = OrderedDict()
        self._cached = 0
        self.dims: int | None = None

    @property
    def block(self) -> int:
        """Vectors per block: ``errors[position // block]`` bounds a score's error."""
        return BLOCK

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
        ).fetchall():
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
        self._columns.clear()
        self._cached = 0
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

    def _read(self, dims: list[int]) -> dict[int, _Column]:
        """The columns *dims* of every block, from SQLite: one statement, each row copied once."""
        n = len(self._blocks)
        # a missing row (a damaged index) reads as zeros that may be off by 1: a unit vector's
        # numbers are at most 1 in magnitude, so the ranking stays exact (and slow)
        columns = {
            d: _Column(np.zeros((n, BLOCK), dtype=np.int8), np.ones(n, dtype=np.float32), np.ones(n))
            for d in dims
        }
        for dim, block, data in self.conn.execute(
            f"""SELECT dim, block, data FROM vector_columns
                WHERE embedder = ? AND dim IN ({",".join("?" * len(dims))}) AND block < ?""",
            (self.embedder, *dims, n),
        ):
            column = columns[dim]
            if len(data) == BLOCK + 4:
                # its scale (float32), then BLOCK int8 numbers within half the scale of the stored ones
                column.data[block] = np.frombuffer(data, dtype=np.int8, count=BLOCK, offset=4)
                column.scales[block] = scale = struct.unpack_from("<f", data)[0]
                column.errors[block] = 0.5 * scale
            elif len(data) == 2 * BLOCK:
                # float16 (blocks written before int8 columns): rounded to int8 with its own scale
                values = np.frombuffer(data, dtype="<f2").astype(np.float32)
                scale = float(np.abs(values).max()) / 127.0 or 1.0
                column.data[block] = np.clip(np.rint(values / np.float32(scale)), -127, 127)
                column.scales[block] = scale
                column.errors[block] = 0.5 * scale + F16_ERROR
        return columns

    def _used(self, dims: list[int]) -> Iterator[tuple[list[int], list[_Column]]]:
        """The columns *dims* (with their dimensions), a group at a time: kept ones first, the
        others read from SQLite and kept while the bound allows (the least recently used make
        room)."""
        kept = [d for d in dims if d in self._columns]
        missing = [d for d in dims if d not in self._columns]
        for d in kept:
            self._columns.move_to_end(d)
        for start in range(0, len(kept), GROUP):
            part = kept[start : start + GROUP]
            yield part, [self._columns[d] for d in part]
        for start in range(0, len(missing), GROUP):
            read = self._read(missing[start : start + GROUP])
            for d, column in read.items():
                self._keep(d, column)
            yield list(read), list(read.values())

    def _keep(self, dim: int, column: _Column) -> None:
        size = column.nbytes
        if size > self.cache_bytes:
            return
        while self._cached + size > self.cache_bytes and self._columns:
            _, old = self._columns.popitem(last=False)
            self._cached -= old.nbytes
        self._columns[dim] = column
        self._cached += size

    def scores(self, q: NDArray[np.float32]) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
        """(scores, errors) of *q* against every cached vector, blocks first, then the tail: a
        score is within its block's error (``errors[position // BLOCK]``) of the exact cosine;
        the tail's scores are exact (its error is 0)."""
        self._load()
        n = len(self._blocks)
        out = np.zeros(n * BLOCK + len(self._tail_ids), dtype=np.float32)
        # per block: half a quantization step of every column read, weighted by the query
        block_errors = np.zeros(n, dtype=np.float64)
        used = np.flatnonzero(q)
        if n and len(used):
            blocks = out[: n * BLOCK].reshape(n, BLOCK)
            for dims, columns in self._used(used.tolist()):
                _add(blocks, columns, q[dims], block_errors)
        # plus float32 sums and rounding: a few units in the last place of a cosine; the tail's: 0
        errors = np.append(block_errors + SLACK, 0.0).astype(np.float32)
        if len(self._tail_ids):
            # a sum of scaled rows, no BLAS call: a few dozen dimensions for a hashing query
            tail = out[n * BLOCK :]
            for d in used.tolist():
                tail += np.float32(q[d]) * self._tail[d]
        return out, errors

    def rowids(self, positions: NDArray[np.int64]) -> NDArray[np.int64]:
        """The embeddings rowids of score *positions*."""
        n_blocks = len(self._blocks) * BLOCK
        found = np.empty(len(positions), dtype=np.int64)
        tail = positions >= n_blocks
        found[tail] = self._tail_ids[positions[tail] - n_blocks]
        inside = np.flatnonzero(~tail)
        which = positions[inside] // BLOCK
        # (not np.unique: its first call imports numpy.ma, a tenth of a cold search)
        for b in sorted(set(which.tolist())):
            block = self._blocks[b]
            if block.rowids is None:
                blob = self.conn.execute(
                    "SELECT rowids FROM vector_blocks WHERE embedder = ? AND block = ?",
                    (self.embedder, block.block),
                ).fetchone()[0]
                block.rowids = np.frombuffer(blob, dtype="<i8").astype(np.int64)
            here = inside[which == b]
            found[here] = block.rowids[positions[here] % BLOCK]
        return found

    def exact(self, rowids: list[int], q: NDArray[np.float32]) -> dict[int, float]:
        """Exact cosine of *q* with the stored float32 vectors of *rowids*."""
        found: dict[int, float] = {}
        for start in range(0, len(rowids), 500):
            part = rowids[start : start + 500]
            got = self.conn.execute(
                f"SELECT rowid, vector FROM embeddings WHERE rowid IN ({','.join('?' * len(part))})", part
            ).fetchall()
            if not got:
                continue
            matrix = np.frombuffer(b"".join(v for _, v in got), dtype="<f4").reshape(len(got), -1)
            found.update(zip([r for r, _ in got], np.einsum("ij,j->i", matrix, q).tolist(), strict=True))
        return found


def _add(
    out: NDArray[np.float32],
    columns: list[_Column],
    weights: NDArray[np.float32],
    errors: NDArray[np.float64],
) -> None:
    """Add the *columns* times their query *weights* to the block scores *out* (a row per block),
    and their bound to *errors* (per block)."""
    w = weights.astype(np.float64)
    coef = (w[:, None] * np.stack([c.scales for c in columns])).astype(np.float32)
    errors += np.abs(w) @ np.stack([c.errors for c in columns])
    # a few blocks at a time (a buffer that stays in the CPU's cache), a column at a time: numpy's
    # own loops (a BLAS call starts threads, which spin on a busy machine)
    step = 4
    buffer = np.empty((step, BLOCK), dtype=np.float32)
    for start in range(0, out.shape[0], step):
        stop = min(out.shape[0], start + step)
        part, scaled = out[start:stop], buffer[: stop - start]
        for i, c in enumerate(columns):
            np.multiply(c.data[start:stop], coef[i, start:stop, None], out=scaled)
            part += scaled
