"""A run on a bad day ends, and says how: a site that is down stops the run within its outage window
(exit 4, one line) and its errors are counted; Ctrl-C does not wait a Retry-After per queued request;
a second Ctrl-C still ends the run (aborted), prints the summary line and exits non-zero. Real
``scrapy crawl`` processes, signals sent as a shell sends them; each test waits on log lines or on
the server seeing a request, never for a while."""

from __future__ import annotations

import signal
import socket
import socketserver
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from tests import docsite, shell, statedb

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0
PAGES = 200


def write_site(site: Site, n: int = PAGES) -> list[str]:
    paths = [f"docs/page-{i}.html" for i in range(n)]
    for i, path in enumerate(paths):
        site.write(path, docsite.widget_page(i), mtime=T0)
    return paths


def outage(site: Site, paths: list[str], retry_after: int) -> None:
    """Every page answers 503 with *retry_after* (the sitemap still answers: a CDN serves it)."""
    for path in paths:
        site.options(path, status=503, headers={"Retry-After": str(retry_after)})


def crawl_argv(sitemap: str, db: Path, *settings: str) -> list[str]:
    # recrawler's defaults (retries, concurrency, Retry-After), every page due each run
    return shell.scrapy_crawl_argv(
        sitemap, f"RECRAWLER_DB_URI=sqlite:///{db}", "RECRAWLER_SCHEDULE=all", "LOG_LEVEL=INFO", *settings
    )


def first_run(site: Site, db: Path) -> tuple[str, list[str]]:
    paths = write_site(site)
    sitemap = site.write_sitemap(paths)
    done = shell.run_in_checkout(crawl_argv(sitemap, db), timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return sitemap, paths


def run_row(db: Path, run_id: int) -> dict[str, Any]:
    (row,) = statedb.dicts(db, "SELECT state, finish_reason, exit_code FROM runs WHERE id = ?", (run_id,))
    return row


def page_requests(site: Site) -> list[dict[str, Any]]:
    return [r for r in site.requests() if r["path"].startswith("docs/")]


def test_a_site_that_is_down_stops_the_run_within_its_outage_window(site: Site, tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    sitemap, paths = first_run(site, db)
    site.clear_requests()
    outage(site, paths, retry_after=2)
    started = time.monotonic()
    # RECRAWLER_OUTAGE_SECS scaled down from its default (120) to keep the test short; before,
    # only the retries bounded the run: 200 pages x 3 tries, 2 s apart, some 20 minutes
    done = shell.run_in_checkout(crawl_argv(sitemap, db, "RECRAWLER_OUTAGE_SECS=6"), timeout=150)
    elapsed = time.monotonic() - started
    assert done.returncode == 4, done.stderr[-3000:]
    assert elapsed < 90
    down = [line for line in done.stderr.splitlines() if "the site is down" in line]
    assert len(down) == 1, down
    assert "ERROR" in down[0]
    assert "Traceback" not in done.stderr
    assert run_row(db, 2) == {"state": "finished", "finish_reason": "recrawler_site_down", "exit_code": 4}
    # the first requests in flight at once, a few more, not the whole site three times over
    assert len(page_requests(site)) < 80
    # the pages that failed are counted, and nothing was removed
    summary = next(line for line in done.stderr.splitlines() if "crawled:" in line)
    errors = int(summary.split("errors: ")[1].split()[0])
    assert errors >= 1
    assert statedb.value(db, "SELECT COUNT(*) FROM pages WHERE status = 'live'") == PAGES


def test_ctrl_c_in_an_outage_does_not_wait_a_retry_after_per_request(site: Site, tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    sitemap, paths = first_run(site, db)
    outage(site, paths, retry_after=60)
    with shell.Watched(crawl_argv(sitemap, db)) as crawl:
        crawl.wait_line("slowing down to one request every 60.0 s")
        stopped = time.monotonic()
        crawl.process.send_signal(signal.SIGINT)
        # before, the graceful stop waited for each queued request's turn: one a minute
        code = crawl.wait(timeout=120)
        assert time.monotonic() - stopped < 30
    assert code == 4, crawl.stderr[-3000:]
    assert "| exit 4" in crawl.stderr
    assert run_row(db, 2) == {"state": "finished", "finish_reason": "shutdown", "exit_code": 4}
    assert statedb.value(db, "SELECT COUNT(*) FROM pages WHERE status = 'live'") == PAGES


class _Hanging(socketserver.BaseRequestHandler):
    """Answers robots.txt with a 404; any other request is read and never answered."""

    server: HangingServer

    def handle(self) -> None:
        request = self.request.recv(65536).decode("latin-1")
        if " /robots.txt " in request.split("\r\n", 1)[0]:
            self.request.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return
        self.server.hung.set()
        self.server.released.wait()


class HangingServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Hanging)
        self.hung = threading.Event()
        self.released = threading.Event()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"


@pytest.fixture
def hanging() -> Iterator[HangingServer]:
    server = HangingServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.released.set()
        server.shutdown()
        server.server_close()


def test_a_second_ctrl_c_ends_the_run_aborted_with_its_summary_and_a_non_zero_exit(
    hanging: HangingServer, tmp_path: Path
) -> None:
    db = tmp_path / "state.db"
    argv = crawl_argv(f"{hanging.url}/sitemap.xml", db, "DOWNLOAD_TIMEOUT=600")
    with shell.Watched(argv) as crawl:
        crawl.wait_line("recrawler run 1 on")
        # the sitemap request is in flight and never answered: a graceful stop waits for it
        assert hanging.hung.wait(timeout=60)
        crawl.process.send_signal(signal.SIGINT)
        crawl.wait_line("shutting down gracefully")
        crawl.process.send_signal(signal.SIGINT)
        code = crawl.wait(timeout=60)
    assert code == 4, crawl.stderr[-3000:]
    assert "forced shutdown: run 1 ends unfinished (aborted)" in crawl.stderr
    summary = [line for line in crawl.lines if "crawled: 0 new: 0" in line]
    assert len(summary) == 1
    assert summary[0].endswith("exit 4")
    assert run_row(db, 1) == {"state": "aborted", "finish_reason": "shutdown_forced", "exit_code": 4}
    # the lease is released: the next run starts at once, without waiting for it to lapse
    assert statedb.value(db, "SELECT COUNT(*) FROM leases") == 0


# --- a site that is down reports its errors ------------------------------------------------------


@deferred_f_from_coro_f
async def test_a_sitemap_that_answers_503_is_an_error(site: Site, crawls: Crawls) -> None:
    paths = write_site(site)
    sitemap = site.write_sitemap(paths)
    r1 = await crawls.crawl(sitemap)
    assert (r1.counts["new"], r1.counts["errors"]) == (PAGES, 0)
    site.options("sitemap.xml", status=503)
    for path in paths:
        site.options(path, status=503)
    r2 = await crawls.crawl(sitemap)
    assert r2.exit_code == 4
    assert (r2.counts["errors"], r2.counts["listing_errors"], r2.counts["crawled"]) == (1, 1, 1)


@deferred_f_from_coro_f
async def test_a_site_that_refuses_connections_is_an_error(crawls: Crawls) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = await crawls.crawl(f"http://127.0.0.1:{port}/sitemap.xml")
    assert r.exit_code == 4
    assert r.counts["errors"] == 1
