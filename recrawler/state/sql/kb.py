"""The knowledge-base role: embeddings, held runs and publication."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from recrawler.state.records import (
    RUN_DISCARDED,
    RUN_HELD,
    RUN_PUBLISHED,
)
from recrawler.state.sql.dialect import count, one, rows
from recrawler.state.sql.rows import _RETIRED_QUARANTINED, _ts
from recrawler.state.sql.visibility import WATERMARKS

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    from recrawler.state.sql.database import Database
    from recrawler.state.sql.dialect import Work


class SQLKnowledgeBaseWriter:
    """The knowledge-base role: embeddings, held runs and publication."""

    def __init__(self, db: Database) -> None:
        self.db = db

    @staticmethod
    def _held_ids() -> Work[list[int]]:
        found = yield rows("SELECT id FROM runs WHERE state IN (?, ?)", (RUN_HELD, RUN_DISCARDED))
        return [r[0] for r in found]

    async def missing_embeddings(
        self, embedder: str, limit: int, *, include_run: int | None = None, after: str = ""
    ) -> list[tuple[str, str]]:
        """Return up to *limit* distinct (text hash, text) of current chunks with no embedding,
        in text-hash order from *after* on (keyset pages: each call costs its page, not the table).

        Chunks of held runs are left out (nothing is paid for a held run) unless
        *include_run* names the held run being approved.
        """

        d = self.db.dialect

        def work() -> Work[list[tuple[str, str]]]:
            excluded = [r for r in (yield from self._held_ids()) if r != include_run]
            found = yield rows(
                f"""SELECT c.chunk_hash, MIN(c.text) AS text FROM chunks c{d.indexed_by("chunks_hash")}
                   WHERE c.chunk_hash > ? AND c.retired_run IS NULL
                     AND c.added_run {d.in_list("?", negate=True, sql_type="INTEGER")}
                     AND NOT EXISTS (SELECT 1 FROM embeddings e
                                     WHERE e.embedder = ? AND e.text_hash = c.chunk_hash)
                   GROUP BY c.chunk_hash ORDER BY c.chunk_hash LIMIT ?""",
                (after, d.list_param(excluded), embedder, limit),
            )
            return [(r[0], r[1]) for r in found]

        return await self.db.run(work())

    async def count_missing(self, embedder: str) -> int:
        """How many distinct current chunk texts (held runs aside) have no embedding."""

        d = self.db.dialect

        def work() -> Work[int]:
            held = yield from self._held_ids()
            row = yield one(
                f"""SELECT COUNT(DISTINCT c.chunk_hash) FROM chunks c
                   WHERE c.retired_run IS NULL
                     AND c.added_run {d.in_list("?", negate=True, sql_type="INTEGER")}
                     AND NOT EXISTS (SELECT 1 FROM embeddings e
                                     WHERE e.embedder = ? AND e.text_hash = c.chunk_hash)""",
                (d.list_param(held), embedder),
            )
            return int(row[0])

        return await self.db.run(work())

    async def missing_for(self, embedder: str, hashes: Sequence[str]) -> list[str]:
        """Those of *hashes* with no embedding for *embedder*, in the given order."""

        d = self.db.dialect

        def work() -> Work[list[str]]:
            found = yield rows(
                f"SELECT text_hash FROM embeddings WHERE embedder = ? AND text_hash {d.in_list('?')}",
                (embedder, d.list_param(hashes)),
            )
            have = {r[0] for r in found}
            return [h for h in hashes if h not in have]

        return await self.db.run(work())

    async def store_embeddings(self, rows: Sequence[tuple[str, str, bytes]]) -> None:
        """Add (embedder, text hash, vector) rows to the cache and commit them (a paid cache)."""

        await self.db.transaction(self.db.embeddings_work(rows))

    async def run_index_counts(self, run_id: int, embedder: str) -> dict[str, int]:
        """Chunks a run added and retired, and how many of its distinct texts are already embedded."""

        def work() -> Work[dict[str, int]]:
            added = yield one("SELECT COUNT(*) FROM chunks WHERE added_run = ?", (run_id,))
            retired = yield one("SELECT COUNT(*) FROM chunks WHERE retired_run = ?", (run_id,))
            cached = yield one(
                """SELECT COUNT(DISTINCT c.chunk_hash) FROM chunks c
                   JOIN embeddings e ON e.embedder = ? AND e.text_hash = c.chunk_hash
                   WHERE c.added_run = ?""",
                (embedder, run_id),
            )
            return {
                "chunks_added": int(added[0]),
                "chunks_retired": int(retired[0]),
                "texts_cached": int(cached[0]),
            }

        return await self.db.run(work())

    async def set_run_state(self, run_id: int, state: str) -> None:
        """Mark a run running / finished / held (held runs stay invisible to search)."""

        await self.db.transaction(self._set_state(run_id, state))

    @staticmethod
    def _set_state(run_id: int, state: str) -> Work[None]:
        yield count("UPDATE runs SET state = ? WHERE id = ?", (state, run_id))

    async def publish(self, run_id: int, at: datetime) -> dict[str, int]:
        """Make a run's changes visible to search in one statement, then drop what no one can see.

        Returns counts of chunk rows and embeddings garbage-collected.
        """

        def work() -> Work[dict[str, int]]:
            yield count(
                "UPDATE runs SET state = ?, published_at = COALESCE(published_at, ?) WHERE id = ?",
                (RUN_PUBLISHED, _ts(at), run_id),
            )
            return (yield from gc_chunks())

        return await self.db.transaction(work())

    async def run_info(self, run_id: int) -> dict[str, Any] | None:
        """Return a run's row (id, state, embedder, site, counts) or None."""

        def work() -> Work[dict[str, Any] | None]:
            row = yield one(
                "SELECT id, spider, site, state, embedder, started_at, finished_at, published_at, counts "
                "FROM runs WHERE id = ?",
                (run_id,),
            )
            return dict(row) if row is not None else None

        return await self.db.run(work())


def gc_chunks() -> Work[dict[str, int]]:
    """Drop the chunk rows no one can see any more (in the publishing transaction)."""
    # rows retired by a run at or before its site's last published run are invisible for good
    # (another site's publication leaves them alone); quarantine-kept rows stay
    n = yield count(
        f"""DELETE FROM chunks
           WHERE retired_run IN (
             SELECT r.id FROM runs r JOIN ({WATERMARKS}) w ON w.site = COALESCE(r.site, '')
             WHERE r.id <= w.p AND r.state NOT IN ('held', 'discarded'))
             AND (retired_why != :why
                  -- rows a quarantine kept, once their page is no longer quarantined
                  OR key NOT IN (SELECT key FROM pages WHERE status = 'quarantined'))""",
        {"why": _RETIRED_QUARANTINED},
    )
    # Embeddings stay in the cache (keyed by text hash; they hold no text): a replaced version
    # that comes back, a moved page's text under its new key and a removed page that returns
    # with the content it had cost no embedding.
    return {"chunks_deleted": n}
