"""Signed webhooks from the outbox, against a real HTTP receiver on 127.0.0.1."""

from __future__ import annotations

import io
import json
import logging
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.cli import main
from recrawler.exceptions import ConfigurationError, EventDeliveryError
from recrawler.state.sqlite import SQLiteStateStore, lease_holder
from recrawler.webhooks import WebhookSink, idempotency_key, sign, verify
from tests import docsite, shell, statedb
from tests.conftest_mockserver import REPO_ROOT
from tests.state_contract import SITE, ev, rec
from tests.state_contract import T0 as T0_DT

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

SECRET = "whsec-test-0123456789abcdef"
T0 = 1_760_000_000.0


def readme_verifier() -> Callable[..., bool]:
    """The receiver's check exactly as the docs give it (docs/deploy.md, Webhooks)."""
    readme = (REPO_ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "def verify_recrawler" in b)
    namespace: dict[str, Any] = {}
    exec(block, namespace)  # the docs' own snippet, run as a reader would
    return namespace["verify_recrawler"]  # type: ignore[no-any-return]


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    status: int

    @property
    def events(self) -> list[dict[str, Any]]:
        return list(json.loads(self.body)["events"])


@dataclass
class Receiver:
    """A webhook receiver: answers each POST with the next planned status (200 once the plan is
    used up) and records every request."""

    url: str = ""
    plan: list[int] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, headers: dict[str, str], body: bytes) -> int:
        with self.lock:
            status = self.plan.pop(0) if self.plan else 200
            self.received.append(Received(headers, body, status))
            return status

    def delivered(self) -> list[dict[str, Any]]:
        """Events of the requests answered 2xx, in order."""
        return [e for r in self.received if 200 <= r.status < 300 for e in r.events]


