"""The trust role: how far each host's signals are trusted, and immutable pages."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from recrawler.state.sql.dialect import count, one, rows
from recrawler.state.sql.rows import _TRUST_COLUMNS, _row_to_trust, _ts

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    from recrawler.state.records import TrustRecord
    from recrawler.state.sql.database import Database
    from recrawler.state.sql.dialect import Work


class SQLTrust:
    """The trust role: how far each host's signals are trusted, and immutable pages."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def trust(self) -> list[TrustRecord]:
        """Every host's trust records."""

        def work() -> Work[list[TrustRecord]]:
            found = yield rows(f"SELECT {_TRUST_COLUMNS} FROM trust ORDER BY host, signal")
            return [_row_to_trust(r) for r in found]

        return await self.db.run(work())

    async def record_trust(
        self, host: str, signal: str, *, lied: bool, url: str, at: datetime, distrust_after: int
    ) -> TrustRecord:
        """Count one audited claim of *signal* on *host*; *distrust_after* lies switch it off."""

        def work() -> Work[TrustRecord]:
            row = yield one(
                f"""INSERT INTO trust (host, signal, checks, lies, trusted, last_lie_at, last_lie_url,
                                       updated_at)
                    VALUES (:host, :signal, 1, :lied, CASE WHEN :lied < :after THEN 1 ELSE 0 END,
                            CAST(:lie_at AS TEXT), CAST(:lie_url AS TEXT), :at)
                    ON CONFLICT (host, signal) DO UPDATE SET
                      checks = trust.checks + 1,
                      lies = trust.lies + :lied,
                      trusted = CASE WHEN trust.lies + :lied >= :after THEN 0 ELSE trust.trusted END,
                      last_lie_at = COALESCE(CAST(:lie_at AS TEXT), trust.last_lie_at),
                      last_lie_url = COALESCE(CAST(:lie_url AS TEXT), trust.last_lie_url),
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
            )
            return _row_to_trust(row)

        return await self.db.page_write(work())

    async def reset_trust(self, host: str | None = None, signal: str | None = None) -> int:
        """Trust *host*'s *signal* again (None: every host, every signal); return the records reset."""

        def work() -> Work[int]:
            n = yield count(
                """UPDATE trust SET trusted = 1, lies = 0
                   WHERE (CAST(:host AS TEXT) IS NULL OR host = :host)
                     AND (CAST(:signal AS TEXT) IS NULL OR signal = :signal)""",
                {"host": host, "signal": signal},
            )
            return int(n)

        return await self.db.transaction(work())

    async def immutable_seen(self, spider: str, keys: Sequence[str]) -> set[str]:
        """Those of *keys* (deltafetch keys) that *spider* stored on an earlier fetch."""

        d = self.db.dialect

        def work() -> Work[set[str]]:
            found = yield rows(
                f"SELECT key FROM deltafetch WHERE spider = ? AND key {d.in_list('?')}",
                (spider, d.list_param(keys)),
            )
            return {r[0] for r in found}

        return await self.db.run(work())

    async def immutable_add(
        self, spider: str, key: str, *, url: str, page_key: str | None, at: datetime
    ) -> None:
        """Remember that *spider* fetched *key*: later runs skip it."""

        def work() -> Work[None]:
            yield count(
                "INSERT INTO deltafetch (spider, key, url, page_key, stored_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (spider, key, url, page_key, _ts(at)),
            )

        await self.db.page_write(work())

    async def immutable_reset(self, spider: str | None = None, pattern: str | None = None) -> int:
        """Forget stored deltafetch keys of *spider* (None: all) whose URL matches *pattern*
        (a regular expression searched in the URL; None: all); return how many."""
        if pattern:
            re.compile(pattern)  # a bad pattern is refused before anything is deleted
        d = self.db.dialect
        where = ["TRUE"]
        params: dict[str, str] = {}
        if spider is not None:
            where.append("spider = :spider")
            params["spider"] = spider
        if pattern:
            # Python's re on SQLite, POSIX regular expressions on PostgreSQL (same for simple patterns)
            where.append(d.regex("url", ":pattern"))
            params["pattern"] = pattern

        def work() -> Work[int]:
            n = yield count(f"DELETE FROM deltafetch WHERE {' AND '.join(where)}", params)
            return int(n)

        return await self.db.transaction(work())
