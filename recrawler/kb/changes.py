"""What the published runs after a given run did to the knowledge base, page by page, for an indexer
of your own (``recrawler changes``, ``open_kb(uri).changes()``).

One reader, :func:`read_changes`, decides what changed: the chunk rows the bot sees, and the pages
table for the pages that left the knowledge base. A published run ``R`` "did" what became visible
when it published: chunk rows of its site's runs since the site's previous publication (a run left
unpublished is published by the site's next run), and the removals those runs applied. A page
that changed twice appears once, as it is now. Delivery is at-least-once: a change published
while a listing is paged through may appear again in the next one, and a removal is repeated
while the page stays listed and missing (deleting what an index no longer holds is a no-op).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from recrawler.exceptions import ConfigurationError
from recrawler.kb.records import ChangeBatch, ChunkRow, PageChange, Slice

if TYPE_CHECKING:
    from recrawler.state import ChangeReads

__all__ = [
    "ChangeBatch",
    "PageChange",
    "database_identity",
    "decode_cursor",
    "encode_cursor",
    "read_changes",
]


#: what a cursor is refused for, and what to do instead
_RESTART = "start again with --since RUN (0: everything published)"


def database_identity(rows: ChangeReads) -> str:
    """What tells this database from another: its first run (id and start, to the microsecond);
    empty before any run. Runs are never deleted: it holds for the database's life."""
    return rows.identity()


def _tag(identity: str, payload: str) -> str:
    return hmac.new(identity.encode(), payload.encode(), hashlib.sha256).hexdigest()[:16]


def encode_cursor(since: int, upto: int | None, after: str, identity: str = "") -> str:
    """An opaque, URL-safe cursor, signed with the database's identity (:func:`database_identity`)."""
    payload = json.dumps({"since": since, "upto": upto, "after": after}, separators=(",", ":"))
    raw = json.dumps({"p": payload, "db": _tag(identity, payload)}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, identity: str = "") -> tuple[int, int | None, str]:
    """(since, upto, after) of a cursor :func:`encode_cursor` made for the database of *identity*;
    any other (another database's, edited, cut short, from an older recrawler) is one
    ConfigurationError line: it could skip the runs after it without a word."""
    try:
        wrapper = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        payload = str(wrapper["p"])
        signed = hmac.compare_digest(str(wrapper["db"]), _tag(identity, payload))
        data = json.loads(payload)
        since, after = int(data["since"]), str(data["after"])
        upto = int(data["upto"]) if data["upto"] is not None else None
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error, UnicodeDecodeError):
        shown = cursor if len(cursor) <= 40 else cursor[:40] + "..."
        raise ConfigurationError(f"not a changes cursor: {shown!r}; {_RESTART}") from None
    # the cursor of "everything published" skips nothing, whichever database made it (one made
    # before the database's first run has no identity to be signed with)
    if not signed and (since, upto, after) != (0, None, ""):
        msg = f"this changes cursor was made for another database (or edited); {_RESTART}"
        raise ConfigurationError(msg)
    return since, upto, after


def _published_before(rows: ChangeReads, at: datetime) -> int:
    """The last run published at or before *at* (0: none): changes "since a time" are those the
    runs published after it made."""
    return rows.published_before(at.astimezone(UTC).isoformat())


def read_changes(
    rows: ChangeReads,
    *,
    since: int | datetime | None = None,
    cursor: str | None = None,
    limit: int = 100,
    key: str | None = None,
    scope: Slice | None = None,
) -> ChangeBatch:
    """The pages that published runs after *since* changed, by page key, *limit* at a time (only
    pages of *scope*'s version and language when it names them).

    *since* is a run id (0: everything published) or a time (the runs published after it). A
    cursor resumes where a call stopped; it is bound to this database and refused elsewhere.

    What it reads: :class:`recrawler.state.ChangeReads` (the published runs, the visible chunks,
    the pages set gone, moved or quarantined, the pages' text).
    """
    if limit < 1:
        raise ConfigurationError(f"changes: --limit must be 1 or more, got {limit}")
    identity = database_identity(rows)
    last = rows.last_run()
    if cursor:
        since, upto, after = decode_cursor(cursor, identity)
        if since > last or (upto is not None and upto > last):
            named = max(since, upto or 0)
            msg = f"this changes cursor names run {named}, past this database's last ({last}); {_RESTART}"
            raise ConfigurationError(msg)
    else:
        if since is None:
            raise ConfigurationError("changes: give since (a run id; 0: everything) or a cursor")
        if isinstance(since, datetime):
            since = _published_before(rows, since)
        if since < 0 or since > last:
            raise ConfigurationError(f"changes: no run {since} in this database (its last is {last})")
        upto, after = None, ""
    if upto is None:
        upto = rows.last_published()
    changed, removed = rows.changed(
        since=since, after=after, limit=limit + 1, key=key, scope=scope or Slice()
    )
    found: dict[str, tuple[int, str | None, str | None]] = {}
    for r in changed:
        found[r["key"]] = (int(r["run_id"]), None, None)
    for r in removed:
        found.setdefault(r["key"], (rows.made_visible(r["seen"]), r["status"], r["moved_to"]))
    keys = sorted(found)[:limit]
    more = len(found) > limit
    # a page first seen after run `since` ended is new to a reader that is up to date with it
    started = rows.run_end(since)
    changes = [_page_change(rows, k, *found[k], started) for k in keys]
    if more:
        return ChangeBatch(
            changes=changes,
            cursor=encode_cursor(since, upto, keys[-1], identity),
            upto=upto,
            done=False,
            since=since,
        )
    return ChangeBatch(
        changes=changes, cursor=encode_cursor(upto, None, "", identity), upto=upto, done=True, since=since
    )


def _page_change(
    rows: ChangeReads,
    key: str,
    run_id: int,
    removed: str | None,
    moved_to: str | None,
    since_started: str | None,
) -> PageChange:
    p = rows.page(key)
    url = p["url"] if p is not None else key
    if removed is not None:
        return PageChange(
            key=key,
            url=url,
            action=removed,
            run_id=run_id,
            status=removed,
            title=p["title"] if p is not None else None,
            content_hash=p["content_hash"] if p is not None else None,
            text=None,
            moved_to=moved_to,
        )
    chunks = tuple(
        ChunkRow(
            key=r["key"],
            url=r["url"],
            chunk_index=r["chunk_index"],
            heading=r["heading"],
            text=r["text"],
            chunk_hash=r["chunk_hash"],
            version=r["version"],
            lang=r["lang"],
        )
        for r in rows.page_chunks(key)
    )
    # the stored text is the page's last write: the published version only when no later run
    # (held, or still running) replaced the page's chunks
    newer = rows.replaced(key)
    text = None if newer else rows.page_text(key)
    if text is None:
        text = "\n\n".join(c.text for c in chunks)
    new = since_started is None or (p is not None and p["first_seen"] > since_started)
    return PageChange(
        key=key,
        url=url,
        action="new" if new else "changed",
        run_id=run_id,
        status=p["status"] if p is not None else "live",
        title=p["title"] if p is not None else None,
        content_hash=p["content_hash"] if p is not None and not newer else None,
        text=text,
        chunks=chunks,
    )
