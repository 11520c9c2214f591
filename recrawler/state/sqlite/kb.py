"""The knowledge-base role on SQLite: embeddings, held runs and publication."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from recrawler.exceptions import StateStoreError
from recrawler.state.records import (
    RUN_DISCARDED,
    RUN_HELD,
    RUN_PUBLISHED,
)
from recrawler.state.sqlite.rows import _RETIRED_QUARANTINED, _ts

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Sequence
    from datetime import datetime

    from recrawler.state.sqlite.database import SQLiteDatabase


class SQLiteKnowledgeBaseWriter:
    """The knowledge-base role on SQLite: embeddings, held runs and publication."""

    def __init__(self, db: SQLiteDatabase) -> None:
        self.db = db

    def _held_ids(self, conn: sqlite3.Connection) -> list[int]:
        return [
            r[0] for r in conn.execute("SELECT id FROM runs WHERE state IN (?, ?)", (RUN_HELD, RUN_DISCARDED))
        ]

    async def missing_embeddings(
        self, embedder: str, limit: int, *, include_run: int | None = None, after: str = ""
    ) -> list[tuple[str, str]]:
        """Return up to *limit* distinct (text hash, text) of current chunks with no embedding,
        in text-hash order from *after* on (keyset pages: each call costs its page, not the table).

        Chunks of held runs are left out (nothing is paid for a held run) unless
        *include_run* names the held run being approved.
        """

        def work() -> list[tuple[str, str]]:
            conn = self.db.conn
            excluded = [r for r in self._held_ids(conn) if r != include_run]
            rows = conn.execute(
                """SELECT c.chunk_hash, MIN(c.text) AS text FROM chunks c INDEXED BY chunks_hash
                   WHERE c.chunk_hash > ? AND c.retired_run IS NULL
                     AND c.added_run NOT IN (SELECT value FROM json_each(?))
                     AND NOT EXISTS (SELECT 1 FROM embeddings e
                                     WHERE e.embedder = ? AND e.text_hash = c.chunk_hash)
                   GROUP BY c.chunk_hash ORDER BY c.chunk_hash LIMIT ?""",
                (after, json.dumps(excluded), embedder, limit),
            ).fetchall()
            return [(r[0], r[1]) for r in rows]

        return await self.db._call(self.db._guard, work)

    async def count_missing(self, embedder: str) -> int:
        """How many distinct current chunk texts (held runs aside) have no embedding."""

        def work() -> int:
            conn = self.db.conn
            row = conn.execute(
                """SELECT COUNT(DISTINCT c.chunk_hash) FROM chunks c
                   WHERE c.retired_run IS NULL
                     AND c.added_run NOT IN (SELECT value FROM json_each(?))
                     AND NOT EXISTS (SELECT 1 FROM embeddings e
                                     WHERE e.embedder = ? AND e.text_hash = c.chunk_hash)""",
                (json.dumps(self._held_ids(conn)), embedder),
            ).fetchone()
            return int(row[0])

        return await self.db._call(self.db._guard, work)

    async def missing_for(self, embedder: str, hashes: Sequence[str]) -> list[str]:
        """Those of *hashes* with no embedding for *embedder*, in the given order."""

        def work() -> list[str]:
            have = {
                r[0]
                for r in self.db.conn.execute(
                    "SELECT text_hash FROM embeddings WHERE embedder = ? "
                    "AND text_hash IN (SELECT value FROM json_each(?))",
                    (embedder, json.dumps(list(hashes))),
                )
            }
            return [h for h in hashes if h not in have]

        return await self.db._call(self.db._guard, work)

    async def store_embeddings(self, rows: Sequence[tuple[str, str, bytes]]) -> None:
        """Add (embedder, text hash, vector) rows to the cache and commit them (a paid cache)."""

        def work() -> None:
            self.db._begin()
            self.db.conn.executemany(
                "INSERT OR IGNORE INTO embeddings (embedder, text_hash, vector) VALUES (?, ?, ?)", rows
            )
            self.db._commit()

        await self.db._call(self.db._guard, work)

    async def run_index_counts(self, run_id: int, embedder: str) -> dict[str, int]:
        """Chunks a run added and retired, and how many of its texts are already embedded."""

        def work() -> dict[str, int]:
            conn = self.db.conn
            added = conn.execute("SELECT COUNT(*) FROM chunks WHERE added_run = ?", (run_id,)).fetchone()[0]
            retired = conn.execute("SELECT COUNT(*) FROM chunks WHERE retired_run = ?", (run_id,)).fetchone()[
                0
            ]
            texts = conn.execute(
                "SELECT COUNT(DISTINCT chunk_hash) FROM chunks WHERE added_run = ?", (run_id,)
            ).fetchone()[0]
            cached = conn.execute(
                """SELECT COUNT(DISTINCT c.chunk_hash) FROM chunks c
                   JOIN embeddings e ON e.embedder = ? AND e.text_hash = c.chunk_hash
                   WHERE c.added_run = ?""",
                (embedder, run_id),
            ).fetchone()[0]
            return {"chunks_added": added, "chunks_retired": retired, "texts": texts, "texts_cached": cached}

        return await self.db._call(self.db._guard, work)

    async def set_run_state(self, run_id: int, state: str) -> None:
        """Mark a run running / finished / held (held runs stay invisible to search)."""

        def work() -> None:
            self.db._begin()
            self.db.conn.execute("UPDATE runs SET state = ? WHERE id = ?", (state, run_id))
            self.db._commit()

        await self.db._call(self.db._guard, work)

    async def publish(self, run_id: int, at: datetime) -> dict[str, int]:
        """Make a run's changes visible to search in one statement, then drop what no one can see.

        Returns counts of chunk rows and embeddings garbage-collected.
        """

        def work() -> dict[str, int]:
            conn = self.db.conn
            self.db._commit()
            self.db._begin()
            conn.execute(
                "UPDATE runs SET state = ?, published_at = COALESCE(published_at, ?) WHERE id = ?",
                (RUN_PUBLISHED, _ts(at), run_id),
            )
            result = self._gc(conn)
            self.db._commit()
            return result

        return await self.db._call(self.db._guard, work)

    def _gc(self, conn: sqlite3.Connection) -> dict[str, int]:
        watermark = conn.execute(
            "SELECT COALESCE(MAX(id), 0) FROM runs WHERE state = ?", (RUN_PUBLISHED,)
        ).fetchone()[0]
        held = json.dumps(self._held_ids(conn))
        # rows retired by a published run are invisible for good; quarantine-kept rows stay
        n = conn.execute(
            """DELETE FROM chunks
               WHERE retired_run IS NOT NULL AND retired_run <= ?1
                 AND retired_run NOT IN (SELECT value FROM json_each(?3))
                 AND (retired_why != ?2
                      -- rows a quarantine kept, once their page is no longer quarantined
                      OR key NOT IN (SELECT key FROM pages WHERE status = 'quarantined'))""",
            (watermark, _RETIRED_QUARANTINED, held),
        ).rowcount
        # Embeddings stay in the cache (keyed by text hash; they hold no text): a replaced version
        # that comes back, a moved page's text under its new key and a removed page that returns
        # with the content it had cost no embedding.
        return {"chunks_deleted": n}

    async def discard(self, run_id: int) -> dict[str, int]:
        """Drop a held run's knowledge-base changes; its pages are checked again next run."""

        def work() -> dict[str, int]:
            conn = self.db.conn
            row = conn.execute("SELECT state FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                raise StateStoreError(f"no run {run_id} in {self.db.path!r}")
            if row[0] != RUN_HELD:
                raise StateStoreError(f"run {run_id} is {row[0]}, not held: only held runs can be discarded")
            self.db._commit()
            self.db._begin()
            later = "NOT EXISTS (SELECT 1 FROM chunks c2 WHERE c2.key = chunks.key AND c2.added_run > :run)"
            touched = [
                r[0]
                for r in conn.execute(
                    f"""SELECT DISTINCT key FROM chunks
                        WHERE (added_run = :run OR retired_run = :run) AND {later}""",
                    {"run": run_id},
                )
            ]
            dropped = conn.execute("DELETE FROM chunks WHERE added_run = ?", (run_id,)).rowcount
            conn.execute(
                f"UPDATE chunks SET retired_run = NULL, retired_why = 0 WHERE retired_run = :run AND {later}",
                {"run": run_id},
            )
            # pages the run saw first have no rows left: forget them, so the next run finds them new;
            # the others lose hash and validators, so the next run fetches and re-indexes them
            conn.executemany(
                "DELETE FROM pages WHERE key = ?1 AND NOT EXISTS (SELECT 1 FROM chunks WHERE key = ?1)",
                [(k,) for k in touched],
            )
            conn.executemany(
                """UPDATE pages SET content_hash = NULL, fuzzy_hash = NULL, etag = NULL,
                     last_modified = NULL, status = 'live', misses = 0,
                     chunks = (SELECT COUNT(*) FROM chunks c WHERE c.key = ?1 AND c.retired_run IS NULL)
                   WHERE key = ?1""",
                [(k,) for k in touched],
            )
            # checked again next run: due now, whatever their schedule said
            conn.executemany("UPDATE pages SET next_check_at = NULL WHERE key = ?", [(k,) for k in touched])
            # removals a mass-removal hold kept for approval are dropped with the run
            conn.execute("DELETE FROM run_misses WHERE run_id = ?", (run_id,))
            conn.execute("UPDATE runs SET state = ? WHERE id = ?", (RUN_DISCARDED, run_id))
            self.db._commit()
            return {"pages": len(touched), "chunks_dropped": dropped}

        return await self.db._call(self.db._guard, work)

    async def run_info(self, run_id: int) -> dict[str, Any] | None:
        """Return a run's row (id, state, embedder, site, counts) or None."""

        def work() -> dict[str, Any] | None:
            row = self.db.conn.execute(
                "SELECT id, spider, site, state, embedder, started_at, finished_at, published_at, counts "
                "FROM runs WHERE id = ?",
                (run_id,),
            ).fetchone()
            return dict(row) if row is not None else None

        return await self.db._call(self.db._guard, work)
