"""The database file under a running store: still there, still the same, still writable."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite3

__all__ = ["abandon", "file_identity", "file_trouble"]

#: connections to files deleted or made unwritable during a run: never closed (see abandon)
_ABANDONED: list[sqlite3.Connection] = []


def file_identity(path: str) -> tuple[int, int]:
    """(st_dev, st_ino) of the database file as opened."""
    st = Path(path).stat()
    return st.st_dev, st.st_ino


def file_trouble(path: str, identity: tuple[int, int]) -> str | None:
    """Why the open database at *path* cannot keep what is written to it, or None.

    A file deleted (or its directory) takes every later commit with it while SQLite goes on
    writing to it; one replaced is another database; one made read-only or immutable (``chattr
    +i``) refuses writes, and SQLite's next write to its memory-mapped ``-shm`` file would kill the
    process (SIGBUS). A stat and three access checks: cheap beside any statement.
    """
    try:
        st = Path(path).stat()
    except OSError:
        return f"state database {path!r} was deleted during the run (or its directory was)"
    if (st.st_dev, st.st_ino) != identity:
        return f"state database {path!r} was replaced by another file during the run"
    for name in (path, path + "-wal", path + "-shm"):
        if not os.access(name, os.W_OK) and Path(name).exists():
            why = "made read-only or immutable during the run"
            return f"state database {name!r} can no longer be written ({why})"
    return None


def abandon(conn: sqlite3.Connection) -> None:
    """Never close *conn*, not even when the process ends: closing checkpoints, which writes to
    the memory-mapped ``-shm`` file (SIGBUS when it was made immutable)."""
    _ABANDONED.append(conn)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(conn))
