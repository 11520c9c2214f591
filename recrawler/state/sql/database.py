"""What the shared role implementations need from a backend's connection, and the store they make."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from recrawler.events import sink_from_settings
from recrawler.exceptions import StateStoreError
from recrawler.state.sql.dialect import values
from recrawler.state.sql.visibility import visible_run

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from contextlib import AbstractContextManager

    from scrapy.settings import BaseSettings

    from recrawler.events import EventSink
    from recrawler.state.records import Event
    from recrawler.state.roles.blocks import BlockModel
    from recrawler.state.sql.dialect import Dialect, Work

_T = TypeVar("_T")

logger = logging.getLogger(__name__)

__all__ = [
    "OUTBOX_COLUMNS",
    "Database",
    "Reader",
    "block_model",
    "insert_embeddings",
    "insert_outbox",
    "log_migrations",
    "outbox_rows",
    "store_options",
    "undelivered_sql",
]


class Reader(Protocol):
    """A read-only connection for the CLI's synchronous readers."""

    dialect: Dialect

    def run(self, work: Work[_T]) -> _T:
        """Run *work* on this connection."""

    def iter(self, sql: str, params: Any = ()) -> Iterator[Any]:
        """Stream the rows of a query (never all in memory)."""

    def damage(self) -> list[str]:
        """What the backend's own check of its files finds damaged (empty: nothing)."""


def block_model(db: Database) -> BlockModel:
    """The store's block arithmetic, or StateStoreError naming why there is none."""
    if db.blocks is None:
        msg = (
            f"{db.label}: block statistics need the caller's block arithmetic "
            "(open the store with blocks=, as a crawl does)"
        )
        raise StateStoreError(msg)
    return db.blocks


class Database(Protocol):
    """One backend's connection as the roles use it (SQLite's worker thread, psycopg's pool).

    Page writes are atomic units inside a group transaction committed every
    ``RECRAWLER_DB_BATCH_SIZE`` writes or ``RECRAWLER_DB_COMMIT_SECS`` seconds; every other write is
    its own transaction, after the group's pending writes committed.
    """

    dialect: Dialect
    sink: EventSink | None
    dry_run: bool
    #: the database named in messages (a path, or a URI without its password)
    label: str
    #: page writes a group transaction commits at most (``RECRAWLER_DB_BATCH_SIZE``)
    batch_size: int
    #: the caller's block arithmetic the history role applies (None: block statistics wait)
    blocks: BlockModel | None

    async def run(self, work: Work[_T], *, flush: bool = False) -> _T:
        """Run *work* where the store's own writes are visible (after committing them: *flush*)."""

    async def page_write(self, work: Work[_T], outcome: Sequence[str] = (), *, units: int = 1) -> _T:
        """Run *work* as one atomic page write (of *units* pages: the group's size counts pages)
        in the group transaction; :class:`~recrawler.exceptions.PageWriteError` when its own
        statements failed (undone, the group stands)."""

    async def flush(self) -> None:
        """Commit the group's pending writes (and deliver their events)."""

    async def transaction(self, work: Work[_T], *, concurrent: bool = False) -> _T:
        """Commit pending writes, then run *work* as one transaction of its own (*concurrent*:
        beside the store's other work, on a connection of its own, where the backend has one)."""

    def transaction_sync(self, work: Work[_T]) -> _T:
        """Blocking :meth:`transaction` on a connection of its own: never on the reactor (it would
        wait for locks the store's own open transaction holds, which only the reactor commits)."""

    def reader(self) -> AbstractContextManager[Reader]:
        """A read-only connection of its own, refused on a newer schema."""

    def embeddings_work(self, rows: Sequence[tuple[str, str, bytes]]) -> Work[None]:
        """Add (embedder, text hash, vector) rows to the embeddings cache."""

    def _outbox(self, events: Sequence[Event]) -> Work[None]:
        """Write *events* to the outbox (in the caller's transaction)."""


def outbox_rows(events: Sequence[Event], *, delivered: bool = False) -> list[tuple[Any, ...]]:
    """The outbox rows of *events* (payload, run, page key, action, delivered)."""
    return [(e.to_json(), e.run_id, e.key, str(e.action), int(delivered)) for e in events]


#: the outbox row's columns :func:`outbox_rows` fills
OUTBOX_COLUMNS = "payload, run_id, key, action, delivered"


def insert_outbox(sink: EventSink | None, events: Sequence[Event]) -> Work[None]:
    """Write *events* to the outbox (in their order): the durable log of what each run did, sent
    to the sink once their run is published (with no sink, marked delivered as written)."""
    if events:
        yield from values(
            f"INSERT INTO outbox ({OUTBOX_COLUMNS})", outbox_rows(events, delivered=sink is None)
        )


def undelivered_sql(d: Dialect) -> str:
    """The next batch of events to send (parameter: the batch size): not sent yet, of a run a
    publication covers (never a held or discarded one), oldest first."""
    return f"""SELECT id, payload FROM outbox WHERE delivered = 0 AND {visible_run("run_id")}
        ORDER BY id LIMIT ?{d.skip_locked}"""


def insert_embeddings(d: Dialect, rows: Sequence[tuple[str, str, bytes]]) -> Work[None]:
    """Add (embedder, text hash, vector) rows to the cache; a row already there is kept."""
    yield from values(
        f"INSERT INTO embeddings ({d.embedding_columns})",
        d.embedding_rows(rows),
        " ON CONFLICT DO NOTHING",
        row=f"({d.embedding_values})",
    )


def store_options(settings: BaseSettings) -> dict[str, Any]:
    """A store's keyword arguments from a crawler's settings (every backend takes the same)."""
    dry_run = settings.getbool("RECRAWLER_DRY_RUN")
    return {
        "batch_size": settings.getint("RECRAWLER_DB_BATCH_SIZE"),
        "commit_secs": settings.getfloat("RECRAWLER_DB_COMMIT_SECS"),
        "timeout_secs": settings.getfloat("RECRAWLER_DB_TIMEOUT_SECS"),
        # a dry run writes nothing: no events either
        "sink": None if dry_run else sink_from_settings(settings),
        "dry_run": dry_run,
        # events go out with the run when it publishes as a whole (a change it takes back is
        # never announced), else after each commit
        "deliver_on_commit": not (
            settings.getbool("RECRAWLER_INDEX_ENABLED") and settings.get("RECRAWLER_PUBLISH") == "run"
        ),
    }


def log_migrations(label: str, before: int, applied: list[int]) -> None:
    """One INFO line for the migrations an open applied: a new database, or one brought forward."""
    if not applied:
        return
    if not before:
        logger.info("state database %(db)s created (schema %(v)d)", {"db": label, "v": max(applied)})
        return
    logger.info(
        "state database %(db)s migrated from schema %(old)d to %(new)d (%(n)d migrations)",
        {"db": label, "old": before, "new": max(applied), "n": len(applied)},
    )
