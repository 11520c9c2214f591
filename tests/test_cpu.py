"""Per-page CPU work in worker processes (RECRAWLER_CPU_PROCESSES): the same pages as in-process,
a dead worker costs no page, and a script without a main guard still crawls once."""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest
import scrapy
from scrapy import signals
from scrapy.http import HtmlResponse, TextResponse
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.counters import RunCounters
from recrawler.cpu import CpuPool, EncodingOf, PageJob, PageWork, usable_cores, worker_processes
from recrawler.exceptions import ConfigurationError
from recrawler.kb.chunking import Chunk
from recrawler.kb.embedders import HashingEmbedder
from recrawler.kb.publish import embed_missing
from recrawler.learning import NoiseRegistry
from recrawler.runtime import Runtime
from recrawler.spiders import RecrawlerSpiderMixin
from recrawler.spiders.docs import DocsSpider
from recrawler.state import PageRecord
from recrawler.state.sqlite import SQLiteStateStore
from tests import docsite, statedb
from tests.conftest import Crawls, make_crawler

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from scrapy.http import Response

    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0


def _write_site(site: Site, pages: int = 12, *, encodings: bool = False) -> str:
    paths = []
    for n in range(pages):
        sections = [
            ("Overview", [f"Page {n} explains the <code>fetch_{n}</code> setting in some detail."]),
            ("Usage", [f"Run it with option {n}.", "Last updated: 2026-11-0{n % 9 + 1}."], f"tool --run {n}"),
        ]
        site.write(f"p{n}.html", docsite.page(f"Page {n}", sections), mtime=T0)
        paths.append(f"p{n}.html")
    # the error paths: no main content, and nesting past the parser's limit
    site.write(
        "empty.html", "<html><head><title>Empty</title></head><body><main> </main></body></html>", mtime=T0
    )
    site.write(
        "deep.html", "<html><body><main>" + "<div>" * 5000 + "x" + "</div>" * 5000 + "</main></body></html>"
    )
    paths += ["empty.html", "deep.html"]
    if encodings:
        paths += _write_encodings(site)
    return site.write_sitemap(paths)


def _write_encodings(site: Site) -> list[str]:
    """The encoding is the worker's to work out, as Scrapy would: from a <meta> declaration, the
    header, a byte order mark, or the bytes alone; a binary served as HTML is no text at all."""
    words = "Straße, café and naïve: the 20 € setting"
    encoded = {
        "meta-cp1252.html": (
            f'<html><head><meta charset="windows-1252"><title>Meta</title></head>'
            f"<body><main><p>{words}.</p></main></body></html>"
        ).encode("cp1252"),
        "header-latin9.html": (f"<html><body><main><p>{words} (by header).</p></main></body></html>").encode(
            "iso-8859-15"
        ),
        "bom-utf16.html": (f"<html><body><main><p>{words} (by BOM).</p></main></body></html>").encode(
            "utf-16"
        ),
        "guess-utf8.html": (
            "<html><body><main><p>設定の説明です。この設定は毎週変わります。</p></main></body></html>"
        ).encode(),
        "binary.html": b"\x7fELF\x02\x01\x01" + b"\x00\x01GLIBC_2.34\x00puts\x00" * 40,
    }
    for name, body in encoded.items():
        content_type = "text/html; charset=iso-8859-15" if name.startswith("header") else "text/html"
        site.write(name, body, mtime=T0, content_type=content_type)
    return list(encoded)


def _state(db: Path) -> dict[str, Any]:
    return {
        "pages": statedb.rows(
            db, "SELECT url, content_hash, fuzzy_hash, title, chunks FROM pages ORDER BY url"
        ),
        "fields": statedb.rows(
            db,
            "SELECT p.url, f.title, f.headings, f.code, f.links, f.text, f.blocks "
            "FROM page_fields f JOIN pages p ON p.key = f.key ORDER BY p.url",
        ),
        "chunks": statedb.rows(
            db,
            "SELECT url, chunk_index, chunk_hash, heading, text FROM chunks "
            "WHERE retired_run IS NULL ORDER BY url, chunk_index",
        ),
        "embeddings": statedb.rows(
            db, "SELECT embedder, text_hash, vector FROM embeddings ORDER BY embedder, text_hash"
        ),
        # folded from the page writes' block deltas, samples included
        "blocks": statedb.rows(db, "SELECT site, block, pages, sample FROM site_blocks ORDER BY block"),
    }


