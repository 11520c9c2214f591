"""The Page item that flows from the spider to the pipelines, and the verdicts it can get."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any


class PageStatus(StrEnum):
    """What a run concluded about a page. The values are the stat and event names."""

    NEW = "new"
    CHANGED = "changed"
    UNCHANGED = "unchanged"
    GONE = "gone"
    QUARANTINED = "quarantined"
    MOVED = "moved"
    RESTORED = "restored"
    ERROR = "error"


class Unread(Enum):
    """``Page.record`` when the page's stored record was not read on its request's way (None
    says the store holds no record of the page)."""

    UNREAD = "unread"


@dataclass(slots=True, kw_only=True)
class Page:
    """One checked page: a 200 with its cleaned text, or a 304 with no body at all.

    ``status`` is filled by ClassifyPipeline; ``error`` (a short reason such as
    ``empty_content``) makes the page an error that leaves its stored state untouched.
    ``record`` and ``update`` carry what the pipelines need from the request side and from each
    other: the item is the only way they share a page.
    """

    url: str
    key: str
    http_status: int
    etag: str | None = None
    last_modified: str | None = None
    lastmod: str | None = None
    title: str | None = None
    text: str | None = None
    #: the text's headings in order: (level, heading text, anchor id or None)
    headings: tuple[tuple[int, str, str | None], ...] = ()
    #: inline code spans and code blocks of the main content, in order
    code: tuple[str, ...] = ()
    #: links of the main content: (href, text)
    links: tuple[tuple[str, str], ...] = ()
    content_hash: str | None = None
    error: str | None = None
    status: PageStatus | None = None
    #: this fetch is the immediate re-fetch of a "same validator, text moved" page
    rechecked: bool = False
    #: how many elements the site's learned volatile regions removed from this page
    region_hits: int = 0
    #: volatile regions learned from this fetch and the one just before it (CSS selectors)
    learned_regions: tuple[str, ...] = ()
    #: the response body, kept only while a same-validator page whose text moved is re-checked
    raw_body: bytes | None = field(default=None, repr=False, compare=False)
    #: how the page was found (``sitemap``, ``feed``, ``link``) and from where (feed or page URL)
    found_via: str | None = None
    found_from: str | None = None
    #: how many links away from a listed page it was found (0: listed, or not found by a link)
    found_depth: int = 0
    #: keys of stored pages a permanent redirect moved to this page
    moved_from: tuple[str, ...] = ()
    #: the key of the address a temporary redirect lent the page (None: it answered itself)
    served_from: str | None = None
    #: what the body was read as (``html``, ``pdf``: see ``recrawler.documents``); None without one
    document: str | None = None
    #: the page's version and language (``RECRAWLER_VERSION_PATTERN``, else what the page says);
    #: None on a 304 the pattern does not name: the stored ones stay
    version: str | None = None
    lang: str | None = None
    #: the fingerprint and chunks ``recrawler.cpu.process_page`` made with the text, in a worker
    #: process or in the crawl's (a ``recrawler.cpu.Worked``), until the pipelines take them
    #: (typed loosely, as ``record`` and ``update`` are: the item module stands below all it carries)
    worked: Any = field(default=None, repr=False, compare=False)
    #: the page's stored state as its request found it (a ``PageRecord``; None: not stored), from
    #: the request's meta; ``Unread.UNREAD`` when nothing read it on the way (the pipelines read
    #: it then)
    record: Any = field(default=Unread.UNREAD, repr=False, compare=False)
    #: ClassifyPipeline's decision (a ``recrawler.pipelines.commit.PageUpdate``) on its way to
    #: IndexPipeline, which writes it with the page's chunks
    update: Any = field(default=None, repr=False, compare=False)

    def __repr__(self) -> str:
        # short, never the text: Scrapy logs each item it scrapes (DEBUG), and a docs page's text
        # is kilobytes; the fields that say which page and what became of it
        status = self.status.value if self.status is not None else "-"
        size = f"{len(self.text):,} chars" if self.text is not None else "no text"
        error = f" error={self.error}" if self.error else ""
        return f"<Page {status} {self.http_status} {self.url} ({size}){error}>"
