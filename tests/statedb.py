"""A SQLite state database read from outside the store, as another process would: each call opens a
connection of its own and closes it, so it sees what was committed and nothing else."""

from __future__ import annotations

import sqlite3
from contextlib import closing, contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from pathlib import Path


def rows(db: Path | str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Every row *sql* selects."""
    with closing(sqlite3.connect(db)) as conn:
        return conn.execute(sql, params).fetchall()


def row(db: Path | str, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
    """The first row *sql* selects (``None`` for none)."""
    with closing(sqlite3.connect(db)) as conn:
        found: tuple[Any, ...] | None = conn.execute(sql, params).fetchone()
        return found


def value(db: Path | str, sql: str, params: Sequence[Any] = ()) -> Any:
    """The first column of the first row *sql* selects."""
    found = row(db, sql, params)
    assert found is not None, sql
    return found[0]


def dicts(db: Path | str, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
    """Every row *sql* selects, as column name -> value."""
    with closing(sqlite3.connect(db)) as conn:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute(sql, params)]


def statuses(db: Path | str) -> dict[str, int]:
    """How many stored pages have each status (live, quarantined, gone)."""
    return dict(rows(db, "SELECT status, COUNT(*) FROM pages GROUP BY status"))


def text_values(db: Path | str) -> list[tuple[str, str, str]]:
    """(table, column, value) for every text value of every table."""
    found = []
    with closing(sqlite3.connect(db)) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            cursor = conn.execute(f'SELECT * FROM "{table}"')
            columns = [d[0] for d in cursor.description]
            for values in cursor:
                found.extend(
                    (table, column, v)
                    for column, v in zip(columns, values, strict=True)
                    if isinstance(v, str)
                )
    return found


@contextmanager
def editing(db: Path | str) -> Iterator[sqlite3.Connection]:
    """A connection of its own for a test's direct edit of the database: the block's statements
    commit together at its end (none do if it raises), then the connection closes."""
    with closing(sqlite3.connect(db)) as conn, conn:
        yield conn