@deferred_f_from_coro_f
async def test_pages_worked_in_a_worker_process_are_the_pages_worked_in_the_crawl_process(
    site: Site, tmp_path: Path
) -> None:
    sitemap = _write_site(site, encodings=True)
    in_workers, in_process = Crawls(tmp_path / "workers"), Crawls(tmp_path / "process")
    for crawls in (in_workers, in_process):
        crawls.tmp_path.mkdir()

    w1 = await in_workers.crawl(sitemap, RECRAWLER_CPU_PROCESSES=1)
    p1 = await in_process.crawl(sitemap, RECRAWLER_CPU_PROCESSES=0)
    assert w1.counts == p1.counts
    assert w1.counts["new"] == 16
    assert w1.counts["errors"] == 3
    assert (
        w1.stats["recrawler/page/error/empty_content"] == p1.stats["recrawler/page/error/empty_content"] == 1
    )
    assert w1.stats["recrawler/page/error/too_deep"] == p1.stats["recrawler/page/error/too_deep"] == 1
    assert w1.stats["recrawler/page/error/not_html"] == p1.stats["recrawler/page/error/not_html"] == 1
    # every page with a text body went to the worker (the binary is told apart on arrival); none
    # in the run without one
    assert w1.stats["recrawler/cpu/worker_pages"] == 18
    assert "recrawler/cpu/worker_pages" not in p1.stats
    state = _state(in_workers.db_path)
    assert len(state["chunks"]) >= 12
    # the workers embedded the chunk texts as they chunked them: the same vectors, bit for bit,
    # as the in-process run's end made
    assert w1.stats["recrawler/cpu/worker_embedded"] == len({c[2] for c in state["chunks"]})
    assert "recrawler/cpu/worker_embedded" not in p1.stats
    assert w1.report["index"]["texts_embedded"] == p1.report["index"]["texts_embedded"]
    assert len(state["embeddings"]) == len({c[2] for c in state["chunks"]})
    assert state == _state(in_process.db_path)
    texts = {url.rsplit("/", 1)[1]: text for url, _, _, _, text in state["chunks"]}
    assert "Straße, café and naïve: the 20 € setting." in texts["meta-cp1252.html"]
    assert "Straße, café and naïve: the 20 € setting (by header)." in texts["header-latin9.html"]
    assert "Straße, café and naïve: the 20 € setting (by BOM)." in texts["bom-utf16.html"]
    assert "設定の説明です。" in texts["guess-utf8.html"]

    # the next run: a changed page is chunked again (by the worker), the others are unchanged
    site.write("p3.html", docsite.page("Page 3", [("Overview", ["Page 3 now says something else."])]))
    w2 = await in_workers.crawl(sitemap, RECRAWLER_CPU_PROCESSES=1)
    p2 = await in_process.crawl(sitemap, RECRAWLER_CPU_PROCESSES=0)
    assert (
        (w2.counts["changed"], w2.counts["unchanged"])
        == (p2.counts["changed"], p2.counts["unchanged"])
        == (1, 15)
    )
    # a changed page's texts wait for the run's verdict: the run's end embeds them, no worker
    assert "recrawler/cpu/worker_embedded" not in w2.stats
    assert w2.report["index"]["texts_embedded"] == p2.report["index"]["texts_embedded"] >= 1
    assert _state(in_workers.db_path) == _state(in_process.db_path)


LATIN = "Straße, café: 20 €."


@pytest.mark.parametrize(
    ("cls", "headers", "body", "declared"),
    [
        (HtmlResponse, {"Content-Type": "text/html; charset=iso-8859-15"}, LATIN.encode("iso-8859-15"), None),
        (HtmlResponse, {}, f"<meta charset='cp1252'><p>{LATIN}</p>".encode("cp1252"), None),
        (HtmlResponse, {"Content-Type": "text/html"}, f"<p>{LATIN}</p>".encode("utf-16"), None),
        (HtmlResponse, {}, "<p>設定の説明です。</p>".encode(), None),
        (TextResponse, {"Content-Type": "text/plain; charset=koi8-r"}, b"\xf0\xd2", None),
        (HtmlResponse, {"Content-Type": "text/html; charset=utf-8"}, LATIN.encode("cp1252"), "cp1252"),
    ],
    ids=["header", "meta", "bom", "detected", "text", "declared"],
)
def test_a_worker_reads_a_pages_encoding_as_scrapy_does(
    cls: type[TextResponse], headers: dict[str, str], body: bytes, declared: str | None
) -> None:
    """The crawl's process hands over what the encoding depends on, never scanning the body."""
    response = cls("https://d/p", headers=headers, body=body, encoding=declared)
    assert EncodingOf.of(response).read(response.url, body) == response.encoding


