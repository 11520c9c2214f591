"""Secrets in URLs: a webhook URL whose path is its key, credential-like query parameters of a
sitemap URL. Shown masked in every line, never stored."""

from __future__ import annotations

import asyncio
import io
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.cli import main as cli_main
from tests import docsite

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0
PAGES = 100
HOOK_KEY = "hGq3tTnZr8WQx2vK9pLm4sYd"
TOKEN = "tok-7f3a9c2e51b8d4"
API_KEY = "ak-5e8b1d9f3c7a20"


def write_site(site: Site) -> list[str]:
    for n in range(PAGES):
        text = f"Page {n} explains how uploads are retried after {n} seconds."
        site.write(f"p{n}.html", docsite.page(f"P{n}", [("Overview", [text])]), mtime=T0)
    site.write_sitemap([f"p{n}.html" for n in range(PAGES)])
    return [f"p{n}.html" for n in range(PAGES)]


def messages(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in caplog.records)


def stored_bytes(tmp_path: Path) -> bytes:
    """Every byte the run left on disk: the database with its WAL, the report, the events."""
    return b"".join(p.read_bytes() for p in sorted(tmp_path.iterdir()) if p.is_file())


def dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def slack_like() -> Iterator[str]:
    """A receiver at a Slack-style URL (its path is the key) that answers 404 to every POST."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:  # the base class's name
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/services/T000/B000/{HOOK_KEY}"
    server.shutdown()
    server.server_close()


@deferred_f_from_coro_f
async def test_a_webhook_url_whose_path_is_its_key_is_never_shown(
    site: Site,
    crawls: Crawls,
    slack_like: str,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.DEBUG)
    write_site(site)
    hook = {"RECRAWLER_WEBHOOK_URL": slack_like, "RECRAWLER_WEBHOOK_SECRET": "whsec-0123456789"}
    r = await crawls.crawl(site.url("sitemap.xml"), RECRAWLER_EVENTS_URI=None, **hook)
    assert r.counts["new"] == PAGES
    text = messages(caplog)
    port = slack_like.split("/")[2]
    # the ERROR line still says where delivery failed: the receiver's host, not its key
    assert f"webhook http://{port}/*** answered HTTP 404" in text
    assert HOOK_KEY not in text
    caplog.clear()
    monkeypatch.setenv("RECRAWLER_WEBHOOK_URL", slack_like)
    monkeypatch.setenv("RECRAWLER_WEBHOOK_SECRET", "whsec-0123456789")
    out = io.StringIO()
    code = await asyncio.to_thread(cli_main, ["events", "deliver", "--db", crawls.db_uri], out)
    assert code == 1
    shown = out.getvalue() + messages(caplog) + "".join(capfd.readouterr())
    assert "100 still wait in the outbox" in shown
    assert HOOK_KEY not in shown


@deferred_f_from_coro_f
async def test_credential_query_parameters_of_a_sitemap_url_are_masked_and_never_stored(
    site: Site, crawls: Crawls, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    caplog.set_level(logging.DEBUG)
    write_site(site)
    query = f"?token={TOKEN}&api_key={API_KEY}"
    # the site's sitemap, and a second one on a host that is down: its failure is logged
    down = f"http://127.0.0.1:{dead_port()}/sitemap.xml{query}"
    sitemaps = f"{site.url('sitemap.xml' + query)},{down}"
    r = await crawls.crawl(sitemaps)
    assert r.counts["new"] == PAGES
    text = messages(caplog)
    assert "sitemap http://127.0.0.1" in text
    assert "failed" in text
    assert "token=***&api_key=***" in text
    assert TOKEN not in text
    assert API_KEY not in text
    # the second run reads the file again (it is never asked conditionally): the same listing
    caplog.clear()
    r2 = await crawls.crawl(sitemaps)
    assert r2.counts["unchanged"] == PAGES
    assert r2.counts["gone"] == r2.counts["quarantined"] == 0
    assert TOKEN not in messages(caplog)
    on_disk = stored_bytes(tmp_path)
    assert TOKEN.encode() not in on_disk
    assert API_KEY.encode() not in on_disk
    assert site.requests("sitemap.xml" + query)[-1]["if_none_match"] is None
