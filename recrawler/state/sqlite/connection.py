"""Opening a SQLite state database: connection settings, WAL, and one-line errors for files that
are locked, missing, empty, corrupt or not recrawler's."""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from recrawler.exceptions import SchemaVersionError, StateStoreError, StateStoreUnavailable
from recrawler.state.sql.database import undelivered_sql
from recrawler.state.sql.dialect import SQLITE, drive
from recrawler.state.sqlite.versions import _execute, integrity_problems

if TYPE_CHECKING:
    from collections.abc import Iterator

    from recrawler.events import EventSink
    from recrawler.state.sql.dialect import Dialect, Work

__all__ = ["SQLiteReader", "connect", "deliver_outbox", "enable_wal", "open_error", "refuse_empty"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


def _regexp(pattern: str, value: str | None) -> bool:
    # SQLite's REGEXP operator: Python's re, searched (not anchored)
    return value is not None and re.search(pattern, value) is not None


def connect(path: str, *, timeout_secs: float, readonly: bool = False) -> sqlite3.Connection:
    """Open *path* (read-only: it must exist) with recrawler's connection settings; a failure is one
    line naming the file and the cause."""
    if path != ":memory:":
        parent = Path(path).resolve().parent
        if not parent.is_dir():
            msg = f"cannot open state database {path!r}: directory {str(parent)!r} does not exist"
            raise StateStoreUnavailable(msg)
        if readonly and not Path(path).exists():
            msg = f"no state database at {path!r} (run a crawl first, or pass --db)"
            raise StateStoreUnavailable(msg)
    try:
        # a read-only open needs a URI: quote the path so "?" or "#" in it stay part of it
        target = Path(path).resolve().as_uri() + "?mode=ro" if readonly else path
        conn = sqlite3.connect(
            target,
            timeout=timeout_secs,
            isolation_level=None,
            uri=readonly,
            check_same_thread=False,
        )
        conn.row_factory = sqlite3.Row
        conn.create_function("regexp", 2, _regexp, deterministic=True)
        conn.execute("PRAGMA foreign_keys = ON")
    except sqlite3.DatabaseError as exc:
        raise open_error(path, exc) from exc
    return conn


def open_error(path: str, exc: sqlite3.Error) -> StateStoreError:
    """The one-line error for a database SQLite cannot open or use: locked, unopenable or not ours."""
    text = str(exc)
    if "locked" in text or "busy" in text:
        return StateStoreUnavailable(
            f"state database {path!r} is locked by another process ({text}); is another crawl running on it?"
        )
    if isinstance(exc, sqlite3.OperationalError) and "unable to open" in text:
        return StateStoreUnavailable(f"cannot open state database {path!r}: {text}")
    return SchemaVersionError(
        f"state database {path!r} is corrupt or not a recrawler database ({text}); "
        "it was left untouched: move it away or point RECRAWLER_DB_URI elsewhere"
    )


def refuse_empty(path: str, *, timeout_secs: float) -> None:
    """A crawl creates its database only where there is no file: an existing empty (0-byte)
    file is refused, as every command refuses it (a truncated database is not a new one).
    One that another process is creating this moment gets its header within milliseconds."""
    if path == ":memory:":
        return
    file = Path(path)
    deadline = time.monotonic() + min(timeout_secs, 1.0)
    while file.exists() and file.stat().st_size == 0 and not Path(path + "-wal").exists():
        if time.monotonic() >= deadline:
            msg = (
                f"state database {path!r} is an empty (0-byte) file: refused and left "
                "untouched (remove it to start a new database, or restore it from a backup)"
            )
            raise SchemaVersionError(msg)
        time.sleep(0.01)


def enable_wal(conn: sqlite3.Connection, *, timeout_secs: float) -> None:
    """Switch the file to WAL, waiting like any other lock for up to ``timeout_secs``.

    The switch needs the file to itself and SQLite does not call the busy handler for it:
    a second process opening the same new file at that moment got "database is locked" at
    once. WAL is kept in the file, so a later open finds it set and takes no lock.
    """
    deadline = time.monotonic() + timeout_secs
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


class SQLiteReader:
    """A read-only connection of its own, for the synchronous readers."""

    dialect: Dialect = SQLITE

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def run(self, work: Work[_T]) -> _T:
        """Run *work* on this connection."""
        return drive(work, lambda op: _execute(self.conn, op))

    def iter(self, sql: str, params: Any = ()) -> Iterator[Any]:
        """Stream the rows of a query."""
        return iter(self.conn.execute(sql, params))

    def damage(self) -> list[str]:
        """What ``PRAGMA integrity_check`` finds (a file too damaged to check: why)."""
        return integrity_problems(self.conn)


def deliver_outbox(
    conn: sqlite3.Connection, sink: EventSink | None, dialect: Dialect, *, asked: bool = False
) -> None:
    """Send committed outbox events of published runs to the sink, a batch at a time, marking
    each batch delivered once the sink took it (at-least-once). A sink that is not
    ``immediate`` (a webhook) is only called when a delivery is *asked* for."""
    if sink is None or not (asked or sink.immediate):
        return
    if conn.in_transaction:
        return
    while True:
        rows = conn.execute(undelivered_sql(dialect), (sink.batch_size,)).fetchall()
        if not rows:
            return
        try:
            sink.deliver([r["payload"] for r in rows])
        except OSError as exc:
            # the pages are committed; their events wait in the outbox for the next delivery
            logger.error(
                "event delivery to %(sink)s failed, kept in the outbox: %(exc)s",
                {"sink": getattr(sink, "path", sink), "exc": exc},
            )
            return
        conn.execute(
            "UPDATE outbox SET delivered = 1 WHERE id IN (SELECT value FROM json_each(?))",
            (json.dumps([r["id"] for r in rows]),),
        )
