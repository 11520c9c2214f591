"""The knowledge base as a LangChain retriever (extra ``recrawler[langchain]``)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from recrawler.extras import require

# one line naming the extra when langchain-core is missing (recrawler[langchain])
require("langchain_core", "recrawler.integrations.langchain")

from langchain_core.documents import Document  # noqa: E402 (after the check above)
from langchain_core.retrievers import BaseRetriever  # noqa: E402 (after the check above)
from pydantic import ConfigDict, Field, PrivateAttr  # noqa: E402 (after the check above)

from recrawler.kb.reader import open_kb  # noqa: E402 (after the check above)
from recrawler.redact import redact_url  # noqa: E402 (after the check above)

if TYPE_CHECKING:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun

    from recrawler.kb.reader import Hit, KnowledgeBase

__all__ = ["RecrawlerRetriever", "hit_to_document"]


def hit_to_document(hit: Hit) -> Document:
    """A search hit as a ``Document``: the chunk's text, where it is and how fresh it is."""
    return Document(
        page_content=hit.text,
        metadata={
            "url": hit.url,
            "heading": hit.heading,
            "title": hit.title,
            "key": hit.chunk.key,
            "chunk_index": hit.chunk.chunk_index,
            "version": hit.chunk.version,
            "lang": hit.chunk.lang,
            "last_checked": hit.last_checked.isoformat() if hit.last_checked else None,
            "last_changed": hit.last_changed.isoformat() if hit.last_changed else None,
            "score": round(hit.score, 6),
            "similarity": round(hit.similarity, 6) if hit.similarity is not None else None,
        },
    )


class RecrawlerRetriever(BaseRetriever):
    """Retrieves the published chunks of a recrawler knowledge base as LangChain documents.

        retriever = RecrawlerRetriever(k=5)  # or uri="sqlite:///docs.db"
        docs = retriever.invoke("how do I retry failed uploads?")
        docs = retriever.invoke("retry_limit", k=1)  # k per call
        RecrawlerRetriever(version="2.0", lang="en")  # one version and language only

    ``page_content`` is the chunk's text. ``metadata`` holds ``url`` (the page URL with the
    nearest heading's anchor), ``heading`` (the heading path), ``title``, ``key``,
    ``chunk_index``, ``version`` and ``lang`` (the page's), ``last_checked`` and ``last_changed``
    (ISO 8601, UTC), ``score`` (what ranks the hits: see ``mode``) and ``similarity`` (the cosine,
    when the vector search found it).
    Only the last published run is read (never a held or half-written one); a run published later
    is seen by the next query. The database is opened read-only on first use. A password in the
    URI never shows in the retriever's ``repr``, ``str`` or ``model_dump()`` (``uri`` holds it
    masked), nor do ``embedder_options``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    #: the database (``RECRAWLER_DB_URI``; shown with its password masked; None: the one a crawl
    #: from the working directory writes, as :func:`recrawler.kb.reader.open_kb` finds it)
    uri: str | None = None
    #: documents per query, at most (``invoke(query, k=...)`` sets it for one call)
    k: int = 4
    #: ``hybrid`` (keyword and vector lists fused), ``vector`` (cosine) or ``keyword``
    mode: str = "hybrid"
    #: drop hits scoring below this (None: keep all hits)
    score_threshold: float | None = None
    #: vector hits need a cosine above this (None: ``RECRAWLER_SEARCH_MIN_SIMILARITY``, else the
    #: embedder's measured floor): a question about nothing the pages hold retrieves no document
    min_similarity: float | None = None
    #: the embedder spec (None: the one the last published run indexed with)
    embedder: str | None = None
    #: only chunks of this version (None: ``default_version``; ``"*"``: every version) and language
    #: (None: any; ``en`` finds ``en-us`` too); pages with no version or language are in every one
    version: str | None = None
    lang: str | None = None
    #: the version shown when ``version`` is None (None: ``RECRAWLER_SEARCH_DEFAULT_VERSION``, the
    #: project's when ``uri`` is None, else every version)
    default_version: str | None = None
    #: embedder options (``base_url``, ``api_key``, ...); kept out of the repr and of model_dump
    embedder_options: dict[str, Any] = Field(default_factory=dict, repr=False, exclude=True)

    _uri: str = PrivateAttr(default="")
    _kb: KnowledgeBase | None = PrivateAttr(default=None)
    # the knowledge base keeps one connection: LangChain may call from executor threads
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def __init__(self, **data: Any) -> None:
        uri = str(data.get("uri", ""))
        if uri:
            data["uri"] = redact_url(uri)
        super().__init__(**data)
        self._uri = uri

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        with self._lock:
            if self._kb is None:
                self._kb = open_kb(
                    self._uri or None,
                    embedder=self.embedder,
                    default_version=self.default_version,
                    min_similarity=self.min_similarity,
                    **self.embedder_options,
                )
            hits = self._kb.search(
                query, k=self.k if k is None else k, mode=self.mode, version=self.version, lang=self.lang
            )
        return [
            hit_to_document(hit)
            for hit in hits
            if self.score_threshold is None or hit.score >= self.score_threshold
        ]

    def __del__(self) -> None:
        # a retriever dropped without close() (as LangChain's own tests do) releases its connection
        kb = getattr(self, "__pydantic_private__", None) and self._kb
        if kb is not None:
            kb.close()

    def close(self) -> None:
        """Release the connection (reopened on the next query)."""
        with self._lock:
            if self._kb is not None:
                self._kb.close()
                self._kb = None
