"""PostgreSQL state store: psycopg 3's async pool, group commits, pgvector for the knowledge base.

``postgresql://user:password@host/db`` or libpq's socket form ``postgresql://user@/db?host=/dir``
(``RECRAWLER_DB_URI``). Needs ``pip install recrawler[postgres]`` and the ``vector`` extension
available on the server (the first open runs ``CREATE EXTENSION IF NOT EXISTS vector``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from recrawler.state.postgres.database import PostgreSQLDatabase
from recrawler.state.postgres.versions import SCHEMA_VERSION
from recrawler.state.sql import RoleMethods

if TYPE_CHECKING:
    from recrawler.events import EventSink
    from recrawler.state.roles.blocks import BlockModel

__all__ = ["SCHEMA_VERSION", "PostgreSQLStateStore"]


class PostgreSQLStateStore(PostgreSQLDatabase, RoleMethods):
    """State in one PostgreSQL database: the same roles, queries and guarantees as SQLite's store.

    Several crawls (one per site, each with its own lease and run) may share the database; each
    site publishes its own runs. Search reads pgvector's HNSW index (``recrawler.kb.reader.open_kb``),
    built once ``RECRAWLER_DB_VECTOR_INDEX_MIN_ROWS`` vectors of a size are stored.
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
        vector_index_min_rows: int = 10_000,
        hnsw: tuple[int, int] | None = None,
    ) -> None:
        super().__init__(
            uri,
            batch_size=batch_size,
            commit_secs=commit_secs,
            timeout_secs=timeout_secs,
            sink=sink,
            dry_run=dry_run,
            deliver_on_commit=deliver_on_commit,
            vector_index_min_rows=vector_index_min_rows,
            hnsw=hnsw,
        )
        #: the caller's block arithmetic the history role applies (None: block statistics wait)
        self.blocks = blocks
        self._bind_roles(self)


if TYPE_CHECKING:
    from recrawler.state.roles import StateStore

    def _implements_every_role(store: PostgreSQLStateStore) -> StateStore:
        # mypy checks here that the PostgreSQL store keeps every role's signatures
        return store
