"""The PostgreSQL schema's versions: numbered SQL migrations, applied forward once each, never downwards."""

from __future__ import annotations

import re
from importlib import resources
from typing import TYPE_CHECKING

from recrawler.exceptions import SchemaVersionError, StateStoreError
from recrawler.state.sql.dialect import POSTGRES, count, one, rows
from recrawler.state.sqlite.versions import _split_sql

if TYPE_CHECKING:
    from recrawler.state.sql.dialect import Work

__all__ = ["FIRST_VERSION", "SCHEMA_VERSION", "check_schema", "migrate"]

_MIGRATION = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")


def _migrations() -> list[tuple[int, str]]:
    folder = resources.files("recrawler.state") / "migrations" / "postgres"
    found = []
    for entry in folder.iterdir():
        m = _MIGRATION.match(entry.name)
        if m:
            found.append((int(m.group(1)), entry.read_text(encoding="utf-8")))
    return sorted(found)


#: numbered as SQLite's schemas: a new PostgreSQL database starts at 6 (schemas 1-6 in one step)
SCHEMA_VERSION = max(v for v, _ in _migrations())
#: the migration that creates the schema of a new database (the versions before it at once)
FIRST_VERSION = min(v for v, _ in _migrations())


def check_schema(label: str) -> Work[set[int]]:
    """The applied migrations; refuse a newer or foreign database (nothing is written)."""
    tables = {r[0] for r in (yield rows(POSTGRES.tables_sql))}
    if not tables:
        return set()
    if "schema_version" not in tables:
        msg = (
            f"state database {label!r} is not a recrawler database (tables: "
            f"{', '.join(sorted(tables))}); it was left untouched"
        )
        raise SchemaVersionError(msg)
    applied = {int(r[0]) for r in (yield rows("SELECT version FROM schema_version"))}
    version = max(applied, default=0)
    if version > SCHEMA_VERSION:
        msg = (
            f"state database {label!r} has schema version {version}, newer than this "
            f"recrawler's {SCHEMA_VERSION}; upgrade recrawler (the database was left untouched)"
        )
        raise SchemaVersionError(msg)
    return applied


def _check_vector_extension(label: str) -> Work[None]:
    """Refuse, in one line that says who can fix it, a database without pgvector's ``vector``
    extension that this role may not create (pgvector is not a trusted extension: creating it
    takes a superuser; recrawler's own role then needs no more than to own its database)."""
    row = yield one("SELECT 1 FROM pg_extension WHERE extname = 'vector'")
    if row is not None:
        return
    row = yield one("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'")
    if row is None:
        msg = (
            f"state database {label!r}: the server has no pgvector (extension 'vector'); install "
            "pgvector 0.8 or later on the PostgreSQL server"
        )
        raise StateStoreError(msg)
    row = yield one("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
    if row is None or not row[0]:
        msg = (
            f"state database {label!r}: pgvector's extension is not created in it, and this role may "
            "not create it: a superuser runs `CREATE EXTENSION vector;` in that database once"
        )
        raise StateStoreError(msg)


def migrate(label: str) -> Work[list[int]]:
    """Apply the missing migrations in the caller's transaction; return their numbers.

    An advisory lock makes concurrent first opens (several crawls starting on one new database)
    apply each migration once.
    """
    yield one("SELECT pg_advisory_xact_lock(hashtext('recrawler schema'))")
    applied = yield from check_schema(label)
    if not applied:
        yield from _check_vector_extension(label)
        yield count("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    done = []
    for number, sql in _migrations():
        if number in applied:
            continue
        for statement in _split_sql(sql):
            yield count(statement)
        yield count("INSERT INTO schema_version (version) VALUES (?)", (number,))
        done.append(number)
    return done
