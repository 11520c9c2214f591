"""OpenAIEmbedder against tests/embedserver.py: batches, keys, retries, and errors that say what failed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from recrawler.exceptions import ConfigurationError, RecrawlerError
from recrawler.kb.embedders import (
    EmbedderError,
    OpenAIEmbedder,
    embedder_from_spec,
)
from tests.embedding import unit
from tests.embedserver import EmbedServer, Reply, vector_for

if TYPE_CHECKING:
    from collections.abc import Iterator


class NoSleepEmbedder(OpenAIEmbedder):
    """Records the waits between retries instead of sleeping."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sleeps: list[float] = []

    def _sleep(self, secs: float) -> None:
        self.sleeps.append(secs)


@pytest.fixture
def server() -> Iterator[EmbedServer]:
    with EmbedServer(dim=8) as s:
        yield s


@pytest.fixture
def keyed_server() -> Iterator[EmbedServer]:
    with EmbedServer(dim=8, api_key="sk-good") as s:
        yield s


def test_openai_batches_and_keeps_order(server: EmbedServer) -> None:
    texts = ["alpha", "beta", "gamma", "delta", "epsilon"]
    embedder = OpenAIEmbedder("test-model", base_url=server.url, batch_size=2)
    vectors = embedder.embed(texts)
    assert [r.body for r in server.requests] == [
        {"model": "test-model", "input": ["alpha", "beta"]},
        {"model": "test-model", "input": ["gamma", "delta"]},
        {"model": "test-model", "input": ["epsilon"]},
    ]
    assert {r.path for r in server.requests} == {"/v1/embeddings"}
    assert server.requests[0].headers["content-type"] == "application/json"
    assert vectors.shape == (5, 8)
    assert vectors.dtype == np.float32
    # The server answers in reverse index order and unnormalised: rows are sorted and rescaled.
    np.testing.assert_allclose(vectors, [unit(vector_for(t, 8)) for t in texts], rtol=1e-5)
    assert (embedder.calls, embedder.texts, embedder.dim) == (3, 5, 8)


@pytest.mark.parametrize("suffix", ["", "/"])
def test_openai_base_url_with_or_without_trailing_slash(server: EmbedServer, suffix: str) -> None:
    embedder = OpenAIEmbedder("m", base_url=server.url + suffix)
    embedder.embed(["x"])
    assert embedder.url == server.url + "/embeddings"
    assert [r.path for r in server.requests] == ["/v1/embeddings"]


def test_openai_blank_texts_are_not_sent(server: EmbedServer) -> None:
    embedder = OpenAIEmbedder("m", base_url=server.url)
    vectors = embedder.embed(["one", "", "  ", "two"])
    assert [r.body["input"] for r in server.requests] == [["one", "two"]]
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), [1, 0, 0, 1], atol=1e-6)
    assert embedder.texts == 4


def test_openai_only_blank_texts_probe_the_dimension_once(server: EmbedServer) -> None:
    embedder = OpenAIEmbedder("m", base_url=server.url)
    assert embedder.dim is None
    assert embedder.embed([""]).shape == (1, 8)
    assert embedder.embed(["", ""]).shape == (2, 8)
    assert len(server.requests) == 1
    assert embedder.embed([]).shape == (0, 8)


def test_openai_id_names_model_and_host(server: EmbedServer) -> None:
    assert OpenAIEmbedder("text-embedding-3-small").id == "openai:text-embedding-3-small@api.openai.com"
    port = server.url.split(":")[2].split("/")[0]
    assert OpenAIEmbedder("nomic-embed-text:latest", base_url=server.url).id == (
        f"openai:nomic-embed-text:latest@127.0.0.1:{port}"
    )


def test_openai_sends_bearer_key(keyed_server: EmbedServer) -> None:
    embedder = OpenAIEmbedder("m", base_url=keyed_server.url, api_key="sk-good")
    assert embedder.embed(["x"]).shape == (1, 8)
    assert keyed_server.requests[0].headers["authorization"] == "Bearer sk-good"


def test_openai_sends_no_authorization_without_key(server: EmbedServer) -> None:
    OpenAIEmbedder("m", base_url=server.url).embed(["x"])
    assert "authorization" not in server.requests[0].headers


