"""Hybrid ranking, pure: one ranking from a keyword and a vector list (the words a keyword
search looks for are :mod:`recrawler.words`'s).

Both readers (SQLite and PostgreSQL) rank with these functions, so they agree on what a hit is,
on its score and on the order of equal scores. Reciprocal rank fusion (Cormack et al., SIGIR
2009) adds ``1 / (60 + rank)`` per list a chunk is in; scores are scaled so that a chunk first in
every list that found something scores 1.0. A chunk is a hit only when a list has it: the vector list holds
chunks whose cosine is above the embedder's floor (:func:`similarity_floor`), the keyword list
chunks that contain a word of the query, so there is never padding with unrelated chunks: the
k nearest chunks of a query about something else are not hits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from recrawler.words import WORD

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "MODES",
    "Ranked",
    "bm25",
    "candidates",
    "fuse",
    "similarity_floor",
    "similarity_order",
    "term_limit",
]

#: ``hybrid``: keyword and vector lists fused; ``vector``: cosine only; ``keyword``: words only
MODES = ("hybrid", "vector", "keyword")
RRF_K = 60


def similarity_floor(embedder: object, setting: float | None = None) -> float:
    """The cosine a chunk must exceed to be in a vector list: *setting*
    (``RECRAWLER_SEARCH_MIN_SIMILARITY``) when given, else the embedder's own ``min_similarity``
    (recrawler's embedders carry one, measured; 0.0 for an embedder without one)."""
    if setting is not None:
        return float(setting)
    return float(getattr(embedder, "min_similarity", 0.0))


def term_limit(chunks: int) -> int:
    """Words in more chunks than this are left out of a keyword search: they rank nothing and
    cost a scan of most of the index."""
    return max(1000, chunks // 50)


def candidates(k: int) -> int:
    """How long each list fused for a top *k* is."""
    return max(4 * k, 40)


@dataclass(frozen=True, slots=True)
class Ranked:
    """A chunk in one ranked list: its row id, page key and position, and cosine (vector lists)."""

    id: int
    key: str
    chunk_index: int
    similarity: float | None = None


def bm25(
    candidates: Sequence[tuple[Ranked, str, str]], df: dict[str, int], total: int, n: int
) -> list[Ranked]:
    """The *n* best of *candidates* (chunk, heading, text) for the words *df* (word -> chunks that
    have it, of *total*) by Okapi BM25 (k1 1.2, b 0.75; a heading's words count twice), best
    first, ties by page key and position. Both backends rank their full-text matches with it, so
    they agree on the keyword list."""
    import math

    docs = []
    for r, heading, text in candidates:
        words = WORD.findall(heading.lower()) * 2 + WORD.findall(text.lower())
        counts: dict[str, int] = {}
        for w in words:
            if w in df:
                counts[w] = counts.get(w, 0) + 1
        docs.append((r, len(words), counts))
    if not docs:
        return []
    avg = sum(length for _, length, _ in docs) / len(docs) or 1.0
    idf = {w: math.log(1.0 + (total - d + 0.5) / (d + 0.5)) for w, d in df.items()}
    scored = []
    for r, length, counts in docs:
        s = sum(idf[w] * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / avg)) for w, tf in counts.items())
        if s > 0:
            scored.append((r, s))
    scored.sort(key=lambda t: (-round(t[1], 6), t[0].key, t[0].chunk_index))
    return [r for r, _ in scored[:n]]


def similarity_order(r: Ranked) -> tuple[float, str, int]:
    """Sort key of a vector list: cosine (to 6 decimals: the backends' float sums differ in the
    last digits), then page key and position."""
    return (-round(r.similarity or 0.0, 6), r.key, r.chunk_index)


def fuse(
    vector: Sequence[Ranked], keyword: Sequence[Ranked], mode: str, k: int
) -> list[tuple[Ranked, float]]:
    """The top *k* chunks of *mode* with their scores, best first (equal scores by page key and
    position): ``vector`` scores are cosines, the others fused reciprocal ranks in (0, 1]."""
    if mode == "vector":
        scored = [(r, float(r.similarity or 0.0)) for r in vector]
    else:
        # scaled by the lists that found something: with nothing similar above the floor, the
        # keyword list's first hit still scores 1.0 (and the vector list's, with no word in common)
        lists = [keyword] if mode == "keyword" else [vector, keyword]
        best = max(1, sum(1 for ranked in lists if ranked)) / (RRF_K + 1)
        total: dict[int, float] = {}
        first: dict[int, Ranked] = {}
        for ranked in lists:
            for rank, r in enumerate(ranked, 1):
                total[r.id] = total.get(r.id, 0.0) + 1.0 / (RRF_K + rank)
                # the vector list's entry carries the cosine
                if r.id not in first or first[r.id].similarity is None:
                    first[r.id] = r
        scored = [(first[i], s / best) for i, s in total.items()]
    scored.sort(key=lambda t: (-round(t[1], 6), t[0].key, t[0].chunk_index))
    return scored[:k]
