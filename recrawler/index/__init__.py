"""The knowledge base a bot reads: open it, search it, dump it.

    from recrawler.index import open_kb

    with open_kb("sqlite:///recrawler.db") as kb:
        for hit in kb.search("how do I retry failed uploads?", k=5):
            print(f"{hit.score:.3f} {hit.url} {hit.heading}")

Search reads only each site's last published run: never half of one run and half of another.
``postgresql://`` URIs search with pgvector, SQLite files in memory with numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from recrawler.index.records import ChunkRow, Hit, KnowledgeBase

if TYPE_CHECKING:
    from recrawler.embedders import Embedder

__all__ = ["ChunkRow", "Hit", "KnowledgeBase", "open_kb"]


def open_kb(uri: str, *, embedder: Embedder | str | None = None, **embedder_options: Any) -> KnowledgeBase:
    """Open the knowledge base in the database at *uri* for reading.

    *embedder* defaults to the one the last published run indexed with (an ``Embedder`` or a
    ``RECRAWLER_EMBEDDER`` spec such as ``"hashing"`` or ``"openai:text-embedding-3-small"``);
    *embedder_options* (``base_url``, ``api_key``, ...) are passed to it.
    """
    if uri.split("://", 1)[0].lower() in ("postgresql", "postgres"):
        from recrawler.index.postgres import PostgreSQLKnowledgeBase

        return PostgreSQLKnowledgeBase(uri, embedder=embedder, **embedder_options)
    from recrawler.index.sqlite import SQLiteKnowledgeBase
    from recrawler.state.sqlite import path_from_uri

    return SQLiteKnowledgeBase(path_from_uri(uri), embedder=embedder, **embedder_options)
