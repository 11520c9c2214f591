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
import json
import zlib
from typing import TYPE_CHECKING, Any

from recrawler.exceptions import ConfigurationError
from recrawler.kb.records import ChangeBatch, ChunkRow, PageChange, Slice
from recrawler.state.sql.visibility import published_pages, visible_from, visible_where

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["ChangeBatch", "PageChange", "decode_cursor", "encode_cursor", "read_changes"]

# the first published run of the chunk's site at or after the run that added it: the run that
# made it visible (c_ra: the adding run, joined by visible_from)
_MADE_VISIBLE = """(SELECT MIN(pub.id) FROM runs pub WHERE pub.state = 'published'
                     AND COALESCE(pub.site, '') = COALESCE(c_ra.site, '') AND pub.id >= c.added_run)"""


def encode_cursor(since: int, upto: int | None, after: str) -> str:
    """An opaque, URL-safe cursor."""
    raw = json.dumps({"since": since, "upto": upto, "after": after}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[int, int | None, str]:
    """(since, upto, after) of a cursor :func:`encode_cursor` made."""
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        return (
            int(data["since"]),
            (int(data["upto"]) if data["upto"] is not None else None),
            str(data["after"]),
        )
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise ConfigurationError(f"not a changes cursor: {cursor!r}") from exc


def read_changes(
    query: Callable[[str, dict[str, Any]], Sequence[Any]],
    *,
    since: int | None = None,
    cursor: str | None = None,
    limit: int = 100,
    key: str | None = None,
    scope: Slice | None = None,
) -> ChangeBatch:
    """The pages that published runs after *since* changed, by page key, *limit* at a time (only
    pages of *scope*'s version and language when it names them).

    What it reads: ``runs`` (``state = 'published'``: which runs count, and per site which one
    made a chunk row visible), ``chunks`` (rows the bot sees, by :mod:`recrawler.state.sql.visibility`,
    whose ``added_run`` was made visible after *since*: new and changed pages, with their
    chunks), ``pages`` (status ``gone``, ``moved`` or ``quarantined`` set by a run made visible
    after *since*, through ``last_seen_run``; title, URL, ``first_seen``, ``content_hash``) and
    ``page_fields`` (the page's text, when it is the published version). This is the one place
    that reads them: a per-run log of what each published run did to each page replaces them here.
    """
    if cursor:
        since, upto, after = decode_cursor(cursor)
    else:
        if since is None:
            raise ConfigurationError("changes: give since (a run id; 0: everything) or a cursor")
        upto, after = None, ""
    if upto is None:
        upto = int(query("SELECT COALESCE(MAX(id), 0) AS p FROM runs WHERE state = 'published'", {})[0]["p"])
    params: dict[str, Any] = {"since": since, "after": after, "limit": limit + 1, "key": key}
    scope = scope or Slice()
    chunk_slice, slice_params = scope.where_named("c")
    page_slice, _ = scope.where_named("p")
    params.update(slice_params)
    one_key = " AND c.key = :key" if key is not None else ""
    changed = query(
        f"""SELECT c.key, MAX({_MADE_VISIBLE}) AS run_id FROM chunks c {visible_from("c")}
            WHERE {visible_where("c")} AND c.key > :after{one_key}{chunk_slice} AND {_MADE_VISIBLE} > :since
            GROUP BY c.key ORDER BY c.key LIMIT :limit""",
        params,
    )
    one_page = " AND p.key = :key" if key is not None else ""
    one_page += page_slice
    removed = query(
        f"""SELECT p.key, p.status, p.moved_to, r.id AS seen
            FROM {published_pages()} p JOIN runs r ON r.id = p.last_seen_run
            WHERE p.status IN ('gone', 'moved', 'quarantined') AND p.key > :after{one_page}
              AND (SELECT MIN(pub.id) FROM runs pub WHERE pub.state = 'published'
                   AND COALESCE(pub.site, '') = COALESCE(r.site, '') AND pub.id >= r.id) > :since
            ORDER BY p.key LIMIT :limit""",
        params,
    )
    found: dict[str, tuple[int, str | None, str | None]] = {}
    for r in changed:
        found[r["key"]] = (int(r["run_id"]), None, None)
    for r in removed:
        run = query(
            """SELECT MIN(pub.id) AS p FROM runs pub JOIN runs r ON r.id = :seen
               WHERE pub.state = 'published' AND COALESCE(pub.site, '') = COALESCE(r.site, '')
                 AND pub.id >= r.id""",
            {"seen": r["seen"]},
        )[0]["p"]
        found.setdefault(r["key"], (int(run), r["status"], r["moved_to"]))
    keys = sorted(found)[:limit]
    more = len(found) > limit
    # a page first seen after run `since` ended is new to a reader that is up to date with it
    ended = query(
        "SELECT COALESCE(finished_at, started_at) AS at FROM runs WHERE id = :since", {"since": since}
    )
    started = ended[0]["at"] if ended else None
    changes = [_page_change(query, k, *found[k], started) for k in keys]
    if more:
        return ChangeBatch(
            changes=changes, cursor=encode_cursor(since, upto, keys[-1]), upto=upto, done=False
        )
    return ChangeBatch(changes=changes, cursor=encode_cursor(upto, None, ""), upto=upto, done=True)


def _page_change(
    query: Callable[[str, dict[str, Any]], Sequence[Any]],
    key: str,
    run_id: int,
    removed: str | None,
    moved_to: str | None,
    since_started: str | None,
) -> PageChange:
    page = query(
        f"SELECT url, title, status, content_hash, first_seen FROM {published_pages()} p WHERE key = :key",
        {"key": key},
    )
    p = page[0] if page else None
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
        for r in query(
            f"""SELECT c.key, c.url, c.chunk_index, c.heading, c.text, c.chunk_hash, c.version, c.lang,
                  c.added_run
                FROM chunks c {visible_from("c")} WHERE c.key = :key AND {visible_where("c")}
                ORDER BY c.chunk_index""",
            {"key": key},
        )
    )
    # the stored text is the page's last write: the published version only when no later run
    # (held, or still running) replaced the page's chunks
    newer = query(
        f"""SELECT 1 AS x FROM chunks c WHERE c.key = :key AND c.retired_run IS NULL
              AND c.added_run > (SELECT MAX(v.added_run) FROM chunks v {visible_from("v")}
                                 WHERE v.key = :key AND {visible_where("v")})""",
        {"key": key},
    )
    text = None
    if not newer:
        stored = query("SELECT text FROM page_fields WHERE key = :key", {"key": key})
        if stored and stored[0]["text"]:
            text = zlib.decompress(bytes(stored[0]["text"])).decode("utf-8")
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