def test_openai_429_is_retried_honouring_retry_after(server: EmbedServer) -> None:
    server.script(Reply(429, headers={"Retry-After": "0"}))
    embedder = NoSleepEmbedder("m", base_url=server.url)
    assert embedder.embed(["x"]).shape == (1, 8)
    assert embedder.calls == 2
    assert embedder.sleeps == [0.0]


def test_openai_retry_after_is_capped(server: EmbedServer) -> None:
    server.script(Reply(503, headers={"Retry-After": "3600"}), Reply(429, headers={"Retry-After": "soon"}))
    embedder = NoSleepEmbedder("m", base_url=server.url, backoff_secs=0.5)
    embedder.embed(["x"])
    assert embedder.sleeps[0] == 30.0
    # Not a number of seconds: exponential backoff (second attempt) with up to 10% jitter.
    assert 1.0 <= embedder.sleeps[1] <= 1.1


def test_openai_5xx_is_retried_with_exponential_backoff(server: EmbedServer) -> None:
    server.script(Reply(503), Reply(502), Reply(500))
    embedder = NoSleepEmbedder("m", base_url=server.url, backoff_secs=0.5)
    assert embedder.embed(["x"]).shape == (1, 8)
    assert embedder.calls == 4
    for wait, base in zip(embedder.sleeps, [0.5, 1.0, 2.0], strict=True):
        assert base <= wait <= base * 1.1


def test_openai_exhausted_retries_raise(server: EmbedServer) -> None:
    server.script(*[Reply(503)] * 3)
    embedder = NoSleepEmbedder("m", base_url=server.url, max_retries=2)
    with pytest.raises(EmbedderError, match=r"after 3 attempts, last status 503 Service Unavailable") as info:
        embedder.embed(["x"])
    assert server.url + "/embeddings" in str(info.value)
    assert "\n" not in str(info.value)
    assert embedder.calls == 3
    assert embedder.texts == 0


def test_openai_dropped_connection_is_retried(server: EmbedServer) -> None:
    server.script(Reply(drop=True))
    embedder = NoSleepEmbedder("m", base_url=server.url)
    assert embedder.embed(["x"]).shape == (1, 8)
    assert embedder.calls == 2


def test_openai_timeout_is_retried(server: EmbedServer) -> None:
    server.script(Reply(delay_secs=5))
    embedder = NoSleepEmbedder("m", base_url=server.url, timeout_secs=0.2)
    assert embedder.embed(["x"]).shape == (1, 8)
    assert embedder.calls == 2


def test_openai_connection_refused_raises_after_retries() -> None:
    with EmbedServer() as closed:
        url = closed.url
    embedder = NoSleepEmbedder("m", base_url=url, max_retries=1)
    with pytest.raises(EmbedderError, match=r"after 2 attempts, last error .*refused"):
        embedder.embed(["x"])
    assert embedder.calls == 2


def test_openai_401_raises_at_once(keyed_server: EmbedServer) -> None:
    embedder = NoSleepEmbedder("m", base_url=keyed_server.url)
    with pytest.raises(EmbedderError) as info:
        embedder.embed(["x"])
    message = str(info.value)
    assert message.startswith(f"401 Unauthorized from {keyed_server.url}/embeddings: ")
    assert "RECRAWLER_EMBEDDER_API_KEY" in message
    assert "OPENAI_API_KEY" in message
    assert "Incorrect API key provided" in message
    assert "\n" not in message
    assert embedder.calls == 1
    assert embedder.sleeps == []


def test_openai_wrong_key_says_it_was_refused(keyed_server: EmbedServer) -> None:
    embedder = OpenAIEmbedder("m", base_url=keyed_server.url, api_key="sk-bad")
    with pytest.raises(EmbedderError, match=r"^401 Unauthorized .*API key was refused"):
        embedder.embed(["x"])


def test_openai_403_raises_at_once(server: EmbedServer) -> None:
    server.script(Reply(403, body={"error": {"message": "model not allowed"}}))
    embedder = OpenAIEmbedder("m", base_url=server.url, api_key="sk-x")
    with pytest.raises(EmbedderError, match=r"^403 Forbidden from .*model not allowed"):
        embedder.embed(["x"])
    assert embedder.calls == 1


