"""SQLite state store: one file, WAL, group commits on one dedicated worker thread.

:class:`SQLiteStateStore` (:mod:`recrawler.state.sqlite.store`) is the shared role implementations
(:mod:`recrawler.state.sql`) over one :class:`~recrawler.state.sqlite.database.SQLiteDatabase`
(connection, worker thread, group transaction, outbox).

Its names load on first use: a reader of the knowledge base that only opens the file and checks
its schema (:mod:`recrawler.state.sqlite.versions`) loads none of the store.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from recrawler.state.records import LIVE
    from recrawler.state.sql.rows import _at
    from recrawler.state.sql.runs import lease_holder
    from recrawler.state.sqlite.store import SQLiteStateStore
    from recrawler.state.sqlite.versions import SCHEMA_VERSION, path_from_uri

__all__ = ["LIVE", "SCHEMA_VERSION", "SQLiteStateStore", "_at", "lease_holder", "path_from_uri"]

_HOMES = {
    "LIVE": "recrawler.state.records",
    "SCHEMA_VERSION": "recrawler.state.sqlite.versions",
    "SQLiteStateStore": "recrawler.state.sqlite.store",
    "_at": "recrawler.state.sql.rows",
    "lease_holder": "recrawler.state.sql.runs",
    "path_from_uri": "recrawler.state.sqlite.versions",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'recrawler.state.sqlite' has no attribute {name!r}")
    return getattr(import_module(home), name)
