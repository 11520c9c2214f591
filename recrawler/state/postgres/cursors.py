"""The dialect's statements run on psycopg connections (the pool's async ones and blocking ones),
rows readable as ``sqlite3.Row``, and the synchronous readers' connection."""

from __future__ import annotations

import logging
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg

from recrawler.state.sql.dialect import (
    ALL,
    COUNT,
    MANY,
    ONE,
    POSTGRES,
    ROWS,
    STAGED_DROP,
    Row,
    drive,
    value_statements,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from recrawler.state.sql.dialect import Dialect, Op, RowSet, Work

_T = TypeVar("_T")

logger = logging.getLogger(__name__)


def binary_vectors(conn: psycopg.BaseConnection[Any]) -> None:
    """Send numpy arrays on *conn* in pgvector's binary form (pgvector-python's dumper). The
    parameter's type comes from its ``CAST(... AS vector)``, so no type lookup is needed, and the
    connection may open before the migration creates the extension."""
    from pgvector.psycopg.vector import VectorBinaryDumper

    conn.adapters.register_dumper("numpy.ndarray", VectorBinaryDumper)


async def configure_connection(conn: psycopg.AsyncConnection[Any]) -> None:
    """The pool's set-up of each new connection: :func:`binary_vectors`."""
    binary_vectors(conn)


def pg_row(cursor: Any) -> Any:
    """psycopg row factory: rows readable by position and by name, as ``sqlite3.Row``."""
    desc = cursor.description
    index = {c.name: i for i, c in enumerate(desc or ())}
    return lambda values: Row(values, index)


def _statement(op: Op) -> tuple[str, bool]:
    """*op*'s statement as psycopg takes it, and whether it goes through a raw cursor: positional
    parameters are sent in PostgreSQL's own numbered spelling, named ones psycopg rewrites."""
    first = op.params[0] if op.kind is MANY else op.params
    if isinstance(first, Mapping):
        return POSTGRES.sql(op.sql), False
    return POSTGRES.numbered_sql(op.sql), True


#: a row set of at least this many rows, its parameters' types given, is copied in (one ``COPY``
#: and one ``INSERT ... SELECT``) rather than sent as ``VALUES`` statements: for a first run's
#: 120,000 block-statistics rows that took the server's time for them from 0.45-0.60 s to 0.30 s,
#: and the crawl's from 0.12 s to 0.03 s (no parameter lists to build and send)
COPY_ROWS = 1000


#: connections whose role may not create temporary tables (``TEMPORARY`` revoked on the
#: database): their row sets go as ``VALUES`` statements
_UNSTAGED: weakref.WeakSet[psycopg.BaseConnection[Any]] = weakref.WeakSet()
#: whether this role may create temporary tables in this database
_MAY_STAGE = "SELECT has_database_privilege(current_database(), 'TEMPORARY')"


def _copied(conn: psycopg.BaseConnection[Any], rows: RowSet) -> bool:
    return rows.types is not None and len(rows.rows) >= COPY_ROWS and conn not in _UNSTAGED


def _refused_staging(conn: psycopg.BaseConnection[Any]) -> None:
    logger.info("this role may not create temporary tables: large row sets go in as VALUES statements")
    _UNSTAGED.add(conn)


async def _insert_values(conn: psycopg.AsyncConnection[Any], rows: RowSet) -> int:
    n = 0
    async with psycopg.AsyncRawCursor(conn) as raw:
        for sql, params in value_statements(rows):
            await raw.execute(POSTGRES.numbered_sql(sql), params)
            n += raw.rowcount
    return n


async def _insert_rows(conn: psycopg.AsyncConnection[Any], rows: RowSet) -> int:
    if not _copied(conn, rows):
        return await _insert_values(conn, rows)
    create, copy, insert = POSTGRES.staged_insert(rows)
    try:
        # a savepoint (or a transaction of its own): a failed insert takes its table back with it
        async with conn.transaction(), conn.cursor() as cur:
            await cur.execute(create)
            async with cur.copy(copy) as staged:
                staged.set_types(["int4", *(rows.types or ())])
                for i, row in enumerate(rows.rows):
                    await staged.write_row((i, *row))
            await cur.execute(insert)
            n = cur.rowcount
            await cur.execute(STAGED_DROP)
    except psycopg.errors.InsufficientPrivilege:
        may = await (await conn.execute(_MAY_STAGE)).fetchone()
        if not (may and may[0]):
            _refused_staging(conn)
            return await _insert_values(conn, rows)
        raise
    return n


def _insert_values_sync(conn: psycopg.Connection[Any], rows: RowSet) -> int:
    n = 0
    with psycopg.RawCursor(conn) as raw:
        for sql, params in value_statements(rows):
            raw.execute(POSTGRES.numbered_sql(sql), params)
            n += raw.rowcount
    return n


def _insert_rows_sync(conn: psycopg.Connection[Any], rows: RowSet) -> int:
    if not _copied(conn, rows):
        return _insert_values_sync(conn, rows)
    create, copy, insert = POSTGRES.staged_insert(rows)
    try:
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(create)
            with cur.copy(copy) as staged:
                staged.set_types(["int4", *(rows.types or ())])
                for i, row in enumerate(rows.rows):
                    staged.write_row((i, *row))
            cur.execute(insert)
            n = cur.rowcount
            cur.execute(STAGED_DROP)
    except psycopg.errors.InsufficientPrivilege:
        may = conn.execute(_MAY_STAGE).fetchone()
        if not (may and may[0]):
            _refused_staging(conn)
            return _insert_values_sync(conn, rows)
        raise
    return n


async def _execute(conn: psycopg.AsyncConnection[Any], op: Op) -> Any:
    if op.kind is ROWS:
        return await _insert_rows(conn, op.params)
    if op.kind is MANY and not op.params:
        return 0
    sql, raw = _statement(op)
    async with psycopg.AsyncRawCursor(conn) if raw else conn.cursor() as cur:
        if op.kind is MANY:
            await cur.executemany(sql, op.params)
            return cur.rowcount
        await cur.execute(sql, op.params)
        if op.kind is ONE:
            return await cur.fetchone()
        if op.kind is ALL:
            return await cur.fetchall()
        if op.kind is COUNT:
            return cur.rowcount
    raise ValueError(f"unknown statement kind {op.kind!r}")


def run_sync(conn: psycopg.Connection[Any], work: Work[_T]) -> _T:
    """Run the statements of *work* on a blocking connection (a reader's own, outside the store)."""
    return drive(work, lambda op: _execute_sync(conn, op))


def _execute_sync(conn: psycopg.Connection[Any], op: Op) -> Any:
    if op.kind is ROWS:
        return _insert_rows_sync(conn, op.params)
    if op.kind is MANY and not op.params:
        return 0
    sql, raw = _statement(op)
    with psycopg.RawCursor(conn) if raw else conn.cursor() as cur:
        if op.kind is MANY:
            cur.executemany(sql, op.params)
            return cur.rowcount
        cur.execute(sql, op.params)
        if op.kind is ONE:
            return cur.fetchone()
        if op.kind is ALL:
            return cur.fetchall()
        return cur.rowcount


async def _drive(conn: psycopg.AsyncConnection[Any], work: Work[_T]) -> _T:
    try:
        op = next(work)
        while True:
            op = work.send(await _execute(conn, op))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]  # the generator's declared return type


class PostgreSQLReader:
    """A connection of its own for the synchronous readers: never commits (rolled back at close)."""

    dialect: Dialect = POSTGRES

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    def run(self, work: Work[_T]) -> _T:
        """Run *work* on this connection."""
        return drive(work, lambda op: _execute_sync(self.conn, op))

    def iter(self, sql: str, params: Any = ()) -> Iterator[Any]:
        """Stream the rows of a query through a server-side cursor."""
        with self.conn.cursor(name="recrawler_reader") as cur:
            cur.execute(POSTGRES.sql(sql), params)
            yield from cur

    def damage(self) -> list[str]:
        """Nothing: PostgreSQL checksums and checks its own pages (amcheck, for an operator)."""
        return []
