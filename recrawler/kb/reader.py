"""The knowledge base a bot reads: open it, search it, dump it.

    from recrawler.kb import open_kb

    with open_kb() as kb:  # the database a crawl from here writes (or open_kb("sqlite:///docs.db"))
        for hit in kb.search("how do I retry failed uploads?", k=5):
            print(f"{hit.score:.3f} {hit.url} {hit.heading}")
        kb.search("retry uploads", version="2.0", lang="fr")  # one version and language only

Search reads only each site's last published run: never half of one run and half of another.
``postgresql://`` URIs search with pgvector, SQLite files in memory with numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from recrawler.kb.records import ChunkRow, Hit, KnowledgeBase

if TYPE_CHECKING:
    from recrawler.kb.embedders import Embedder

__all__ = ["ChunkRow", "Hit", "KnowledgeBase", "open_kb"]


def open_kb(
    uri: str | None = None,
    *,
    embedder: Embedder | str | None = None,
    cache_mb: float | None = None,
    default_version: str | None = None,
    min_similarity: float | None = None,
    **embedder_options: Any,
) -> KnowledgeBase:
    """Open the knowledge base in the database at *uri* for reading.

    *uri* None is the database a crawl from the working directory writes, as the ``recrawler``
    CLI finds it: ``RECRAWLER_DB_URI`` from the environment or the project's settings, else
    ``recrawler.db`` in Scrapy's project data directory (``.scrapy/`` beside ``scrapy.cfg``).
    *embedder* defaults to the one the last published run indexed with (an ``Embedder`` or a
    ``RECRAWLER_EMBEDDER`` spec such as ``"hashing"`` or ``"openai:text-embedding-3-small"``);
    *embedder_options* (``base_url``, ``api_key``, ...) are passed to it.

    *cache_mb* bounds the vector columns a SQLite knowledge base keeps for the next searches
    (None: ``RECRAWLER_SEARCH_CACHE_MB``, the project's when *uri* is None too); PostgreSQL keeps
    what it reads in its own buffers and takes no cache here.

    *default_version* is the version ``search()`` shows when none is asked for (``"*"``: every
    version; None: ``RECRAWLER_SEARCH_DEFAULT_VERSION``, the project's when *uri* is None, else
    every version).

    A search finds the chunks that have a word of the query and the chunks whose similarity to it
    is above *min_similarity* (None: ``RECRAWLER_SEARCH_MIN_SIMILARITY``, the project's when *uri*
    is None, else the embedder's own floor, measured so that questions about something else find
    nothing): a query about nothing the pages hold returns no hit, not the nearest chunks.
    """
    if uri is None:
        from recrawler.project import project_database, project_settings

        settings = project_settings()
        uri = project_database(settings)
        if cache_mb is None:
            cache_mb = settings.getfloat("RECRAWLER_SEARCH_CACHE_MB")
        if default_version is None:
            default_version = settings.get("RECRAWLER_SEARCH_DEFAULT_VERSION") or None
        if min_similarity is None and settings.get("RECRAWLER_SEARCH_MIN_SIMILARITY") is not None:
            min_similarity = settings.getfloat("RECRAWLER_SEARCH_MIN_SIMILARITY")
    if uri.split("://", 1)[0].lower() in ("postgresql", "postgres"):
        from recrawler.kb.postgres import PostgreSQLKnowledgeBase

        return PostgreSQLKnowledgeBase(
            uri,
            embedder=embedder,
            default_version=default_version,
            min_similarity=min_similarity,
            **embedder_options,
        )
    from recrawler.kb.sqlite import SQLiteKnowledgeBase

    # a sqlite:// or file: URI, or a path (the read role reads either)
    return SQLiteKnowledgeBase(
        uri,
        embedder=embedder,
        cache_mb=cache_mb,
        default_version=default_version,
        min_similarity=min_similarity,
        **embedder_options,
    )
