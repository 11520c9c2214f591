"""A run's staged misses and moves applied when it publishes: pages moved, gone or quarantined,
their events, their chunks retired and their boilerplate statistics taken back."""

from __future__ import annotations

from typing import TYPE_CHECKING

from recrawler.state.records import GONE, LIVE, MOVED, QUARANTINED, Event, ReconcileResult
from recrawler.state.sql.dialect import count, rows
from recrawler.state.sql.rows import _RETIRED_GONE, _RETIRED_QUARANTINED, _block_delta, _ts

if TYPE_CHECKING:
    from datetime import datetime

    from recrawler.state.records import Run
    from recrawler.state.sql.database import Database
    from recrawler.state.sql.dialect import Work

__all__ = ["apply_misses"]


def apply_misses(
    db: Database, run: Run, gone_after: int, gone_statuses: list[int], at: datetime
) -> Work[ReconcileResult]:
    """The run's staged misses and moves that are not kept, applied (in the transaction that
    publishes it): moves to live pages, then gone or quarantined pages with their events, their
    chunks retired and their block statistics taken back; the staged rows go."""
    d = db.dialect
    events: list[Event] = []
    # Moves first: a page moves only to a live page (one key live, never two); a move whose
    # target is not live is dropped and the source stays as it is.
    moved_rows = yield rows(
        """UPDATE pages SET status = :moved, misses = 0, last_checked = :at,
             moved_to = (SELECT m.moved_to FROM run_misses m WHERE m.run_id = :run AND m.key = pages.key)
           WHERE status IN (:live, :quarantined) AND key IN (
             SELECT m.key FROM run_misses m JOIN pages t ON t.key = m.moved_to
             WHERE m.run_id = :run AND m.kept = 0 AND m.moved_to IS NOT NULL AND t.status = :live)
           RETURNING key, url, content_hash, moved_to,
             (SELECT t.url FROM pages t WHERE t.key = pages.moved_to) AS moved_url""",
        {"run": run.id, "moved": MOVED, "at": _ts(at), "live": LIVE, "quarantined": QUARANTINED},
    )
    events.extend(
        Event(
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
        for r in moved_rows
    )
    yield count(
        "DELETE FROM run_misses WHERE run_id = ? AND kept = 0 AND moved_to IS NOT NULL AND key NOT IN "
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
             AND key IN (SELECT key FROM run_misses WHERE run_id = :run AND kept = 0 AND moved_to IS NULL)
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
        events.append(
            Event(
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
        )
    yield from db._outbox(events)
    applied = (
        "SELECT m.key FROM run_misses m JOIN pages p ON p.key = m.key WHERE m.run_id = :run AND m.kept = 0"
    )
    # The knowledge base follows in the same transaction: quarantined pages' chunks are
    # retired but kept (restored without re-embedding), gone and moved pages' chunks are
    # retired for good (a moved page's text lives on under its new key).
    for statuses, why in (((QUARANTINED,), _RETIRED_QUARANTINED), ((GONE, MOVED), _RETIRED_GONE)):
        yield count(
            f"""UPDATE chunks SET retired_run = :run, retired_why = :why
               WHERE retired_run IS NULL
                 AND key IN ({applied} AND p.status {d.in_list(":statuses")})""",
            {"run": run.id, "why": why, "statuses": d.list_param(statuses)},
        )
    yield count(
        "UPDATE pages SET chunks = 0 WHERE key IN (SELECT key FROM run_misses WHERE run_id = ? AND kept = 0)",
        (run.id,),
    )
    # a gone page no longer counts towards its site's boilerplate statistics
    removed = yield rows(
        """SELECT p.key, p.site, f.blocks FROM run_misses m JOIN pages p ON p.key = m.key
           JOIN page_fields f ON f.key = p.key WHERE m.run_id = :run AND m.kept = 0
           AND p.status IN (:gone, :moved)""",
        {"run": run.id, "gone": GONE, "moved": MOVED},
    )
    for key, site, blob in removed:
        yield from _block_delta(site, bytes(blob or b""), b"", None)
        yield count("DELETE FROM page_fields WHERE key = ?", (key,))
    yield count("DELETE FROM run_misses WHERE run_id = ? AND kept = 0", (run.id,))
    return ReconcileResult(applied=True, quarantined=quarantined, gone=gone, moved=len(moved_rows))
