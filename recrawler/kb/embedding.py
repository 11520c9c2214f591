"""What every embedder shares: the protocol, its error, stored vectors and row helpers.

Pure (no Scrapy) and blocking: callers run ``embed`` in a worker thread, one thread per embedder.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from recrawler.exceptions import RecrawlerError

# numpy is imported where vectors are made: a run that embeds nothing (an unchanged week) does
# not pay for loading it
if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np
    from numpy.typing import NDArray

__all__ = [
    "PROBE_TEXT",
    "SPEC_SETTING",
    "Embedder",
    "EmbedderError",
    "blank_mask",
    "blob_to_vector",
    "normalise",
    "one_line",
    "vector_to_blob",
]

# Hints used in error messages; the settings themselves are read by the caller.
SPEC_SETTING = "RECRAWLER_EMBEDDER"
# Sent when an embedder of unknown dimension is asked only for blank texts.
PROBE_TEXT = "dimension probe"


class EmbedderError(RecrawlerError):
    """An embedding backend failed: HTTP error, exhausted retries or a malformed response."""


class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors; blocking, not thread-safe.

    ``id`` keys the embedding cache: it changes whenever the vectors would (model, dimension,
    algorithm version). ``dim`` is None until known (remote models: after the first call).
    ``calls`` counts backend calls (HTTP requests including retries, or model invocations) and
    ``texts`` counts texts embedded, so callers can report them. An embedder may carry
    ``min_similarity``: the cosine a chunk must exceed to be a search hit (recrawler's embedders
    carry a measured one; without it, 0.0: see :func:`recrawler.kb.ranking.similarity_floor`).
    """

    @property
    def id(self) -> str: ...

    @property
    def dim(self) -> int | None: ...

    @property
    def calls(self) -> int: ...

    @property
    def texts(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Return an array of shape ``(len(texts), dim)``, each row of unit length.

        A blank text (empty or whitespace only) gives a zero row.
        """
        ...

    def close(self) -> None:
        """Release the model or connections; the embedder is not used afterwards."""
        ...


def vector_to_blob(v: NDArray[np.floating[Any]]) -> bytes:
    """Return a 1-D vector as little-endian float32 bytes (4 bytes per component)."""
    import numpy as np

    return np.ascontiguousarray(v, dtype="<f4").tobytes()


def blob_to_vector(b: bytes) -> NDArray[np.float32]:
    """Return the float32 vector stored by :func:`vector_to_blob` (a writable copy)."""
    import numpy as np

    return np.frombuffer(b, dtype="<f4").astype(np.float32)


def normalise(rows: NDArray[np.float32]) -> NDArray[np.float32]:
    """Scale each row to unit L2 norm in place; zero rows stay zero."""
    import numpy as np

    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    np.divide(rows, norms, out=rows, where=norms > 0)
    return rows


def blank_mask(texts: Sequence[str]) -> list[bool]:
    return [not t.strip() for t in texts]


def one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."
