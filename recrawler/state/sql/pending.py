"""Pending pages: what a run changed of a page, before a publication covers it.

The first write that changes a page since the knowledge base last showed it keeps the page's
published state (its row and field record) in ``page_before`` and marks the page pending. The
publication of a run of the page's site drops those rows (the change is published); discarding
puts them back (as if the discarded runs never ran); a page that returns to its published state
is put back on its own (:func:`revert_page`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from recrawler.state.records import LIVE, PENDING_CHANGED, PENDING_NEW
from recrawler.state.sql.dialect import count, one, rows, values
from recrawler.state.sql.rows import _block_delta
from recrawler.state.sql.visibility import BEFORE_COLUMNS, unpublished_runs

if TYPE_CHECKING:
    from collections.abc import Sequence

    from recrawler.state.sql.dialect import Dialect, Work

__all__ = [
    "discard_pending",
    "keep_published",
    "pending_counts",
    "publish_pending",
    "revert_page",
]

_FIELDS = ("title", "headings", "code", "links", "text", "blocks")


def keep_published(d: Dialect, run_id: int, pages: Sequence[tuple[str, str]]) -> Work[None]:
    """Keep the published state of (key, site) *pages* a write of run *run_id* makes pending:
    a stored page's row and field record (``changed``), or the mark of a page the knowledge base
    never held (``new``). A page pending already keeps the state it had when it first was."""
    cols = ", ".join(BEFORE_COLUMNS)
    yield count(
        f"""INSERT INTO page_before (key, site, run_id, kind, {cols}, f_present,
              {", ".join(f"f_{f}" for f in _FIELDS)})
            SELECT p.key, p.site, ?, '{PENDING_CHANGED}', {", ".join(f"p.{c}" for c in BEFORE_COLUMNS)},
              CASE WHEN f.key IS NULL THEN 0 ELSE 1 END, {", ".join(f"f.{f}" for f in _FIELDS)}
            FROM pages p LEFT JOIN page_fields f ON f.key = p.key
            WHERE p.key {d.in_list("?")} AND p.pending IS NULL
            ON CONFLICT (key) DO NOTHING""",
        (run_id, d.list_param([key for key, _ in pages])),
    )
    # pages no row stands for: the knowledge base never held them
    yield from values(
        "INSERT INTO page_before (key, site, run_id, kind)",
        [(key, site, run_id, PENDING_NEW) for key, site in pages],
        " ON CONFLICT (key) DO NOTHING",
    )


def _restore_fields(key: str, site: str, before: Any) -> Work[None]:
    """Put a page's published field record back (none: drop it), with its block-set change."""
    cur = yield one("SELECT blocks FROM page_fields WHERE key = ?", (key,))
    now = bytes(cur[0] or b"") if cur is not None else b""
    if before is not None and before["f_present"]:
        old = bytes(before["f_blocks"] or b"")
        yield count(
            """INSERT INTO page_fields (key, title, headings, code, links, text, blocks)
               VALUES (?, ?, ?, ?, ?, ?, ?)
               ON CONFLICT (key) DO UPDATE SET title = excluded.title, headings = excluded.headings,
                 code = excluded.code, links = excluded.links, text = excluded.text,
                 blocks = excluded.blocks""",
            (key, *(before[f"f_{f}"] for f in _FIELDS)),
        )
    else:
        old = b""
        yield count("DELETE FROM page_fields WHERE key = ?", (key,))
    yield from _block_delta(site, now, old, None)


def _undo_runs_of(key_filter: str, params: dict[str, Any]) -> Work[None]:
    """What the site's unpublished runs did to the pages *key_filter* selects: chunk versions
    added are dropped, those retired come back, history rows and events go."""
    unpub = unpublished_runs(":site")
    yield count(f"DELETE FROM chunks WHERE {key_filter} AND added_run IN {unpub}", params)
    yield count(
        "UPDATE chunks SET retired_run = NULL, retired_why = 0 "
        f"WHERE {key_filter} AND retired_run IN {unpub}",
        params,
    )
    yield count(f"DELETE FROM page_changes WHERE {key_filter} AND run_id IN {unpub}", params)
    yield count(f"DELETE FROM outbox WHERE {key_filter} AND run_id IN {unpub}", params)


#: what a page that returns to its published state takes back from it (the rest, validators and
#: the time of the check, is the answer's)
_REVERTED = ("content_hash", "fuzzy_hash", "title", "last_changed", "changed_run", "noise_key")