@deferred_f_from_coro_f
async def test_a_worker_killed_mid_run_costs_one_error_line_and_no_page(
    site: Site, crawls: Crawls, caplog: pytest.LogCaptureFixture
) -> None:
    sitemap = _write_site(site, pages=30)
    crawler = make_crawler(DocsSpider, crawls.settings(RECRAWLER_CPU_PROCESSES=1, CONCURRENT_REQUESTS=2))
    killed: list[int] = []

    def kill_workers(**_: Any) -> None:
        runtime = crawler.get_extension(Runtime)
        pool = runtime.cpu_pool._pool if runtime is not None else None
        if killed or pool is None:
            return
        for process in list(pool._processes.values()):
            assert process.pid is not None
            os.kill(process.pid, signal.SIGKILL)
            killed.append(process.pid)

    crawler.signals.connect(kill_workers, signal=signals.item_scraped)
    await crawler.crawl_async(sitemap_url=sitemap)
    runtime = crawler.get_extension(Runtime)
    assert runtime is not None
    assert killed
    counts = runtime.counters
    assert counts["recrawler/cpu/worker_lost"] == 1
    # the pages the dead worker held, and the rest, were worked in the crawl's process
    assert counts["recrawler/page/new"] == 30
    assert counts["recrawler/page/error"] == 2
    lines = [r.getMessage() for r in caplog.records if "CPU worker process died" in r.getMessage()]
    assert len(lines) == 1
    assert "\n" not in lines[0]


def test_a_script_without_a_main_guard_crawls_once(site: Site, tmp_path: Path) -> None:
    """Workers are forked, never spawned: a spawned worker runs the user's script again, and a
    script without ``if __name__ == "__main__"`` then starts a second crawl in every worker."""
    sitemap = _write_site(site, pages=3)
    script = tmp_path / "crawl_it.py"
    script.write_text(
        textwrap.dedent(
            f"""
            from scrapy.crawler import CrawlerProcess
            from recrawler.spiders.docs import DocsSpider

            print("script started", flush=True)
            process = CrawlerProcess({{
                "ADDONS": {{"recrawler.addon.RecrawlerAddon": 0}},
                "RECRAWLER_DB_URI": "sqlite:///{tmp_path / "state.db"}",
                "RECRAWLER_CPU_PROCESSES": 2,
                "LOG_LEVEL": "INFO",
                "TELNETCONSOLE_ENABLED": False,
            }})
            process.crawl(DocsSpider, sitemap_url={sitemap!r})
            process.start()
            """
        )
    )
    site.clear_requests()
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("script started") == 1
    assert "recrawler/cpu/worker_pages': 5" in done.stderr
    assert len(site.requests("p0.html")) == 1


