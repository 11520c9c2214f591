"""The SQLite state store: every role over one :class:`~recrawler.state.sqlite.database.SQLiteDatabase`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from recrawler.state.sql import RoleMethods
from recrawler.state.sqlite.database import SQLiteDatabase

if TYPE_CHECKING:
    from recrawler.events import EventSink
    from recrawler.state.roles.blocks import BlockModel


class SQLiteStateStore(SQLiteDatabase, RoleMethods):
    """State in one SQLite file (WAL, ``synchronous=NORMAL``): every role over one connection.

    Every call runs on one dedicated worker thread that owns the connection, so the reactor never
    blocks. Page writes are savepoints inside a group transaction committed every
    ``RECRAWLER_DB_BATCH_SIZE`` pages or ``RECRAWLER_DB_COMMIT_SECS`` seconds: each page is atomic,
    and a kill loses at most the uncommitted tail, which the next run simply checks again.

    The roles are attributes (``pages``, ``runs``, ``kb``, ``history``, ``schedule``, ``host_trust``
    for trust, ``readers``, ...): a component is handed the one role it uses and calls it
    (``store.pages.record(...)``).
    """

    def __init__(
        self,
        uri: str,
        *,
        batch_size: int = 1000,
        commit_secs: float = 2.0,
        timeout_secs: float = 10.0,
        sink: EventSink | None = None,
        dry_run: bool = False,
        deliver_on_commit: bool = True,
        blocks: BlockModel | None = None,
    ) -> None:
        super().__init__(
            uri,
            batch_size=batch_size,
            commit_secs=commit_secs,
            timeout_secs=timeout_secs,
            sink=sink,
            dry_run=dry_run,
            deliver_on_commit=deliver_on_commit,
        )
        #: the caller's block arithmetic the history role applies (None: block statistics wait)
        self.blocks = blocks
        self._bind_roles(self)


if TYPE_CHECKING:
    from recrawler.state.roles import StateStore

    def _implements_every_role(store: SQLiteStateStore) -> StateStore:
        # mypy checks here that the SQLite store keeps every role's signatures
        return store
