"""Bulk loads of the PostgreSQL store's own tables, for benchmarks that fill a knowledge base
without crawling it: the cache's vectors as a binary COPY."""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np


#: the columns :func:`binary_embeddings` fills, in its order
EMBEDDINGS_COPY = "COPY embeddings (embedder, text_hash, embedding) FROM STDIN (FORMAT BINARY)"


def binary_embeddings(embedder_id: str, hashes: Sequence[str], vectors: np.ndarray) -> bytes:
    """The rows of a binary COPY into ``embeddings`` (:data:`EMBEDDINGS_COPY`): every field
    fixed-size, one numpy record a row; the vector in pgvector's binary form."""
    import numpy as np

    n, dims = vectors.shape
    emb = embedder_id.encode()
    rec = np.dtype(
        [
            ("nfields", ">i2"),
            ("l_emb", ">i4"),
            ("emb", f"S{len(emb)}"),
            ("l_hash", ">i4"),
            ("hash", "S64"),
            ("l_vec", ">i4"),
            ("vdim", ">i2"),
            ("vunused", ">i2"),
            ("vec", ">f4", (dims,)),
        ]
    )
    data = np.zeros(n, dtype=rec)
    data["nfields"] = 3
    data["l_emb"], data["emb"] = len(emb), emb
    data["l_hash"], data["hash"] = 64, [h.encode() for h in hashes]
    data["l_vec"], data["vdim"], data["vec"] = 4 + 4 * dims, dims, vectors
    return b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0) + data.tobytes() + struct.pack(">h", -1)
