"""The search index role's contract, on every backend (SQLite and PostgreSQL): writing the index
never changes what search finds, a block is written once, and a vector cached after the last
block is found as well as one inside it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.kb.embedders import embedder_from_spec, vector_to_blob
from recrawler.kb.reader import open_kb
from recrawler.state.sql import search
from recrawler.state.sqlite import vectors
from tests.state_contract import HOLDER, SITE, T0, BackendMixin, chunks, rec

if TYPE_CHECKING:
    from pathlib import Path

    from scrapy.settings import Settings

    from recrawler.state import StateStore

#: vectors per block in these tests (16,384 in a crawl): a few blocks from a few hundred pages
SMALL_BLOCK = 64


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    # each module that reads the blocks binds the size on import
    for module in (search, vectors):
        monkeypatch.setattr(module, "BLOCK", SMALL_BLOCK)


def topic(i: int) -> str:
    return f"page {i} explains how widget {i} retries its uploads after error {i * 7}"


class SearchIndexContract(BackendMixin):
    #: blocks this backend writes for its cached vectors (SQLite reads blocks; PostgreSQL, pgvector)
    writes_blocks: bool

    async def fill(self, store: StateStore, embedder: Any, first: int, n: int) -> None:
        """Publish *n* pages from *first* on, a chunk each, with their vectors cached."""
        run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
        texts = [topic(i) for i in range(first, first + n)]
        for i, text in zip(range(first, first + n), texts, strict=True):
            page = rec(f"p{i}")
            await store.pages.record(run, page, [], chunks=chunks(page, text))
        await store.decisions.publish_run(run, at=T0, gone_after=3, gone_statuses=[410])
        vectors_ = embedder.embed(texts)
        await store.kb.store_embeddings(
            [(embedder.id, f"c-{t}", vector_to_blob(v)) for t, v in zip(texts, vectors_, strict=True)]
        )
        await store.flush()

    def found(self, uri: str, embedder: Any, queries: range) -> dict[int, str]:
        """The best vector hit of each query, by the query's topic number."""
        with open_kb(uri, embedder=embedder) as kb:
            return {i: kb.search(topic(i), k=1, mode="vector")[0].chunk.text for i in queries}

    @deferred_f_from_coro_f
    async def test_writing_the_index_changes_nothing_search_finds(self, uri: str, settings: Settings) -> None:
        embedder = embedder_from_spec("hashing")
        async with self.opened(uri, settings) as store:
            await self.fill(store, embedder, 0, 3 * SMALL_BLOCK + 10)
            sample = range(0, 3 * SMALL_BLOCK + 10, 7)
            before = self.found(uri, embedder, sample)
            assert before == {i: topic(i) for i in sample}
            written = await store.search_index.index_vectors(embedder.id)
            assert written == (3 if self.writes_blocks else 0)
            # a block is written once: nothing new, nothing written
            assert await store.search_index.index_vectors(embedder.id) == 0
            assert self.found(uri, embedder, sample) == before

    @deferred_f_from_coro_f
    async def test_a_vector_after_the_last_block_is_found(self, uri: str, settings: Settings) -> None:
        embedder = embedder_from_spec("hashing")
        async with self.opened(uri, settings) as store:
            await self.fill(store, embedder, 0, 2 * SMALL_BLOCK)
            assert await store.search_index.index_vectors(embedder.id) == (2 if self.writes_blocks else 0)
            # the tail: fewer vectors than a block, in no block yet
            await self.fill(store, embedder, 2 * SMALL_BLOCK, SMALL_BLOCK // 2)
            tail = range(2 * SMALL_BLOCK, 2 * SMALL_BLOCK + SMALL_BLOCK // 2)
            assert await store.search_index.index_vectors(embedder.id) == 0
            assert self.found(uri, embedder, tail) == {i: topic(i) for i in tail}
            # and once the tail fills a block, the block holds them
            await self.fill(store, embedder, 2 * SMALL_BLOCK + SMALL_BLOCK // 2, SMALL_BLOCK // 2)
            assert await store.search_index.index_vectors(embedder.id) == (1 if self.writes_blocks else 0)
            assert self.found(uri, embedder, tail) == {i: topic(i) for i in tail}


class TestSQLiteSearchIndex(SearchIndexContract):
    writes_blocks = True

    @pytest.fixture
    def uri(self, tmp_path: Path) -> str:
        return f"sqlite:///{tmp_path / 'state.db'}"


@pytest.mark.postgres
class TestPostgreSQLSearchIndex(SearchIndexContract):
    writes_blocks = False

    @pytest.fixture
    def uri(self, postgres_uri: str) -> str:
        # a fresh database per test (tests/postgres.py)
        return postgres_uri
