"""The trust role: how far each host's signals are trusted, and immutable pages."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from recrawler.exceptions import PageWriteError
from recrawler.state.sql.dialect import count, one, rows
from recrawler.state.sql.rows import _TRUST_COLUMNS, _row_to_trust, _ts

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    from recrawler.state.records import TrustRecord
    from recrawler.state.sql.database import Database
    from recrawler.state.sql.dialect import Work


@dataclass(slots=True, kw_only=True)
class _Claim:
    """One :meth:`SQLTrust.record_trust` call, queued."""

    lied: bool
    url: str
    at: datetime
    distrust_after: int
    done: asyncio.Future[TrustRecord]


def _settle(claims: Sequence[_Claim], result: TrustRecord | BaseException) -> None:
    for c in claims:
        if c.done.done():  # (its caller may have been cancelled meanwhile)
            continue
        if isinstance(result, BaseException):
            c.done.set_exception(result)
        else:
            c.done.set_result(result)


class SQLTrust:
    """The trust role: how far each host's signals are trusted, and immutable pages."""

    def __init__(self, db: Database) -> None:
        self.db = db
        #: audited claims waiting for the write in progress, per (host, signal), and the task
        #: writing them
        self._claims: dict[tuple[str, str], list[_Claim]] = {}
        self._draining: asyncio.Future[None] | None = None

    async def trust(self) -> list[TrustRecord]:
        """Every host's trust records."""

        def work() -> Work[list[TrustRecord]]:
            found = yield rows(f"SELECT {_TRUST_COLUMNS} FROM trust ORDER BY host, signal")
            return [_row_to_trust(r) for r in found]

        return await self.db.run(work())

    async def record_trust(
        self, host: str, signal: str, *, lied: bool, url: str, at: datetime, distrust_after: int
    ) -> TrustRecord:
        """Count one audited claim of *signal* on *host*; *distrust_after* lies switch it off.

        Claims of one host's signal that queue while a write is in progress are counted
        together, in one write of its row: a forced recheck makes a claim per page, and on
        PostgreSQL each update of one row in a savepoint of its own costs more than the last
        while their group transaction is open. Each claim gets the record as that write left it;
        a claim the database refuses fails alone, and a write the group loses fails all of them.
        """
        claim = _Claim(
            lied=lied,
            url=url,
            at=at,
            distrust_after=distrust_after,
            done=asyncio.get_running_loop().create_future(),
        )
        self._claims.setdefault((host, signal), []).append(claim)
        if self._draining is None:
            self._draining = asyncio.ensure_future(self._drain())
        return await claim.done

    async def _drain(self) -> None:
        """Write the queued claims, one write per (host, signal) and what queued for it."""
        try:
            while self._claims:
                (host, signal), claims = next(iter(self._claims.items()))
                del self._claims[host, signal]
                try:
                    await self._write(host, signal, claims)
                except BaseException as exc:
                    _settle(claims, exc)
                    if not isinstance(exc, Exception):
                        raise
        except BaseException:
            for claims in self._claims.values():
                for c in claims:
                    if not c.done.done():
                        c.done.cancel()
            self._claims.clear()
            raise
        finally:
            self._draining = None

    async def _write(self, host: str, signal: str, claims: list[_Claim]) -> None:
        """Several claims in one write; if its statement fails (undone, the group stands), each
        alone, so that only a claim the database refuses fails."""
        if len(claims) > 1:
            try:
                found = await self.db.page_write(self._count(host, signal, claims))
            except PageWriteError:
                pass
            else:
                _settle(claims, found)
                return
        for c in claims:
            try:
                found = await self.db.page_write(self._count(host, signal, [c]))
            except Exception as exc:
                _settle([c], exc)
            else:
                _settle([c], found)

    @staticmethod
    def _count(host: str, signal: str, claims: Sequence[_Claim]) -> Work[TrustRecord]:
        """Add *claims* (in their order) to the row of *host*'s *signal*: as many checks, their
        lies, the last lie's time and URL; switched off once its lies reach the threshold."""
        lies = [c for c in claims if c.lied]
        last = lies[-1] if lies else None
        row = yield one(
            f"""INSERT INTO trust (host, signal, checks, lies, trusted, last_lie_at, last_lie_url,
                                   updated_at)
                VALUES (:host, :signal, :checks, :lies, CASE WHEN :lies < :after THEN 1 ELSE 0 END,
                        CAST(:lie_at AS TEXT), CAST(:lie_url AS TEXT), :at)
                ON CONFLICT (host, signal) DO UPDATE SET
                  checks = trust.checks + :checks,
                  lies = trust.lies + :lies,
                  trusted = CASE WHEN trust.lies + :lies >= :after THEN 0 ELSE trust.trusted END,
                  last_lie_at = COALESCE(CAST(:lie_at AS TEXT), trust.last_lie_at),
                  last_lie_url = COALESCE(CAST(:lie_url AS TEXT), trust.last_lie_url),
                  updated_at = :at
                RETURNING {_TRUST_COLUMNS}""",
            {
                "host": host,
                "signal": signal,
                "checks": len(claims),
                "lies": len(lies),
                "after": claims[-1].distrust_after,
                "lie_at": _ts(last.at) if last is not None else None,
                "lie_url": last.url if last is not None else None,
                "at": _ts(max(c.at for c in claims)),
            },
        )
        return _row_to_trust(row)

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
