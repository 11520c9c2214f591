"""The offline embedder: feature hashing of words and word pairs, no model and no network."""

from __future__ import annotations

import hashlib
import itertools
import re
from typing import TYPE_CHECKING

from recrawler.exceptions import ConfigurationError
from recrawler.kb.embedding import SPEC_SETTING, normalise

# numpy is imported where vectors are made: a run that embeds nothing (an unchanged week) does
# not pay for loading it
if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np
    from numpy.typing import NDArray

__all__ = ["HashingEmbedder"]

_WORD = re.compile(r"\w+")


class HashingEmbedder:
    """Offline lexical embedder: signed feature hashing of word unigrams and bigrams.

    Lowercased ``\\w+`` tokens (Unicode) and adjacent token pairs are hashed with blake2b into
    ``dim`` buckets; the hash's top bit picks the sign, so collisions cancel out on average.
    Each distinct feature weighs ``1 + log(tf)`` and rows are L2-normalised. Identical in every
    process and on every platform (Python's randomised ``hash()`` is never used).

    It is lexical, not semantic: texts score as similar when they share words and word pairs,
    not when they mean the same thing. Needs no model and no network; id ``hashing:v1:{dim}``.
    """

    def __init__(self, dim: int = 384) -> None:
        if dim < 1:
            raise ConfigurationError(f"{SPEC_SETTING}: hashing dimension must be positive, got {dim}")
        self.dim: int = dim
        self.id: str = f"hashing:v1:{dim}"
        #: search's vector floor: on a real docs site (mesonbuild, 150 labelled questions, 40
        #: off-topic ones) no off-topic query's nearest chunk passed 0.40 (the most: 0.356), and
        #: hybrid recall@5 rose from 0.887 (no floor) to 0.933
        self.min_similarity: float = 0.40
        self.calls: int = 0
        self.texts: int = 0

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Return the hashed feature vectors of ``texts``, shape ``(len(texts), dim)``.

        The whole batch is one set of array operations: every token of every text is hashed
        once per distinct token (docs pages repeat most of their vocabulary), then the features
        are grouped by (row, feature) with two sorts and summed into buckets with one
        ``bincount``. Each row's buckets are summed in ascending feature order, so a text's
        vector does not depend on the batch it came in.
        """
        import numpy as np

        n = len(texts)
        dim = self.dim
        out = np.zeros((n, dim), dtype=np.float32)
        tokens = [_WORD.findall(text.lower()) for text in texts]
        lengths = np.fromiter(map(len, tokens), dtype=np.intp, count=n)
        total = int(lengths.sum())
        if total:
            hashes = _TokenHashes()
            unigrams = np.fromiter(
                map(hashes.__getitem__, itertools.chain.from_iterable(tokens)), dtype=np.uint64, count=total
            )
            rows = np.repeat(np.arange(n, dtype=np.intp), lengths)
            # a bigram is two adjacent tokens of one text, never the last of one and the first of the next
            pairs = rows[:-1] == rows[1:]
            features = np.concatenate((unigrams, _mix(unigrams[:-1][pairs], unigrams[1:][pairs])))
            rows = np.concatenate((rows, rows[:-1][pairs]))
            # by feature, then (stable) by row: each row's features ascending, equal ones adjacent
            order = np.argsort(features)
            narrow = np.uint16 if n <= 0xFFFF else np.uint32  # a stable sort of small ints is a radix sort
            order = order[np.argsort(rows[order].astype(narrow), kind="stable")]
            features = features[order]
            rows = rows[order]
            first = np.empty(features.size, dtype=bool)
            first[0] = True
            np.not_equal(features[1:], features[:-1], out=first[1:])
            first[1:] |= rows[1:] != rows[:-1]
            starts = np.flatnonzero(first)
            tf = np.diff(np.append(starts, features.size))
            distinct = features[starts]
            weights = 1.0 + np.log(tf)
            negative = (distinct >> np.uint64(63)).astype(bool)
            buckets = rows[starts] * dim + (distinct % np.uint64(dim)).astype(np.intp)
            summed = np.bincount(buckets, weights=np.where(negative, -weights, weights), minlength=n * dim)
            out[:] = summed.reshape(n, dim)
        self.calls += 1
        self.texts += n
        return normalise(out)

    def close(self) -> None:
        """Do nothing: there is nothing to release."""


class _TokenHashes(dict[str, int]):
    """A token's 64-bit blake2b hash, computed on first use and kept for the batch."""

    def __missing__(self, token: str) -> int:
        digest = hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest()
        h = self[token] = int.from_bytes(digest, "little")
        return h


def _mix(a: NDArray[np.uint64], b: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """Hash ordered pairs of 64-bit hashes (splitmix64 finaliser); uint64 arithmetic wraps."""
    import numpy as np

    x = (a * np.uint64(0x9E3779B97F4A7C15)) ^ b
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x
