"""The worker pool (RECRAWLER_CPU_PROCESSES): noise models handed over, batches that fail alone,
shutdown, the number of workers, their CPU priority, and what a worker makes of a page.
"""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import os
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
import scrapy
from scrapy.http import HtmlResponse
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.counters import RunCounters
from recrawler.cpu import CpuPool, PageJob, PageWork, usable_cores, worker_processes
from recrawler.exceptions import ConfigurationError
from recrawler.kb.embedders import HashingEmbedder
from recrawler.learning import NoiseRegistry
from recrawler.state import PageRecord
from tests import docsite
from tests.waiting import until


@deferred_f_from_coro_f
async def test_a_sites_noise_model_goes_to_the_workers_until_they_hold_it() -> None:
    """A job names the site's model by a digest; the model itself travels with the first jobs
    only, and again when a worker says it does not hold it."""
    pool = CpuPool(1, selectors=["main"], noise_selectors=[], chunking=None)
    pool.counters = RunCounters()
    pool.start()
    try:
        model = NoiseRegistry().site("docs.example.com")
        body = b"<html><body><main><p>One paragraph.</p><p>Another one.</p></main></body></html>"

        def job(noise_id: bytes | None, noise: bytes | None) -> PageJob:
            return PageJob(
                key="k", url="https://k", body=body, encoding="utf-8", noise_id=noise_id, noise=noise
            )

        sent = [pool.noise(model) for _ in range(129)]
        digest = sent[0][0]
        # two tasks' worth for the one worker
        assert [data is not None for _, data in sent] == [True] * 128 + [False]
        assert {d for d, _ in sent} == {digest}
        # the worker loads it once, then fingerprints under it by its digest alone
        first = await pool.work(job(digest, sent[0][1]))
        later = await pool.work(job(digest, None))
        assert first is not None
        assert later is not None
        assert first.fingerprint is not None
        assert later.fingerprint == first.fingerprint
        assert not later.model_missing
        # a task carries the model once (to its first job that names it): all its jobs use it
        fresh = NoiseRegistry(boilerplate=False).site("fresh.example.com")
        batch = await asyncio.gather(*(pool.work(job(*pool.noise(fresh))) for _ in range(20)))
        assert all(w is not None and w.fingerprint is not None and not w.model_missing for w in batch)
        # a model the worker never got: no fingerprint, and the next jobs carry it again
        other = NoiseRegistry(boilerplate=False).site("other.example.com")
        other_id, _ = pool.noise(other)
        missing = await pool.work(job(other_id, None))
        assert missing is not None
        assert missing.model_missing
        assert missing.fingerprint is None
        assert missing.content is not None
        assert pool.noise(other)[1] is not None
    finally:
        pool.shutdown()


@deferred_f_from_coro_f
async def test_pages_handed_over_at_once_go_in_batches_and_fail_alone() -> None:
    """The pages of one turn of the event loop go to the workers together, at most 64 a task
    and two tasks per worker at once (the rest go together when one comes back); a page whose
    work fails fails alone, the rest of its batch is worked."""
    pool = CpuPool(1, selectors=["main"], noise_selectors=[], chunking=None)
    pool.counters = counters = RunCounters()
    pool.start()
    try:
        jobs = [
            PageJob(
                key=f"k{i}",
                url=f"https://k{i}",
                body=f"<main><p>Page {i}.</p></main>".encode(),
                encoding="utf-8",
            )
            for i in range(150)
        ]
        # a model that does not unpickle: that page's work raises in the worker
        jobs[5] = dataclasses.replace(jobs[5], noise_id=b"x" * 16, noise=b"not a pickle")
        results = await asyncio.gather(*(pool.work(job) for job in jobs), return_exceptions=True)
        assert isinstance(results[5], Exception)
        others = [r for i, r in enumerate(results) if i != 5]
        assert all(isinstance(r, PageWork) and r.content is not None for r in others)
        assert [r.content.text for r in others if isinstance(r, PageWork) and r.content][:2] == [
            "Page 0.",
            "Page 1.",
        ]
        assert counters["recrawler/cpu/worker_batches"] == 3  # 64 + 64, then the 22 that waited
        assert counters["recrawler/cpu/worker_pages"] == 149
        assert counters["recrawler/cpu/worker_lost"] == 0
    finally:
        pool.shutdown()


