"""The runs role: leases, run rows and the reconciliation of staged misses."""

from __future__ import annotations

import json
import logging
import os
import socket
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from recrawler.exceptions import RunRefused
from recrawler.state.records import (
    LISTING_FAILURES,
    LIVE,
    PENDING_NEW,
    QUARANTINED,
    RUN_ABORTED,
    RUN_FINISHED,
    RUN_HELD,
    RUN_PUBLISHED,
    RUN_RUNNING,
    Run,
)
from recrawler.state.sql.dialect import count, one
from recrawler.state.sql.rows import (
    _dt,
    _ts,
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
        if site is not None:
            # misses staged by runs that ended without applying them (aborted, unpublished) are
            # no evidence now: this run answers for itself; those kept for a decision stay
            yield count(
                """DELETE FROM run_misses WHERE kept = 0 AND run_id < ? AND run_id IN (
                     SELECT id FROM runs WHERE site = ?)""",
                (run_id, site),
            )
        else:
            yield count("DELETE FROM run_misses WHERE kept = 0 AND run_id < ?", (run_id,))
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
            # what the knowledge base holds: a page no publication brought in is not prior
            prior, live = yield one(
                "SELECT COUNT(*), COUNT(*) FILTER (WHERE status = ?) FROM pages "
                "WHERE site = ? AND status IN (?, ?) AND (pending IS NULL OR pending != ?)",
                (LIVE, site, LIVE, QUARANTINED, PENDING_NEW),
            )
            held = yield one(
                "SELECT id, reasons FROM runs WHERE state = ? AND site = ? ORDER BY id DESC LIMIT 1",
                (RUN_HELD, site),
            )
            if held is not None:
                why = ", ".join(json.loads(held["reasons"] or "[]")) or "held"
                logger.info(
                    "run %(held)d of %(site)s waits for a decision (%(why)s): run %(run)d goes on and "
                    "carries it (`recrawler runs approve` / `discard` the run that holds it at the end)",
                    {"held": held["id"], "site": site, "why": why, "run": run_id},
                )
            # the last accepted listing: a rejected one (it shrank, failed, was cut short) is
            # never a baseline, or a listing broken for two runs would be proof on the second
            rejected = "".join(
                f" AND COALESCE(reasons, '') NOT LIKE :failure{i}" for i in range(len(LISTING_FAILURES))
            )
            row = yield one(
                "SELECT listed FROM runs WHERE site = :site AND id < :run AND listed IS NOT NULL "
                f"AND finished_at IS NOT NULL AND state != :aborted{rejected} ORDER BY id DESC LIMIT 1",
                {
                    "site": site,
                    "run": run_id,
                    "aborted": RUN_ABORTED,
                    **{f"failure{i}": f'%"{why}"%' for i, why in enumerate(LISTING_FAILURES)},
                },
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
            each_page=publish_each_page,
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
        aborted: bool = False,
    ) -> None:
        """Store the run's end, counts, report and outcome, and release the site's lease; an
        *aborted* run (stopped before its closing work) ends ``aborted``."""
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
                    RUN_ABORTED if aborted else RUN_FINISHED,
                    run.id,
                ),
            )
            yield count("DELETE FROM leases WHERE site = ? AND run_id = ?", (lease_key, run.id))
            # what the run took out of the knowledge base, as it stands now: its report, later
            yield from record_run_pages(run.id, run.site, _ts(run.started_at) or "", _ts(at) or "")

        await self.db.transaction(work())
