"""The runs role: leases, run rows and the reconciliation of staged misses."""

from __future__ import annotations

import json
import logging
import os
import socket
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from recrawler.detect.hashing import fuzzy_distance
from recrawler.exceptions import RunRefused, StateStoreError
from recrawler.state.records import (
    GONE,
    LIVE,
    MOVED,
    QUARANTINED,
    RUN_ABORTED,
    RUN_FINISHED,
    RUN_HELD,
    RUN_PUBLISHED,
    RUN_RUNNING,
    ReconcileResult,
    RemovalPlan,
    Run,
)
from recrawler.state.sql.dialect import count, many, one, rows
from recrawler.state.sql.rows import (
    _REPLACED_DISTANCE,
    _RETIRED_GONE,
    _RETIRED_QUARANTINED,
    _SAME_CONTENT_DISTANCE,
    _block_delta,
    _dt,
    _ts,
    gone_case,
)
from recrawler.state.sql.snapshots import record_run_pages

if TYPE_CHECKING:
    from collections.abc import Sequence

    from recrawler.state.sql.database import Database
    from recrawler.state.sql.dialect import Work


logger = logging.getLogger(__name__)


def lease_holder() -> str:
    """Who holds a lease: this host and process (``host pid N``)."""
    return f"{socket.gethostname()} pid {os.getpid()}"


def _holder_alive(holder: str) -> bool:
    """False only when *holder* is a process of this host that no longer exists (a killed run):
    its lease is taken over at once. Anything else counts as alive until its heartbeats lapse."""
    host, _, pid = holder.rpartition(" pid ")
    if host != socket.gethostname() or not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


