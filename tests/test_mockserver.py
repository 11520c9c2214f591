"""Tests of the local site server itself, through plain urllib."""

from __future__ import annotations

import gzip
import hashlib
import re
import signal
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.error import HTTPError
from urllib.parse import urlsplit
from urllib.request import HTTPRedirectHandler, ProxyHandler, Request, build_opener
from xml.etree import ElementTree

import pytest

from tests.conftest_mockserver import serve
from tests.docsite import gzip_bytes, page, sitemap

if TYPE_CHECKING:
    from email.message import Message
    from pathlib import Path

    from tests.conftest_mockserver import MockServer, Site

MTIME = 1_767_225_600.0  # 2026-01-01T00:00:00Z
LAST_MODIFIED = "Thu, 01 Jan 2026 00:00:00 GMT"
BODY = "<html><body><main><p>Hello</p></main></body></html>\n"
TAG = '"' + hashlib.sha256(BODY.encode()).hexdigest()[:16] + '"'
SITEMAP_NS = "{http://www.sitemaps.org/schemas/sitemap/0.9}"


class _NoRedirect(HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


# No proxies from the environment, and redirects are answers to check, not to follow.
_opener = build_opener(ProxyHandler({}), _NoRedirect())


@dataclass
class Fetched:
    status: int
    headers: Message
    body: bytes


def address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname is not None
    assert parts.port is not None
    return parts.hostname, parts.port


def fetch(url: str, headers: dict[str, str] | None = None, method: str = "GET") -> Fetched:
    request = Request(url, headers=headers or {}, method=method)
    try:
        with _opener.open(request, timeout=10) as response:
            return Fetched(response.status, response.headers, response.read())
    except HTTPError as exc:
        with exc:
            return Fetched(exc.code, exc.headers, exc.read())


def test_url_printed_and_served(mockserver: MockServer, site: Site) -> None:
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", mockserver.url)
    assert site.url("a.html") == f"{mockserver.url}/{site.name}/a.html"
    site.write("a.html", BODY)
    fetched = fetch(site.url("a.html"))
    assert (fetched.status, fetched.body) == (200, BODY.encode())
    assert fetched.headers["Content-Type"] == "text/html; charset=utf-8"


def test_robots_txt(mockserver: MockServer) -> None:
    fetched = fetch(f"{mockserver.url}/robots.txt")
    assert (fetched.status, fetched.body) == (200, b"User-agent: *\nAllow: /\n")
    assert fetched.headers["Content-Type"] == "text/plain"


@pytest.mark.parametrize(
    ("path", "url_path", "content_type"),
    [
        ("a.xml", "a.xml", "application/xml"),
        ("a.txt", "a.txt", "text/plain"),
        ("docs/index.html", "docs/", "text/html; charset=utf-8"),
        ("index.html", "", "text/html; charset=utf-8"),
    ],
)
def test_content_types_and_index(site: Site, path: str, url_path: str, content_type: str) -> None:
    site.write(path, BODY)
    fetched = fetch(site.url(url_path))
    assert (fetched.status, fetched.body) == (200, BODY.encode())
    assert fetched.headers["Content-Type"] == content_type


@pytest.mark.parametrize(
    ("validators", "etag", "last_modified"),
    [
        (None, TAG, LAST_MODIFIED),
        ("strong", TAG, LAST_MODIFIED),
        ("weak", f"W/{TAG}", LAST_MODIFIED),
        ("lm", None, LAST_MODIFIED),
        ("none", None, None),
    ],
)
def test_validators(site: Site, validators: str | None, etag: str | None, last_modified: str | None) -> None:
    options = {"validators": validators} if validators else {}
    site.write("a.html", BODY, mtime=MTIME, **options)
    fetched = fetch(site.url("a.html"))
    assert fetched.status == 200
    assert fetched.headers["ETag"] == etag
    assert fetched.headers["Last-Modified"] == last_modified


@pytest.mark.parametrize("validators", ["strong", "weak"])
@pytest.mark.parametrize("if_none_match", ["{tag}", "W/{tag}", '"other", {tag}', "*"])
def test_if_none_match_304(site: Site, validators: str, if_none_match: str) -> None:
    site.write("a.html", BODY, mtime=MTIME, validators=validators)
    etag = fetch(site.url("a.html")).headers["ETag"]
    fetched = fetch(site.url("a.html"), {"If-None-Match": if_none_match.format(tag=TAG)})
    assert (fetched.status, fetched.body) == (304, b"")
    # RFC 9110 §15.4.5: the 304 repeats the validators; §8.6: no misleading Content-Length.
    assert fetched.headers["ETag"] == etag
    assert fetched.headers["Last-Modified"] == LAST_MODIFIED
    assert fetched.headers["Content-Length"] is None


def test_304_echoes_etag_byte_for_byte(site: Site) -> None:
    site.write("a.html", BODY)
    etag = fetch(site.url("a.html")).headers["ETag"]
    assert fetch(site.url("a.html"), {"If-None-Match": etag}).status == 304


def test_if_none_match_takes_precedence(site: Site) -> None:
    site.write("a.html", BODY, mtime=MTIME)
    headers = {"If-None-Match": '"other"', "If-Modified-Since": LAST_MODIFIED}
    assert fetch(site.url("a.html"), headers).status == 200
    site.options("a.html", validators="lm")
    assert fetch(site.url("a.html"), headers).status == 200


@pytest.mark.parametrize(
    ("if_modified_since", "status"),
    [
        (LAST_MODIFIED, 304),
        ("Thu, 01 Jan 2026 00:00:01 GMT", 304),
        ("Wed, 31 Dec 2025 23:59:59 GMT", 200),
        ("yesterday", 200),
    ],
)
def test_if_modified_since(site: Site, if_modified_since: str, status: int) -> None:
    site.write("a.html", BODY, mtime=MTIME + 0.5, validators="lm")
    fetched = fetch(site.url("a.html"), {"If-Modified-Since": if_modified_since})
    assert fetched.status == status


def test_if_modified_since_ignored_without_validators(site: Site) -> None:
    site.write("a.html", BODY, mtime=MTIME, validators="none")
    assert fetch(site.url("a.html"), {"If-Modified-Since": LAST_MODIFIED}).status == 200


def test_changed_file_answers_200(site: Site) -> None:
    site.write("a.html", BODY, mtime=MTIME)
    first = fetch(site.url("a.html"))
    validators = {
        "If-None-Match": first.headers["ETag"],
        "If-Modified-Since": first.headers["Last-Modified"],
    }
    # Same bytes, newer mtime: the content-hash ETag still matches and takes precedence.
    site.write("a.html", BODY, mtime=MTIME + 60)
    assert fetch(site.url("a.html"), validators).status == 304
    site.write("a.html", BODY.replace("Hello", "Hello again"), mtime=MTIME + 120)
    changed = fetch(site.url("a.html"), validators)
    assert (changed.status, changed.body) == (200, BODY.replace("Hello", "Hello again").encode())
    assert changed.headers["ETag"] != first.headers["ETag"]
    del validators["If-None-Match"]
    assert fetch(site.url("a.html"), validators).status == 200


def test_not_found(mockserver: MockServer, site: Site) -> None:
    site.write("a.html", BODY, validators="weak")
    assert fetch(site.url("missing.html")).status == 404
    assert fetch(site.url("_meta.json")).status == 404
    assert fetch(site.url("../a.html")).status == 404
    assert fetch(f"{mockserver.url}/no-such-site/a.html").status == 404


def test_gone(site: Site) -> None:
    site.write("a.html", BODY)
    site.remove("a.html", gone=True)
    assert fetch(site.url("a.html")).status == 410
    # write() replaces the options, so the page is back.
    site.write("a.html", BODY)
    assert fetch(site.url("a.html")).status == 200
    site.remove("a.html")
    assert fetch(site.url("a.html")).status == 404


@pytest.mark.parametrize("status", [500, 503])
def test_forced_status(site: Site, status: int) -> None:
    site.write("a.html", BODY, status=status)
    fetched = fetch(site.url("a.html"), {"If-None-Match": "*"})
    assert fetched.status == status
    assert fetched.body
    assert fetched.headers["ETag"] is None
    assert fetched.headers["Last-Modified"] is None
    site.options("a.html", status=None)
    assert fetch(site.url("a.html")).status == 200


def test_redirect(site: Site) -> None:
    site.write("new/b.html", BODY)
    site.options("old.html", redirect="new/b.html")
    fetched = fetch(site.url("old.html"))
    assert fetched.status == 301
    assert fetched.headers["Location"] == urlsplit(site.url("new/b.html")).path


def test_noise_differs_per_request_outside_main(site: Site) -> None:
    html = page("Install", [("Setup", ["Run it."], "pip install x")], chrome_noise=True)
    site.write("a.html", html, noise=True)
    first, second = fetch(site.url("a.html")), fetch(site.url("a.html"))
    assert first.body != second.body
    assert first.headers["ETag"] != second.headers["ETag"]
    for fetched in (first, second):
        assert b"{{" not in fetched.body
        assert b"Related articles" in fetched.body
    main = re.compile(rb"<main>.*</main>", re.DOTALL)
    assert main.findall(first.body) == main.findall(second.body) == main.findall(html.encode())


def test_noise_with_lm_validators_still_304(site: Site) -> None:
    html = page("Install", [("Setup", ["Run it."])], chrome_noise=True)
    site.write("a.html", html, mtime=MTIME, noise=True, validators="lm")
    assert fetch(site.url("a.html"), {"If-Modified-Since": LAST_MODIFIED}).status == 304


def test_gz_served_as_bytes(site: Site) -> None:
    data = gzip_bytes(sitemap([site.url("a.html")]))
    site.write("sitemap.xml.gz", data)
    fetched = fetch(site.url("sitemap.xml.gz"))
    assert (fetched.status, fetched.body) == (200, data)
    assert fetched.headers["Content-Type"] == "application/gzip"
    assert fetched.headers["Content-Encoding"] is None


@pytest.mark.parametrize("name", ["sitemap.xml", "sitemap.xml.gz"])
def test_write_sitemap(site: Site, name: str) -> None:
    url = site.write_sitemap(["a.html", ("b.html", "2026-01-02"), ("c.html", None)], name=name)
    assert url == site.url(name)
    body = fetch(url).body
    root = ElementTree.fromstring(gzip.decompress(body) if name.endswith(".gz") else body)
    entries = [
        (url.findtext(f"{SITEMAP_NS}loc"), url.findtext(f"{SITEMAP_NS}lastmod"))
        for url in root.iter(f"{SITEMAP_NS}url")
    ]
    assert entries == [
        (site.url("a.html"), None),
        (site.url("b.html"), "2026-01-02"),
        (site.url("c.html"), None),
    ]


def test_request_log(site: Site) -> None:
    site.write("a.html", BODY)
    missing = fetch(site.url("missing.html?x=1"))
    fetch(site.url("a.html"))
    fetch(site.url("a.html"), {"If-None-Match": TAG, "If-Modified-Since": LAST_MODIFIED})
    fetch(site.url("a.html"), method="HEAD")
    base = {"method": "GET", "if_none_match": None, "if_modified_since": None}
    logged = site.requests()
    assert all(isinstance(entry.pop("at"), float) for entry in logged)
    assert logged == [
        {**base, "path": "missing.html?x=1", "status": 404, "bytes": len(missing.body)},
        {**base, "path": "a.html", "status": 200, "bytes": len(BODY)},
        {
            **base,
            "path": "a.html",
            "if_none_match": TAG,
            "if_modified_since": LAST_MODIFIED,
            "status": 304,
            "bytes": 0,
        },
        {**base, "path": "a.html", "method": "HEAD", "status": 200, "bytes": 0},
    ]
    assert [entry["status"] for entry in site.requests("a.html")] == [200, 304, 200]
    site.clear_requests()
    assert site.requests() == []


def test_hang_never_answers(site: Site) -> None:
    site.write("a.html", BODY)
    site.write("slow.html", BODY, hang=True)
    with socket.create_connection(address(site.url()), timeout=0.3) as conn:
        conn.sendall(f"GET /{site.name}/slow.html HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        with pytest.raises(TimeoutError):
            conn.recv(1)
    # The server keeps serving other requests meanwhile.
    assert fetch(site.url("a.html")).status == 200
    assert site.requests("slow.html")[0]["status"] is None


@pytest.mark.parametrize("stop", ["sigterm", "stdin_eof"])
def test_server_exits_promptly(tmp_path: Path, stop: str) -> None:
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "_meta.json").write_text('{"slow.html": {"hang": true}}')
    with (
        serve(tmp_path) as server,
        socket.create_connection(address(server.url), timeout=0.3) as conn,
    ):
        conn.sendall(b"GET /s/slow.html HTTP/1.1\r\nHost: x\r\n\r\n")
        with pytest.raises(TimeoutError):
            conn.recv(1)
        # Logged on receipt: the server holds a request it will never answer.
        assert (tmp_path / "s" / "_requests.jsonl").exists()
        if stop == "sigterm":
            server.process.send_signal(signal.SIGTERM)
        else:
            assert server.process.stdin is not None
            server.process.stdin.close()
        assert server.process.wait(timeout=5) == 0
