"""The history role: field records, learned regions and boilerplate block pairs."""

from __future__ import annotations

import json
import zlib
from typing import TYPE_CHECKING

from recrawler.state.records import (
    LIVE,
    FieldsRow,
    Run,
    unpack_blocks,
)
from recrawler.state.sql.database import block_model
from recrawler.state.sql.dialect import count, one, rows
from recrawler.state.sql.rows import (
    _RETIRED_REPLACED,
    FOLD_BATCH,
    _boilerplate_pairs,
    _fold_block_deltas,
    _rehash,
    _ts,
)

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    from recrawler.state.sql.database import Database
    from recrawler.state.sql.dialect import Work


class SQLHistory:
    """The history role: field records, learned regions and boilerplate block pairs."""

    def __init__(self, db: Database) -> None:
        self.db = db
        #: pairs a boilerplate update switched off, per site (changes they explain are taken back)
        self._flipped_off: dict[str, set[tuple[int, int]]] = {}
        #: pairs a boilerplate update switched on, per site (new furniture: see the take-back)
        self._flipped_on: dict[str, set[tuple[int, int]]] = {}

    async def get_fields(self, key: str) -> FieldsRow | None:
        """The page's stored field-level record, or None."""

        def work() -> Work[FieldsRow | None]:
            row = yield one(
                "SELECT title, headings, code, links, text, blocks FROM page_fields WHERE key = ?", (key,)
            )
            if row is None:
                return None
            return FieldsRow(
                title=row["title"] or "",
                headings=json.loads(row["headings"] or "[]"),
                code=json.loads(row["code"] or "[]"),
                links=json.loads(row["links"] or "[]"),
                text=zlib.decompress(row["text"]).decode("utf-8") if row["text"] else "",
                blocks=bytes(row["blocks"] or b""),
            )

        return await self.db.run(work())

    async def load_regions(self) -> dict[str, list[str]]:
        """Every site's learned volatile regions (CSS selectors); a small table."""

        def work() -> Work[dict[str, list[str]]]:
            out: dict[str, list[str]] = {}
            for r in (yield rows("SELECT site, selector FROM site_regions ORDER BY site, selector")):
                out.setdefault(r[0], []).append(r[1])
            return out

        return await self.db.run(work())

    async def add_regions(
        self, site: str, selectors: Sequence[str], *, source: str, learned_from: str, at: datetime
    ) -> int:
        """Learn volatile regions for *site*; returns how many are new."""

        d = self.db.dialect

        def work() -> Work[int]:
            known = yield rows(
                f"SELECT selector FROM site_regions WHERE site = ? AND selector {d.in_list('?')}",
                (site, d.list_param(selectors)),
            )
            new = set(selectors) - {r[0] for r in known}
            for sel in selectors:
                yield count(
                    """INSERT INTO site_regions (site, selector, source, learned_from, first_seen)
                       VALUES (?, ?, ?, ?, ?)
                       ON CONFLICT (site, selector) DO UPDATE SET hits = site_regions.hits + 1""",
                    (site, sel, source, learned_from, _ts(at)),
                )
            return len(new)

        return await self.db.transaction(work())

    async def load_boilerplate(self, site: str) -> frozenset[tuple[int, int]]:
        """The site's boilerplate block pairs."""

        def work() -> Work[frozenset[tuple[int, int]]]:
            return frozenset((yield from _boilerplate_pairs(site)))

        return await self.db.run(work())

    async def fold_block_stats(self) -> int:
        """Fold what page writes left in ``block_deltas`` into the sites' block and block-pair
        counters, a batch per transaction; returns how many page deltas were folded."""
        d, blocks = self.db.dialect, block_model(self.db)
        folded = 0
        while n := await self.db.transaction(_fold_block_deltas(d, FOLD_BATCH, blocks)):
            folded += n
        return folded

    async def update_boilerplate(
        self, site: str, *, enter_share: float, exit_share: float, min_pages: int
    ) -> dict[str, int]:
        """Re-decide the site's boilerplate block pairs (with hysteresis) and re-hash affected pages.

        A pair of adjacent blocks (a page's start and end count as blocks) becomes boilerplate when
        it is on at least *enter_share* of the site's live pages and stops being one below
        *exit_share*; sites with fewer than *min_pages* pages have none. What a page's hash keeps
        under those pairs is the store's :class:`BlockModel`'s to say. Pages whose hash moves
        because of a flip are re-hashed from their stored blocks, so the next run compares like
        with like (no false "changed").
        """
        await self.fold_block_stats()  # the counters first take in every page written so far

        d, blocks = self.db.dialect, block_model(self.db)

        def work() -> Work[dict[str, int]]:
            row = yield one("SELECT COUNT(*) FROM pages WHERE site = ? AND status = ?", (site, LIVE))
            live = int(row[0])
            # pairs that stop being boilerplate this run (kept for taking back changes below)
            flipped = yield rows(
                "SELECT prev, block FROM site_pairs WHERE site = ? AND boilerplate = 1 AND pages < ? * ?",
                (site, exit_share if live >= min_pages else 2.0, max(live, 1)),
            )
            self._flipped_off[site] = {(r[0], r[1]) for r in flipped}
            if live < min_pages:
                on = 0
                off = yield count(
                    "UPDATE site_pairs SET boilerplate = 0 WHERE site = ? AND boilerplate = 1", (site,)
                )
            else:
                entering = yield rows(
                    "SELECT prev, block FROM site_pairs "
                    "WHERE site = ? AND boilerplate = 0 AND pages >= ? * ?",
                    (site, enter_share, live),
                )
                self._flipped_on[site] = {(r[0], r[1]) for r in entering}
                on = yield count(
                    "UPDATE site_pairs SET boilerplate = 1 WHERE site = ? AND boilerplate = 0 "
                    "AND pages >= ? * ?",
                    (site, enter_share, live),
                )
                off = yield count(
                    "UPDATE site_pairs SET boilerplate = 0 WHERE site = ? AND boilerplate = 1 "
                    "AND pages < ? * ?",
                    (site, exit_share, live),
                )
            yield count("DELETE FROM site_pairs WHERE site = ? AND pages <= 0", (site,))
            yield count("DELETE FROM site_blocks WHERE site = ? AND pages <= 0", (site,))
            rehashed = (yield from _rehash(d, site, blocks)) if on or off else 0
            return {"boilerplate_on": on, "boilerplate_off": off, "rehashed": rehashed}

        return await self.db.transaction(work())

    async def take_back_boilerplate_changes(self, run: Run, site: str) -> list[str]:
        """Pages this run called changed whose only difference is now boilerplate: call them
        unchanged after all. Their chunk swap and their undelivered events are taken back.

        Returns the page keys taken back.
        """

        blocks = block_model(self.db)

        def work() -> Work[list[str]]:
            # a pair that was boilerplate when the run started still counts as noise here
            now = yield from _boilerplate_pairs(site)
            boiler = self._flipped_off.get(site, set()) | now
            # furniture is what was there before: the blocks of the pairs that were boilerplate
            # when the run started
            before = (now - self._flipped_on.get(site, set())) | self._flipped_off.get(site, set())
            furniture = {b for pair in before for b in pair} - {blocks.edge}
            changes = yield rows(
                """SELECT c.id, c.key, c.old_blocks, f.blocks FROM page_changes c
                   JOIN page_fields f ON f.key = c.key JOIN pages p ON p.key = c.key
                   WHERE c.run_id = ? AND c.verdict = 'changed' AND p.site = ?
                     AND c.old_blocks IS NOT NULL""",
                (run.id, site),
            )
            taken: list[str] = []
            for change_id, key, old_blob, new_blob in changes:
                old_list, new_list = unpack_blocks(old_blob), unpack_blocks(new_blob)
                if not blocks.same_content(old_list, new_list, boiler):
                    continue
                if not blocks.joins_furniture(old_list, new_list, furniture):
                    # a block newly on many pages at once, beside their own content: a site-wide
                    # edit (a deprecation notice), not furniture; it reaches the knowledge base
                    continue
                taken.append(key)
                yield count(
                    "UPDATE page_changes SET verdict = 'unchanged_boilerplate' WHERE id = ?", (change_id,)
                )
                yield count("UPDATE pages SET changed_run = NULL WHERE key = ?", (key,))
                yield count("DELETE FROM chunks WHERE key = ? AND added_run = ?", (key, run.id))
                yield count(
                    "UPDATE chunks SET retired_run = NULL "
                    "WHERE key = ? AND retired_run = ? AND retired_why = ?",
                    (key, run.id, _RETIRED_REPLACED),
                )
                yield count(
                    "UPDATE pages SET chunks = (SELECT COUNT(*) FROM chunks c "
                    "WHERE c.key = pages.key AND c.retired_run IS NULL) WHERE key = ?",
                    (key,),
                )
                # as published, unless an earlier unpublished run changed it too
                yield count(
                    "UPDATE pages SET pending = NULL WHERE key = ? AND pending = 'changed' AND key IN "
                    "(SELECT key FROM page_before WHERE run_id = ?)",
                    (key, run.id),
                )
                yield count("DELETE FROM page_before WHERE key = ? AND run_id = ?", (key, run.id))
                yield count(
                    "DELETE FROM outbox WHERE key = ? AND run_id = ? AND action = 'changed'", (key, run.id)
                )
            return taken

        return await self.db.transaction(work())
