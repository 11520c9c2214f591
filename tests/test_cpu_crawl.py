"""Per-page CPU work in worker processes (RECRAWLER_CPU_PROCESSES) in a crawl: the same pages as
in-process, a dead worker costs no page, a script without a main guard still crawls once, and a
refused run stops its workers.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING, Any

import pytest
import scrapy
from scrapy import signals
from scrapy.http import HtmlResponse, TextResponse
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.cpu import EncodingOf
from recrawler.extensions.reconcile import decided_exit_code
from recrawler.runtime import Runtime
from recrawler.spiders import RecrawlerSpiderMixin
from recrawler.spiders.docs import DocsSpider
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
    assert decided_exit_code(crawler) == 5
    assert set(multiprocessing.active_children()) - before == set()