def test_openai_other_4xx_raise_with_server_message(server: EmbedServer) -> None:
    server.script(Reply(400, body={"error": {"message": "This model's maximum context length is 8192"}}))
    embedder = NoSleepEmbedder("m", base_url=server.url)
    with pytest.raises(EmbedderError, match=r"^400 Bad Request from .*: This model's maximum context length"):
        embedder.embed(["x"])
    assert embedder.calls == 1


def test_openai_wrong_path_is_a_404(server: EmbedServer) -> None:
    embedder = OpenAIEmbedder("m", base_url=server.url + "/nope")
    with pytest.raises(EmbedderError, match=r"^404 Not Found .*no route /v1/nope/embeddings"):
        embedder.embed(["x"])


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ({"unexpected": True}, "malformed response"),
        ({"data": [{"index": 0}]}, "malformed response"),
        ({"data": []}, "returned 0 embeddings for 1 texts"),
    ],
)
def test_openai_malformed_response(server: EmbedServer, body: dict[str, Any], match: str) -> None:
    server.script(Reply(200, body=body))
    embedder = OpenAIEmbedder("m", base_url=server.url)
    with pytest.raises(EmbedderError, match=match):
        embedder.embed(["x"])
    assert embedder.calls == 1


def test_openai_dimension_change_is_an_error(server: EmbedServer) -> None:
    embedder = OpenAIEmbedder("m", base_url=server.url)
    embedder.embed(["x"])
    server.script(Reply(200, body={"data": [{"index": 0, "embedding": [1.0, 0.0]}]}))
    with pytest.raises(EmbedderError, match="returned 2 dimensions, expected 8"):
        embedder.embed(["y"])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"base_url": "ftp://example.com/v1"}, "RECRAWLER_EMBEDDER_BASE_URL"),
        ({"base_url": "localhost:11434/v1"}, "RECRAWLER_EMBEDDER_BASE_URL"),
        ({"batch_size": 0}, "RECRAWLER_EMBEDDER_BATCH_SIZE"),
        ({"max_retries": -1}, "RECRAWLER_EMBEDDER_MAX_RETRIES"),
        ({"timeout_secs": 0}, "RECRAWLER_EMBEDDER_TIMEOUT_SECS"),
    ],
)
def test_openai_bad_options(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        OpenAIEmbedder("m", **kwargs)


def test_embedder_error_is_a_recrawler_error() -> None:
    assert issubclass(EmbedderError, RecrawlerError)


def test_spec_openai_keeps_colons_in_model_and_passes_options(server: EmbedServer) -> None:
    embedder = embedder_from_spec(
        "openai:nomic-embed-text:latest",
        base_url=server.url,
        api_key="",
        batch_size=3,
        max_retries=1,
        timeout_secs=5.0,
    )
    assert isinstance(embedder, OpenAIEmbedder)
    assert (embedder.model, embedder.batch_size, embedder.max_retries, embedder.timeout_secs) == (
        "nomic-embed-text:latest",
        3,
        1,
        5.0,
    )
    embedder.embed(["x"])
    assert server.requests[0].body["model"] == "nomic-embed-text:latest"
    assert "authorization" not in server.requests[0].headers


@pytest.mark.parametrize(
    ("env", "api_key", "sent"),
    [
        ({"RECRAWLER_EMBEDDER_API_KEY": "sk-good", "OPENAI_API_KEY": "sk-other"}, None, "Bearer sk-good"),
        ({"OPENAI_API_KEY": "sk-good"}, None, "Bearer sk-good"),
        ({"RECRAWLER_EMBEDDER_API_KEY": "sk-other"}, "sk-good", "Bearer sk-good"),
        ({}, None, None),
    ],
)
def test_spec_openai_key_from_environment(
    keyed_server: EmbedServer,
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    api_key: str | None,
    sent: str | None,
) -> None:
    for name in ("RECRAWLER_EMBEDDER_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    embedder = embedder_from_spec("openai:m", base_url=keyed_server.url, api_key=api_key, max_retries=0)
    if sent is None:
        with pytest.raises(EmbedderError, match="401"):
            embedder.embed(["x"])
    else:
        embedder.embed(["x"])
    assert keyed_server.requests[0].headers.get("authorization") == sent
