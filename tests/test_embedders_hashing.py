"""HashingEmbedder: shape, norms, a pinned algorithm, determinism across processes; the blob form."""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

from recrawler.exceptions import ConfigurationError
from recrawler.kb.embedders import (
    HashingEmbedder,
    blob_to_vector,
    vector_to_blob,
)
from tests.embedding import TEXTS, cosine, unit


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