class AsyncOptedIn(RecrawlerSpiderMixin, scrapy.Spider):
    """A project's own spider whose callback hands its pages to the workers."""

    name = "async_opted"

    def __init__(self, urls: list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.urls = urls or []

    async def start(self) -> AsyncIterator[Any]:
        for url in self.urls:
            yield scrapy.Request(url)

    async def parse(self, response: Response) -> AsyncIterator[Any]:
        yield await self.recrawler_page_async(response)


@deferred_f_from_coro_f
async def test_a_projects_own_spider_hands_its_pages_to_the_workers(site: Site, crawls: Crawls) -> None:
    _write_site(site, pages=4)
    urls = [site.url(f"p{n}.html") for n in range(4)]
    crawler = make_crawler(AsyncOptedIn, crawls.settings(RECRAWLER_CPU_PROCESSES=1))
    await crawler.crawl_async(urls=urls)
    runtime = crawler.get_extension(Runtime)
    assert runtime is not None
    assert runtime.counters["recrawler/cpu/worker_pages"] == 4
    assert runtime.counters["recrawler/page/new"] == 4
    # the second run: validators sent, 304s never handed over
    crawler = make_crawler(AsyncOptedIn, crawls.settings(RECRAWLER_CPU_PROCESSES=1))
    await crawler.crawl_async(urls=urls)
    runtime = crawler.get_extension(Runtime)
    assert runtime is not None
    assert runtime.counters["recrawler/page/unchanged"] == 4
    assert runtime.counters["recrawler/conditional/not_modified"] == 4
    assert "recrawler/cpu/worker_pages" not in runtime.counters


@deferred_f_from_coro_f
async def test_every_page_of_a_first_run_is_fingerprinted_by_a_worker(site: Site, crawls: Crawls) -> None:
    """Observed: the site's noise model was loaded when its first page was classified, so the
    pages handed to the worker before that (200 to 400 of a 2,000-page first run) came back
    without a fingerprint and were fingerprinted and chunked again in the crawl's process."""
    sitemap = _write_site(site, pages=30)
    crawler = make_crawler(DocsSpider, crawls.settings(RECRAWLER_CPU_PROCESSES=1))
    await crawler.crawl_async(sitemap_url=sitemap)
    runtime = crawler.get_extension(Runtime)
    assert runtime is not None
    assert runtime.counters["recrawler/page/new"] == 30
    assert runtime.counters["recrawler/cpu/worker_fingerprints"] == 30


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
            run = await store.begin_run("docs", site, now, lease_secs=0)
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
                await store.record(run, page, [], chunks=chunks)
            embedder = HashingEmbedder()
            assert await embed_missing(store, embedder, pool=pool) == (texts_in, -(-texts_in // 256))
            assert embedder.texts == texts_in
            if not processes:
                assert counters["recrawler/cpu/worker_texts"] == 0
            elif pages == 40:
                # 800 texts, 4 batches: all the worker's
                assert counters["recrawler/cpu/worker_texts"] == 800
            else:
                # 2,400 texts, 10 batches: the worker's first 4, then this process beside it
                assert 4 * 256 <= counters["recrawler/cpu/worker_texts"] < 2400
            assert await store.count_missing(embedder.id) == 0
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
    run = await store.begin_run("docs", site, now, lease_secs=0)
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
        await store.record(run, page, [], chunks=chunks)
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
    real = store.store_embeddings

    async def store_embeddings(rows: Any) -> None:
        n = len(stored)
        if n + 1 < len(begun):
            await asyncio.wait_for(begun[n + 1].wait(), 10)
        stored.append(len(rows))
        await real(rows)

    store.store_embeddings = store_embeddings  # type: ignore[method-assign]
    try:
        embedder = Watched()
        assert await embed_missing(store, embedder) == (1024, 4)
        assert stored == [256] * 4
        assert await store.count_missing(embedder.id) == 0
    finally:
        await store.close()


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
async def test_a_refused_run_stops_its_workers_before_it_returns(site: Site, tmp_path: Path) -> None:
    """A database from a newer recrawler refuses the run before engine_stopped is ever sent: the
    workers forked for it are stopped with the refusal, not left to the interpreter's exit."""
    sitemap = _write_site(site, pages=2)
    db = tmp_path / "state.db"
    store = SQLiteStateStore(str(db))
    await store.open()
    await store.close()
    with statedb.editing(db) as conn:
        conn.execute("INSERT INTO schema_version VALUES (999)")
    before = set(multiprocessing.active_children())
    crawls = Crawls(tmp_path)
    crawls.db_uri = f"sqlite:///{db}"
    crawler = make_crawler(DocsSpider, crawls.settings(RECRAWLER_CPU_PROCESSES=1))
    await crawler.crawl_async(sitemap_url=sitemap)
    runtime = crawler.get_extension(Runtime)
    assert runtime is not None
    assert runtime.exit_code == 5
    assert set(multiprocessing.active_children()) - before == set()


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
        deadline = time.monotonic() + 10
        while (seen := [os.getpriority(os.PRIO_PROCESS, pid) for pid in pids]) != [
            min(own + 5, 19)
        ] * 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert seen == [min(own + 5, 19)] * 2
    finally:
        pool.shutdown()
    assert os.getpriority(os.PRIO_PROCESS, 0) == own


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
