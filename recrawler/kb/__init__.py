"""The knowledge base: chunking, embedders, publishing, search and the vector-store sink.

    from recrawler.kb import open_kb

``open_kb`` and the records it returns load on first use, so the pure modules here (chunking,
ranking) import nothing heavy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from recrawler.kb.reader import ChunkRow, Hit, KnowledgeBase, open_kb

__all__ = ["ChunkRow", "Hit", "KnowledgeBase", "open_kb"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from recrawler.kb import reader

        return getattr(reader, name)
    raise AttributeError(f"module 'recrawler.kb' has no attribute {name!r}")
