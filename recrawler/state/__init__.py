"""Crawl state: the role protocols, their records, and the crawler's single store."""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from scrapy.utils.misc import load_object

from recrawler.exceptions import ConfigurationError
from recrawler.state.records import (
    GONE,
    LIVE,
    MOVED,
    QUARANTINED,
    RUN_ABORTED,
    RUN_DISCARDED,
    RUN_FINISHED,
    RUN_HELD,
    RUN_PUBLISHED,
    RUN_RUNNING,
    TRUST_SIGNALS,
    ChangeRow,
    Event,
    FieldsRow,
    PageRecord,
    ReconcileResult,
    RemovalPlan,
    Run,
    ScheduledPage,
    TrustRecord,
    utcnow,
)
from recrawler.state.roles import (
    History,
    KnowledgeBase,
    Lifecycle,
    Pages,
    Readers,
    Runs,
    Schedule,
    StateStore,
    Trust,
)

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

__all__ = [
    "GONE",
    "LIVE",
    "MOVED",
    "QUARANTINED",
    "RUN_ABORTED",
    "RUN_DISCARDED",
    "RUN_FINISHED",
    "RUN_HELD",
    "RUN_PUBLISHED",
    "RUN_RUNNING",
    "TRUST_SIGNALS",
    "ChangeRow",
    "Event",
    "FieldsRow",
    "History",
    "KnowledgeBase",
    "Lifecycle",
    "PageRecord",
    "Pages",
    "Readers",
    "ReconcileResult",
    "RemovalPlan",
    "Run",
    "Runs",
    "Schedule",
    "ScheduledPage",
    "StateStore",
    "Trust",
    "TrustRecord",
    "begin_run_now",
    "store_for",
    "store_from_uri",
    "utcnow",
]


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

    def peek(self, key: str) -> PageRecord | Any | None:
        """Return the hint for *key* (kept), or ``MISSING``."""
        return self._data.get(key, self.MISSING)

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
    if isinstance(fut, Run):
        # the hot path: every request and item after the first
        return fut
    if fut is None:
        fut = asyncio.ensure_future(_begin(crawler))
        _runs[crawler] = fut
    elif fut.done():
        done: Run = fut.result()
        return done
    run: Run = await asyncio.shield(fut)
    return run


def begin_run_now(crawler: Crawler) -> Run:
    """Open the store and begin the run before the crawl starts (blocking, once): a bad database or
    another run of the same site stops the crawl before its first request."""
    current = _runs.get(crawler)
    if isinstance(current, Run):
        return current
    store = store_for(crawler)
    store.open_sync()
    spider, site, kwargs = _run_args(crawler)
    run = store.begin_run_sync(spider, site, utcnow(), **kwargs)
    _runs[crawler] = run
    return run


async def _begin(crawler: Crawler) -> Run:
    store = store_for(crawler)
    await store.open()
    spider, site, kwargs = _run_args(crawler)
    return await store.begin_run(spider, site, utcnow(), **kwargs)


def _run_args(crawler: Crawler) -> tuple[str, str | None, dict[str, Any]]:
    from recrawler.state.sqlite import lease_holder

    spider = crawler.spider
    site = getattr(spider, "recrawler_site", None)
    settings = crawler.settings
    embedder = None
    if settings.getbool("RECRAWLER_INDEX_ENABLED"):
        from recrawler.pipelines.index import embedder_for
        from recrawler.redact import redact_url

        base_url = settings.get("RECRAWLER_EMBEDDER_BASE_URL")
        # what search and `runs approve` need to rebuild the same embedder (never a key or password)
        embedder = json.dumps(
            {
                "id": embedder_for(crawler).id,
                "spec": settings.get("RECRAWLER_EMBEDDER"),
                "base_url": redact_url(str(base_url)) if base_url else base_url,
            }
        )
    kwargs: dict[str, Any] = {
        "embedder": embedder,
        "publish_each_page": (
            embedder is not None
            and settings.get("RECRAWLER_PUBLISH") == "page"
            and not settings.getbool("RECRAWLER_DRY_RUN")
        ),
        "holder": lease_holder(),
        "lease_secs": settings.getfloat("RECRAWLER_LEASE_SECS") or 60.0,
    }
    return getattr(spider, "name", "?"), site, kwargs


def current_run(crawler: Crawler) -> Run | None:
    """Return the crawler's run if it has begun (without waiting)."""
    fut = _runs.get(crawler)
    if isinstance(fut, Run):
        return fut
    if fut is None or not fut.done() or fut.exception() is not None:
        return None
    run: Run = fut.result()
    return run
