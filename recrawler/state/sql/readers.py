"""The readers role: read-only connections for the CLI, and ``recrawler check``."""

from __future__ import annotations

import json
import zlib
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from recrawler.exceptions import StateStoreError
from recrawler.state.records import (
    GONE,
    LISTING_FAILURES,
    LIVE,
    MOVED,
    QUARANTINED,
    RUN_ABORTED,
    RUN_DISCARDED,
    RUN_HELD,
    RUN_SUPERSEDED,
    Freshness,
    HeldRun,
    PageRecord,
    ScheduledPage,
    SiteBuild,
    TrustRecord,
)
from recrawler.state.sql.check import Finding, check, repair
from recrawler.state.sql.rows import (
    _PAGE_COLUMNS,
    _SCHEDULE_BEFORE_18,
    _SCHEDULE_COLUMNS,
    _SITE_BUILD_COLUMNS,
    _TRUST_COLUMNS,
    _at,
    _dt,
    _row_to_record,
    _row_to_scheduled,
    _row_to_site_build,
    _row_to_trust,
    _ts,
)
from recrawler.state.sql.visibility import published_pages, visible_run

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from recrawler.state.sql.database import Database, Reader


#: how many URLs of delisted pages :meth:`SQLReaders.freshness` names
_DELISTED_URLS = 5
# The last complete listing of each site: the last run that finished (not aborted: a taken-over
# run's end is its takeover) having read a listing (``runs.listed``: pages its sitemaps named; NULL
# for spiders without one) and with no reason (``runs.reasons``, a JSON list) that says the
# listing was no evidence.
_LISTING_RUNS = f"""SELECT r.site, MAX(r.id) AS run FROM runs r
    WHERE r.finished_at IS NOT NULL AND r.listed IS NOT NULL AND r.state != :aborted
      AND (CAST(:site AS TEXT) IS NULL OR r.site = :site)
      {"".join(f" AND COALESCE(r.reasons, '') NOT LIKE :failure{i}" for i in range(len(LISTING_FAILURES)))}
    GROUP BY r.site"""
# the run that last listed a live page: its listing mark (``pages.listed_run``, set for every
# stored page a listing names), else, for a page first stored from a sitemap (or from the link
# crawl that lists a site with none) in a run that had no row for it yet to mark, the run that
# stored it; pages found by links beyond a sitemap or by feeds alone have none
_LISTED_IN = "COALESCE(p.listed_run, CASE WHEN p.found_via IN ('sitemap', 'crawl') THEN p.changed_run END)"