def serve(receiver: Receiver) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            status = receiver.answer(dict(self.headers.items()), body)
            self.send_response(status)
            if 300 <= status < 400:
                self.send_header("Location", "/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:  # the base class's name
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/recrawler"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    rec = Receiver()
    server = serve(rec)
    yield rec
    server.shutdown()
    server.server_close()


@pytest.fixture
def down_url() -> str:
    """A loopback URL where nothing listens (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/hooks/recrawler"


def webhook(url: str, **extra: Any) -> dict[str, Any]:
    return {
        "RECRAWLER_WEBHOOK_URL": url,
        "RECRAWLER_WEBHOOK_SECRET": SECRET,
        "RECRAWLER_WEBHOOK_BACKOFF_SECS": 0.01,
        "RECRAWLER_WEBHOOK_MAX_RETRIES": 2,
        **extra,
    }


def write_site(site: Site, n: int = 3) -> str:
    for i in range(n):
        site.write(f"p{i}.html", docsite.page(f"P{i}", [("Intro", [f"Text {i}."])]), mtime=T0)
    return site.write_sitemap([f"p{i}.html" for i in range(n)])


def outbox(crawls: Crawls) -> int:
    """Events waiting for delivery (delivered ones stay in the log, marked)."""
    return int(statedb.value(crawls.db_path, "SELECT COUNT(*) FROM outbox WHERE delivered = 0"))


def without_key(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k != "idempotency_key"} for e in events]


# --- signing ------------------------------------------------------------------------------------


def test_the_readme_recipe_verifies_what_sign_signs() -> None:
    verify_recrawler = readme_verifier()
    body = b'{"events":[]}'
    ts = str(int(time.time()))
    headers = {"X-Recrawler-Timestamp": ts, "X-Recrawler-Signature": sign(SECRET, ts, body)}
    assert verify_recrawler(SECRET.encode(), headers, body)
    assert verify(SECRET, ts, body, headers["X-Recrawler-Signature"])
    # another body, another secret, or a replayed (old) timestamp fail
    assert not verify_recrawler(SECRET.encode(), headers, body + b" ")
    assert not verify_recrawler(b"other-secret", headers, body)
    old = str(int(time.time()) - 3600)
    replay = {"X-Recrawler-Timestamp": old, "X-Recrawler-Signature": sign(SECRET, old, body)}
    assert not verify_recrawler(SECRET.encode(), replay, body)
    assert not verify(SECRET, old, body, replay["X-Recrawler-Signature"])


def test_idempotency_key_is_stable_and_names_the_event() -> None:
    payload = '{"run_id": 3, "action": "new", "url": "https://h/a", "key": "h/a", "at": "t"}'
    assert idempotency_key(payload) == idempotency_key(payload)
    assert idempotency_key(payload).startswith("3:h/a:new:")
    assert idempotency_key(payload) != idempotency_key(payload.replace('"t"', '"t2"'))


@pytest.mark.parametrize(
    ("url", "secret", "setting"),
    [
        ("ftp://h/x", SECRET, "RECRAWLER_WEBHOOK_URL"),
        ("http://h/x", "", "RECRAWLER_WEBHOOK_SECRET"),
    ],
)
def test_a_misconfigured_webhook_is_refused(url: str, secret: str, setting: str) -> None:
    with pytest.raises(ConfigurationError, match=setting):
        WebhookSink(url, secret)


def test_a_redirect_or_a_4xx_is_not_retried(receiver: Receiver) -> None:
    line = '{"run_id": 1, "action": "new", "key": "h/a", "at": "t"}'
    for status in (302, 401):
        receiver.plan = [status]
        receiver.received.clear()
        sink = WebhookSink(receiver.url, SECRET, max_retries=3, backoff_secs=0)
        with pytest.raises(EventDeliveryError, match=f"HTTP {status}"):
            sink.deliver([line])
        assert [r.status for r in receiver.received] == [status]


def test_retries_back_off_exponentially_with_bounded_jitter(down_url: str) -> None:
    waits: list[float] = []
    sink = WebhookSink(down_url, SECRET, max_retries=4, backoff_secs=1.0, sleep=waits.append)
    with pytest.raises(EventDeliveryError, match="failed 5 times") as info:
        sink.deliver(['{"run_id": 1, "action": "new", "key": "h/a", "at": "t"}'])
    assert SECRET not in str(info.value)
    assert len(waits) == 4
    for n, wait in enumerate(waits):
        assert 0.5 * 2**n <= wait <= 2**n


# --- delivery from a crawl ----------------------------------------------------------------------


@deferred_f_from_coro_f
async def test_a_run_posts_its_events_in_signed_batches(
    site: Site, crawls: Crawls, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    verify_recrawler = readme_verifier()
    sitemap = write_site(site, 3)
    caplog.set_level(logging.DEBUG)
    r1 = await crawls.crawl(sitemap, **webhook(receiver.url, RECRAWLER_WEBHOOK_BATCH_SIZE=2))
    assert r1.counts["new"] == 3
    # two POSTs (2 + 1 events), each signed over its timestamp and body
    assert [len(r.events) for r in receiver.received] == [2, 1]
    for r in receiver.received:
        assert verify_recrawler(SECRET.encode(), r.headers, r.body)
        assert r.headers["Content-Type"] == "application/json"
    delivered = receiver.delivered()
    keys = [e["idempotency_key"] for e in delivered]
    assert len(set(keys)) == 3
    assert all(k.startswith(f"{e['run_id']}:{e['key']}:new:") for k, e in zip(keys, delivered, strict=True))
    # the webhook gets exactly the events the events file gets
    assert without_key(delivered) == r1.events
    assert outbox(crawls) == 0
    # nothing changed: no events, no POST
    r2 = await crawls.crawl(sitemap, **webhook(receiver.url))
    assert r2.counts["unchanged"] == 3
    assert len(receiver.received) == 2
    # the secret is never logged
    assert not [r for r in caplog.records if SECRET in r.getMessage()]


@deferred_f_from_coro_f
async def test_a_receiver_answering_500_then_200_gets_every_event_once(
    site: Site, crawls: Crawls, receiver: Receiver
) -> None:
    sitemap = write_site(site, 3)
    receiver.plan = [500, 503]
    r1 = await crawls.crawl(sitemap, **webhook(receiver.url, RECRAWLER_WEBHOOK_BATCH_SIZE=10))
    assert [r.status for r in receiver.received] == [500, 503, 200]
    # the retries carry the same events under the same idempotency keys
    keys = [[e["idempotency_key"] for e in r.events] for r in receiver.received]
    assert keys[0] == keys[1] == keys[2]
    assert without_key(receiver.delivered()) == r1.events
    assert outbox(crawls) == 0


@deferred_f_from_coro_f
async def test_a_receiver_down_for_a_run_gets_the_events_later(
    site: Site,
    crawls: Crawls,
    down_url: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    sitemap = write_site(site, 3)
    r1 = await crawls.crawl(sitemap, RECRAWLER_EVENTS_URI=None, **webhook(down_url))
    assert r1.counts["new"] == 3
    assert r1.exit_code == 0  # the pages are stored: only their events wait
    assert outbox(crawls) == 3
    assert any("kept in the outbox" in r.getMessage() for r in caplog.records)
    # `recrawler events deliver` while the receiver is still down: exit 1, nothing lost
    monkeypatch.setenv("RECRAWLER_WEBHOOK_URL", down_url)
    monkeypatch.setenv("RECRAWLER_WEBHOOK_SECRET", SECRET)
    fast = ["-s", "RECRAWLER_WEBHOOK_BACKOFF_SECS=0.01", "-s", "RECRAWLER_WEBHOOK_MAX_RETRIES=1"]
    code, out = await shell.acli("events", "deliver", "--db", crawls.db_uri, *fast)
    assert (code, out) == (
        1,
        "0 events delivered; 3 still wait in the outbox: delivery failed (see above); run it again later\n",
    )
    assert outbox(crawls) == 3
    # the receiver is back
    rec = Receiver()
    server = serve(rec)
    try:
        monkeypatch.setenv("RECRAWLER_WEBHOOK_URL", rec.url)
        assert await shell.acli("events", "deliver", "--db", crawls.db_uri, *fast) == (
            0,
            "3 events delivered; none wait in the outbox\n",
        )
        delivered = rec.delivered()
        assert sorted(e["url"] for e in delivered) == [site.url(f"p{i}.html") for i in range(3)]
        assert {e["action"] for e in delivered} == {"new"}
        verify_recrawler = readme_verifier()
        assert all(verify_recrawler(SECRET.encode(), r.headers, r.body) for r in rec.received)
        assert outbox(crawls) == 0
        # delivered events left the outbox: a second delivery sends nothing
        assert (await shell.acli("events", "deliver", "--db", crawls.db_uri, *fast))[0] == 0
        assert len(rec.received) == 1
    finally:
        server.shutdown()
        server.server_close()


def test_events_deliver_needs_somewhere_to_deliver_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("RECRAWLER_WEBHOOK_URL", "RECRAWLER_EVENTS_URI"):
        monkeypatch.delenv(name, raising=False)
    assert main(["events", "deliver", "--db", f"sqlite:///{tmp_path / 'x.db'}"], out=io.StringIO()) == 2


@deferred_f_from_coro_f
async def test_a_webhook_is_called_on_delivery_never_from_a_commit(
    tmp_path: Path, receiver: Receiver
) -> None:
    """Even where events go out after each commit (RECRAWLER_PUBLISH=page), a network sink waits for
    ``deliver()``, so a slow or absent receiver never holds up page writes."""
    sink = WebhookSink(receiver.url, SECRET, backoff_secs=0)
    store = SQLiteStateStore(str(tmp_path / "state.db"), batch_size=1, sink=sink, deliver_on_commit=True)
    await store.open()
    try:
        run = await store.runs.begin_run("docs", SITE, T0_DT, holder=lease_holder(), publish_each_page=True)
        for name in ("a", "b"):
            page = rec(name)
            await store.pages.record(run, page, [ev(run, page)])
        await store.flush()
        assert receiver.received == []
        assert await store.pending_events() == 2
        await store.deliver()
        assert [e["key"] for e in receiver.delivered()] == [f"{SITE}/a", f"{SITE}/b"]
        assert await store.pending_events() == 0
    finally:
        await store.close()
    assert len(receiver.received) == 1


def test_an_answer_that_is_not_http_is_retried_then_kept(tmp_path: Path) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        url = f"http://127.0.0.1:{server.getsockname()[1]}/"

        def garbage() -> None:
            for _ in range(2):
                conn, _ = server.accept()
                with conn:
                    conn.recv(65536)
                    conn.sendall(b"not http at all\r\n\r\n")

        thread = threading.Thread(target=garbage, daemon=True)
        thread.start()
        sink = WebhookSink(url, SECRET, max_retries=1, backoff_secs=0)
        with pytest.raises(EventDeliveryError, match="failed 2 times"):
            sink.deliver(['{"run_id": 1, "action": "new", "key": "h/a", "at": "t"}'])
        thread.join(timeout=10)


@deferred_f_from_coro_f
async def test_a_held_run_posts_nothing_until_approved_and_a_discarded_one_never(
    site: Site, crawls: Crawls, receiver: Receiver
) -> None:
    sitemap = write_site(site, 12)
    await crawls.crawl(sitemap, **webhook(receiver.url))
    posted = len(receiver.delivered())
    assert posted == 12
    for i in range(12):
        site.write(
            f"p{i}.html", docsite.page(f"P{i}", [("Intro", [f"Text {i}, second edition."])]), mtime=T0 + 60
        )
    r2 = await crawls.crawl(sitemap, **webhook(receiver.url))
    assert r2.report["held"] == ["change_spike"]
    assert len(receiver.delivered()) == posted
    # discarded: its events are gone, never POSTed
    assert (await shell.acli("runs", "discard", str(r2.report["run_id"]), "--db", crawls.db_uri))[0] == 0
    r3 = await crawls.crawl(sitemap, **webhook(receiver.url))
    assert r3.report["held"] == ["change_spike"]
    assert len(receiver.delivered()) == posted
    # approved: its events go out with the next delivery, once each
    assert (await shell.acli("runs", "approve", str(r3.report["run_id"]), "--db", crawls.db_uri))[0] == 0
    await crawls.crawl(sitemap, **webhook(receiver.url))
    changed = [e for e in receiver.delivered()[posted:] if e["action"] == "changed"]
    assert sorted(e["key"].rsplit("/", 1)[1] for e in changed) == sorted(f"p{i}.html" for i in range(12))
    assert {e["run_id"] for e in changed} == {r3.report["run_id"]}
