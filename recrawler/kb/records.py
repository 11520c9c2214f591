"""What the knowledge base's readers return: published chunks, search hits, the reader protocol."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from recrawler.state import Slice

if TYPE_CHECKING:
    from collections.abc import Iterator
    from datetime import datetime
    from types import TracebackType

    from recrawler.kb.embedders import Embedder

__all__ = ["ChangeBatch", "ChunkRow", "Hit", "KnowledgeBase", "PageChange", "Slice"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkRow:
    """A published chunk: ``key, url, chunk_index, heading, text, chunk_hash``, and its page's
    ``version`` and ``lang`` (None: none known)."""

    key: str
    url: str
    chunk_index: int
    heading: str
    text: str
    chunk_hash: str
    version: str | None = None
    lang: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of ``recrawler chunks --json``."""
        return {
            "key": self.key,
            "url": self.url,
            "chunk_index": self.chunk_index,
            "heading": self.heading,
            "text": self.text,
            "chunk_hash": self.chunk_hash,
            "version": self.version,
            "lang": self.lang,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Hit:
    """A search result: the chunk, its score, and how fresh its page is.

    ``score`` ranks the hits: the cosine in ``vector`` mode, else the fused reciprocal rank in
    (0, 1] (1.0: first in every list that found something). ``similarity`` is the cosine when the vector
    search found the chunk (None for a chunk only its words found).
    """

    score: float
    chunk: ChunkRow
    title: str | None
    last_checked: datetime | None
    last_changed: datetime | None
    similarity: float | None = None

    @property
    def url(self) -> str:
        """The page URL with the nearest heading's anchor."""
        return self.chunk.url

    @property
    def heading(self) -> str:
        """The heading path (breadcrumb) of the chunk."""
        return self.chunk.heading

    @property
    def text(self) -> str:
        """The chunk's text."""
        return self.chunk.text

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of ``recrawler search --json``."""
        return {
            "score": round(self.score, 6),
            "similarity": round(self.similarity, 6) if self.similarity is not None else None,
            **self.chunk.to_dict(),
            "title": self.title,
            "last_checked": self.last_checked.isoformat() if self.last_checked else None,
            "last_changed": self.last_changed.isoformat() if self.last_changed else None,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class PageChange:
    """One page the published runs changed: ``action`` is ``new`` or ``changed`` (its chunks are
    the page's chunks now: replace what you hold for ``key``), or ``gone``, ``moved`` (to
    ``moved_to``) or ``quarantined`` (delete what you hold for ``key``)."""

    key: str
    url: str
    action: str
    #: the published run that made the page what it is now
    run_id: int
    status: str
    title: str | None
    content_hash: str | None
    #: the page's cleaned text as markdown (headings, lists, code), as published
    text: str | None
    chunks: tuple[ChunkRow, ...] = ()
    moved_to: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of ``recrawler changes --json``."""
        return {
            "key": self.key,
            "url": self.url,
            "action": self.action,
            "run_id": self.run_id,
            "status": self.status,
            "title": self.title,
            "content_hash": self.content_hash,
            "moved_to": self.moved_to,
            "text": self.text,
            "chunks": [c.to_dict() for c in self.chunks],
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ChangeBatch:
    """A page of changes; pass ``cursor`` to the next call (it stays valid across restarts).

    ``done``: nothing more up to ``upto``, the last run published when the listing began; the
    cursor then lists what runs after ``upto`` publish. ``since``: the run the listing is after."""

    changes: list[PageChange] = field(default_factory=list)
    cursor: str = ""
    upto: int = 0
    done: bool = True
    since: int = 0


class KnowledgeBase(Protocol):
    """Read side of the knowledge base (thread-safe per instance is not promised: one per thread)."""

    embedder: Embedder
    #: the version :meth:`search` shows when none is asked for (None: every version)
    default_version: str | None

    def search(
        self,
        query: str,
        k: int = 5,
        *,
        site: str | None = None,
        mode: str = "hybrid",
        version: str | None = None,
        lang: str | None = None,
    ) -> list[Hit]:
        """Return at most *k* published chunks that match *query*, best first (of *site* only, if
        given; of *version*, None: ``default_version``, ``"*"``: any; of *lang*): *mode*
        ``hybrid`` (words and vectors), ``vector`` or ``keyword``."""

    def chunks(self) -> Iterator[ChunkRow]:
        """Yield every published chunk, by page key and position."""

    def changes(
        self,
        since: int | datetime | None = None,
        *,
        cursor: str | None = None,
        limit: int = 100,
        key: str | None = None,
        version: str | None = None,
        lang: str | None = None,
    ) -> ChangeBatch:
        """The pages the published runs after run *since* (or published after the time *since*)
        changed, *limit* at a time, by page key (resume with the batch's ``cursor``, bound to this
        database); only page *key* when given, only pages of *version* and *lang* when given
        (``"*"`` or None: any; no default version applies)."""

    def published_run(self) -> int:
        """Return the id of the last published run (0: none yet)."""

    def close(self) -> None:
        """Release the connection and the in-memory vectors."""

    def __enter__(self) -> KnowledgeBase: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...
