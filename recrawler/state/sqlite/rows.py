"""SQLite rows to records and back, column lists, and the block-pair statistics' helpers."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from recrawler.detect.boilerplate import EDGE, kept_blocks
from recrawler.detect.hashing import page_hash, unpack_blocks
from recrawler.schedule import Revisit
from recrawler.state.records import (
    PageRecord,
    ScheduledPage,
    TrustRecord,
)

if TYPE_CHECKING:
    import sqlite3

    pass


# why a chunk row was retired
_RETIRED_REPLACED, _RETIRED_QUARANTINED, _RETIRED_GONE = 0, 1, 2

# the schedule's view of a page: a stored page checked before schema 4 uses last_checked
_SCHEDULE_COLUMNS = (
    "key, url, status, lastmod, listed_run, listed_skip, audit_run, "
    "COALESCE(last_check_at, last_checked) AS last_check_at, "
    "next_check_at, check_interval, check_count, change_count, checked_secs, change_rate"
)
_TRUST_COLUMNS = "host, signal, checks, lies, trusted, last_lie_at, last_lie_url"
_PAGE_COLUMNS = (
    "key, site, url, etag, last_modified, lastmod, content_hash, fuzzy_hash, title, status, "
    "misses, first_seen, last_checked, last_changed, last_seen_run, chunks, noise_key, "
    "found_depth, moved_to, changed_run"
)


# TLSH distance within which two pages changed in one run count as the same text, and beyond
# which a page's change replaced its content rather than edited it
_SAME_CONTENT_DISTANCE, _REPLACED_DISTANCE = 30, 100
# the staged miss of row ``m`` makes page ``p`` gone: a "gone" status, or enough consecutive misses
_GONE_CASE = "(m.http_status IN (SELECT value FROM json_each(:codes)) OR p.misses + 1 >= :after)"


def _ts(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _dt(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _at(value: datetime | None) -> str | None:
    """A schedule time: UTC, fixed width, so text order is time order in SQL comparisons."""
    return value.astimezone(UTC).isoformat(timespec="microseconds") if value is not None else None


def _row_to_revisit(row: sqlite3.Row) -> Revisit:
    return Revisit(
        last_check_at=_dt(row["last_check_at"]),
        next_check_at=_dt(row["next_check_at"]),
        interval=row["check_interval"],
        checks=row["check_count"],
        changes=row["change_count"],
        checked_secs=row["checked_secs"],
        rate=row["change_rate"],
    )


def _row_to_scheduled(row: sqlite3.Row) -> ScheduledPage:
    return ScheduledPage(
        key=row["key"],
        url=row["url"],
        status=row["status"],
        lastmod=row["lastmod"],
        revisit=_row_to_revisit(row),
        listed_run=row["listed_run"],
        listed_skip=row["listed_skip"],
        audit_run=row["audit_run"],
    )


def _row_to_trust(row: sqlite3.Row) -> TrustRecord:
    return TrustRecord(
        host=row["host"],
        signal=row["signal"],
        checks=row["checks"],
        lies=row["lies"],
        trusted=bool(row["trusted"]),
        last_lie_at=_dt(row["last_lie_at"]),
        last_lie_url=row["last_lie_url"],
    )


def _row_to_record(row: sqlite3.Row) -> PageRecord:
    first_seen = _dt(row["first_seen"])
    assert first_seen is not None  # NOT NULL column
    return PageRecord(
        key=row["key"],
        site=row["site"],
        url=row["url"],
        etag=row["etag"],
        last_modified=row["last_modified"],
        lastmod=row["lastmod"],
        content_hash=row["content_hash"],
        fuzzy_hash=row["fuzzy_hash"],
        title=row["title"],
        status=row["status"],
        misses=row["misses"],
        first_seen=first_seen,
        last_checked=_dt(row["last_checked"]),
        last_changed=_dt(row["last_changed"]),
        last_seen_run=row["last_seen_run"],
        chunks=row["chunks"],
        noise_key=row["noise_key"],
        found_depth=row["found_depth"] or 0,
        moved_to=row["moved_to"],
        changed_run=row["changed_run"],
    )


def _count_pairs(conn: sqlite3.Connection, site: str, pairs: set[tuple[int, int]], delta: int) -> None:
    """Add *delta* (1 or -1) to the page counts of a site's block pairs."""
    if delta > 0:
        conn.executemany(
            """INSERT INTO site_pairs (site, prev, block, pages) VALUES (?, ?, ?, 1)
               ON CONFLICT (site, prev, block) DO UPDATE SET pages = pages + 1""",
            [(site, prev, block) for prev, block in pairs],
        )
    else:
        conn.executemany(
            "UPDATE site_pairs SET pages = MAX(pages - 1, 0) WHERE site = ? AND prev = ? AND block = ?",
            [(site, prev, block) for prev, block in pairs],
        )


def _boilerplate_pairs(conn: sqlite3.Connection, site: str) -> set[tuple[int, int]]:
    return {
        (r[0], r[1])
        for r in conn.execute(
            "SELECT prev, block FROM site_pairs WHERE site = ? AND boilerplate = 1", (site,)
        )
    }


def _rehash(conn: sqlite3.Connection, site: str) -> int:
    """Re-hash the site's pages from their stored blocks under its boilerplate pairs, and mark the
    blocks of those pairs in ``site_blocks`` (what ``recrawler noise`` lists); returns how many
    page hashes moved."""
    boiler = _boilerplate_pairs(conn, site)
    conn.execute("UPDATE site_blocks SET boilerplate = 0 WHERE site = ? AND boilerplate = 1", (site,))
    conn.executemany(
        "UPDATE site_blocks SET boilerplate = 1 WHERE site = ? AND block = ?",
        [(site, b) for b in {b for pair in boiler for b in pair} - {EDGE}],
    )
    cur = conn.execute(
        """SELECT p.key, p.content_hash, f.blocks FROM pages p
           JOIN page_fields f ON f.key = p.key
           WHERE p.site = ? AND p.noise_key IS NOT NULL""",
        (site,),
    )
    updates = []
    for key, old_hash, blob in cur:
        new_hash = page_hash(kept_blocks(unpack_blocks(blob), boiler))
        if new_hash != old_hash:
            updates.append((new_hash, key))
    conn.executemany("UPDATE pages SET content_hash = ? WHERE key = ?", updates)
    return len(updates)
