"""The SQLite schema's versions: numbered SQL migrations, applied forward once each, never downwards."""

from __future__ import annotations

import logging
import re
import sqlite3
from importlib import resources
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

from recrawler.exceptions import ConfigurationError, SchemaVersionError
from recrawler.state.sql.dialect import ALL, COUNT, MANY, ONE, ROWS, SQLITE, drive, value_statements

if TYPE_CHECKING:
    from recrawler.state.roles.blocks import BlockModel
    from recrawler.state.sql.dialect import Op, Work

_T = TypeVar("_T")


logger = logging.getLogger(__name__)


_MIGRATION = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")


def _migrations() -> list[tuple[int, str]]:
    folder = resources.files("recrawler.state") / "migrations" / "sqlite"
    found = []
    for entry in folder.iterdir():
        m = _MIGRATION.match(entry.name)
        if m:
            found.append((int(m.group(1)), entry.read_text(encoding="utf-8")))
    return sorted(found)


SCHEMA_VERSION = max(v for v, _ in _migrations())


#: ``?mode=`` values of a SQLite URI: ``ro`` opens it read-only; the others are how a crawl opens it
_MODES = ("ro", "rw", "rwc")
#: ``scheme:`` at the start of a URI written without ``//`` (``sqlite:/x.db``); one letter is a drive
_BARE_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):(?!//)")


def path_from_uri(uri: str) -> str:
    """Map ``sqlite:///rel.db``, ``sqlite:////abs.db``, ``file:///abs.db``, ``file:rel.db`` or a bare
    path to a path (see :func:`sqlite_target`)."""
    return sqlite_target(uri)[0]


def sqlite_target(uri: str) -> tuple[str, bool]:
    """The file *uri* names and whether it is opened read-only (``?mode=ro``).

    ``sqlite:///rel.db`` and ``file:rel.db`` are relative, ``sqlite:////abs.db``, ``file:///abs.db``
    and ``file:/abs.db`` absolute, as SQLAlchemy and SQLite read them. A bare path is a path. A
    query other than ``mode=ro|rw|rwc``, or a scheme without ``//`` (``sqlite:/x.db``), is one
    ConfigurationError line saying what to write instead.
    """
    query = ""
    bare = _BARE_SCHEME.match(uri)
    if "://" in uri:
        parts = urlsplit(uri)
        path, query = unquote(parts.path), parts.query
        if parts.scheme == "sqlite":
            # sqlite:///rel.db -> "rel.db"; sqlite:////abs.db -> "/abs.db" (SQLAlchemy's convention)
            path = path[1:] if path.startswith("/") else path
    elif bare is not None and bare.group(1).lower() == "file":
        # RFC 8089's forms without an authority, as SQLite reads them: file:rel.db, file:/abs.db
        parts = urlsplit(uri)
        path, query = unquote(parts.path), parts.query
    elif bare is not None:
        scheme, rest = bare.group(1), uri[bare.end() :]
        name = rest.lstrip("/") or "recrawler.db"
        hint = (
            f"write sqlite:///{name} (relative) or sqlite:////{name} (absolute)"
            if scheme.lower() == "sqlite"
            else f"write {scheme}://... (two slashes after the scheme)"
        )
        raise ConfigurationError(f"RECRAWLER_DB_URI: {uri!r} is not a database URI: {hint}")
    else:
        path = uri
    if not path.strip():
        # SQLite opens a throwaway database for an empty name: every run would be a first run
        msg = (
            f"RECRAWLER_DB_URI: {uri!r} names no database file (state would be lost after each run); "
            "use sqlite:///recrawler.db (relative) or sqlite:////abs/path/recrawler.db"
        )
        raise ConfigurationError(msg)
    readonly = False
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name != "mode" or value not in _MODES:
            msg = (
                f"RECRAWLER_DB_URI: {uri!r}: unsupported parameter {name}={value!r} "
                "(a SQLite URI takes ?mode=ro: read-only, for the commands that only read)"
            )
            raise ConfigurationError(msg)
        readonly = value == "ro"
    return path, readonly


def schema_version(conn: sqlite3.Connection, path: str) -> int:
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not tables:
        return 0
    if "schema_version" not in tables:
        msg = (
            f"state database {path!r} is not a recrawler database (tables: "
            f"{', '.join(sorted(tables))}); it was left untouched"
        )
        raise SchemaVersionError(msg)
    row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return int(row[0] or 0)


def check_schema(conn: sqlite3.Connection, path: str) -> int:
    version = schema_version(conn, path)
    if version > SCHEMA_VERSION:
        msg = (
            f"state database {path!r} has schema version {version}, newer than this "
            f"recrawler's {SCHEMA_VERSION}; upgrade recrawler (the database was left untouched)"
        )
        raise SchemaVersionError(msg)
    return version


def integrity_problems(conn: sqlite3.Connection, most: int = 20, *, quick: bool = False) -> list[str]:
    """What ``PRAGMA integrity_check`` (*quick*: ``quick_check``, which skips matching each index
    with its table) finds wrong with the file, at most *most* (empty: nothing)."""
    pragma = "quick_check" if quick else "integrity_check"
    try:
        problems = [str(r[0]) for r in conn.execute(f"PRAGMA {pragma}({int(most)})")]
    except sqlite3.DatabaseError as exc:
        # too damaged for the check to go on ("database disk image is malformed")
        return [str(exc)]
    return [] if problems == ["ok"] else problems


def check_integrity(conn: sqlite3.Connection, path: str, *, quick: bool = False) -> None:
    """Refuse a database whose pages SQLite finds damaged (``PRAGMA integrity_check``): written to,
    it would spread the damage, and its rows would be served as they are. Checked before anything
    writes, so a refused file stays byte-identical. Readers check with *quick* (``quick_check``:
    every page and record, not each index against its table): what a command shows comes from an
    undamaged file, or it says the file is damaged."""
    problems = integrity_problems(conn, 5, quick=quick)
    if problems:
        pragma = "quick_check" if quick else "integrity_check"
        msg = (
            f"state database {path!r} is corrupt (PRAGMA {pragma}: {'; '.join(problems)[:300]}); "
            "it was left untouched: restore it from a backup, or move it away to start afresh"
        )
        raise SchemaVersionError(msg)


def migrate(conn: sqlite3.Connection, path: str, dry_run: bool, blocks: BlockModel | None = None) -> None:
    version = check_schema(conn, path)
    # each applied number is a row: a migration numbered below one already applied (written
    # on another branch) is still applied once
    applied = {r[0] for r in conn.execute("SELECT version FROM schema_version")} if version else set()
    done: list[int] = []
    for number, sql in _migrations():
        if number in applied:
            continue
        if dry_run:
            conn.execute("SAVEPOINT migrate")
        else:
            conn.execute("BEGIN IMMEDIATE")
            if _applied_meanwhile(conn, number):
                # another process opening the same new database took the write lock first
                conn.execute("COMMIT")
                continue
        try:
            if number == 1:
                conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
            for statement in _split_sql(sql):
                conn.execute(statement)
            conn.execute("INSERT INTO schema_version (version) VALUES (?)", (number,))
            conn.execute("RELEASE migrate" if dry_run else "COMMIT")
        except BaseException:
            conn.execute("ROLLBACK TO migrate" if dry_run else "ROLLBACK")
            raise
        done.append(number)
    from recrawler.state.sql.database import log_migrations

    log_migrations(path, version, done)
    if blocks is not None:
        fill_block_pairs(conn, path, dry_run, blocks)


def _applied_meanwhile(conn: sqlite3.Connection, number: int) -> bool:
    """Whether migration *number* is applied now (read under the write lock)."""
    table = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
    if conn.execute(table).fetchone() is None:
        return False
    return conn.execute("SELECT 1 FROM schema_version WHERE version = ?", (number,)).fetchone() is not None


def fill_block_pairs(conn: sqlite3.Connection, path: str, dry_run: bool, blocks: BlockModel) -> None:
    """Count the block pairs of a database from before schema 6 from its stored blocks, once.

    Until the next run ends and re-decides them, a pair of two boilerplate blocks (a page edge
    counts as one) is a boilerplate pair; every page is re-hashed under those pairs, so the
    next run compares like with like (no false "changed"), with *blocks*' arithmetic (a store
    opened without it leaves this to the next open that has it). One transaction: a crash leaves
    ``site_pairs`` empty and the next open counts again. Pages written since schema 8 count
    through ``block_deltas``: a database with deltas waiting (a run killed before its first
    reconciliation) has its pairs counted by their fold, not here.
    """
    from recrawler.state.records import unpack_blocks
    from recrawler.state.sql.rows import _count_pairs, _rehash

    if conn.execute(
        "SELECT EXISTS (SELECT 1 FROM site_pairs) OR EXISTS (SELECT 1 FROM block_deltas)"
    ).fetchone()[0]:
        return
    stored = conn.execute("SELECT EXISTS (SELECT 1 FROM page_fields WHERE blocks != x'')").fetchone()[0]
    if not stored:
        return
    conn.execute("SAVEPOINT migrate" if dry_run else "BEGIN IMMEDIATE")
    try:
        pages = 0
        for site, blob in conn.execute(
            "SELECT p.site, f.blocks FROM page_fields f JOIN pages p ON p.key = f.key"
        ):
            _run(conn, _count_pairs(SQLITE, site, blocks.pairs(unpack_blocks(blob)), 1))
            pages += 1
        sites = [r[0] for r in conn.execute("SELECT DISTINCT site FROM site_blocks WHERE boilerplate = 1")]
        for site in sites:
            conn.execute(
                """UPDATE site_pairs SET boilerplate = 1 WHERE site = :site
                     AND (prev = :edge OR prev IN
                          (SELECT block FROM site_blocks WHERE site = :site AND boilerplate = 1))
                     AND (block = :edge OR block IN
                          (SELECT block FROM site_blocks WHERE site = :site AND boilerplate = 1))""",
                {"site": site, "edge": blocks.edge},
            )
            _run(conn, _rehash(SQLITE, site, blocks))
        conn.execute("RELEASE migrate" if dry_run else "COMMIT")
    except BaseException:
        conn.execute("ROLLBACK TO migrate" if dry_run else "ROLLBACK")
        raise
    logger.info(
        "state database %(path)s: block pairs counted from %(n)d stored pages",
        {"path": path, "n": pages},
    )


def _execute(conn: sqlite3.Connection, op: Op) -> Any:
    kind = op.kind
    if kind is ONE:
        return conn.execute(op.sql, op.params).fetchone()
    if kind is COUNT:
        return conn.execute(op.sql, op.params).rowcount
    if kind is ALL:
        return conn.execute(op.sql, op.params).fetchall()
    if kind is MANY:
        return conn.executemany(op.sql, op.params).rowcount if op.params else 0
    if kind is ROWS:
        return sum(conn.execute(sql, params).rowcount for sql, params in value_statements(op.params))
    raise ValueError(f"unknown statement kind {kind!r}")


def _run(conn: sqlite3.Connection, work: Work[_T]) -> _T:
    return drive(work, lambda op: _execute(conn, op))


def _split_sql(sql: str) -> list[str]:
    """Split a migration file into statements (no semicolons inside our literals; a trigger's
    body, from its ``BEGIN`` line to its ``END;`` line, and a ``$$``-quoted body stay one
    statement)."""
    lines = [line for line in sql.splitlines() if not line.lstrip().startswith("--")]
    statements: list[str] = []
    trigger: list[str] = []
    quoted = ""
    for part in "\n".join(lines).split(";"):
        if quoted or part.count("$$") % 2:
            # inside a dollar-quoted body until the part that closes it
            quoted = f"{quoted};{part}" if quoted else part
            if quoted.count("$$") % 2 == 0:
                statements.append(quoted.strip())
                quoted = ""
        elif trigger or part.lstrip().upper().startswith("CREATE TRIGGER"):
            trigger.append(part)
            if part.strip().upper() == "END":
                statements.append(";".join(trigger).strip())
                trigger = []
        elif part.strip():
            statements.append(part.strip())
    return statements
