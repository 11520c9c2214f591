"""The schedule role: revisit state, what a run's listing decided, audit samples."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from recrawler.intervals import Revisit, audit_count
from recrawler.state.records import (
    LIVE,
    RevisitUpdate,
    Run,
    ScheduledPage,
)
from recrawler.state.sql.dialect import count, many, one, rows
from recrawler.state.sql.rows import _SCHEDULE_COLUMNS, _at, _row_to_revisit, _row_to_scheduled

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from recrawler.state.sql.database import Database
    from recrawler.state.sql.dialect import Dialect, Work


#: a page's revisit state, as the schedule reads it (its own clock only: a page checked before
#: schema 4 starts a fresh history)
_REVISIT_COLUMNS = (
    "last_check_at, next_check_at, check_interval, check_count, change_count, checked_secs, change_rate"
)

_REVISIT_UPDATE = """UPDATE pages SET last_check_at = :last, next_check_at = :next,
     check_interval = :interval, check_count = :checks, change_count = :changes, checked_secs = :secs,
     change_rate = :rate, found_via = COALESCE(found_via, CAST(:via AS TEXT)),
     found_from = CASE WHEN found_via IS NULL AND CAST(:via AS TEXT) IS NOT NULL
                  THEN CAST(:src AS TEXT) ELSE found_from END
   WHERE key = :key"""


def _revisit_params(
    key: str, revisit: Revisit, found_via: str | None, found_from: str | None
) -> dict[str, Any]:
    return {
        "via": found_via,
        "src": found_from,
        "last": _at(revisit.last_check_at),
        "next": _at(revisit.next_check_at),
        "interval": revisit.interval,
        "checks": revisit.checks,
        "changes": revisit.changes,
        "secs": revisit.checked_secs,
        "rate": revisit.rate,
        "key": key,
    }


def revisit_updates(
    d: Dialect, updates: Sequence[tuple[str, RevisitUpdate]]
) -> Work[list[tuple[Revisit | None, Revisit]]]:
    """Read the revisit state of each (distinct) page in one query and store ``update(state)`` in
    its place (in any write); (before, after) per page, in order. A page's ``found_via`` and
    ``found_from`` are set only if not known yet."""
    if not updates:
        return []
    found = yield rows(
        f"SELECT key, {_REVISIT_COLUMNS} FROM pages WHERE key {d.in_list('?')}",
        (d.list_param([key for key, _ in updates]),),
    )
    state = {r[0]: r for r in found}
    done: list[tuple[Revisit | None, Revisit]] = []
    params = []
    for key, u in updates:
        row = state.get(key)
        before = _row_to_revisit(row) if row is not None else None
        after = u.update(before)
        done.append((before, after))
        params.append(_revisit_params(key, after, u.found_via, u.found_from))
    yield many(_REVISIT_UPDATE, params)
    return done


class SQLSchedule:
    """The schedule role: revisit state, what a run's listing decided, audit samples."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def scheduled(self, keys: Sequence[str]) -> dict[str, ScheduledPage]:
        """The schedule's view of the stored pages among *keys* (one query for the batch)."""

        d = self.db.dialect

        def work() -> Work[dict[str, ScheduledPage]]:
            found = yield rows(
                f"SELECT {_SCHEDULE_COLUMNS} FROM pages WHERE key {d.in_list('?')}", (d.list_param(keys),)
            )
            return {r["key"]: _row_to_scheduled(r) for r in found}

        return await self.db.run(work())

    async def mark_listed(self, run: Run, decided: Sequence[tuple[str, str | None]]) -> None:
        """Note that this run's listing decided these (key, skipping layer or None: requested)."""

        def work() -> Work[None]:
            yield many(
                "UPDATE pages SET listed_run = ?, listed_skip = ? WHERE key = ?",
                [(run.id, skip, key) for key, skip in decided],
            )

        if decided:
            await self.db.page_write(work())

    async def revisit(self, key: str) -> Revisit | None:
        """The revisit state of *key*, or None for an unknown page."""

        return await self.db.run(self._revisit(key))

    async def update_revisit(
        self,
        key: str,
        update: Callable[[Revisit | None], Revisit],
        *,
        found_via: str | None = None,
        found_from: str | None = None,
    ) -> tuple[Revisit | None, Revisit]:
        """Read a page's revisit state, store ``update(state)`` in its place; one round trip.

        Returns (before, after). *update* runs on the worker thread: it must be quick and pure.
        """

        u = RevisitUpdate(update=update, found_via=found_via, found_from=found_from)
        (done,) = await self.db.page_write(revisit_updates(self.db.dialect, [(key, u)]))
        return done

    @staticmethod
    def _revisit(key: str) -> Work[Revisit | None]:
        # the schedule's own clock only: a page checked before schema 4 starts a fresh history
        row = yield one(f"SELECT {_REVISIT_COLUMNS} FROM pages WHERE key = ?", (key,))
        return _row_to_revisit(row) if row is not None else None

    async def record_revisit(
        self, key: str, revisit: Revisit, *, found_via: str | None = None, found_from: str | None = None
    ) -> None:
        """Store a page's revisit state after a check (and how it was found, if not known yet)."""

        await self.db.page_write(self._write_revisit(key, revisit, found_via, found_from))

    @staticmethod
    def _write_revisit(
        key: str, revisit: Revisit, found_via: str | None, found_from: str | None
    ) -> Work[None]:
        yield count(_REVISIT_UPDATE, _revisit_params(key, revisit, found_via, found_from))

    async def audit_sample(self, run: Run, sample: float) -> list[str]:
        """Draw this run's self-audit sample among the site's live pages; return their keys.

        A ``float`` ``sample`` is a share, an ``int`` a count. Immutable pages are left out.
        """

        def work() -> Work[list[str]]:
            where = """site = :site AND status = :live AND content_hash IS NOT NULL
                       AND key NOT IN (SELECT page_key FROM deltafetch WHERE page_key IS NOT NULL)"""
            params = {"site": run.site, "live": LIVE, "run": run.id}
            population = yield one(f"SELECT COUNT(*) FROM pages WHERE {where}", params)
            n = audit_count(sample, int(population[0]))
            if not n:
                return []
            drawn = yield rows(
                f"""UPDATE pages SET audit_run = :run WHERE key IN (
                      SELECT key FROM pages WHERE {where} ORDER BY random() LIMIT :n)
                    RETURNING key""",
                {**params, "n": n},
            )
            return sorted(r[0] for r in drawn)

        if run.site is None or sample <= 0:
            return []
        return await self.db.transaction(work())
