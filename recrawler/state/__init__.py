"""Crawl state: the role protocols, their records, and how a backend is chosen."""

from __future__ import annotations

from typing import TYPE_CHECKING

from recrawler.exceptions import ConfigurationError
from recrawler.extras import missing_extra
from recrawler.state.errors import DAMAGED, UNREACHABLE, UNREADABLE, database_errors
from recrawler.state.ledger import SinkLedger
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
from recrawler.state.slices import Slice
from recrawler.state.sql.changes import ChangeReads

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

    from recrawler.state.postgres.search import PostgreSQLSearchReads
    from recrawler.state.sqlite.search import SQLiteSearchReads


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
    "ChangeReads",
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
    "SinkLedger",
    "SiteBuild",
    "SitemapFile",
    "Slice",
    "StateStore",
    "Trust",
    "TrustRecord",
    "database_errors",
    "open_postgres_search",
    "open_sink_ledger",
    "open_sqlite_search",
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


def open_sqlite_search(target: str) -> SQLiteSearchReads:
    """Search's read role over the SQLite database at *target* (a path or a ``sqlite://`` URI),
    read-only, its schema and integrity checked: the rows a search, the changes feed and a dump
    read (``recrawler.kb`` ranks them)."""
    # imported here: a crawl never loads the readers
    from recrawler.state.sqlite.search import SQLiteSearchReads

    return SQLiteSearchReads(target)


def open_postgres_search(uri: str) -> PostgreSQLSearchReads:
    """Search's read role over the PostgreSQL database at *uri*, its schema checked."""
    from recrawler.state.postgres.search import PostgreSQLSearchReads

    return PostgreSQLSearchReads(uri)


def open_sink_ledger(uri: str, name: str) -> SinkLedger:
    """The ledger of the vector-store sink *name* in the knowledge base's database at *uri*."""
    return SinkLedger(uri, name)
