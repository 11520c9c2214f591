"""Secrets never leave the process: keys and passwords stay out of logs, reports, events and the database."""

from __future__ import annotations

import base64
import json
import logging
from typing import TYPE_CHECKING, Any

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.kb.embedders import EmbedderError, OpenAIEmbedder
from tests import docsite, statedb
from tests.embedserver import EmbedServer

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

API_KEY = "sk-test-SECRET-0123456789abcdef"
PASSWORD = "secretpass-4821"
DB_PASSWORD = "dbsecret-9917"
BASIC = base64.b64encode(f"user:{PASSWORD}".encode()).decode()
SECRETS = (API_KEY, PASSWORD, DB_PASSWORD, BASIC)


@pytest.fixture
def echo_server() -> Iterator[EmbedServer]:
    with EmbedServer(dim=8, echo_auth=True) as server:
        yield server


def with_password(url: str) -> str:
    return url.replace("http://", f"http://user:{PASSWORD}@", 1)


def leaks(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


def test_openai_error_body_echoing_the_key_is_redacted(echo_server: EmbedServer) -> None:
    embedder = OpenAIEmbedder("m", base_url=echo_server.url, api_key=API_KEY, max_retries=0)
    with pytest.raises(EmbedderError, match="401 Unauthorized") as info:
        embedder.embed(["hello"])
    assert echo_server.requests[0].headers["authorization"] == f"Bearer {API_KEY}"
    message = str(info.value)
    assert "Incorrect API key provided: ***" in message
    assert leaks(message) == []


def test_openai_key_echoed_by_a_failing_server_is_redacted() -> None:
    # a key that looks like nothing in particular: masked because the embedder knows it
    key = "plain-looking-credential-42"
    with EmbedServer(dim=8, echo_auth=True) as server:
        embedder = OpenAIEmbedder("m", base_url=server.url, api_key=key, max_retries=0)
        with pytest.raises(EmbedderError) as info:
            embedder.embed(["hello"])
    assert key not in str(info.value)


def test_openai_credentials_in_the_base_url_go_in_a_header_not_the_url(echo_server: EmbedServer) -> None:
    embedder = OpenAIEmbedder("m", base_url=with_password(echo_server.url), max_retries=0)
    assert embedder.url == echo_server.url + "/embeddings"
    assert embedder.id == f"openai:m@{echo_server.url.split('/')[2]}"
    with pytest.raises(EmbedderError, match="401 Unauthorized") as info:
        embedder.embed(["hello"])
    # the request reached the server (urllib would take user:pass@ for part of the host name)
    assert echo_server.requests[0].headers["authorization"] == f"Basic {BASIC}"
    assert leaks(str(info.value)) == []


def test_openai_api_key_wins_over_base_url_credentials(echo_server: EmbedServer) -> None:
    embedder = OpenAIEmbedder("m", base_url=with_password(echo_server.url), api_key=API_KEY, max_retries=0)
    with pytest.raises(EmbedderError) as info:
        embedder.embed(["hello"])
    assert echo_server.requests[0].headers["authorization"] == f"Bearer {API_KEY}"
    assert leaks(str(info.value)) == []


def test_openai_connection_error_never_shows_the_password() -> None:
    with EmbedServer() as closed:
        url = with_password(closed.url)
    embedder = OpenAIEmbedder("m", base_url=url, max_retries=0)
    with pytest.raises(EmbedderError, match="failed after 1 attempts") as info:
        embedder.embed(["hello"])
    assert leaks(str(info.value)) == []


def test_openai_bad_base_url_error_never_shows_the_password() -> None:
    from recrawler.exceptions import ConfigurationError

    with pytest.raises(ConfigurationError, match="RECRAWLER_EMBEDDER_BASE_URL") as info:
        OpenAIEmbedder("m", base_url=f"ftp://user:{PASSWORD}@example.com/v1")
    assert leaks(str(info.value)) == []


@pytest.mark.parametrize(
    ("api_key", "url_credentials"),
    [(API_KEY, False), (API_KEY, True), (None, True)],
    ids=["key", "key-and-url-credentials", "url-credentials"],
)
@deferred_f_from_coro_f
async def test_crawl_leaves_no_secret_behind(
    site: Site,
    crawls: Crawls,
    echo_server: EmbedServer,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    api_key: str | None,
    url_credentials: bool,
) -> None:
    for name in ("RECRAWLER_EMBEDDER_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    if api_key:
        monkeypatch.setenv("RECRAWLER_EMBEDDER_API_KEY", api_key)
    site.write("a.html", docsite.page("A", [("Intro", ["Words about things."])]))
    sitemap = site.write_sitemap(["a.html"])
    # a database URI with a password, as a PostgreSQL one would carry (SQLite ignores it)
    db_uri = f"sqlite://app:{DB_PASSWORD}@/{crawls.db_path}"
    settings: dict[str, Any] = {
        "RECRAWLER_DB_URI": db_uri,
        "RECRAWLER_EMBEDDER": "openai:test-model",
        "RECRAWLER_EMBEDDER_BASE_URL": with_password(echo_server.url) if url_credentials else echo_server.url,
        "RECRAWLER_EMBEDDER_MAX_RETRIES": 0,
    }
    with caplog.at_level(logging.INFO):
        result = await crawls.crawl(sitemap, **settings)

    assert "embedding failed" in caplog.text
    assert leaks(caplog.text) == []
    report_files = sorted(crawls.tmp_path.glob("report*.json"))
    assert report_files
    for report in report_files:
        assert leaks(report.read_text()) == []
    # an unpublished run announces nothing; whatever was written leaks nothing
    assert leaks(crawls.events_path.read_text() if crawls.events_path.exists() else "") == []
    assert [(t, c) for t, c, v in statedb.text_values(crawls.db_path) if leaks(v)] == []

    # the embedding server refused the credentials and said them back: the run stays unpublished
    assert echo_server.requests
    assert result.counts["new"] == 1
    index = result.report["index"]
    assert index["state"] == "unpublished"
    assert "401 Unauthorized" in index["reason"]
    # what is kept is still useful: who, where, which embedder
    assert result.report["db"] == f"sqlite://app:***@/{crawls.db_path}"
    stored = json.loads(statedb.value(crawls.db_path, "SELECT embedder FROM runs"))
    expected = echo_server.url.replace("http://", "http://user:***@") if url_credentials else echo_server.url
    assert stored["base_url"] == expected


SITE_PASSWORD = "site-pass-6604"
SITE_TOKEN = "site-token-31c9e7"
SITE_SESSION = "site-session-88a1f2"
SITE_SECRETS = (
    SITE_PASSWORD,
    SITE_TOKEN,
    SITE_SESSION,
    base64.b64encode(f"support:{SITE_PASSWORD}".encode()).decode(),
)


def site_leaks(text: str) -> list[str]:
    return [secret for secret in SITE_SECRETS if secret in text]


@deferred_f_from_coro_f
async def test_site_credentials_leave_no_trace(
    site: Site,
    crawls: Crawls,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    basic = "Basic " + base64.b64encode(f"support:{SITE_PASSWORD}".encode()).decode()
    require = {"Authorization": basic, "X-Api-Key": SITE_TOKEN, "Cookie": f"session={SITE_SESSION}"}
    for i in range(30):
        site.write(f"p{i}.html", docsite.page(f"P{i}", [("Intro", [f"Private page {i}."])]))
    site.options("*", require=require, login="login.html")
    sitemap = site.write_sitemap([f"p{i}.html" for i in range(30)])
    cookies = tmp_path / "cookies.txt"
    cookies.write_text(
        f"# Netscape HTTP Cookie File\n127.0.0.1\tFALSE\t/\tFALSE\t0\tsession\t{SITE_SESSION}\n"
    )
    monkeypatch.setenv("RECRAWLER_AUTH_USER", "support")
    monkeypatch.setenv("RECRAWLER_AUTH_PASSWORD", SITE_PASSWORD)
    monkeypatch.setenv("RECRAWLER_AUTH_HEADERS", json.dumps({"X-Api-Key": SITE_TOKEN}))
    monkeypatch.setenv("RECRAWLER_AUTH_COOKIES_FILE", str(cookies))
    with caplog.at_level(logging.DEBUG):
        ok = await crawls.crawl(sitemap)
        # then the session expires: the refused run logs its one line, still without a secret
        site.options("*", require={**require, "Cookie": "session=other"})
        refused = await crawls.crawl(sitemap, RECRAWLER_AUTH_LOGIN_URL="/login")
    assert (ok.counts["new"], ok.exit_code) == (30, 0)
    assert refused.exit_code == 4
    assert {r.get("x-api-key") for r in site.requests()} == {SITE_TOKEN}
    assert "refused its credentials" in caplog.text
    assert site_leaks(caplog.text) == []
    for report in sorted(crawls.tmp_path.glob("report*.json")):
        assert site_leaks(report.read_text()) == []
    assert site_leaks(crawls.events_path.read_text()) == []
    assert [(t, c) for t, c, v in statedb.text_values(crawls.db_path) if site_leaks(v)] == []
