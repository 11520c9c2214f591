"""Docs behind a login: basic auth, a bearer token or any header, cookies from a file, sent to the
site's own hosts only; a login that expired is an outage of the whole run, never a removal."""

from __future__ import annotations

import base64
import json
import logging
from typing import TYPE_CHECKING, Any

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from tests import docsite, statedb
from tests.embedserver import EmbedServer

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0
N_PAGES = 200
PASSWORD = "docs-pass-7731"
BASIC = "Basic " + base64.b64encode(f"support:{PASSWORD}".encode()).decode()
TOKEN = "tok-93f1c0ffee"
API_KEY = "key-5521beef"
SESSION = "sess-0a9b8c7d"
ROTATED = "rot-4411cafe"


@pytest.fixture
def embed_server() -> Iterator[EmbedServer]:
    with EmbedServer(dim=16) as server:
        yield server


def build_site(site: Site, *, require: dict[str, str], login: str | None = None) -> str:
    """A site of N_PAGES pages behind credentials; one page a temporary redirect lends to
    another host (``localhost`` for the server's ``127.0.0.1``) that needs none."""
    for i in range(N_PAGES):
        page = docsite.page(
            f"Runbook {i}", [("Steps", [f"Runbook {i}: restart worker {i} and watch the queue."])]
        )
        site.write(f"runbooks/{i}.html", page, mtime=T0)
    site.write("runbooks/elsewhere.html", docsite.page("Status", [("Now", ["All systems go."])]), mtime=T0)
    site.options("runbooks/elsewhere.html", public=True)
    other_host = site.url("runbooks/elsewhere.html").replace("127.0.0.1", "localhost")
    site.write("runbooks/status.html", "", mtime=T0, location=other_host, redirect_status=302)
    site.write("login.html", docsite.page("Sign in", [("Sign in", ["Your session expired."])]), mtime=T0)
    lock(site, require, login)
    return site.write_sitemap([*(f"runbooks/{i}.html" for i in range(N_PAGES)), "runbooks/status.html"])


def lock(site: Site, require: dict[str, str], login: str | None = None) -> None:
    """What every path of the site requires from now on (the server's side of a login)."""
    site.options("*", require=require, login=login)


def site_requests(site: Site) -> list[dict[str, Any]]:
    return [r for r in site.requests() if r["path"] != "runbooks/elsewhere.html"]


def live_texts(crawls: Crawls) -> dict[str, str]:
    rows = statedb.rows(crawls.db_path, "SELECT key, status, content_hash FROM pages")
    return {key: f"{status}:{content_hash}" for key, status, content_hash in rows}


def cookie_file(tmp_path: Path, *cookies: tuple[str, str, str]) -> str:
    """A Netscape cookies.txt with (domain, name, value) session cookies."""
    lines = ["# Netscape HTTP Cookie File"]
    for domain, name, value in cookies:
        # the flag says whether the cookie is for the domain's subdomains too (a leading dot)
        subdomains = "TRUE" if domain.startswith(".") else "FALSE"
        lines.append(f"{domain}\t{subdomains}\t/\tFALSE\t0\t{name}\t{value}")
    path = tmp_path / "cookies.txt"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@deferred_f_from_coro_f
