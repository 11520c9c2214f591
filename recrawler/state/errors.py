"""The database drivers' errors as recrawler's: what a reader of the database outside the store
(search, ``recrawler.kb``) raises instead of a driver's exception."""

from __future__ import annotations

import sqlite3
import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING

from recrawler.exceptions import SchemaVersionError, StateStoreError, StateStoreUnavailable
from recrawler.redact import redact_text

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["DAMAGED", "UNREACHABLE", "UNREADABLE", "database_errors"]

#: what failed, for :func:`database_errors`: the database could not be reached (a server)
UNREACHABLE = "unreachable"
#: the file is not a recrawler database SQLite can read
UNREADABLE = "unreadable"
#: a read failed on what the file holds (text that no longer decodes, a malformed page)
DAMAGED = "damaged"


def _driver_error(exc: BaseException) -> bool:
    if isinstance(exc, sqlite3.Error):
        return True
    # psycopg is an extra: its errors can only be raised once it is loaded
    psycopg = sys.modules.get("psycopg")
    return psycopg is not None and isinstance(exc, psycopg.Error)


@contextmanager
def database_errors(label: str, *, failing: str | None = None) -> Iterator[None]:
    """Raise a driver's error (SQLite's, psycopg's) inside as one StateStoreError line naming the
    knowledge base *label*: by default ``knowledge base 'label': what the driver said`` (redacted);
    *failing* :data:`UNREACHABLE`: StateStoreUnavailable (the server could not be reached);
    :data:`UNREADABLE`: SchemaVersionError (not a recrawler database); :data:`DAMAGED`: the file
    may be damaged (``recrawler check``). Any other exception goes through untouched."""
    try:
        yield
    except Exception as exc:
        if not _driver_error(exc):
            raise
        if failing == UNREACHABLE:
            msg = f"cannot reach knowledge base {label!r}: {redact_text(str(exc).strip())}"
            raise StateStoreUnavailable(msg) from None
        if failing == UNREADABLE:
            raise SchemaVersionError(f"{label!r} is not a readable recrawler database ({exc})") from exc
        if failing == DAMAGED:
            # SQLite quotes what it could not decode, newlines and all: one line of it is enough
            what = " ".join(str(exc).split())[:160]
            msg = f"knowledge base {label!r}: {what} (the file may be damaged: run `recrawler check`)"
            raise StateStoreError(msg) from exc
        raise StateStoreError(f"knowledge base {label!r}: {redact_text(str(exc))}") from exc
