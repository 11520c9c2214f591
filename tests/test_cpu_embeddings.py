"""Chunk texts embedded in worker processes (RECRAWLER_CPU_PROCESSES): the same vectors as in-process,
the next batch embedded while one is stored, and each new text embedded once.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.counters import RunCounters
from recrawler.cpu import CpuPool, PageJob, PageWork
from recrawler.kb.chunking import Chunk
from recrawler.kb.embedders import HashingEmbedder
from recrawler.kb.publish import embed_missing
from recrawler.learning import NoiseRegistry
from recrawler.state import PageRecord
from recrawler.state.sqlite import SQLiteStateStore
from tests import statedb

if TYPE_CHECKING:
    from pathlib import Path

    import pytest


@deferred_f_from_coro_f
async def test_chunk_texts_embedded_by_a_worker_are_the_texts_embedded_in_process(tmp_path: Path) -> None:
    """At publishing, batches of chunk texts go to the worker: the cache ends up with the same
    vectors, each text embedded once, in the same number of calls. A remainder of two rounds of
    the worker's lanes (4 batches of 256) is the worker's alone; beyond that this process joins."""
    site = "docs.example.com"
    found = []
    for processes, pages in ((1, 40), (0, 40), (1, 120)):
        texts_in = pages * 20
        db = tmp_path / f"{processes}-{pages}.db"
        store = SQLiteStateStore(str(db))
        await store.open()
        pool = CpuPool(processes, selectors=["main"], noise_selectors=[], chunking=None)
        pool.counters = counters = RunCounters()
        pool.start()
        try:
            now = datetime.now(UTC)
            run = await store.runs.begin_run("docs", site, now, lease_secs=0)
            for p in range(pages):
                key = f"{site}/p{p}"
                texts = [f"page {p} chunk {i}: the fetch_{p}_{i} setting, {i * p} words" for i in range(20)]
                page = PageRecord(
                    key=key, site=site, url=f"https://{key}", content_hash=f"h{p}", first_seen=now
                )
                chunks = [
                    Chunk(key=key, url=page.url, chunk_index=i, heading="H", text=t, chunk_hash=f"c{p}-{i}")
                    for i, t in enumerate(texts)
                ]
                await store.pages.record(run, page, [], chunks=chunks)
            embedder = HashingEmbedder()
            assert await embed_missing(store.kb, embedder, pool=pool) == (texts_in, -(-texts_in // 256))
            assert embedder.texts == texts_in
            if not processes:
                assert counters["recrawler/cpu/worker_texts"] == 0
            elif pages == 40:
                # 800 texts, 4 batches: all the worker's
                assert counters["recrawler/cpu/worker_texts"] == 800
            else:
                # 2,400 texts, 10 batches: the worker's first 4, then this process beside it
                assert 4 * 256 <= counters["recrawler/cpu/worker_texts"] < 2400
            assert await store.kb.count_missing(embedder.id) == 0
        finally:
            pool.shutdown()
            await store.close()
        found.append(statedb.rows(db, "SELECT text_hash, vector FROM embeddings ORDER BY text_hash"))
    assert len(found[0]) == 800
    assert found[0] == found[1]
    assert len(found[2]) == 2400
    assert set(found[0]) <= set(found[2])


async def _store_with_chunks(path: Path, pages: int, per_page: int) -> SQLiteStateStore:
    store = SQLiteStateStore(str(path))
    await store.open()
    site = "docs.example.com"
    now = datetime.now(UTC)
    run = await store.runs.begin_run("docs", site, now, lease_secs=0)
    for p in range(pages):
        key = f"{site}/p{p}"
        page = PageRecord(key=key, site=site, url=f"https://{key}", content_hash=f"h{p}", first_seen=now)
        chunks = [
            Chunk(
                key=key,
                url=page.url,
                chunk_index=i,
                heading="H",
                text=f"page {p} chunk {i}",
                chunk_hash=f"c{p}-{i}",
            )
            for i in range(per_page)
        ]
        await store.pages.record(run, page, [], chunks=chunks)
    await store.flush()
    return store


@deferred_f_from_coro_f
async def test_the_next_batch_is_embedded_while_one_is_stored(tmp_path: Path) -> None:
    """Publishing reads, embeds and stores batch after batch: storing one no longer holds up
    embedding the next (the store waits here until the next batch's embedding has begun; one
    after the other, it would wait for ever)."""
    loop = asyncio.get_running_loop()
    begun: list[asyncio.Event] = [asyncio.Event() for _ in range(4)]

    class Watched(HashingEmbedder):
        def embed(self, texts: Any) -> Any:
            loop.call_soon_threadsafe(begun[min(self.calls, 3)].set)
            return super().embed(texts)

    store = await _store_with_chunks(tmp_path / "s.db", 4, 256)
    stored: list[int] = []
    real = store.kb.store_embeddings

    async def store_embeddings(rows: Any) -> None:
        n = len(stored)
        if n + 1 < len(begun):
            await asyncio.wait_for(begun[n + 1].wait(), 10)
        stored.append(len(rows))
        await real(rows)

    store.kb.store_embeddings = store_embeddings  # type: ignore[method-assign]
    try:
        embedder = Watched()
        assert await embed_missing(store.kb, embedder) == (1024, 4)
        assert stored == [256] * 4
        assert await store.kb.count_missing(embedder.id) == 0
    finally:
        await store.close()


def test_a_worker_embeds_each_new_chunk_text_once_while_it_has_time_to_spare(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A task's new chunk texts are embedded in one call, each text once per worker (a copy of a
    page brings no vector: the first page's write carries it); a worker that never waits for
    tasks stops embedding and leaves the texts to the run's end."""
    import pickle

    from recrawler.cpu.worker_process import _SPARE, _Tools

    tools = _Tools(["main"], [], (1200, 150))
    packed = pickle.dumps(NoiseRegistry().site("docs.example.com"))

    def job(key: str, text: str, dim: int = 384) -> PageJob:
        body = f"<html><body><main><h2>{key}</h2><p>{text}</p></main></body></html>".encode()
        return PageJob(
            key=key,
            url=f"https://{key}",
            body=body,
            encoding="utf-8",
            noise_id=b"m",
            noise=packed,
            embed_dim=dim,
        )

    # the third page is a copy of the second
    jobs = [job("a", "The fetch setting."), job("b", "The crawl setting."), job("b", "The crawl setting.")]
    jobs.append(dataclasses.replace(job("d", "No vectors wanted here."), embed_dim=0))
    works: list[PageWork | BaseException] = [tools.work(j) for j in jobs]
    tools.embed(jobs, works)
    got = [w.vectors if isinstance(w, PageWork) else None for w in works]
    first = works[0]
    assert isinstance(first, PageWork)
    assert first.chunks
    texts = [c.text for c in first.chunks]
    assert got[0] == [
        (c.chunk_hash, v.astype("<f4").tobytes())
        for c, v in zip(first.chunks, HashingEmbedder(384).embed(texts), strict=True)
    ]
    assert got[1]
    assert got[2] == []  # the copy's text went with the page it copies
    assert got[3] is None
    # embedded once per worker: the same text in a later task brings nothing
    again = [tools.work(jobs[0])]
    tools.embed(jobs[:1], again)
    assert isinstance(again[0], PageWork)
    assert again[0].vectors == []
    # a worker whose tasks follow one another with no wait has no time to spare
    clock = [100.0]
    monkeypatch.setattr("recrawler.cpu.worker_process.time", SimpleNamespace(monotonic=lambda: clock[0]))
    assert tools.spare() == 1.0
    for _ in range(12):
        started = tools.started()
        clock[0] += 0.5  # working
        tools.finished(started)
    assert tools.spare() < _SPARE
    # and one that waits between tasks has it again
    for _ in range(12):
        clock[0] += 0.5  # waiting
        started = tools.started()
        clock[0] += 0.5  # working
        tools.finished(started)
    assert tools.spare() > _SPARE