class SQLRuns:
    """The runs role: leases, run rows and the reconciliation of staged misses."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def begin_run(
        self,
        spider: str,
        site: str | None,
        started_at: datetime,
        *,
        embedder: str | None = None,
        publish_each_page: bool = False,
        holder: str = "",
        lease_secs: float = 60.0,
    ) -> Run:
        """Take the site's lease and insert a run row (published at once when each page publishes
        itself).

        One run at a time per site: a lease whose holder still beats (within *lease_secs*) refuses
        the run, as does a held run of the site that awaits ``runs approve`` or ``runs discard``.
        A lease whose holder stopped beating is taken over: that run is marked aborted and its
        staged misses are dropped.
        """
        return await self.db.transaction(
            self._begin_run(spider, site, started_at, embedder, publish_each_page, holder, lease_secs)
        )

    def _begin_run(
        self,
        spider: str,
        site: str | None,
        started_at: datetime,
        embedder: str | None,
        publish_each_page: bool,
        holder: str,
        lease_secs: float,
    ) -> Work[Run]:
        lease_key = site if site is not None else f"spider:{spider}"
        if not self.db.dry_run:
            held = yield one(
                "SELECT id, reasons FROM runs WHERE state = ? AND site IS NOT DISTINCT FROM ? "
                "ORDER BY id DESC LIMIT 1",
                (RUN_HELD, site),
            )
            if held is not None:
                why = ", ".join(json.loads(held["reasons"] or "[]")) or "held"
                msg = (
                    f"run {held['id']} of {site or spider} is held ({why}): decide it first with "
                    f"`recrawler runs approve {held['id']}` or `recrawler runs discard {held['id']}`"
                )
                raise RunRefused(msg, held=True)
        lock = self.db.dialect.lock_sql
        if lock:
            # two processes starting one site take its lease in turn (SQLite's write lock does that)
            yield one(lock, (lease_key,))
        lease = yield one("SELECT run_id, holder, heartbeat_at FROM leases WHERE site = ?", (lease_key,))
        now = datetime.now(UTC)
        if lease is not None:
            beat = _dt(lease["heartbeat_at"])
            age = (now - beat).total_seconds() if beat else lease_secs + 1
            if age < lease_secs and _holder_alive(lease["holder"]):
                msg = (
                    f"{site or spider} is being crawled by run {lease['run_id']} ({lease['holder']}, "
                    f"heartbeat {age:.0f} s ago): one run at a time per site"
                )
                raise RunRefused(msg)
            yield count(
                """UPDATE runs SET state = ?, finish_reason = COALESCE(finish_reason, 'aborted'),
                     finished_at = COALESCE(finished_at, ?) WHERE id = ? AND state = ?""",
                (RUN_ABORTED, _ts(now), lease["run_id"], RUN_RUNNING),
            )
            yield count("DELETE FROM run_misses WHERE run_id = ?", (lease["run_id"],))
            logger.warning(
                "run %(run)d of %(site)s stopped without finishing (%(holder)s, last heartbeat "
                "%(age).0f s ago): marked aborted, its staged misses dropped",
                {"run": lease["run_id"], "site": lease_key, "holder": lease["holder"], "age": age},
            )
        row = yield one(
            "INSERT INTO runs (spider, site, started_at, state, published_at, embedder) "
            "VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
            (
                spider,
                site,
                _ts(started_at),
                RUN_PUBLISHED if publish_each_page else RUN_RUNNING,
                _ts(started_at) if publish_each_page else None,
                embedder,
            ),
        )
        run_id = int(row[0])
        yield count(
            """INSERT INTO leases (site, run_id, holder, acquired_at, heartbeat_at) VALUES (?, ?, ?, ?, ?)
               ON CONFLICT (site) DO UPDATE SET run_id = excluded.run_id, holder = excluded.holder,
                 acquired_at = excluded.acquired_at, heartbeat_at = excluded.heartbeat_at""",
            (lease_key, run_id, holder or "?", _ts(now), _ts(now)),
        )
        prior = live = 0
        last_listed = None
        backfill = False
        if site is not None:
            prior, live = yield one(
                "SELECT COUNT(*), COUNT(*) FILTER (WHERE status = ?) FROM pages "
                "WHERE site = ? AND status IN (?, ?)",
                (LIVE, site, LIVE, QUARANTINED),
            )
            row = yield one(
                "SELECT listed FROM runs WHERE site = ? AND id < ? AND listed IS NOT NULL "
                "AND state != ? ORDER BY id DESC LIMIT 1",
                (site, run_id, RUN_ABORTED),
            )
            last_listed = row["listed"] if row is not None else None
            row = yield one(
                "SELECT state, reasons, finished_at FROM runs "
                "WHERE site = ? AND id < ? ORDER BY id DESC LIMIT 1",
                (site, run_id),
            )
            if row is not None:
                reasons = json.loads(row["reasons"] or "[]")
                # the last run failed to store its pages (or to record its own end: a full
                # disk): the pages it left out come back as new, the knowledge base catching up
                backfill = (
                    row["state"] == RUN_ABORTED or "state_error" in reasons or row["finished_at"] is None
                )
        return Run(
            id=run_id,
            spider=spider,
            site=site,
            started_at=started_at,
            prior_pages=int(prior),
            prior_live=int(live),
            last_listed=last_listed,
            backfill=backfill,
        )

    def begin_run_sync(
        self,
        spider: str,
        site: str | None,
        started_at: datetime,
        *,
        embedder: str | None = None,
        publish_each_page: bool = False,
        holder: str = "",
        lease_secs: float = 60.0,
    ) -> Run:
        """Blocking :meth:`begin_run`, used once at startup (before the crawl's first request)."""
        return self.db.transaction_sync(
            self._begin_run(spider, site, started_at, embedder, publish_each_page, holder, lease_secs)
        )

    async def heartbeat(self, run: Run) -> bool:
        """Renew the run's lease; False when another run has taken it over."""
        lease_key = run.site if run.site is not None else f"spider:{run.spider}"

        def work() -> Work[bool]:
            n = yield count(
                "UPDATE leases SET heartbeat_at = ? WHERE site = ? AND run_id = ?",
                (_ts(datetime.now(UTC)), lease_key, run.id),
            )
            return bool(n)

        # beside the store's own work where the backend can: a renewal never waits behind it
        return await self.db.transaction(work(), concurrent=True)

    async def finish_run(
        self,
        run: Run,
        *,
        reason: str,
        at: datetime,
        report: dict[str, Any],
        reasons: Sequence[str] = (),
        listed: int | None = None,
        exit_code: int | None = None,
    ) -> None:
        """Store the run's end, counts, report and outcome, and release the site's lease."""
        lease_key = run.site if run.site is not None else f"spider:{run.spider}"

        def work() -> Work[None]:
            yield count(
                """UPDATE runs SET finished_at = ?, finish_reason = ?, counts = ?, report = ?,
                     reasons = ?, listed = ?, exit_code = ?,
                     state = CASE WHEN state = ? THEN ? ELSE state END
                   WHERE id = ?""",
                (
                    _ts(at),
                    reason,
                    json.dumps(report.get("counts", {})),
                    json.dumps(report),
                    json.dumps(list(reasons)),
                    listed,
                    exit_code,
                    RUN_RUNNING,
                    RUN_FINISHED,
                    run.id,
                ),
            )
            yield count("DELETE FROM leases WHERE site = ? AND run_id = ?", (lease_key, run.id))
            # what the run took out of the knowledge base, as it stands now: its report, later
            yield from record_run_pages(run.id, run.site, _ts(run.started_at) or "", _ts(at) or "")

        await self.db.transaction(work())

    async def removal_plan(self, run: Run, *, gone_after: int, gone_statuses: Sequence[int]) -> RemovalPlan:
        """What applying the run's staged misses and moves would do (nothing is changed)."""

        gone = gone_case(self.db.dialect)

        def work() -> Work[RemovalPlan]:
            row = yield one(
                f"""SELECT
                      COUNT(*) FILTER (WHERE m.moved_to IS NOT NULL AND t.status = :live) AS moved,
                      COUNT(*) FILTER (WHERE m.moved_to IS NULL AND p.status != :gone
                                       AND {gone}) AS gone,
                      COUNT(*) FILTER (WHERE m.moved_to IS NULL AND p.status = :live
                                       AND NOT {gone}) AS quarantine,
                      COUNT(*) FILTER (WHERE p.status = :live AND (m.moved_to IS NULL
                                       OR t.status = :live)) AS removals
                    FROM run_misses m JOIN pages p ON p.key = m.key
                    LEFT JOIN pages t ON t.key = m.moved_to
                    WHERE m.run_id = :run AND p.status IN (:live, :quarantined)""",
                {
                    "run": run.id,
                    "live": LIVE,
                    "gone": GONE,
                    "quarantined": QUARANTINED,
                    "codes": self.db.dialect.list_param(gone_statuses),
                    "after": gone_after,
                },
            )
            return RemovalPlan(
                pages=run.prior_pages,
                live=run.prior_live,
                removals=int(row["removals"]),
                quarantine=int(row["quarantine"]),
                gone=int(row["gone"]),
                moved=int(row["moved"]),
            )

        return await self.db.run(work(), flush=True)

    async def reconcile(
        self,
        run: Run,
        *,
        apply: bool,
        gone_after: int,
        gone_statuses: Sequence[int],
        at: datetime,
        keep: bool = False,
    ) -> ReconcileResult:
        """Apply the run's staged misses and moves in one transaction; or, when not *apply*, drop
        them (the outage guard), or keep them for ``runs approve`` (*keep*: the run is held)."""

        return await self.db.transaction(
            self._reconcile(run, apply, gone_after, list(gone_statuses), at, keep)
        )

    def _reconcile(
        self,
        run: Run,
        apply: bool,
        gone_after: int,
        gone_statuses: list[int],
        at: datetime,
        keep: bool = False,
    ) -> Work[ReconcileResult]:
        d = self.db.dialect
        if not apply:
            if keep:
                row = yield one("SELECT COUNT(*) FROM run_misses WHERE run_id = ?", (run.id,))
                return ReconcileResult(applied=False, skipped_misses=int(row[0]), kept=True)
            n = yield count("DELETE FROM run_misses WHERE run_id = ?", (run.id,))
            return ReconcileResult(applied=False, skipped_misses=n)
        from recrawler.state import Event

        batch: list[tuple[str]] = []
        # Moves first: a page moves only to a live page (one key live, never two); a move whose
        # target is not live is dropped and the source stays as it is.
        moved_rows = yield rows(
            """UPDATE pages SET status = :moved, misses = 0, last_checked = :at,
                 moved_to = (SELECT m.moved_to FROM run_misses m WHERE m.run_id = :run AND m.key = pages.key)
               WHERE status IN (:live, :quarantined) AND key IN (
                 SELECT m.key FROM run_misses m JOIN pages t ON t.key = m.moved_to
                 WHERE m.run_id = :run AND m.moved_to IS NOT NULL AND t.status = :live)
               RETURNING key, url, content_hash, moved_to,
                 (SELECT t.url FROM pages t WHERE t.key = pages.moved_to) AS moved_url""",
            {"run": run.id, "moved": MOVED, "at": _ts(at), "live": LIVE, "quarantined": QUARANTINED},
        )
        for r in moved_rows:
            if self.db.sink is not None:
                ev = Event(
                    run_id=run.id,
                    action=MOVED,
                    url=r["url"],
                    key=r["key"],
                    content_hash=r["content_hash"],
                    status=MOVED,
                    at=at,
                    reason="http_301",
                    extra={"moved_to": r["moved_url"], "moved_to_key": r["moved_to"]},
                )
                batch.append((ev.to_json(),))
        yield count(
            "DELETE FROM run_misses WHERE run_id = ? AND moved_to IS NOT NULL AND key NOT IN "
            "(SELECT key FROM pages WHERE status = ?)",
            (run.id, MOVED),
        )
        codes = d.list_param(gone_statuses)
        # Decide every staged miss in one statement: gone (gone status, or enough consecutive
        # misses) or quarantined. RETURNING gives the counts without loading the rows' state.
        decided = yield rows(
            f"""UPDATE pages SET
                 misses = misses + 1,
                 last_checked = :at,
                 status = CASE
                   WHEN (SELECT m.http_status FROM run_misses m
                         WHERE m.run_id = :run AND m.key = pages.key)
                        {d.in_list(":codes", sql_type="INTEGER")} THEN :gone
                   WHEN misses + 1 >= :after THEN :gone
                   ELSE :quarantined END
               WHERE status IN (:live, :quarantined)
                 AND key IN (SELECT key FROM run_misses WHERE run_id = :run AND moved_to IS NULL)
               RETURNING key, url, status, content_hash,
                 (SELECT m.http_status FROM run_misses m
                  WHERE m.run_id = :run AND m.key = pages.key) AS http_status""",
            {
                "at": _ts(at),
                "run": run.id,
                "codes": codes,
                "gone": GONE,
                "live": LIVE,
                "quarantined": QUARANTINED,
                "after": gone_after,
            },
        )
        quarantined = 0
        gone: dict[str, int] = {}
        for r in decided:
            action = r["status"]
            reason = f"http_{r['http_status']}"
            if action == GONE:
                gone[reason] = gone.get(reason, 0) + 1
            else:
                quarantined += 1
            if self.db.sink is not None:
                ev = Event(
                    run_id=run.id,
                    action=action,
                    url=r["url"],
                    key=r["key"],
                    content_hash=r["content_hash"],
                    status=action,
                    at=at,
                    reason=reason,
                    http_status=r["http_status"],
                )
                batch.append((ev.to_json(),))
        if batch:
            yield many("INSERT INTO outbox (payload) VALUES (?)", batch)
        # The knowledge base follows in the same transaction: quarantined pages' chunks are
        # retired but kept (restored without re-embedding), gone and moved pages' chunks are
        # retired for good (a moved page's text lives on under its new key).
        for statuses, why in (((QUARANTINED,), _RETIRED_QUARANTINED), ((GONE, MOVED), _RETIRED_GONE)):
            yield count(
                f"""UPDATE chunks SET retired_run = :run, retired_why = :why
                   WHERE retired_run IS NULL
                     AND key IN (SELECT m.key FROM run_misses m JOIN pages p ON p.key = m.key
                                 WHERE m.run_id = :run AND p.status {d.in_list(":statuses")})""",
                {"run": run.id, "why": why, "statuses": d.list_param(statuses)},
            )
        yield count(
            "UPDATE pages SET chunks = 0 WHERE key IN (SELECT key FROM run_misses WHERE run_id = ?)",
            (run.id,),
        )
        # a gone page no longer counts towards its site's boilerplate statistics
        removed = yield rows(
            """SELECT p.key, p.site, f.blocks FROM run_misses m JOIN pages p ON p.key = m.key
               JOIN page_fields f ON f.key = p.key WHERE m.run_id = ? AND p.status IN (?, ?)""",
            (run.id, GONE, MOVED),
        )
        for key, site, blob in removed:
            yield from _block_delta(site, bytes(blob or b""), b"", None)
            yield count("DELETE FROM page_fields WHERE key = ?", (key,))
        yield count("DELETE FROM run_misses WHERE run_id = ?", (run.id,))
        return ReconcileResult(applied=True, quarantined=quarantined, gone=gone, moved=len(moved_rows))

    async def largest_same_content(self, run: Run) -> tuple[int, str] | None:
        """The largest group of pages this run made new or changed that now say the same thing:
        the same text once noise is taken out, or (for pages whose content was replaced rather
        than edited, TLSH distance over 100) texts within TLSH distance 30 of each other.
        Returns (size, a sample URL), or None."""

        def work() -> Work[tuple[int, str] | None]:
            row = yield one(
                """SELECT COUNT(*) AS n, MIN(url) AS url FROM pages
                   WHERE changed_run = ? AND site IS NOT DISTINCT FROM ? AND status = ?
                     AND content_hash IS NOT NULL
                   GROUP BY content_hash ORDER BY n DESC LIMIT 1""",
                (run.id, run.site, LIVE),
            )
            best = (int(row["n"]), str(row["url"])) if row is not None else None
            # near-identical replacements (a maintenance page that names each page): greedy
            # clusters around representatives, over at most a few thousand pages
            reps: list[tuple[str, list[str]]] = []
            replaced = yield rows(
                """SELECT p.url, p.fuzzy_hash FROM page_changes c JOIN pages p ON p.key = c.key
                   WHERE c.run_id = ? AND c.verdict = 'changed' AND c.distance > ?
                     AND p.site IS NOT DISTINCT FROM ? AND p.status = ? AND p.fuzzy_hash IS NOT NULL
                   ORDER BY p.key LIMIT 5000""",
                (run.id, _REPLACED_DISTANCE, run.site, LIVE),
            )
            for url, digest in replaced:
                for rep, members in reps:
                    if fuzzy_distance(rep, digest) <= _SAME_CONTENT_DISTANCE:
                        members.append(url)
                        break
                else:
                    if len(reps) < 200:
                        reps.append((digest, [url]))
            for _, members in reps:
                if best is None or len(members) > best[0]:
                    best = (len(members), members[0])
            return best

        return await self.db.run(work(), flush=True)

    async def apply_held(
        self, run_id: int, *, gone_after: int, gone_statuses: Sequence[int], at: datetime
    ) -> ReconcileResult:
        """Apply the misses and moves a held run kept (``runs approve`` of a mass removal)."""

        def work() -> Work[ReconcileResult]:
            row = yield one("SELECT id, spider, site, started_at FROM runs WHERE id = ?", (run_id,))
            if row is None:
                raise StateStoreError(f"no run {run_id} in {self.db.label!r}")
            started = _dt(row["started_at"]) or at
            run = Run(id=run_id, spider=row["spider"], site=row["site"], started_at=started)
            result = yield from self._reconcile(run, True, gone_after, list(gone_statuses), at)
            # its report shows what the approval took out too
            yield from record_run_pages(run_id, run.site, _ts(at) or "", _ts(at) or "")
            return result

        return await self.db.transaction(work())