def revert_page(key: str, site: str) -> Work[None]:
    """The page answers with its published state again (its row just written): undo what
    unpublished runs changed of it (chunks, field record, history, events) and take its published
    content columns back; it is pending no more."""
    before = yield one(
        f"SELECT f_present, {', '.join(f'f_{f}' for f in _FIELDS)}, {', '.join(_REVERTED)} "
        "FROM page_before WHERE key = ?",
        (key,),
    )
    if before is None:
        return
    yield from _undo_runs_of("key = :key", {"key": key, "site": site})
    yield from _restore_fields(key, site, before)
    yield count("DELETE FROM page_before WHERE key = ?", (key,))
    yield count(
        f"""UPDATE pages SET {", ".join(f"{c} = ?" for c in _REVERTED)}, pending = NULL,
              chunks = (SELECT COUNT(*) FROM chunks c WHERE c.key = pages.key AND c.retired_run IS NULL)
            WHERE key = ?""",
        (*(before[c] for c in _REVERTED), key),
    )


def publish_pending(site: str | None) -> Work[int]:
    """A publication covers the site's pending pages: their published state is now what they
    hold. Returns how many pages it covered."""
    n: int = yield count(
        "UPDATE pages SET pending = NULL WHERE site IS NOT DISTINCT FROM ? AND pending IS NOT NULL", (site,)
    )
    yield count("DELETE FROM page_before WHERE site IS NOT DISTINCT FROM ?", (site,))
    return n


#: pages put back per statement batch when a decision discards them
_BATCH = 500


def discard_pending(d: Dialect, site: str | None) -> Work[int]:
    """Put every pending page of the site back in its published state, as if the site's
    unpublished runs never ran: a stored page's row and field record come back (due for a check
    at once), a page the knowledge base never held is forgotten; chunk versions, history rows and
    events of those runs go. Returns how many pages were put back. Call it before the runs are
    marked discarded (it reads which runs are unpublished)."""
    params = {"site": site}
    restored = 0
    cols = list(BEFORE_COLUMNS)
    while True:
        batch = yield rows(
            f"""SELECT key, site, kind, f_present, {", ".join(f"f_{f}" for f in _FIELDS)}, {", ".join(cols)}
                FROM page_before WHERE site IS NOT DISTINCT FROM ? ORDER BY key LIMIT {_BATCH}""",
            (site,),
        )
        if not batch:
            break
        for r in batch:
            key = r["key"]
            yield from _restore_fields(key, r["site"], r)
            if r["kind"] == PENDING_NEW:
                yield count("DELETE FROM pages WHERE key = ?", (key,))
            else:
                sets = ", ".join(f"{c} = ?" for c in cols)
                # checked again at once: the next run sees what the discarded runs saw, or better
                yield count(
                    f"UPDATE pages SET {sets}, pending = NULL, next_check_at = NULL WHERE key = ?",
                    (*(r[c] for c in cols), key),
                )
        yield count(
            f"DELETE FROM page_before WHERE key {d.in_list('?')}", (d.list_param([r["key"] for r in batch]),)
        )
        restored += len(batch)
    # whatever the runs wrote (a run has one site): chunk versions, history rows and events
    yield from _undo_runs_of("1 = 1", params)
    yield count(
        """UPDATE pages SET chunks = (SELECT COUNT(*) FROM chunks c
              WHERE c.key = pages.key AND c.retired_run IS NULL)
            WHERE site IS NOT DISTINCT FROM :site AND chunks != (SELECT COUNT(*) FROM chunks c
              WHERE c.key = pages.key AND c.retired_run IS NULL)""",
        params,
    )
    return restored


def pending_counts(site: str | None) -> Work[dict[str, int]]:
    """The site's pending pages as the spike rule judges them: live pages the knowledge base
    does not hold (``new``, and of those ``moved_in``: pages a redirect brought), live pages whose
    content differs from what it shows (``changed``), and the live or quarantined pages it holds
    (``published``)."""
    row = yield one(
        f"""SELECT
              COUNT(*) FILTER (WHERE p.pending = '{PENDING_NEW}') AS new,
              COUNT(*) FILTER (WHERE p.pending = '{PENDING_CHANGED}'
                               AND p.content_hash IS DISTINCT FROM b.content_hash) AS changed
            FROM pages p LEFT JOIN page_before b ON b.key = p.key
            WHERE p.site IS NOT DISTINCT FROM ? AND p.pending IS NOT NULL AND p.status = ?""",
        (site, LIVE),
    )
    published = yield one(
        """SELECT COUNT(*) FROM pages WHERE site IS NOT DISTINCT FROM ? AND status IN ('live', 'quarantined')
             AND (pending IS NULL OR pending != 'new')""",
        (site,),
    )
    return {"new": int(row["new"]), "changed": int(row["changed"]), "published": int(published[0])}
