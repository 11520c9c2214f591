"""Crawl state: the role protocols, their records, and how a backend is chosen."""

from __future__ import annotations

from typing import TYPE_CHECKING

from recrawler.exceptions import ConfigurationError
from recrawler.extras import missing_extra
from recrawler.state.errors import DAMAGED, UNREACHABLE, UNREADABLE, database_errors
from recrawler.state.records import (
    GONE,
    LIVE,
    MOVED,
    PENDING_CHANGED,
    PENDING_NEW,
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
    Freshness,
    HeldRun,
    ListedEntry,
    PageRecord,
    ReconcileResult,
    RemovalPlan,
    RevisitUpdate,
    Run,
    ScheduledPage,
    SiteBuild,
    SitemapFile,
    TrustRecord,
    utcnow,
)
from recrawler.state.roles import (
    BlockModel,
    Decisions,
    Frontier,
    History,
    KnowledgeBase,
    Lifecycle,
    Pages,
    Readers,
    Runs,
    Schedule,
    SearchIndex,
    StateStore,
    Trust,
)

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


__all__ = [
    "DAMAGED",
    "GONE",
    "LIVE",
    "MOVED",
    "PENDING_CHANGED",
    "PENDING_NEW",
    "QUARANTINED",
    "RUN_ABORTED",
    "RUN_DISCARDED",
    "RUN_FINISHED",
    "RUN_HELD",
    "RUN_PUBLISHED",
    "RUN_RUNNING",
    "TRUST_SIGNALS",
    "UNREACHABLE",
    "UNREADABLE",
    "BlockModel",
    "ChangeRow",
    "Decisions",
    "Event",
    "FieldsRow",
    "Freshness",
    "Frontier",
    "HeldRun",
    "History",
    "KnowledgeBase",
    "Lifecycle",
    "ListedEntry",
    "PageRecord",
    "Pages",
    "Readers",
    "ReconcileResult",
    "RemovalPlan",
    "RevisitUpdate",
    "Run",
    "Runs",
    "Schedule",
    "ScheduledPage",
    "SearchIndex",
    "SiteBuild",
    "SitemapFile",
    "StateStore",
    "Trust",
    "TrustRecord",
    "database_errors",
    "store_from_uri",
    "utcnow",
]


def store_from_uri(uri: str, settings: BaseSettings, *, blocks: BlockModel | None = None) -> StateStore:
    """Build (not open) the backend for *uri*, chosen by its scheme; *blocks*: the block
    arithmetic its history role applies (change detection's, passed by who opens the store)."""
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else "sqlite"
    backends = settings.getdict("RECRAWLER_STATE_BACKENDS")
    if scheme not in backends:
        msg = f"RECRAWLER_DB_URI: no backend for scheme {scheme!r} in {uri!r} (known: {sorted(backends)})"
        raise ConfigurationError(msg)
    # imported here: a reader of the knowledge base (open_kb, `recrawler search`) never loads Scrapy
    from scrapy.utils.misc import load_object

    try:
        cls = load_object(backends[scheme])
    except ModuleNotFoundError as exc:
        # the backend's driver is an extra (psycopg: recrawler[postgres])
        missing = missing_extra(exc, f"RECRAWLER_DB_URI={scheme}://...")
        if missing is None:
            raise
        raise missing from exc
    store: StateStore = cls.from_settings(uri, settings)
    store.blocks = blocks
    return store
