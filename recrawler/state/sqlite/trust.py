"""The trust role on SQLite: how far each host's signals are trusted, and immutable pages."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from recrawler.state.sqlite.rows import _TRUST_COLUMNS, _row_to_trust, _ts

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Sequence
    from datetime import datetime

    from recrawler.state.records import (
        TrustRecord,
    )
    from recrawler.state.sqlite.database import SQLiteDatabase


class SQLiteTrust:
    """The trust role on SQLite: how far each host's signals are trusted, and immutable pages."""

    def __init__(self, db: SQLiteDatabase) -> None:
        self.db = db

    async def trust(self) -> list[TrustRecord]:
        """Every host's trust records."""

        def work() -> list[TrustRecord]:
            rows = self.db.conn.execute(
                f"SELECT {_TRUST_COLUMNS} FROM trust ORDER BY host, signal"
            ).fetchall()
            return [_row_to_trust(r) for r in rows]

        return await self.db._call(self.db._guard, work)

    async def record_trust(
        self, host: str, signal: str, *, lied: bool, url: str, at: datetime, distrust_after: int
    ) -> TrustRecord:
        """Count one audited claim of *signal* on *host*; *distrust_after* lies switch it off."""

        def work(conn: sqlite3.Connection) -> TrustRecord:
            row = conn.execute(
                f"""INSERT INTO trust (host, signal, checks, lies, trusted, last_lie_at, last_lie_url,
                                       updated_at)
                    VALUES (:host, :signal, 1, :lied, :lied < :after, :lie_at, :lie_url, :at)
                    ON CONFLICT (host, signal) DO UPDATE SET
                      checks = trust.checks + 1,
                      lies = trust.lies + :lied,
                      trusted = CASE WHEN trust.lies + :lied >= :after THEN 0 ELSE trust.trusted END,
                      last_lie_at = COALESCE(:lie_at, trust.last_lie_at),
                      last_lie_url = COALESCE(:lie_url, trust.last_lie_url),
                      updated_at = :at
                    RETURNING {_TRUST_COLUMNS}""",
                {
                    "host": host,
                    "signal": signal,
                    "lied": int(lied),
                    "after": distrust_after,
                    "lie_at": _ts(at) if lied else None,
                    "lie_url": url if lied else None,
                    "at": _ts(at),
                },
            ).fetchone()
            return _row_to_trust(row)

        return await self.db._page_write(work)

    async def reset_trust(self, host: str | None = None, signal: str | None = None) -> int:
        """Trust *host*'s *signal* again (None: every host, every signal); return the records reset."""

        def work() -> int:
            self.db._begin()
            n = self.db.conn.execute(
                """UPDATE trust SET trusted = 1, lies = 0
                   WHERE (:host IS NULL OR host = :host) AND (:signal IS NULL OR signal = :signal)""",
                {"host": host, "signal": signal},
            ).rowcount
            self.db._commit()
            return int(n)

        return await self.db._call(self.db._guard, work)

    async def immutable_seen(self, spider: str, keys: Sequence[str]) -> set[str]:
        """Those of *keys* (deltafetch keys) that *spider* stored on an earlier fetch."""

        def work() -> set[str]:
            rows = self.db.conn.execute(
                "SELECT key FROM deltafetch WHERE spider = ? AND key IN (SELECT value FROM json_each(?))",
                (spider, json.dumps(list(keys))),
            )
            return {r[0] for r in rows}

        return await self.db._call(self.db._guard, work)

    async def immutable_add(
        self, spider: str, key: str, *, url: str, page_key: str | None, at: datetime
    ) -> None:
        """Remember that *spider* fetched *key*: later runs skip it."""

        def work(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT OR IGNORE INTO deltafetch (spider, key, url, page_key, stored_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (spider, key, url, page_key, _ts(at)),
            )

        await self.db._page_write(work)

    async def immutable_reset(self, spider: str | None = None, pattern: str | None = None) -> int:
        """Forget stored deltafetch keys of *spider* (None: all) whose URL matches *pattern*
        (a regular expression searched in the URL; None: all); return how many."""
        regex = re.compile(pattern) if pattern else None

        def work() -> int:
            conn = self.db.conn
            conn.create_function(
                "recrawler_search",
                1,
                lambda url: regex is None or bool(regex.search(url)),
                deterministic=True,
            )
            self.db._begin()
            n = conn.execute(
                "DELETE FROM deltafetch "
                "WHERE (:spider IS NULL OR spider = :spider) AND recrawler_search(url)",
                {"spider": spider},
            ).rowcount
            self.db._commit()
            return int(n)

        return await self.db._call(self.db._guard, work)
