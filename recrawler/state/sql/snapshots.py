"""What a run took out of the knowledge base, recorded when it ends: its report shows it as it was."""

from __future__ import annotations

from typing import TYPE_CHECKING

from recrawler.state.records import GONE, MOVED, QUARANTINED
from recrawler.state.sql.dialect import count

if TYPE_CHECKING:
    from recrawler.state.sql.dialect import Work

__all__ = ["record_run_pages"]


def record_run_pages(run_id: int, site: str | None, since: str, until: str) -> Work[int]:
    """Record the pages of *site* (None: any) the run left quarantined, gone or moved, decided
    between *since* and *until* (``last_checked``, ISO text), in the caller's transaction; mark the
    run as recorded (``runs.pages_recorded``, counted over the run's rows); return how many rows
    this call wrote. Called again for the same run (an approval applying its held removals) it adds
    to them."""
    written = yield count(
        """INSERT INTO run_pages (run_id, key, url, title, event, moved_to, at)
           SELECT :run, p.key, p.url, p.title, p.status, p.moved_to, p.last_checked FROM pages p
           WHERE (CAST(:site AS TEXT) IS NULL OR p.site = :site)
             AND p.status IN (:quarantined, :gone, :moved)
             AND p.last_checked >= :since AND p.last_checked <= :until
           ON CONFLICT (run_id, key) DO UPDATE SET event = excluded.event, moved_to = excluded.moved_to,
             url = excluded.url, title = excluded.title, at = excluded.at""",
        {
            "run": run_id,
            "site": site,
            "quarantined": QUARANTINED,
            "gone": GONE,
            "moved": MOVED,
            "since": since,
            "until": until,
        },
    )
    yield count(
        """UPDATE runs SET pages_recorded = (SELECT COUNT(*) FROM run_pages WHERE run_id = :run)
           WHERE id = :run""",
        {"run": run_id},
    )
    return int(written)
