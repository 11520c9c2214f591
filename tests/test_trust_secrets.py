"""Secrets never leave the process: keys and passwords stay out of logs, reports, events and the database."""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING

import pytest

from recrawler.embedders import EmbedderError, OpenAIEmbedder
from tests.embedserver import EmbedServer

if TYPE_CHECKING:
    from collections.abc import Iterator

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
