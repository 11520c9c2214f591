"""The rows the changes feed reads (``recrawler.kb.changes`` turns them into pages and cursors).

What it reads: ``runs`` (``state = 'published'``: which runs count, and per site which one made a
chunk row visible), ``chunks`` (rows the bot sees, by :mod:`recrawler.state.sql.visibility`,
whose ``added_run`` was made visible after a run: new and changed pages, with their chunks),
``pages`` (status ``gone``, ``moved`` or ``quarantined`` set by a run made visible after it,
through ``last_seen_run``; title, URL, ``first_seen``, ``content_hash``) and ``page_fields`` (the
page's text). This is the one place that reads them for the feed.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, Any

from recrawler.state.sql.visibility import published_pages, visible_from, visible_where

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from recrawler.state.slices import Slice

    Query = Callable[[str, dict[str, Any]], Sequence[Any]]

__all__ = ["ChangeReads"]

# the first published run of the chunk's site at or after the run that added it: the run that
# made it visible (c_ra: the adding run, joined by visible_from)
_MADE_VISIBLE = """(SELECT MIN(pub.id) FROM runs pub WHERE pub.state = 'published'
                     AND COALESCE(pub.site, '') = COALESCE(c_ra.site, '') AND pub.id >= c.added_run)"""


class ChangeReads:
    """The changes feed's queries over one snapshot; *query* runs a statement with ``:name``
    parameters (a backend's reader translates them) and returns its rows, readable by name."""

    def __init__(self, query: Query) -> None:
        self.query = query

    def identity(self) -> str:
        """What tells this database from another: its first run (id and start, to the
        microsecond); empty before any run. Runs are never deleted: it holds for the database's life."""
        rows = self.query("SELECT id, started_at FROM runs ORDER BY id LIMIT 1", {})
        return f"{rows[0]['id']}|{rows[0]['started_at']}" if rows else ""

    def last_run(self) -> int:
        """The last run's id, in any state (0: none)."""
        return int(self.query("SELECT COALESCE(MAX(id), 0) AS p FROM runs", {})[0]["p"])

    def last_published(self) -> int:
        """The last published run's id (0: none)."""
        return int(
            self.query("SELECT COALESCE(MAX(id), 0) AS p FROM runs WHERE state = 'published'", {})[0]["p"]
        )

    def published_before(self, stamp: str) -> int:
        """The last run published at or before the ISO time *stamp* (0: none)."""
        rows = self.query(
            "SELECT COALESCE(MAX(id), 0) AS p FROM runs WHERE state = 'published' AND published_at <= :at",
            {"at": stamp},
        )
        return int(rows[0]["p"])

    def changed(
        self, *, since: int, after: str, limit: int, key: str | None, scope: Slice
    ) -> tuple[list[Any], list[Any]]:
        """The pages after key *after* (at most *limit* of each) whose visible chunks a run made
        visible after *since* (rows of key and run_id), and those a run made visible after *since*
        set gone, moved or quarantined (rows of key, status, moved_to and seen: the run)."""
        params: dict[str, Any] = {"since": since, "after": after, "limit": limit, "key": key}
        chunk_slice, slice_params = scope.where_named("c")
        page_slice, _ = scope.where_named("p")
        params.update(slice_params)
        one_key = " AND c.key = :key" if key is not None else ""
        changed = self.query(
            f"""SELECT c.key, MAX({_MADE_VISIBLE}) AS run_id FROM chunks c {visible_from("c")}
                WHERE {visible_where("c")} AND c.key > :after{one_key}{chunk_slice}
                  AND {_MADE_VISIBLE} > :since
                GROUP BY c.key ORDER BY c.key LIMIT :limit""",
            params,
        )
        one_page = " AND p.key = :key" if key is not None else ""
        one_page += page_slice
        removed = self.query(
            f"""SELECT p.key, p.status, p.moved_to, r.id AS seen
                FROM {published_pages()} p JOIN runs r ON r.id = p.last_seen_run
                WHERE p.status IN ('gone', 'moved', 'quarantined') AND p.key > :after{one_page}
                  AND (SELECT MIN(pub.id) FROM runs pub WHERE pub.state = 'published'
                       AND COALESCE(pub.site, '') = COALESCE(r.site, '') AND pub.id >= r.id) > :since
                ORDER BY p.key LIMIT :limit""",
            params,
        )
        return list(changed), list(removed)

    def made_visible(self, seen: int) -> int:
        """The published run that made run *seen*'s writes visible (its site's first at or after it)."""
        return int(
            self.query(
                """SELECT MIN(pub.id) AS p FROM runs pub JOIN runs r ON r.id = :seen
                   WHERE pub.state = 'published' AND COALESCE(pub.site, '') = COALESCE(r.site, '')
                     AND pub.id >= r.id""",
                {"seen": seen},
            )[0]["p"]
        )

    def run_end(self, run: int) -> str | None:
        """When run *run* ended (or started, while it runs); None: no such run."""
        ended = self.query(
            "SELECT COALESCE(finished_at, started_at) AS at FROM runs WHERE id = :since", {"since": run}
        )
        return ended[0]["at"] if ended else None

    def page(self, key: str) -> Any | None:
        """The published page's url, title, status, content_hash and first_seen (None: none)."""
        page = self.query(
            f"SELECT url, title, status, content_hash, first_seen FROM {published_pages()} p "
            "WHERE key = :key",
            {"key": key},
        )
        return page[0] if page else None

    def page_chunks(self, key: str) -> list[Any]:
        """The page's visible chunk rows, by position."""
        return list(
            self.query(
                f"""SELECT c.key, c.url, c.chunk_index, c.heading, c.text, c.chunk_hash, c.version, c.lang,
                      c.added_run
                    FROM chunks c {visible_from("c")} WHERE c.key = :key AND {visible_where("c")}
                    ORDER BY c.chunk_index""",
                {"key": key},
            )
        )

    def replaced(self, key: str) -> bool:
        """Whether a later run (held, or still running) replaced the page's visible chunks."""
        newer = self.query(
            f"""SELECT 1 AS x FROM chunks c WHERE c.key = :key AND c.retired_run IS NULL
                  AND c.added_run > (SELECT MAX(v.added_run) FROM chunks v {visible_from("v")}
                                     WHERE v.key = :key AND {visible_where("v")})""",
            {"key": key},
        )
        return bool(newer)

    def page_text(self, key: str) -> str | None:
        """The page's stored text (its last write; None: none stored)."""
        stored = self.query("SELECT text FROM page_fields WHERE key = :key", {"key": key})
        if stored and stored[0]["text"]:
            return zlib.decompress(bytes(stored[0]["text"])).decode("utf-8")
        return None