class SQLReaders:
    """The readers role: read-only connections for the CLI, and ``recrawler check``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def noise_report(self) -> dict[str, dict[str, list[dict[str, Any]]]]:
        """What is being ignored, per site: boilerplate blocks and learned regions (for the CLI)."""
        with self.db.reader() as conn:
            out: dict[str, dict[str, list[dict[str, Any]]]] = {}
            for r in conn.iter(
                "SELECT site, block, pages, sample FROM site_blocks WHERE boilerplate = 1 "
                "ORDER BY site, pages DESC"
            ):
                out.setdefault(r[0], {"boilerplate": [], "regions": []})["boilerplate"].append(
                    {"block": r[1], "pages": r[2], "sample": r[3]}
                )
            for r in conn.iter(
                "SELECT site, selector, source, learned_from, first_seen, hits FROM site_regions "
                "ORDER BY site, selector"
            ):
                out.setdefault(r[0], {"boilerplate": [], "regions": []})["regions"].append(
                    {"selector": r[1], "source": r[2], "learned_from": r[3], "first_seen": r[4], "hits": r[5]}
                )
            return out

    def iter_changes(
        self,
        *,
        key: str | None = None,
        site: str | None = None,
        run_id: int | None = None,
        limit: int | None = None,
        held: bool = False,
    ) -> Iterator[dict[str, Any]]:
        """History rows, newest first, for one page, site or run (for the CLI and reports): of
        published runs, or (*held*) of held runs and those they supersede."""
        with self.db.reader() as conn:
            where: list[str] = []
            params: list[Any] = []
            if key is not None:
                where.append("key = ?")
                params.append(key)
            if run_id is not None:
                where.append("run_id = ?")
                params.append(run_id)
            if site is not None:
                where.append("(key = ? OR key LIKE ? || '/%' OR key LIKE ? || '?%')")
                params.extend([site, site, site])
            if held:
                # what waits for a decision: the operator's to see, no one else's
                where.append(
                    f"run_id IN (SELECT id FROM runs WHERE state IN ('{RUN_HELD}', '{RUN_SUPERSEDED}')) "
                    f"AND NOT {visible_run('run_id')}"
                )
            else:
                # history of published runs only: a held run's changes are not history yet
                where.append(visible_run("run_id"))
            sql = "SELECT * FROM page_changes WHERE " + " AND ".join(where)
            sql += " ORDER BY id DESC"
            if limit:
                sql += f" LIMIT {int(limit)}"
            for row in conn.iter(sql, params):
                data = dict(row)
                data["changed_fields"] = json.loads(data["changed_fields"] or "[]")
                data["critical"] = json.loads(data["critical"] or "[]")
                yield data

    def iter_pages(self, status: str | None = None) -> Iterator[PageRecord]:
        """Yield pages ordered by key, streaming (never all in memory)."""
        with self.db.reader() as conn:
            # as the knowledge base shows them: a pending page as published, a new one not yet
            pages = f"{published_pages()} pp"
            if status:
                cur = conn.iter(
                    f"SELECT {_PAGE_COLUMNS} FROM {pages} WHERE status = ? ORDER BY key", (status,)
                )
            else:
                cur = conn.iter(f"SELECT {_PAGE_COLUMNS} FROM {pages} ORDER BY key")
            for row in cur:
                yield _row_to_record(row)

    def page_state(self, key: str) -> dict[str, Any] | None:
        """A page's stored state (None: no such page): ``record`` (its row), ``text`` (the text
        it was last stored with, None if not kept), ``first_run`` (the run that first stored it)
        and ``removed_run`` (the last run whose end recorded it quarantined, gone or moved)."""
        with self.db.reader() as conn:
            # as the knowledge base shows it: a pending page's published state and text
            rows = list(
                conn.iter(
                    f"SELECT {_PAGE_COLUMNS} FROM {published_pages()} pp WHERE key = :key", {"key": key}
                )
            )
            current = list(conn.iter(f"SELECT {_PAGE_COLUMNS} FROM pages WHERE key = :key", {"key": key}))
            if not current:
                return None
            pending = current[0]["pending"]
            record = _row_to_record(rows[0] if rows else current[0])
            before = list(
                conn.iter(
                    "SELECT f_present, f_text FROM page_before WHERE key = :key AND kind = 'changed'",
                    {"key": key},
                )
            )
            blobs = (
                [before[0]["f_text"]]
                if before and before[0]["f_present"]
                else [r[0] for r in conn.iter("SELECT text FROM page_fields WHERE key = :key", {"key": key})]
            )
            text = next((zlib.decompress(b).decode("utf-8") for b in blobs if b), None)
            first_run = next(
                (
                    int(r[0])
                    for r in conn.iter(
                        """SELECT MIN(id) FROM runs WHERE started_at <= :at
                             AND (finished_at IS NULL OR finished_at >= :at)
                             AND (site IS NULL OR site = :site)""",
                        {"at": _ts(record.first_seen), "site": record.site},
                    )
                    if r[0] is not None
                ),
                None,
            )
            removed_run = None
            if self._has_table(conn, "run_pages"):
                removed_run = next(
                    (
                        int(r[0])
                        for r in conn.iter("SELECT MAX(run_id) FROM run_pages WHERE key = :key", {"key": key})
                        if r[0] is not None
                    ),
                    None,
                )
        return {
            "record": record,
            "text": text,
            "first_run": first_run,
            "removed_run": removed_run,
            "pending": pending,
        }

    def iter_runs(self) -> Iterator[dict[str, Any]]:
        """Yield runs newest first."""
        with self.db.reader() as conn:
            for row in conn.iter(
                "SELECT id, spider, site, started_at, finished_at, finish_reason, state, published_at, "
                "counts, reasons, listed, exit_code FROM runs ORDER BY id DESC"
            ):
                data = dict(row)
                data["counts"] = json.loads(data["counts"]) if data["counts"] else None
                data["reasons"] = json.loads(data["reasons"]) if data["reasons"] else []
                yield data

    def run_report(self, run_id: int) -> dict[str, Any] | None:
        """A run's row with its stored JSON ``report`` and ``pages_recorded`` (None: no such run)."""
        with self.db.reader() as conn:
            # schema 12 records what a run's end took out (NULL before)
            recorded = "pages_recorded" if self._has_table(conn, "run_pages") else "NULL AS pages_recorded"
            rows = [
                dict(row)
                for row in conn.iter(
                    "SELECT id, spider, site, started_at, finished_at, finish_reason, state, published_at, "
                    f"counts, reasons, listed, exit_code, report, {recorded} FROM runs WHERE id = ?",
                    (run_id,),
                )
            ]
        if not rows:
            return None
        data = rows[0]
        for name, empty in (("counts", None), ("reasons", []), ("report", None)):
            data[name] = json.loads(data[name]) if data[name] else empty
        return data

    def iter_run_pages(self, run_id: int) -> Iterator[dict[str, Any]]:
        """Pages the run made new, quarantined, gone or moved, then a held run's staged removals.

        A run that ended on schema 12 or later is shown as it ended: its new pages live, the
        pages it took out as ``run_pages`` recorded them. Any other run (still running, aborted,
        or ended before schema 12) is shown from the pages' state now, within its window (its
        start to its finish, to now while it runs)."""
        with self.db.reader() as conn:
            recorded = self._has_table(conn, "run_pages") and any(
                row[0] is not None
                for row in conn.iter("SELECT pages_recorded FROM runs WHERE id = :run", {"run": run_id})
            )
            rows = self._recorded_run_pages(conn, run_id) if recorded else self._run_pages_now(conn, run_id)
            yield from (dict(row) for row in rows)
            yield from (
                dict(row)
                for row in conn.iter(
                    """SELECT p.key, p.url, p.title, p.status, 'held' AS event,
                         t.url AS moved_to, m.http_status
                       FROM run_misses m JOIN pages p ON p.key = m.key LEFT JOIN pages t ON t.key = m.moved_to
                       WHERE m.run_id = :run AND m.kept = 1 ORDER BY p.url""",
                    {"run": run_id},
                )
            )

    @staticmethod
    def _recorded_run_pages(conn: Reader, run_id: int) -> Iterator[Any]:
        """A run as it ended: its new pages (live then), and the removals its end recorded."""
        return conn.iter(
            f"""SELECT p.key, p.url, p.title, '{LIVE}' AS status, 'new' AS event,
                 NULL AS moved_to, NULL AS http_status
               FROM runs r JOIN pages p ON r.site IS NULL OR p.site = r.site
               WHERE r.id = :run AND p.first_seen >= r.started_at
                 AND (r.finished_at IS NULL OR p.first_seen <= r.finished_at)
               UNION ALL
               SELECT rp.key, rp.url, rp.title, rp.event AS status, rp.event,
                 t.url AS moved_to, NULL AS http_status
               FROM run_pages rp LEFT JOIN pages t ON t.key = rp.moved_to WHERE rp.run_id = :run
               ORDER BY url""",
            {"run": run_id},
        )

    @staticmethod
    def _run_pages_now(conn: Reader, run_id: int) -> Iterator[Any]:
        """A run's pages as they stand now, within its window."""
        return conn.iter(
            """SELECT p.key, p.url, p.title, p.status,
               CASE WHEN p.first_seen >= r.started_at
                         AND (r.finished_at IS NULL OR p.first_seen <= r.finished_at)
                    THEN 'new' ELSE p.status END AS event,
               t.url AS moved_to, NULL AS http_status
             FROM runs r JOIN pages p ON r.site IS NULL OR p.site = r.site
             LEFT JOIN pages t ON t.key = p.moved_to
             WHERE r.id = :run AND (
               (p.first_seen >= r.started_at
                AND (r.finished_at IS NULL OR p.first_seen <= r.finished_at))
               OR (p.status IN (:quarantined, :gone, :moved)
                   AND p.last_checked >= r.started_at
                   AND (r.finished_at IS NULL OR p.last_checked <= r.finished_at)))
             ORDER BY p.url""",
            {"run": run_id, "quarantined": QUARANTINED, "gone": GONE, "moved": MOVED},
        )

    def iter_events(
        self, *, site: str | None = None, run_id: int | None = None, since: datetime | None = None
    ) -> Iterator[dict[str, Any]]:
        """The events of runs a publication covers, oldest first, from the outbox (the durable log
        every run writes, whatever ``RECRAWLER_EVENTS_URI`` was): as delivered, one dict each."""
        with self.db.reader() as conn:
            # schema 10 names each event's run (and made the outbox a log kept with or without a sink)
            if not self._has_table(conn, "page_before"):
                return
            d = conn.dialect
            # a period reads the runs that ended in it (or have not ended) through the outbox's run
            # index, and only their events' payloads: not every payload the outbox ever kept
            period = (
                f"""AND o.run_id IN (SELECT p.id FROM runs p
                                     WHERE p.finished_at IS NULL OR p.finished_at >= :since)
                    AND {d.json_text("o.payload", "at")} >= :since"""
                if since is not None
                else ""
            )
            for row in conn.iter(
                f"""SELECT o.payload FROM outbox o LEFT JOIN runs r ON r.id = o.run_id
                    WHERE o.run_id IS NOT NULL AND {visible_run("o.run_id")}
                      AND (CAST(:site AS TEXT) IS NULL OR r.site = :site)
                      AND (CAST(:run AS INTEGER) IS NULL OR o.run_id = :run) {period}
                    ORDER BY o.id""",
                {"site": site, "run": run_id, "since": _at(since) if since is not None else None},
            ):
                yield json.loads(row[0])

    def freshness(self, site: str | None, *, bound_secs: float, now: datetime) -> Freshness:
        """How current the live pages of *site* (None: every site) are at *now*: verified within
        *bound_secs* (by a request or a trusted signal; after a detected deploy, by a request since),
        by what, the oldest verification, the pages a deploy left unchecked, and those missing from
        the last complete listing."""
        params = {
            "site": site,
            "live": LIVE,
            "aborted": RUN_ABORTED,
            "cutoff": _at(now - timedelta(seconds=bound_secs)),
            **{f"failure{i}": f'%"{why}"%' for i, why in enumerate(LISTING_FAILURES)},
        }
        delisted = f"""FROM pages p JOIN ({_LISTING_RUNS}) ref ON ref.site = p.site
            WHERE p.status = :live AND {_LISTED_IN} < ref.run"""
        with self.db.reader() as conn:
            deploys = self._has_table(conn, "site_builds")
            if deploys:
                # verified: within the bound, and after the site's last deploy by a request
                checked = "COALESCE(p.last_check_at, p.last_checked)"
                late = f"(b.deploy_at IS NOT NULL AND ({checked} IS NULL OR {checked} < b.deploy_at))"
                at = "COALESCE(p.verified_at, p.last_checked)"
                pages = (
                    "FROM pages p LEFT JOIN site_builds b ON b.site = p.site "
                    "WHERE p.status = :live AND (CAST(:site AS TEXT) IS NULL OR p.site = :site)"
                )
                ok = f"{at} >= :cutoff AND NOT {late}"
                (live, verified, oldest, by_lastmod, by_feed, unchecked), *_ = conn.iter(
                    f"""SELECT COUNT(*), COUNT(*) FILTER (WHERE {ok}), MIN({at}),
                          COUNT(*) FILTER (WHERE {ok} AND p.verified_by = 'lastmod'),
                          COUNT(*) FILTER (WHERE {ok} AND p.verified_by = 'feed'),
                          COUNT(*) FILTER (WHERE {late}) {pages}""",
                    params,
                )
                deploy = next(
                    iter(
                        conn.iter(
                            "SELECT deploy_at, deploy_reason FROM site_builds WHERE site = :site", params
                        )
                    ),
                    None,
                )
            else:
                at = "p.last_checked"
                pages = (
                    "FROM pages p WHERE p.status = :live AND (CAST(:site AS TEXT) IS NULL OR p.site = :site)"
                )
                (live, verified, oldest), *_ = conn.iter(
                    f"""SELECT COUNT(*), COUNT(*) FILTER (WHERE {at} >= :cutoff), MIN({at}) {pages}""", params
                )
                by_lastmod = by_feed = unchecked = 0
                deploy = None
            oldest_url = next(
                (
                    str(r[0])
                    for r in conn.iter(
                        f"SELECT p.url {pages} AND {at} = :oldest ORDER BY p.key LIMIT 1",
                        {**params, "oldest": oldest},
                    )
                ),
                None,
            )
            (count,), *_ = conn.iter(f"SELECT COUNT(*) {delisted}", params)
            listing_run = next((r[1] for r in conn.iter(_LISTING_RUNS, params)), None)
            urls = [
                str(r[0])
                for r in conn.iter(f"SELECT p.url {delisted} ORDER BY p.url LIMIT {_DELISTED_URLS}", params)
            ]
        return Freshness(
            site=site,
            now=now,
            bound_secs=bound_secs,
            live=int(live),
            verified=int(verified),
            oldest_checked=_dt(oldest),
            oldest_url=oldest_url,
            delisted=int(count),
            delisted_urls=tuple(urls),
            listing_run=int(listing_run) if site is not None and listing_run is not None else None,
            by_request=int(verified) - int(by_lastmod) - int(by_feed),
            by_lastmod=int(by_lastmod),
            by_feed=int(by_feed),
            deploy_at=_dt(deploy[0]) if deploy is not None else None,
            deploy_reason=deploy[1] if deploy is not None else None,
            deploy_unchecked=int(unchecked),
        )

    def iter_site_builds(self) -> Iterator[SiteBuild]:
        """Yield each site's build as the deploy detection stored it (none before schema 18)."""
        with self.db.reader() as conn:
            if not self._has_table(conn, "site_builds"):
                return
            for row in conn.iter(f"SELECT {_SITE_BUILD_COLUMNS} FROM site_builds ORDER BY site"):
                yield _row_to_site_build(row)

    def iter_held_runs(self, site: str | None = None) -> Iterator[HeldRun]:
        """Runs waiting for ``runs approve`` / ``runs discard`` (of *site*; None: every site),
        oldest first: held runs, and runs whose removals wait (kept misses, schema 10; a held run a
        later run supersedes hands its decision to that run), with why and how many removals."""
        with self.db.reader() as conn:
            # before schema 10 a held run's staged misses were its removals, and only held runs waited
            kept, waits = (
                ("m.kept = 1", "m.kept = 1") if self._has_table(conn, "page_before") else ("1 = 1", "1 = 0")
            )
            for row in conn.iter(
                f"""SELECT r.id, r.site, r.started_at, r.finished_at, r.reasons, r.report, r.state,
                     (SELECT COUNT(*) FROM run_misses m WHERE m.run_id = r.id AND {kept}) AS staged
                   FROM runs r
                   WHERE (r.state = :held OR (r.state NOT IN (:discarded, :aborted) AND EXISTS (
                       SELECT 1 FROM run_misses m WHERE m.run_id = r.id AND {waits})))
                     AND (CAST(:site AS TEXT) IS NULL OR r.site = :site)
                   ORDER BY r.id""",
                {"held": RUN_HELD, "discarded": RUN_DISCARDED, "aborted": RUN_ABORTED, "site": site},
            ):
                report = json.loads(row["report"]) if row["report"] else {}
                yield HeldRun(
                    id=int(row["id"]),
                    site=row["site"],
                    started_at=datetime.fromisoformat(row["started_at"]),
                    finished_at=_dt(row["finished_at"]),
                    holds=tuple(str(h) for h in report.get("held") or ()),
                    alert=report.get("alert"),
                    reasons=tuple(json.loads(row["reasons"]) if row["reasons"] else ()),
                    staged_removals=int(row["staged"]),
                    state=str(row["state"]),
                )

    def iter_schedule(self, site: str | None = None) -> Iterator[ScheduledPage]:
        """Yield the schedule's view of every live or quarantined page, soonest due first."""
        with self.db.reader() as conn:
            if not self._has_table(conn, "trust"):
                msg = (
                    f"state database {self.db.label!r} predates schedules: "
                    "run a crawl with this recrawler first"
                )
                raise StateStoreError(msg)
            columns = _SCHEDULE_COLUMNS
            if not self._has_table(conn, "site_builds"):
                columns = columns.replace(*_SCHEDULE_BEFORE_18)
            for row in conn.iter(
                f"""SELECT {columns} FROM pages
                    WHERE status != ? AND (CAST(? AS TEXT) IS NULL OR site = ?)
                    ORDER BY next_check_at IS NOT NULL, next_check_at, key""",
                (GONE, site, site),
            ):
                yield _row_to_scheduled(row)

    def iter_trust(self) -> Iterator[TrustRecord]:
        """Yield trust records by host and signal."""
        with self.db.reader() as conn:
            if not self._has_table(conn, "trust"):
                return
            for row in conn.iter(f"SELECT {_TRUST_COLUMNS} FROM trust ORDER BY host, signal"):
                yield _row_to_trust(row)

    def iter_immutable(self) -> Iterator[dict[str, Any]]:
        """Yield stored deltafetch keys (spider, key, url, page_key, stored_at) by URL."""
        with self.db.reader() as conn:
            if not self._has_table(conn, "deltafetch"):
                return
            for row in conn.iter(
                "SELECT spider, key, url, page_key, stored_at FROM deltafetch ORDER BY spider, url"
            ):
                yield dict(row)

    @staticmethod
    def _has_table(conn: Reader, name: str) -> bool:
        return any(r[0] == name for r in conn.iter(conn.dialect.tables_sql))

    def check_sync(
        self,
        key_maker: Callable[[str], str],
        *,
        lease_secs: float,
        refusal: Callable[[str], str | None] | None = None,
    ) -> list[Finding]:
        """Every broken invariant of the database, read-only (see ``recrawler.state.sql.check``)."""
        with self.db.reader() as conn:
            return check(conn, key_maker, lease_secs=lease_secs, refusal=refusal)

    async def repair(self, findings: Sequence[Finding]) -> dict[str, int]:
        """Mend what :meth:`check_sync` found, in one transaction (re-queue, retire, abort)."""
        return await self.db.transaction(repair(list(findings), at=_ts(datetime.now(UTC)) or ""))
