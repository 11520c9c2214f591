"""The history role's contract, on every backend (SQLite and PostgreSQL): field records,
regions, boilerplate and block statistics.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.detect.hashing import pack_blocks
from recrawler.kb.embedders import vector_to_blob
from recrawler.state import (
    ChangeRow,
    FieldsRow,
)
from recrawler.state.sql import pages as pages_module
from tests.state_contract import HOLDER, SITE, T0, BackendMixin, CopyEveryTypedRowSet, chunks, rec

if TYPE_CHECKING:
    from pathlib import Path

    from scrapy.settings import Settings


class HistoryContract(BackendMixin):
    @deferred_f_from_coro_f
    async def test_field_records_and_history_follow_the_page(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            fields = FieldsRow(
                title="A", headings=["H"], code=["x = 1"], links=[["https://x", "x"]], text="body",
                blocks=pack_blocks([11, 12, 13]),
            )  # fmt: skip
            change = ChangeRow(
                key=f"{SITE}/a", url=f"https://{SITE}/a", at=T0, verdict="changed", old_hash="h0",
                new_hash="h-a", changed_fields=["text"], distance=40,
            )  # fmt: skip
            assert await store.history.get_fields(f"{SITE}/a") is None
            await store.pages.record(run, rec("a"), [], fields=fields, change=change)
            assert await store.history.get_fields(f"{SITE}/a") == replace(fields, samples={})
            await store.flush()
            # history is what published runs did
            assert list(store.readers.iter_changes(key=f"{SITE}/a")) == []
            await store.decisions.publish_run(run, at=T0, gone_after=3, gone_statuses=[410])
            (row,) = list(store.readers.iter_changes(key=f"{SITE}/a"))
            assert (row["verdict"], row["changed_fields"], row["run_id"]) == ("changed", ["text"], run.id)

    @deferred_f_from_coro_f
    async def test_regions_are_learned_once(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings) as store:
            kw: dict[str, Any] = {"source": "learned", "learned_from": "https://x", "at": T0}
            assert await store.history.add_regions(SITE, [".ad", ".clock"], **kw) == 2
            assert await store.history.add_regions(SITE, [".ad"], **kw) == 0
            assert await store.history.load_regions() == {SITE: [".ad", ".clock"]}

    @deferred_f_from_coro_f
    async def test_pairs_on_most_pages_become_boilerplate(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            for i in range(4):
                blocks = pack_blocks([7, 8, 100 + i])
                fields = FieldsRow(title="", headings=[], code=[], links=[], text="", blocks=blocks)
                await store.pages.record(run, rec(f"p{i}", noise_key="n"), [], fields=fields)
            assert await store.history.load_boilerplate(SITE) == frozenset()
            done = await store.history.update_boilerplate(SITE, enter_share=0.75, exit_share=0.5, min_pages=3)
            assert done["boilerplate_on"] == 2  # (edge, 7) and (7, 8)
            assert await store.history.load_boilerplate(SITE) == {(0, 7), (7, 8)}
            assert sum(1 for _ in store.readers.noise_report()[SITE]["boilerplate"]) == 2

    @deferred_f_from_coro_f
    async def test_block_statistics_are_folded_once_even_by_two_folds_at_once(
        self, uri: str, settings: Settings, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # small batches: the two folds interleave, each adding to the same counters
        monkeypatch.setattr("recrawler.state.sql.history.FOLD_BATCH", 7)
        async with self.opened(uri, settings) as store, self.opened(uri, settings) as other:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            for i in range(60):
                # blocks 7 and 8 on every page, one block of its own
                blocks = pack_blocks([7, 8, 100 + i])
                fields = FieldsRow(
                    title="", headings=[], code=[], links=[], text="", blocks=blocks,
                    samples={7: "seven", 8: "eight", 100 + i: "own"},
                )  # fmt: skip
                await store.pages.record(run, rec(f"p{i}", noise_key="n"), [], fields=fields)
            # a page loses block 8: its change is a delta too, folded with the rest
            blocks = pack_blocks([7, 100])
            fields = FieldsRow(title="", headings=[], code=[], links=[], text="", blocks=blocks)
            await store.pages.record(run, rec("p0", noise_key="n"), [], fields=fields)
            await store.flush()
            # the page writes left 61 deltas; two folds at once take each of them once
            folded = await asyncio.gather(store.history.fold_block_stats(), other.history.fold_block_stats())
            assert sum(folded) == 61
            assert await store.history.fold_block_stats() == 0
            await store.history.update_boilerplate(SITE, enter_share=0.9, exit_share=0.5, min_pages=3)
            listed = store.readers.noise_report()[SITE]["boilerplate"]
            report = {b["block"]: (b["pages"], b["sample"]) for b in listed}
            assert report == {7: (60, "seven"), 8: (59, "eight")}

    @deferred_f_from_coro_f
    async def test_a_fold_that_fails_half_way_leaves_its_deltas_for_the_next(
        self, uri: str, settings: Settings, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A fold takes its deltas and writes their sums in one transaction: one that fails after
        taking them (here while writing the sums) leaves every delta where it was, and the next
        fold counts them once."""
        from recrawler.state.sql import rows as sql_rows

        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            for i in range(12):
                blocks = pack_blocks([7, 100 + i])
                fields = FieldsRow(
                    title="", headings=[], code=[], links=[], text="", blocks=blocks,
                    samples={7: "seven", 100 + i: "own"},
                )  # fmt: skip
                await store.pages.record(run, rec(f"p{i}", noise_key="n"), [], fields=fields)
            await store.flush()
            fold_site = sql_rows._fold_site

            def failing(*args: Any, **kwargs: Any) -> Any:
                yield from fold_site(*args, **kwargs)
                raise RuntimeError("injected: the fold fails after writing its sums")

            monkeypatch.setattr(sql_rows, "_fold_site", failing)
            with pytest.raises(RuntimeError, match="injected"):
                await store.history.fold_block_stats()
            monkeypatch.setattr(sql_rows, "_fold_site", fold_site)
            assert await store.history.fold_block_stats() == 12
            assert await store.history.fold_block_stats() == 0
            await store.history.update_boilerplate(SITE, enter_share=0.9, exit_share=0.5, min_pages=3)
            listed = store.readers.noise_report()[SITE]["boilerplate"]
            assert {b["block"]: (b["pages"], b["sample"]) for b in listed} == {7: (12, "seven")}

    @deferred_f_from_coro_f
    async def test_page_writes_fold_block_deltas_as_they_go(
        self, uri: str, settings: Settings, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr("recrawler.state.sql.pages.FOLD_EVERY", 10)
        # the fold's counting runs beside the crawl, never on the reactor's thread
        fold = pages_module._fold_block_deltas
        folded_on: list[str] = []

        def spy(*args: Any) -> Any:
            folded_on.append(threading.current_thread().name)
            return (yield from fold(*args))

        monkeypatch.setattr(pages_module, "_fold_block_deltas", spy)
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            for i in range(25):
                fields = FieldsRow(
                    title="", headings=[], code=[], links=[], text="", blocks=pack_blocks([7, 100 + i]),
                    samples={7: "seven"},
                )  # fmt: skip
                await store.pages.record(run, rec(f"p{i}", noise_key="n"), [], fields=fields)
            await store.flush()
            # two folds went with the writes (after the 10th and the 20th): five deltas wait
            assert len(folded_on) == 2
            assert threading.main_thread().name not in folded_on
            assert await store.history.fold_block_stats() == 5
            await store.history.update_boilerplate(SITE, enter_share=0.9, exit_share=0.5, min_pages=3)
            listed = store.readers.noise_report()[SITE]["boilerplate"]
            assert {b["block"]: (b["pages"], b["sample"]) for b in listed} == {7: (25, "seven")}

    @deferred_f_from_coro_f
    async def test_writes_of_more_rows_than_one_statement_carries_land_whole(
        self, uri: str, settings: Settings
    ) -> None:
        # 1,201 chunks, vectors and blocks: several multi-row statements each (500 rows at most)
        n = 1201
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            big = rec("big")
            texts = [f"text {i}" for i in range(n)]
            vectors = [("e1", f"c-{t}", vector_to_blob([float(i), 1.0])) for i, t in enumerate(texts)]
            blocks = list(range(1000, 1000 + n))
            fields = FieldsRow(
                title="", headings=[], code=[], links=[], text="", blocks=pack_blocks(blocks),
                samples={b: f"block {b}" for b in blocks},
            )  # fmt: skip
            await store.pages.record(
                run, big, [], chunks=chunks(big, *texts), embeddings=vectors, fields=fields
            )
            await store.flush()
            assert await store.history.fold_block_stats() == 1
            # the twin page comes in a later fold: every block it shares was on one page already
            twin = FieldsRow(
                title="", headings=[], code=[], links=[], text="", blocks=pack_blocks(blocks[1:]),
                samples={b: f"twin {b}" for b in blocks},
            )  # fmt: skip
            await store.pages.record(run, rec("twin"), [], chunks=chunks(rec("twin"), "only"), fields=twin)
            await store.flush()
            assert await store.history.fold_block_stats() == 1
            counts = await store.kb.run_index_counts(run.id, "e1")
            assert (counts["chunks_added"], counts["texts_cached"]) == (n + 1, n)
            assert (await store.pages.get(big.key)).chunks == n  # type: ignore[union-attr]
            assert await store.kb.missing_for("e1", [h for _, h, _ in vectors]) == []
            await store.history.update_boilerplate(SITE, enter_share=0.9, exit_share=0.5, min_pages=2)
            report = store.readers.noise_report()[SITE]["boilerplate"]
            listed = {b["block"]: (b["pages"], b["sample"]) for b in report}
            # shared blocks count both pages, each with the sample of the page that made it two
            assert listed == {b: (2, f"twin {b}") for b in blocks[1:]}
            # a stored page's count follows its new chunks, and only them
            await store.pages.record(run, big, [], chunks=chunks(big, "short", "page"))
            assert (await store.pages.get(big.key)).chunks == 2  # type: ignore[union-attr]
            await store.pages.record(run, replace(big, chunks=0), [])
            assert (await store.pages.get(big.key)).chunks == 2  # type: ignore[union-attr]


class TestSQLiteHistory(HistoryContract):
    @pytest.fixture
    def uri(self, tmp_path: Path) -> str:
        return f"sqlite:///{tmp_path / 'state.db'}"


@pytest.mark.postgres
class TestPostgreSQLHistory(HistoryContract):
    @pytest.fixture
    def uri(self, postgres_uri: str) -> str:
        # a fresh database per test (tests/postgres.py)
        return postgres_uri


@pytest.mark.postgres
class TestPostgreSQLCopiedHistory(CopyEveryTypedRowSet, TestPostgreSQLHistory):
    """The same contract with every row set whose types are given copied in."""
