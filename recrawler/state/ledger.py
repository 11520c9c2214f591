"""A vector-store sink's ledger: what one sink put into its store (``sink_chunks``), kept in the
knowledge base's own database so that a sync resumes and deletes exactly what it added."""

from __future__ import annotations

from typing import Any

from recrawler.exceptions import ConfigurationError

__all__ = ["SinkLedger"]


class SinkLedger:
    """The rows of one sink (*name*) in ``sink_chunks``: an id's state is 0 while it is being
    added to the store, 1 once the store holds it."""

    def __init__(self, uri: str, name: str) -> None:
        self.name = name
        if uri.split("://", 1)[0].lower() in ("postgresql", "postgres"):
            import psycopg

            self.conn: Any = psycopg.connect(uri, autocommit=True)
            self.param = "%s"
        else:
            import sqlite3

            from recrawler.state.sqlite.versions import sqlite_target

            path, readonly = sqlite_target(uri)
            if readonly:
                msg = f"RECRAWLER_DB_URI: {uri!r} is read-only (?mode=ro): a sync writes its ledger there"
                raise ConfigurationError(msg)
            self.conn = sqlite3.connect(path, isolation_level=None, timeout=30)
            self.param = "?"

    def _run(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        sql = sql.replace("?", self.param)
        if self.param == "?":
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                self.conn.executemany(sql, rows)
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")
        else:
            with self.conn.transaction(), self.conn.cursor() as cur:
                cur.executemany(sql, rows)

    def read(self) -> dict[str, int]:
        """Every id of this sink and its state."""
        sql = "SELECT id, state FROM sink_chunks WHERE sink = ?".replace("?", self.param)
        return {r[0]: int(r[1]) for r in self.conn.execute(sql, (self.name,)).fetchall()}

    def adding(self, chunks: list[tuple[str, str, str]]) -> None:
        """Record (id, page key, chunk hash) rows about to be added to the store (state 0)."""
        self._run(
            "INSERT INTO sink_chunks (sink, id, key, chunk_hash, state) VALUES (?, ?, ?, ?, 0) "
            "ON CONFLICT (sink, id) DO NOTHING",
            [(self.name, i, key, chunk_hash) for i, key, chunk_hash in chunks],
        )

    def added(self, ids: list[str]) -> None:
        """Mark *ids* as held by the store (state 1)."""
        self._run("UPDATE sink_chunks SET state = 1 WHERE sink = ? AND id = ?", [(self.name, i) for i in ids])

    def forget(self, ids: list[str]) -> None:
        """Drop *ids*: the store no longer holds them."""
        self._run("DELETE FROM sink_chunks WHERE sink = ? AND id = ?", [(self.name, i) for i in ids])

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()