async def test_basic_auth_reaches_only_the_sites_host_and_a_401_stops_the_run(
    site: Site,
    crawls: Crawls,
    embed_server: EmbedServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    sitemap = build_site(site, require={"Authorization": BASIC})
    # the secret comes from the environment, as a deployment sets it
    monkeypatch.setenv("RECRAWLER_AUTH_USER", "support")
    monkeypatch.setenv("RECRAWLER_AUTH_PASSWORD", PASSWORD)
    embedder = {"RECRAWLER_EMBEDDER": "openai:test-model", "RECRAWLER_EMBEDDER_BASE_URL": embed_server.url}
    r1 = await crawls.crawl(sitemap, {"allowed_hosts": "*"}, **embedder)
    assert r1.counts["new"] == N_PAGES + 1
    assert r1.counts["errors"] == 0
    assert r1.exit_code == 0
    # every request to the site carried them; the other host got none, nor did the embedder
    sent = site_requests(site)
    assert len(sent) == N_PAGES + 2
    assert {r.get("authorization") for r in sent} == {BASIC}
    elsewhere = site.requests("runbooks/elsewhere.html")
    assert len(elsewhere) == 1
    assert "authorization" not in elsewhere[0]
    assert embed_server.requests
    assert all("authorization" not in r.headers for r in embed_server.requests)
    stored = live_texts(crawls)

    # the password changes on the server: 401s. The run stops at once, removes nothing
    lock(site, {"Authorization": "Basic " + base64.b64encode(b"support:rotated").decode()})
    site.clear_requests()
    with caplog.at_level(logging.INFO):
        r2 = await crawls.crawl(sitemap, {"allowed_hosts": "*"}, **embedder)
    assert r2.finish_reason == "recrawler_auth_failed"
    assert r2.exit_code == 4
    # the sitemap was the first to be refused: the listing failed too
    assert r2.report["reconcile"]["skipped"] == ["not_finished", "sitemap_failed"]
    assert r2.report["index"]["state"] == "unpublished"
    assert r2.stats["recrawler/auth/refused"] >= 1
    assert not any(
        v for k, v in r2.stats.items() if k.startswith(("recrawler/page/missing", "recrawler/page/gone"))
    )
    assert r2.counts["quarantined"] == r2.counts["gone"] == 0
    refused = [r for r in caplog.records if "refused its credentials" in r.getMessage()]
    assert len(refused) == 1
    assert refused[0].levelno == logging.ERROR
    assert "HTTP 401" in refused[0].getMessage()
    # it stopped asking: a few requests in flight, not the whole site
    assert len(site_requests(site)) < N_PAGES // 2
    assert live_texts(crawls) == stored


@deferred_f_from_coro_f
async def test_a_bearer_token_and_an_api_key_header_from_the_environment(
    site: Site, crawls: Crawls, monkeypatch: pytest.MonkeyPatch
) -> None:
    sitemap = build_site(site, require={"Authorization": f"Bearer {TOKEN}", "X-Api-Key": API_KEY})
    monkeypatch.setenv(
        "RECRAWLER_AUTH_HEADERS", json.dumps({"Authorization": f"Bearer {TOKEN}", "X-Api-Key": API_KEY})
    )
    result = await crawls.crawl(sitemap)
    assert result.counts["new"] == N_PAGES
    assert result.counts["errors"] == 1  # status.html's loan to another host is refused: offsite
    assert {(r.get("authorization"), r.get("x-api-key")) for r in site_requests(site)} == {
        (f"Bearer {TOKEN}", API_KEY)
    }
    assert site.requests("runbooks/elsewhere.html") == []


@deferred_f_from_coro_f
async def test_session_cookies_from_a_file_and_an_expired_session(
    site: Site, crawls: Crawls, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sitemap = build_site(site, require={"Cookie": f"session={SESSION}"}, login="login.html")
    cookies = cookie_file(
        tmp_path,
        ("127.0.0.1", "session", SESSION),
        # a cookie of another site in the same export: never sent anywhere
        (".other.example", "tracker", "other-value"),
    )
    settings = {"RECRAWLER_AUTH_COOKIES_FILE": cookies, "RECRAWLER_AUTH_LOGIN_URL": r"/login\.html"}
    # the listing is public here: the pages themselves are what redirects to the login page
    site.options("sitemap.xml", public=True)
    r1 = await crawls.crawl(sitemap, {"allowed_hosts": "*"}, **settings)
    assert r1.counts["new"] == N_PAGES + 1
    assert r1.exit_code == 0
    assert {r.get("cookie") for r in site_requests(site)} == {f"session={SESSION}"}
    assert "cookie" not in site.requests("runbooks/elsewhere.html")[0]
    stored = live_texts(crawls)

    # the session expires: every page now redirects to the login page
    lock(site, {"Cookie": "session=renewed-elsewhere"}, login="login.html")
    site.clear_requests()
    with caplog.at_level(logging.INFO):
        r2 = await crawls.crawl(sitemap, {"allowed_hosts": "*"}, **settings)
    assert (r2.finish_reason, r2.exit_code) == ("recrawler_auth_failed", 4)
    assert r2.report["reconcile"]["skipped"] == ["not_finished"]
    refused = [r.getMessage() for r in caplog.records if "refused its credentials" in r.getMessage()]
    assert len(refused) == 1
    assert "a redirect to the login page" in refused[0]
    # the login page was never fetched, so never indexed as every page's new text
    assert site.requests("login.html") == []
    assert "recrawler/page/changed" not in r2.stats
    assert r2.counts["quarantined"] == r2.counts["gone"] == 0
    assert live_texts(crawls) == stored

    # a renewed cookie file: the next run goes on as if nothing happened
    renewed = cookie_file(tmp_path, ("127.0.0.1", "session", "renewed-elsewhere"))
    r3 = await crawls.crawl(
        sitemap, {"allowed_hosts": "*"}, **{**settings, "RECRAWLER_AUTH_COOKIES_FILE": renewed}
    )
    assert r3.exit_code == 0
    assert r3.counts["unchanged"] == N_PAGES + 1
    assert r3.counts["gone"] == r3.counts["quarantined"] == 0


@deferred_f_from_coro_f
async def test_without_credentials_nothing_is_sent_and_nothing_changes(site: Site, crawls: Crawls) -> None:
    sitemap = build_site(site, require={})
    result = await crawls.crawl(sitemap)
    assert result.counts["new"] == N_PAGES
    assert all(not {"authorization", "cookie", "x-api-key"} & r.keys() for r in site.requests())
    assert "recrawler/auth/refused" not in result.stats


@deferred_f_from_coro_f
async def test_cookies_reach_the_sites_own_origin_never_another_port_of_its_host(
    site: Site, other_port: Site, crawls: Crawls, tmp_path: Path
) -> None:
    """A cookie's host is a host name, whatever the port (RFC 6265 §8.5): the session cookie of the
    file and the one the site rotates once reached another server on the same host name."""
    build_site(site, require={"Cookie": f"session={SESSION}"})
    notes = [f"notes/{i}.html" for i in range(30)]
    for path in notes:
        other_port.write(path, docsite.page(path, [("Note", [f"Another service: {path}."])]), mtime=T0)
    # a page of the site sends its readers there, and the listing names pages there
    there = other_port.url("notes/0.html")
    site.write("runbooks/port.html", "", mtime=T0, location=there, redirect_status=302)
    listed = [
        *(site.url(f"runbooks/{i}.html") for i in range(N_PAGES)),
        site.url("runbooks/status.html"),
        site.url("runbooks/port.html"),
        *(other_port.url(p) for p in notes),
    ]
    # the listing rotates a cookie of its own, as a site renewing its session does
    site.write("sitemap.xml", docsite.sitemap(listed), headers={"Set-Cookie": f"rotated={ROTATED}; Path=/"})
    cookies = cookie_file(tmp_path, ("127.0.0.1", "session", SESSION))

    result = await crawls.crawl(
        site.url("sitemap.xml"), {"allowed_hosts": "*"}, RECRAWLER_AUTH_COOKIES_FILE=cookies
    )
    assert result.exit_code == 0
    assert result.counts["new"] == N_PAGES + 2 + len(notes)
    pages = [r for r in site_requests(site) if r["path"].startswith("runbooks/")]
    assert len(pages) == N_PAGES + 2
    assert all(f"session={SESSION}" in r["cookie"] and f"rotated={ROTATED}" in r["cookie"] for r in pages)
    elsewhere = other_port.requests()
    assert len(elsewhere) == len(notes) + 1
    assert [r for r in elsewhere if "cookie" in r or "authorization" in r] == []
