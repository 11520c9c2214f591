"""One set of queries for SQLite and PostgreSQL: statements as values, and the few words that differ.

A role's database work is a generator that yields :class:`Op` statements and receives their
results, so the same code runs on SQLite's worker thread (a plain loop) and on psycopg's async
connection (an ``await`` per statement). Queries are written once, in SQLite's spelling of
parameters (``?`` and ``:name``); :meth:`Dialect.sql` rewrites them for psycopg (``%s``,
``%(name)s``). What no spelling shares is a :class:`Dialect` attribute or method.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias, TypeVar

from recrawler.words import chunk_words

if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Iterator, Sequence

__all__ = [
    "POSTGRES",
    "SQLITE",
    "Dialect",
    "Op",
    "Row",
    "RowSet",
    "Work",
    "count",
    "drive",
    "many",
    "one",
    "rows",
    "value_statements",
    "values",
]

_T = TypeVar("_T")

ONE, ALL, COUNT, MANY, ROWS = "one", "all", "count", "many", "rows"


class Op(NamedTuple):
    """One statement of a unit of work, and what its result is: a row, all rows or a row count."""

    kind: str
    sql: str
    params: Any = ()


#: a unit of database work: yields statements, receives their results, returns its value
Work: TypeAlias = "Generator[Op, Any, _T]"


def one(sql: str, params: Any = ()) -> Op:
    """The first row (or None)."""
    return Op(ONE, sql, params)


def rows(sql: str, params: Any = ()) -> Op:
    """Every row, as a list."""
    return Op(ALL, sql, params)


def count(sql: str, params: Any = ()) -> Op:
    """Run a statement; the number of rows it changed."""
    return Op(COUNT, sql, params)


def many(sql: str, seq: Sequence[Any]) -> Op:
    """Run a statement once per parameter set; the number of rows changed in all."""
    return Op(MANY, sql, seq)


#: rows a multi-row ``VALUES`` statement carries at most (kept well under SQLite's 32,766 and
#: PostgreSQL's 65,535 parameters a statement)
VALUES_ROWS = 500


class RowSet(NamedTuple):
    """The rows of one insert (a :func:`values` statement's parameters): ``head VALUES row, row,
    ... tail``. *types* are the SQL types of a row's parameters, in order; with them, PostgreSQL
    takes a large set through ``COPY`` (see :mod:`recrawler.state.postgres.cursors`)."""

    head: str
    row: str
    tail: str
    rows: Sequence[Sequence[Any]]
    types: tuple[str, ...] | None = None


def values(
    head: str,
    params: Sequence[Sequence[Any]],
    tail: str = "",
    *,
    row: str | None = None,
    types: tuple[str, ...] | None = None,
) -> Work[int]:
    """Insert every row of *params*: ``head VALUES (...), (...) tail``, one step whose result is
    the number of rows changed. *row* is one row's values (default: one ``?`` per parameter);
    *types*, the SQL types of its parameters, let PostgreSQL copy a large set in. The rows of one
    call never conflict with each other (one statement may hold them all)."""
    if not params:
        return 0
    one_row = row if row is not None else "(" + ", ".join("?" * len(params[0])) + ")"
    changed: int = yield Op(ROWS, head, RowSet(head, one_row, tail, params, types))
    return changed


def value_statements(rows: RowSet) -> Iterator[tuple[str, list[Any]]]:
    """The multi-row ``VALUES`` statements of *rows*, up to :data:`VALUES_ROWS` rows each: each
    statement is one step of the database, where :func:`many` is one a row (and, on SQLite, one
    wait for the interpreter lock a row while the crawl holds it)."""
    for start in range(0, len(rows.rows), VALUES_ROWS):
        part = rows.rows[start : start + VALUES_ROWS]
        yield (
            f"{rows.head} VALUES {', '.join([rows.row] * len(part))}{rows.tail}",
            [value for row in part for value in row],
        )


def drive(work: Work[_T], execute: Callable[[Op], Any]) -> _T:
    """Run *work* synchronously, each statement through *execute*."""
    try:
        op = next(work)
        while True:
            op = work.send(execute(op))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]  # the generator's declared return type


class Row:
    """A result row readable by position and by column name, like ``sqlite3.Row``."""

    __slots__ = ("_index", "_values")

    def __init__(self, values: Sequence[Any], index: dict[str, int]) -> None:
        self._values = values
        self._index = index

    def __getitem__(self, key: int | str) -> Any:
        if isinstance(key, str):
            return self._values[self._index[key]]
        return self._values[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def keys(self) -> list[str]:
        """Column names, in order (so ``dict(row)`` works)."""
        return list(self._index)

    def __repr__(self) -> str:
        return f"Row({dict(zip(self._index, self._values, strict=True))!r})"


class Dialect:
    """What SQLite's spelling says differently; the base class is SQLite (no rewriting)."""

    name = "sqlite"
    #: the larger of two values
    greatest = "MAX"
    #: list the tables of the database
    tables_sql = "SELECT name FROM sqlite_master WHERE type = 'table'"
    #: concatenate a group's values with a separator
    group_concat = "GROUP_CONCAT"
    #: columns of the embeddings cache written with a vector
    embedding_columns = "embedder, text_hash, vector"
    embedding_values = "?, ?, ?"
    #: columns of a chunk row beyond its own (PostgreSQL: its words, see :meth:`chunk_extra`)
    chunk_extra_columns = ""
    chunk_extra_values = ""
    chunk_extra_types: tuple[str, ...] = ()
    #: a transaction-long lock on a key (``?``), where writers do not already exclude each other
    lock_sql: str | None = None
    #: after a SELECT: lock the rows read, passing over rows another transaction holds (SQLite's
    #: writers exclude each other already)
    skip_locked = ""

    def sql(self, text: str) -> str:
        """The statement in this dialect's parameter style."""
        return text

    def indexed_by(self, index: str) -> str:
        """A planner hint naming the index to use (SQLite only)."""
        return f" INDEXED BY {index}"

    def in_list(self, param: str, *, negate: bool = False, sql_type: str = "TEXT") -> str:
        """``IN`` a list passed as one parameter (see :meth:`list_param`)."""
        return f"{'NOT ' if negate else ''}IN (SELECT value FROM json_each({param}))"

    def list_param(self, values: Sequence[Any]) -> Any:
        """The value of a list parameter."""
        return json.dumps(list(values))

    def json_text(self, column: str, field: str) -> str:
        """A top-level field of a JSON text column."""
        return f"json_extract({column}, '$.{field}')"

    def json_int(self, column: str, field: str) -> str:
        """A top-level integer field of a JSON text column."""
        return f"json_extract({column}, '$.{field}')"

    def regex(self, column: str, param: str) -> str:
        """*column* matches the regular expression *param* (searched, not anchored)."""
        return f"{column} REGEXP {param}"

    def embedding_rows(self, rows: Sequence[tuple[str, str, bytes]]) -> list[tuple[Any, ...]]:
        """Parameters of the embeddings insert for (embedder, text hash, vector) rows."""
        return list(rows)

    def chunk_extra(self, heading: str, text: str) -> tuple[Any, ...]:
        """A chunk row's parameters for :attr:`chunk_extra_columns` (none: SQLite's FTS5 index
        reads the text itself)."""
        return ()


_PG_TOKEN = re.compile(r"'(?:[^']|'')*'|::|:(\w+)|\?|%")


@lru_cache(maxsize=1024)
def _to_psycopg(text: str) -> str:
    def sub(m: re.Match[str]) -> str:
        found = m.group(0)
        if found.startswith("'"):
            return found.replace("%", "%%")
        if found == "::":
            return found
        if m.group(1):
            return f"%({m.group(1)})s"
        return "%s" if found == "?" else "%%"

    return _PG_TOKEN.sub(sub, text)


#: a string literal (kept whole: a ``?`` in it is text)
_PG_LITERAL = re.compile(r"('(?:[^']|'')*')")


@lru_cache(maxsize=1024)
def _to_numbered(text: str, prefix: str = "$") -> str:
    """*text* with each ``?`` outside a literal numbered: ``$1``, ``$2``, ... (or *prefix* 1, ...)."""
    pieces = _PG_LITERAL.split(text)
    out: list[str] = []
    n = 0
    for i, piece in enumerate(pieces):
        if i % 2:  # a literal
            out.append(piece)
            continue
        parts = piece.split("?")
        out.append(parts[0])
        for part in parts[1:]:
            n += 1
            out.append(f"{prefix}{n}{part}")
    return "".join(out)


#: the temporary table a staged insert copies its rows into (dropped after each insert)
_STAGED = "recrawler_rows"
STAGED_DROP = f"DROP TABLE {_STAGED}"


class PostgreSQLDialect(Dialect):
    """PostgreSQL (psycopg 3): ``%s`` parameters, arrays for lists, ``jsonb``, ``~`` and pgvector."""

    name = "postgresql"
    greatest = "GREATEST"
    tables_sql = "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
    group_concat = "string_agg"
    embedding_columns = "embedder, text_hash, embedding"
    embedding_values = "?, ?, CAST(? AS vector)"
    chunk_extra_columns = ", words"
    chunk_extra_values = ", array_to_tsvector(string_to_array(?, ' '))"
    chunk_extra_types = ("text",)
    lock_sql = "SELECT pg_advisory_xact_lock(hashtext(?))"
    skip_locked = " FOR UPDATE SKIP LOCKED"

    def sql(self, text: str) -> str:
        """Rewrite ``?``/``:name`` parameters as psycopg's, and ``%`` in literals as ``%%``."""
        return _to_psycopg(text)

    def numbered_sql(self, text: str) -> str:
        """A statement with ``?`` parameters only, in PostgreSQL's own spelling (``$1``, ``$2``, ...)
        for a raw cursor: psycopg then sends it as it is. Parsing a multi-row ``VALUES`` statement's
        thousands of ``%s`` (psycopg caches none over 50 parameters) cost a first crawl's process
        half its CPU time."""
        return _to_numbered(text)

    def staged_insert(self, rows: RowSet) -> tuple[str, str, str]:
        """*rows*' insert through a temporary table: its ``CREATE`` (a column per parameter, of
        its type, after the row's place), the ``COPY`` that fills it and the ``INSERT ...
        SELECT`` that reads it in the rows' order (each ``?`` of the row a column of the table)."""
        assert rows.types is not None
        columns = ", ".join(f"v{i} {t}" for i, t in enumerate(rows.types, 1))
        select = _to_numbered(rows.row.strip()[1:-1], "v")
        return (
            f"CREATE TEMPORARY TABLE {_STAGED} (i INTEGER, {columns})",
            f"COPY {_STAGED} FROM STDIN (FORMAT BINARY)",
            f"{rows.head} SELECT {select} FROM {_STAGED} ORDER BY i{rows.tail}",
        )

    def indexed_by(self, index: str) -> str:
        """PostgreSQL's planner takes no hints."""
        return ""

    def in_list(self, param: str, *, negate: bool = False, sql_type: str = "TEXT") -> str:
        """``= ANY`` (or ``<> ALL``) of an array parameter of *sql_type*."""
        return f"{'<> ALL' if negate else '= ANY'}(CAST({param} AS {sql_type}[]))"

    def list_param(self, values: Sequence[Any]) -> Any:
        """A Python list (psycopg sends an array)."""
        return list(values)

    def json_text(self, column: str, field: str) -> str:
        """A top-level field of a JSON text column."""
        return f"(CAST({column} AS jsonb) ->> '{field}')"

    def json_int(self, column: str, field: str) -> str:
        """A top-level integer field of a JSON text column."""
        return f"CAST(CAST({column} AS jsonb) ->> '{field}' AS BIGINT)"

    def regex(self, column: str, param: str) -> str:
        """POSIX regular expression match (PostgreSQL's ``~``)."""
        return f"{column} ~ {param}"

    def embedding_rows(self, rows: Sequence[tuple[str, str, bytes]]) -> list[tuple[Any, ...]]:
        """Each row with its vector as a numpy array, for the ``embedding`` column (pgvector's
        ``vector``, searched with an HNSW index; the cache keeps no other copy): the store's
        connections send it in pgvector's binary form
        (:func:`recrawler.state.postgres.database.binary_vectors`). Its text form cost a first
        crawl's process a fifth of its reactor time, in Python, and the server as much to parse."""
        import numpy as np

        return [(e, h, np.frombuffer(v, dtype="<f4")) for e, h, v in rows]

    def chunk_extra(self, heading: str, text: str) -> tuple[Any, ...]:
        """The chunk's words (:func:`~recrawler.words.chunk_words`) for the full-text index:
        split in Python, the server only files them. Its own regular expression and parser over
        each chunk's text took two thirds of a first run's chunk inserts."""
        return (chunk_words(heading, text),)


SQLITE = Dialect()
POSTGRES = PostgreSQLDialect()