@deferred_f_from_coro_f
async def test_a_pool_shut_down_with_its_run_never_starts_workers_again() -> None:
    """Work asked for after the run stopped its workers (a late response) is done in the crawl's
    process: no worker is forked again, to be left to interpreter exit."""
    pool = CpuPool(1, selectors=["main"], noise_selectors=[], chunking=None)
    pool.counters = RunCounters()
    pool.start()
    body = b"<html><body><main><p>One paragraph.</p></main></body></html>"
    job = PageJob(key="k", url="https://k", body=body, encoding="utf-8")
    assert await pool.work(job) is not None
    pool.shutdown()
    assert not pool.active
    assert await pool.work(job) is None
    assert await pool.embed(HashingEmbedder(), ["a text"]) is None
    assert pool._pool is None
    assert not multiprocessing.active_children()


def test_auto_starts_one_worker_per_usable_core_and_bad_values_name_the_setting() -> None:
    """RECRAWLER_CPU_PROCESSES is "auto" by default: one worker per core this process may use, at
    most four; a number is taken as it is; anything else is refused naming the setting."""
    from scrapy.settings import Settings

    from recrawler import default_settings

    assert default_settings.RECRAWLER_CPU_PROCESSES == "auto"
    assert worker_processes("auto") == worker_processes(None) == min(usable_cores(), 4)
    assert worker_processes(" AUTO ") == min(usable_cores(), 4)
    assert worker_processes(0) == 0
    assert worker_processes("3") == 3
    for bad in ("many", -1, True, "1.5x"):
        with pytest.raises(ConfigurationError, match="RECRAWLER_CPU_PROCESSES"):
            worker_processes(bad)
    with pytest.raises(ConfigurationError, match="RECRAWLER_CPU_NICE"):
        CpuPool.from_settings(Settings({"RECRAWLER_CPU_NICE": "low"}))
    with pytest.raises(ConfigurationError, match="RECRAWLER_CPU_NICE: expected 0 to 19, got 20"):
        CpuPool.from_settings(Settings({"RECRAWLER_CPU_NICE": 20}))


@deferred_f_from_coro_f
async def test_workers_yield_the_cpu_to_the_crawls_process() -> None:
    """Every worker runs RECRAWLER_CPU_NICE steps below the crawl's process: on a machine with no
    core to spare, the process that feeds the workers is not kept waiting behind them."""
    own = os.getpriority(os.PRIO_PROCESS, 0)
    pool = CpuPool(2, selectors=["main"], noise_selectors=[], chunking=None, nice=5)
    pool.counters = RunCounters()
    pool.start()
    try:
        body = b"<html><body><main><p>One paragraph.</p></main></body></html>"
        job = PageJob(key="k", url="https://k", body=body, encoding="utf-8")
        assert await pool.work(job) is not None
        assert pool._pool is not None
        pids = list(pool._pool._processes)
        assert len(pids) == 2
        # a worker lowers its priority as it starts: the one that took no job may still be starting
        want = [min(own + 5, 19)] * 2

        def lowered() -> bool:
            return [os.getpriority(os.PRIO_PROCESS, pid) for pid in pids] == want

        await asyncio.to_thread(until, lowered, "both workers' priority lowered", timeout=10)
    finally:
        pool.shutdown()
    assert os.getpriority(os.PRIO_PROCESS, 0) == own


def test_a_model_carried_by_a_page_without_text_still_reaches_the_worker() -> None:
    """Observed (one run in five under load): a task's first page, the only one that carries the
    site's noise model, had no text (or could not be parsed), the worker returned before loading
    the model, and every other page of the task came back without a fingerprint."""
    import pickle

    from recrawler.cpu.worker_process import _Tools

    tools = _Tools(["main"], [], None)
    packed = pickle.dumps(NoiseRegistry().site("docs.example.com"))
    empty = b"<html><body><main> </main></body></html>"
    deep = b"<html><body><main>" + b"<div>" * 5000 + b"x" + b"</div>" * 5000 + b"</main></body></html>"
    page = b"<html><body><main><p>One paragraph.</p></main></body></html>"
    for first in (empty, deep):
        tools = _Tools(["main"], [], None)
        carrier = PageJob(key="e", url="https://e", body=first, encoding="utf-8", noise_id=b"m", noise=packed)
        later = PageJob(key="p", url="https://p", body=page, encoding="utf-8", noise_id=b"m")
        assert tools.work(carrier).fingerprint is None
        work = tools.work(later)
        assert not work.model_missing
        assert work.fingerprint is not None


