"""Texts and vector helpers shared by the embedder tests (``tests/test_embedders_*.py``)."""

from __future__ import annotations

import numpy as np

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
