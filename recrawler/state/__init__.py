"""Crawl state: the StateStore contract, its records, and the crawler's single store."""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol
from weakref import WeakKeyDictionary

from scrapy.utils.misc import load_object

from recrawler.exceptions import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

__all__ = [
    "Event",
    "PageRecord",
    "ReconcileResult",
    "Run",
    "StateStore",
    "store_for",
    "store_from_uri",
    "utcnow",
]

LIVE, QUARANTINED, GONE = "live", "quarantined", "gone"


def utcnow() -> datetime:
    """Return the current time, timezone-aware UTC."""
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True, kw_only=True)
class PageRecord:
    """A page's stored state: one row per page key."""

    key: str
    site: str
    url: str
    etag: str | None = None
    last_modified: str | None = None
    lastmod: str | None = None
    content_hash: str | None = None
    fuzzy_hash: str | None = None
    title: str | None = None
    status: str = LIVE
    misses: int = 0
    first_seen: datetime
    last_checked: datetime | None = None
    last_changed: datetime | None = None
    last_seen_run: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """One crawl run: its id numbers the run's events and its ``last_seen_run`` marks."""

    id: int
    spider: str
    site: str | None
    started_at: datetime
    #: live or quarantined pages of the site stored before the run (0: a first run)
    prior_pages: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """A page event, written to the outbox in the page's transaction and delivered afterwards."""

    run_id: int
    action: str
    url: str
    key: str
    content_hash: str | None
    status: str
    at: datetime
    reason: str | None = None
    http_status: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """Serialise as one JSON line (``at`` in ISO 8601)."""
        data = asdict(self)
        data["at"] = self.at.isoformat()
        extra = data.pop("extra")
        data.update(extra)
        return json.dumps({k: v for k, v in data.items() if v is not None or k in _KEEP_NULL})


_KEEP_NULL = frozenset({"content_hash"})


@dataclass(frozen=True, slots=True, kw_only=True)
class ReconcileResult:
    """What the reconciliation did (or, when skipped, would have done)."""

    applied: bool
    quarantined: int = 0
    gone: dict[str, int] = field(default_factory=dict)
    skipped_misses: int = 0


class StateStore(Protocol):
    """The contract every backend keeps. All methods are coroutines except the CLI readers.

    Guarantees: each ``record*`` call is atomic (its page state and its events land together or
    not at all); nothing is durable until ``flush()`` or a group commit; ``reconcile`` is one
    transaction of set statements; stores are never recreated or migrated downwards.
    """

    uri: str

    async def open(self) -> None:
        """Connect and migrate; idempotent. Raises StateStoreError subclasses."""

    def open_sync(self) -> None:
        """Blocking open, used once at startup so a bad database stops the crawl before it begins."""

    async def close(self) -> None:
        """Commit what is pending, deliver events, disconnect."""

    async def flush(self) -> None:
        """Commit pending page writes now and deliver their events."""

    async def begin_run(self, spider: str, site: str | None, started_at: datetime) -> Run:
        """Start a run."""

    async def get(self, key: str) -> PageRecord | None:
        """Return the stored record of *key*, or None."""

    async def record(self, run: Run, rec: PageRecord, events: Sequence[Event]) -> None:
        """Write a page's new state and its events in one transaction."""

    async def record_error(self, run: Run, key: str | None, events: Sequence[Event]) -> None:
        """Note that a page was reached with an error: state untouched, events written."""

    async def record_miss(self, run: Run, key: str, http_status: int) -> str:
        """Stage a 404/410 answer of a stored page: ``staged``, ``tombstone`` or ``unknown``."""

    def unseen_sync(self, run: Run, limit: int) -> list[tuple[str, str]]:
        """Blocking :meth:`unseen`, for ``spider_idle`` handlers (sync signals, nothing in flight)."""

    async def unseen(self, run: Run, limit: int) -> list[tuple[str, str]]:
        """Return up to *limit* (key, url) of the run's site not reached yet, marking them."""

    async def reconcile(
        self, run: Run, *, apply: bool, gone_after: int, gone_statuses: Sequence[int], at: datetime
    ) -> ReconcileResult:
        """Apply (or drop) the run's staged misses: quarantine, gone, with their events."""

    async def finish_run(self, run: Run, *, reason: str, at: datetime, report: dict[str, Any]) -> None:
        """Record how the run ended."""

    def iter_pages(self, status: str | None = None) -> Iterator[PageRecord]:
        """Yield stored pages ordered by key (synchronous; for the CLI)."""

    def iter_runs(self) -> Iterator[dict[str, Any]]:
        """Yield runs, newest first (synchronous; for the CLI)."""


