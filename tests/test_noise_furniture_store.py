"""Boilerplate statistics in the store: pairs enter and leave with hysteresis, gone pages no longer
count, folded counters equal a count from scratch, and pages written together share one read.
"""

from __future__ import annotations

import asyncio
import random
from itertools import pairwise
from typing import TYPE_CHECKING

from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.detect.boilerplate import EDGE
from recrawler.detect.hashing import block_hash, pack_blocks, page_hash, unpack_blocks
from recrawler.learning import NoiseRegistry
from recrawler.state import FieldsRow
from recrawler.state.sqlite import SQLiteStateStore
from tests.noise_furniture import counted_from_scratch, counters
from tests.state_sqlite import SITE, T0, opened, query, rec

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

    from recrawler.state import Run


# --- the store: pair statistics, hysteresis, gone pages, and a database from before schema 6 ---


def fields_of(names: str) -> FieldsRow:
    hashes = [block_hash(n) for n in names.split()]
    return FieldsRow(
        title="",
        headings=[],
        code=[],
        links=[],
        text="\n\n".join(names.split()),
        blocks=pack_blocks(hashes),
        samples=dict(zip(hashes, names.split(), strict=True)),
    )


def pairs_of(*chains: str) -> frozenset[tuple[int, int]]:
    """Block pairs along each chain; ``^`` and ``$`` are the page's start and end."""
    out = set()
    for chain in chains:
        seq = [EDGE if n in "^$" else block_hash(n) for n in chain.split()]
        out.update(pairwise(seq))
    return frozenset(out)


async def store_page(store: SQLiteStateStore, run: Run, name: str, names: str) -> None:
    blocks = unpack_blocks(fields_of(names).blocks)
    page = rec(name, content_hash=page_hash(blocks), noise_key="k")
    await store.pages.record(run, page, [], fields=fields_of(names))


def count(db: Path, chain: str) -> int | None:
    ((prev, block),) = pairs_of(chain)
    rows = query(db, "SELECT pages FROM site_pairs WHERE prev = ? AND block = ?", (prev, block))
    return rows[0][0] if rows else None


