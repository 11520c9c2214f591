"""The readers role: read-only connections for the CLI, and ``recrawler check``."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from recrawler.exceptions import StateStoreError
from recrawler.index.visibility import published_pages, visible_run
from recrawler.state.records import (
    GONE,
    MOVED,
    QUARANTINED,
    PageRecord,
    ScheduledPage,
    TrustRecord,
)
from recrawler.state.sql.check import Finding, check, repair
from recrawler.state.sql.rows import (
    _PAGE_COLUMNS,
    _SCHEDULE_COLUMNS,
    _TRUST_COLUMNS,
    _row_to_record,
    _row_to_scheduled,
    _row_to_trust,
    _ts,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from recrawler.state.sql.database import Database, Reader


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
    ) -> Iterator[dict[str, Any]]:
        """History rows, newest first, for one page, site or run (for the CLI and reports)."""
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
        """A run's row with its stored JSON ``report`` (None: no such run)."""
        with self.db.reader() as conn:
            rows = [
                dict(row)
                for row in conn.iter(
                    "SELECT id, spider, site, started_at, finished_at, finish_reason, state, published_at, "
                    "counts, reasons, listed, exit_code, report FROM runs WHERE id = ?",
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
        """Pages the run made new, quarantined, gone or moved (their state now), then a held run's
        staged removals. A run's window is its start to its finish (to now while it runs)."""
        with self.db.reader() as conn:
            yield from (
                dict(row)
                for row in conn.iter(
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
            )
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

    def iter_schedule(self, site: str | None = None) -> Iterator[ScheduledPage]:
        """Yield the schedule's view of every live or quarantined page, soonest due first."""
        with self.db.reader() as conn:
            if not self._has_table(conn, "trust"):
                msg = (
                    f"state database {self.db.label!r} predates schedules: "
                    "run a crawl with this recrawler first"
                )
                raise StateStoreError(msg)
            for row in conn.iter(
                f"""SELECT {_SCHEDULE_COLUMNS} FROM pages
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

    def check_sync(self, key_maker: Callable[[str], str]) -> list[Finding]:
        """Every broken invariant of the database, read-only (see ``recrawler.state.sql.check``)."""
        with self.db.reader() as conn:
            return check(conn, key_maker)

    async def repair(self, findings: Sequence[Finding]) -> dict[str, int]:
        """Mend what :meth:`check_sync` found, in one transaction (re-queue, retire, abort)."""
        return await self.db.transaction(repair(list(findings), at=_ts(datetime.now(UTC)) or ""))