_stores: WeakKeyDictionary[Crawler, StateStore] = WeakKeyDictionary()


def store_from_uri(uri: str, settings: BaseSettings) -> StateStore:
    """Build (not open) the backend for *uri*, chosen by its scheme."""
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else "sqlite"
    backends = settings.getdict("RECRAWLER_STATE_BACKENDS")
    if scheme not in backends:
        msg = f"RECRAWLER_DB_URI: no backend for scheme {scheme!r} in {uri!r} (known: {sorted(backends)})"
        raise ConfigurationError(msg)
    cls = load_object(backends[scheme])
    store: StateStore = cls.from_settings(uri, settings)
    return store


def store_for(crawler: Crawler) -> StateStore:
    """Return the crawler's single store, built on first use from ``RECRAWLER_DB_URI``."""
    store = _stores.get(crawler)
    if store is None:
        uri = crawler.settings.get("RECRAWLER_DB_URI")
        if not uri:
            raise ConfigurationError(
                "RECRAWLER_DB_URI: empty; set a database URI such as sqlite:///recrawler.db"
            )
        store = store_from_uri(str(uri), crawler.settings)
        _stores[crawler] = store
    return store


class RecordHints:
    """Records the middleware read for in-flight requests, so the pipeline does not read again.

    Bounded (oldest dropped first); a miss only costs the pipeline one more read.
    """

    MISSING: Any = object()

    def __init__(self, maxsize: int = 10_000) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[str, PageRecord | None] = OrderedDict()

    def put(self, key: str, rec: PageRecord | None) -> None:
        """Remember what the store held for *key* when its request was sent."""
        self._data[key] = rec
        if len(self._data) > self.maxsize:
            self._data.popitem(last=False)

    def pop(self, key: str) -> PageRecord | Any | None:
        """Return and forget the hint for *key*, or ``MISSING``."""
        return self._data.pop(key, self.MISSING)

    def __len__(self) -> int:
        return len(self._data)


_hints: WeakKeyDictionary[Crawler, RecordHints] = WeakKeyDictionary()


def hints_for(crawler: Crawler) -> RecordHints:
    """Return the crawler's record hints."""
    hints = _hints.get(crawler)
    if hints is None:
        hints = _hints[crawler] = RecordHints()
    return hints


_runs: WeakKeyDictionary[Crawler, Any] = WeakKeyDictionary()


async def run_for(crawler: Crawler) -> Run:
    """Open the crawler's store and begin its run once; every component awaits the same run."""
    import asyncio

    fut = _runs.get(crawler)
    if fut is None:
        fut = asyncio.ensure_future(_begin(crawler))
        _runs[crawler] = fut
    elif fut.done():
        # the hot path: every request and item after the first
        done: Run = fut.result()
        return done
    run: Run = await asyncio.shield(fut)
    return run


async def _begin(crawler: Crawler) -> Run:
    store = store_for(crawler)
    await store.open()
    spider = crawler.spider
    site = getattr(spider, "recrawler_site", None)
    return await store.begin_run(getattr(spider, "name", "?"), site, utcnow())


def current_run(crawler: Crawler) -> Run | None:
    """Return the crawler's run if it has begun (without waiting)."""
    fut = _runs.get(crawler)
    if fut is None or not fut.done() or fut.exception() is not None:
        return None
    run: Run = fut.result()
    return run
