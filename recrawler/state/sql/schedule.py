"""The schedule role: revisit state, what a run's listing decided, audit samples."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from recrawler.intervals import Revisit, audit_count
from recrawler.state.records import (
    LIVE,
    QUARANTINED,
    RevisitUpdate,
    Run,
    ScheduledPage,
    SiteBuild,
)
from recrawler.state.sql.dialect import count, many, one, rows
from recrawler.state.sql.rows import (
    _SCHEDULE_COLUMNS,
    _SITE_BUILD_COLUMNS,
    _at,
    _dt,
    _row_to_revisit,
    _row_to_scheduled,
    _row_to_site_build,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from datetime import datetime

    from recrawler.state.sql.database import Database
    from recrawler.state.sql.dialect import Dialect, Work


#: a page's revisit state, as the schedule reads it (its own clock only: a page checked before
#: schema 4 starts a fresh history)
_REVISIT_COLUMNS = (
    "last_check_at, next_check_at, check_interval, check_count, change_count, checked_secs, change_rate"
)

_REVISIT_UPDATE = """UPDATE pages SET last_check_at = :last, next_check_at = :next,
     verified_at = :last, verified_by = 'request',
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

    async def mark_listed(
        self,
        run: Run,
        decided: Sequence[tuple[str, str | None]],
        *,
        vouched: Sequence[tuple[str, str]] = (),
        at: datetime | None = None,
    ) -> None:
        """Note that this run's listing decided these (key, skipping layer or None: requested), and
        that a trusted signal (``lastmod``, ``feed``) verified the *vouched* (key, signal) pages *at*."""

        def work() -> Work[None]:
            yield many(
                "UPDATE pages SET listed_run = ?, listed_skip = ? WHERE key = ?",
                [(run.id, skip, key) for key, skip in decided],
            )
            if vouched:
                yield many(
                    "UPDATE pages SET verified_at = ?, verified_by = ? WHERE key = ?",
                    [(_at(at), signal, key) for key, signal in vouched],
                )

        if decided or vouched:
            await self.db.page_write(work())

    async def take_skipped(
        self, run: Run, *, before: datetime, limit: int
    ) -> list[tuple[str, str, str | None, str]]:
        """Up to *limit* pages of the run's site its listing skipped that no request checked since
        *before* (a deploy): (key, url, lastmod, skipping layer) each, their skip undone (taken
        once: the run requests them)."""

        def work() -> Work[list[tuple[str, str, str | None, str]]]:
            found = yield rows(
                """SELECT key, url, lastmod, listed_skip FROM pages
                   WHERE site = :site AND listed_run = :run AND listed_skip IN ('schedule', 'lastmod')
                     AND status IN (:live, :quarantined)
                     AND COALESCE(last_check_at, last_checked, '') < :before
                   ORDER BY key LIMIT :limit""",
                {
                    "site": run.site,
                    "run": run.id,
                    "live": LIVE,
                    "quarantined": QUARANTINED,
                    "before": _at(before),
                    "limit": limit,
                },
            )
            if found:
                yield many("UPDATE pages SET listed_skip = NULL WHERE key = ?", [(r["key"],) for r in found])
            return [(r["key"], r["url"], r["lastmod"], r["listed_skip"]) for r in found]

        if run.site is None:
            return []
        return await self.db.transaction(work())

    async def probe_sample(
        self, run: Run, n: int, homes: Sequence[str] = ()
    ) -> list[tuple[str, str, str | None]]:
        """The run's *n* probes among the site's live pages (neither immutable nor in the audit
        sample): the first of the *homes* keys it keeps, then pages drawn at random: (key, url,
        lastmod)."""

        d = self.db.dialect

        def work() -> Work[list[tuple[str, str, str | None]]]:
            where = """site = :site AND status = :live AND content_hash IS NOT NULL
                       AND key NOT IN (SELECT page_key FROM deltafetch WHERE page_key IS NOT NULL)
                       AND (audit_run IS NULL OR audit_run != :run)"""
            params: dict[str, Any] = {"site": run.site, "live": LIVE, "run": run.id}
            found: list[Any] = []
            if homes:
                found = yield rows(
                    f"SELECT key, url, lastmod FROM pages WHERE {where} AND key {d.in_list(':homes')} "
                    "LIMIT 1",
                    {**params, "homes": d.list_param(list(homes))},
                )
            if n > len(found):
                drawn = yield rows(
                    f"""SELECT key, url, lastmod FROM pages
                        WHERE {where} {"AND key != :home" if found else ""}
                        ORDER BY random() LIMIT :n""",
                    {**params, "n": n - len(found), **({"home": found[0]["key"]} if found else {})},
                )
                found = [*found, *drawn]
            return [(r["key"], r["url"], r["lastmod"]) for r in found]

        if run.site is None or n <= 0:
            return []
        return await self.db.run(work())

    async def mark_solo(self, keys: Sequence[str], *, solo: bool) -> None:
        """Note whether these pages' changes come on their own (no sample of a deploy)."""

        def work() -> Work[None]:
            yield many("UPDATE pages SET solo = ? WHERE key = ?", [(int(solo), key) for key in keys])

        if keys:
            await self.db.page_write(work())

    async def site_build(self, site: str) -> SiteBuild | None:
        """The site's build as the deploy detection last stored it, or None."""

        def work() -> Work[SiteBuild | None]:
            row = yield one(f"SELECT {_SITE_BUILD_COLUMNS} FROM site_builds WHERE site = ?", (site,))
            return _row_to_site_build(row) if row is not None else None

        return await self.db.run(work())

    async def record_site_build(self, build: SiteBuild, at: datetime) -> None:
        """Store the site's build (its fingerprint, noise and last detected deploy) as *build* says."""

        def work() -> Work[None]:
            yield count(
                f"""INSERT INTO site_builds ({_SITE_BUILD_COLUMNS}, updated_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (site) DO UPDATE SET fingerprint = excluded.fingerprint,
                     noise = excluded.noise, lastmod_noise = excluded.lastmod_noise,
                     deploy_at = excluded.deploy_at, deploy_run = excluded.deploy_run,
                     deploy_reason = excluded.deploy_reason, updated_at = excluded.updated_at""",
                (
                    build.site,
                    json.dumps(dict(build.fingerprint), sort_keys=True),
                    json.dumps(sorted(build.noise)),
                    int(build.lastmod_noise),
                    _at(build.deploy_at),
                    build.deploy_run,
                    build.deploy_reason,
                    _at(at),
                ),
            )

        await self.db.page_write(work())

    async def live_pages(self, site: str) -> int:
        """How many pages of *site* are live or quarantined (what a deploy's check covers)."""

        def work() -> Work[int]:
            row = yield one(
                "SELECT COUNT(*) FROM pages WHERE site = ? AND status IN (?, ?)", (site, LIVE, QUARANTINED)
            )
            return int(row[0])

        return await self.db.run(work())

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

    async def audit_sample(
        self, run: Run, sample: float, *, now: datetime | None = None, bound_secs: float | None = None
    ) -> list[str]:
        """Draw this run's self-audit sample among the site's live pages; return their keys.

        A ``float`` ``sample`` is a share, an ``int`` a count. Immutable pages are left out. With
        *now* and *bound_secs*, a share below 1 is per bound: a run a part of the bound after the
        site's last verification draws that part of it (see :func:`~recrawler.intervals.audit_count`).
        """

        def work() -> Work[list[str]]:
            where = """site = :site AND status = :live AND content_hash IS NOT NULL
                       AND key NOT IN (SELECT page_key FROM deltafetch WHERE page_key IS NOT NULL)"""
            params = {"site": run.site, "live": LIVE, "run": run.id}
            population = yield one(
                f"SELECT COUNT(*), MAX(COALESCE(verified_at, last_check_at)) FROM pages WHERE {where}", params
            )
            part = 1.0
            last = _dt(population[1])
            if now is not None and bound_secs and last is not None:
                part = (now - last).total_seconds() / bound_secs
            n = audit_count(sample, int(population[0]), part=part)
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