def test_a_worker_makes_the_stored_forms_of_a_field_record_it_will_be_written_with() -> None:
    """A new page's compressed text and block samples, and a moved page's compressed text, are
    made in the worker, as the write would make them; a page still hashing to what is indexed
    gets none (its record is not written)."""
    import json
    import pickle

    from recrawler.cpu.worker_process import _Tools
    from recrawler.state.records import packed_text, samples_json

    packed = pickle.dumps(NoiseRegistry().site("docs.example.com"))
    body = "<html><body><main><p>Straße, café.</p><p>Second block.</p></main></body></html>".encode()
    job = PageJob(key="k", url="https://k", body=body, encoding="utf-8", noise_id=b"m", noise=packed)
    tools = _Tools(["main"], [], None)
    new = tools.work(replace(job, new=True))
    assert new.content is not None
    assert new.fingerprint is not None
    assert new.packed_text == packed_text(new.content.text)
    assert new.samples_json == samples_json(new.fingerprint.samples)
    assert json.loads(new.samples_json or "") == {str(b): t for b, t in new.fingerprint.samples.items()}
    moved = tools.work(replace(job, indexed_hash="another hash"))
    assert (moved.packed_text, moved.samples_json) == (new.packed_text, None)
    same = tools.work(replace(job, indexed_hash=new.fingerprint.content_hash))
    assert (same.packed_text, same.samples_json) == (None, None)


def test_a_page_built_in_the_crawls_process_carries_what_a_worker_makes_of_it() -> None:
    """process_page is the one CPU work of a page: built in the crawl's process (no workers, or
    them gone) a Page carries the fingerprint, chunks and stored forms a worker would have made,
    so the pipelines take them the same way whatever the mode."""
    import pickle

    from recrawler import meta
    from recrawler.cpu.worker_process import _Tools
    from recrawler.extract import ContentExtractor
    from recrawler.kb.chunking import Chunker
    from recrawler.spiders import PageBuilder
    from recrawler.urls import KeyMaker

    noise = NoiseRegistry(boilerplate=False)  # a site model needs no database read
    builder = PageBuilder(ContentExtractor(["main"]), KeyMaker(), noise, chunker=Chunker(1200, 150))
    body = docsite.page("Setup", [("Install", ["Run the installer."]), ("Use", ["Start the tool."])]).encode()
    url = "https://docs.example.com/setup.html"

    def built(record: PageRecord | None) -> Any:
        request = scrapy.Request(url, meta={meta.RECORD: record})
        page = builder.page(HtmlResponse(url, body=body, encoding="utf-8", request=request))
        job = PageJob(
            key=page.key,
            url=page.url,
            body=body,
            encoding="utf-8",
            noise_id=b"m",
            noise=pickle.dumps(noise.site("docs.example.com")),
            indexed_hash=record.content_hash if record is not None else None,
            new=record is None,
        )
        return page, _Tools(["main"], [], (1200, 150, 500)).work(job)

    page, work = built(None)
    assert page.record is None
    assert page.worked is not None
    assert page.worked.noise is noise.site("docs.example.com")
    assert page.worked.fingerprint == work.fingerprint
    assert page.worked.chunks == work.chunks
    assert len(page.worked.chunks) == 2
    assert (page.worked.packed_text, page.worked.samples_json) == (work.packed_text, work.samples_json)
    assert page.worked.samples_json is not None
    assert page.content_hash == work.content_hash
    # a page that still hashes to what is indexed: nothing to chunk, no field record to write
    assert page.worked.fingerprint is not None
    indexed = PageRecord(
        key=page.key,
        site="docs.example.com",
        url=url,
        content_hash=page.worked.fingerprint.content_hash,
        chunks=2,
        first_seen=datetime(2026, 1, 1, tzinfo=UTC),
    )
    again, work = built(indexed)
    assert again.record is indexed
    assert again.worked is not None
    assert (again.worked.chunks, again.worked.packed_text, again.worked.samples_json) == (None, None, None)
    assert (work.chunks, work.packed_text, work.samples_json) == (None, None, None)
