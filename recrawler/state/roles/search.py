"""The search index's role: what a crawl writes so that search reads the published chunks fast."""

from __future__ import annotations

from typing import Protocol

__all__ = ["SearchIndex"]


class SearchIndex(Protocol):
    """The search index over the embedding cache.

    Guarantees: a block is written once it is full and never rewritten; search reads the blocks
    and the cache's tail beyond them alike, so an unwritten block never hides a vector.
    """

    async def index_vectors(self, embedder: str) -> int:
        """Write the search index's blocks of cached vectors that are full and not written yet
        (committed; SQLite only, 0 elsewhere); return how many blocks were written."""