@deferred_f_from_coro_f
async def test_pairs_enter_and_leave_with_hysteresis(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    async with opened(db) as store:
        run = await store.runs.begin_run("docs", SITE, T0, lease_secs=0)
        for i in range(10):
            await store_page(store, run, f"p{i}", f"T own{i} F1 F2" if i < 6 else f"T own{i}")

        async def learn(min_pages: int = 10) -> dict[str, int]:
            return await store.history.update_boilerplate(
                SITE, enter_share=0.5, exit_share=0.35, min_pages=min_pages
            )

        assert (await learn())["boilerplate_on"] == 3
        assert await store.history.load_boilerplate(SITE) == pairs_of("^ T", "F1 F2 $")
        # the list's pages are re-hashed without their furniture: T at the top, the list at the end
        assert query(db, "SELECT content_hash FROM pages WHERE key = ?", (f"{SITE}/p0",)) == [
            (page_hash([block_hash("own0")]),)
        ]
        assert count(db, "T own0") == 1
        # 4 of 10 pages keep the list: above the exit share, the pairs stay
        for i in (0, 1):
            await store_page(store, run, f"p{i}", f"T own{i}")
        assert (await learn())["boilerplate_off"] == 0
        # 3 of 10: below it, they go; the pages' own lines are counted once each
        await store_page(store, run, "p2", "T own2")
        result = await learn()
        assert (result["boilerplate_on"], result["boilerplate_off"]) == (0, 2)
        assert await store.history.load_boilerplate(SITE) == pairs_of("^ T")
        assert count(db, "F1 F2") == 3
        assert count(db, "own0 F1") is None
        # fewer live pages than the minimum: no boilerplate at all
        assert (await learn(min_pages=11))["boilerplate_off"] == 1
        assert await store.history.load_boilerplate(SITE) == frozenset()


@deferred_f_from_coro_f
async def test_a_gone_page_no_longer_counts(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    async with opened(db) as store:
        run = await store.runs.begin_run("docs", SITE, T0, lease_secs=0)
        for name in ("a", "b"):
            await store_page(store, run, name, f"T {name} F1 F2")
        # the page writes left their block sets for the fold (the run's reconciliation)
        assert count(db, "F1 F2") is None
        assert await store.history.fold_block_stats() == 2
        assert (count(db, "^ T"), count(db, "F1 F2"), count(db, "b F1")) == (2, 2, 1)
        run2 = await store.runs.begin_run("docs", SITE, T0, lease_secs=0)
        assert await store.pages.record_miss(run2, f"{SITE}/b", 410) == "staged"
        await store.decisions.publish_run(run2, at=T0, gone_after=2, gone_statuses=[410])
        # a removal leaves its block-set change for the fold too
        assert await store.history.fold_block_stats() == 1
        assert (count(db, "^ T"), count(db, "F1 F2"), count(db, "b F1")) == (1, 1, 0)
        # the noise report lists the blocks of boilerplate pairs
        await store.history.update_boilerplate(SITE, enter_share=0.5, exit_share=0.35, min_pages=1)
    report = SQLiteStateStore(str(db)).readers.noise_report()
    # a block's sample is kept from its second page on ("a" was only ever on one page)
    samples = {b["sample"] for b in report[SITE]["boilerplate"]}
    assert samples == {"F1", "F2", "T", None}


@deferred_f_from_coro_f
async def test_folded_counters_equal_a_count_from_scratch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Page writes leave their block-set changes as deltas; folding them (in batches smaller
    than a run, at any point) gives exactly the counts of the stored pages."""
    monkeypatch.setattr("recrawler.state.sql.history.FOLD_BATCH", 7)
    db = tmp_path / "s.db"
    rng = random.Random(7)
    words = [f"w{i}" for i in range(12)]
    async with opened(db) as store:
        run = None
        for round_ in range(6):
            run = await store.runs.begin_run("docs", SITE, T0, lease_secs=0)
            for i in rng.sample(range(40), 25):
                names = " ".join(rng.choice(words) for _ in range(rng.randint(1, 6)))
                await store_page(store, run, f"p{i}", names)
            if round_ % 2:
                for i in rng.sample(range(40), 3):
                    await store.pages.record_miss(run, f"{SITE}/p{i}", 410)
                await store.decisions.publish_run(run, at=T0, gone_after=1, gone_statuses=[410])
            await store.flush()
            pending = query(db, "SELECT COUNT(*) FROM block_deltas")[0][0]
            assert pending > 0
            # the counters lag until the fold; the fold takes every delta once
            assert await store.history.fold_block_stats() == pending
            assert await store.history.fold_block_stats() == 0
            assert counters(db) == counted_from_scratch(db)
        assert query(db, "SELECT COUNT(*) FROM block_deltas") == [(0,)]


@deferred_f_from_coro_f
async def test_page_writes_fold_their_deltas_a_batch_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's page writes fold their block deltas as they go: the reconciliation is left only
    what the writes since the last fold added, however many pages the run wrote."""
    monkeypatch.setattr("recrawler.state.sql.pages.FOLD_EVERY", 10)
    db = tmp_path / "s.db"
    rng = random.Random(3)
    words = [f"w{i}" for i in range(12)]
    async with opened(db) as store:
        run = await store.runs.begin_run("docs", SITE, T0, lease_secs=0)
        for i in range(25):
            await store_page(store, run, f"p{i}", " ".join(rng.choice(words) for _ in range(4)))
        await store.flush()
        # folded after the 10th and the 20th write: five wait
        assert query(db, "SELECT COUNT(*) FROM block_deltas") == [(5,)]
        assert await store.history.fold_block_stats() == 5
        assert counters(db) == counted_from_scratch(db)


@deferred_f_from_coro_f
async def test_pages_arriving_together_share_one_read_of_the_sites_boilerplate(tmp_path: Path) -> None:
    """The first pages of a run all ask for the site's model at once: one database read, one
    model object (what a CPU worker fingerprinted under it stays usable for each of them)."""
    async with opened(tmp_path / "s.db") as store:
        run = await store.runs.begin_run("docs", SITE, T0, lease_secs=0)
        for i in range(4):
            await store_page(store, run, f"p{i}", f"T own{i} F1 F2")
        await store.history.update_boilerplate(SITE, enter_share=0.5, exit_share=0.35, min_pages=3)
        reads = 0
        load = store.history.load_boilerplate

        async def counted(site: str) -> frozenset[tuple[int, int]]:
            nonlocal reads
            reads += 1
            return await load(site)

        store.history.load_boilerplate = counted  # type: ignore[method-assign]
        registry = NoiseRegistry()
        models = await asyncio.gather(*(registry.ensure(SITE, store.history) for _ in range(25)))
        assert reads == 1
        assert len({id(m) for m in models}) == 1
        assert models[0].boilerplate == pairs_of("^ T", "F1 F2 $")
        assert registry.ready(SITE) is models[0]
