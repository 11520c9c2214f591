"""Content fingerprints of cleaned text (never of raw HTML): exact sha256 and fuzzy TLSH."""

from __future__ import annotations

import hashlib

import tlsh


def content_hash(text: str) -> str:
    """Return the hex sha256 of cleaned text; callers never pass raw HTML or empty text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def fuzzy_hash(text: str) -> str | None:
    """Return the TLSH digest of cleaned text, or None when TLSH cannot fingerprint it.

    TLSH needs at least 50 bytes with enough variety; otherwise it returns ``TNULL``, which
    ``tlsh.diff`` rejects, so callers fall back to the exact hash.
    """
    digest = tlsh.hash(text.encode("utf-8"))
    return None if not digest or digest == "TNULL" else str(digest)


def fuzzy_distance(a: str, b: str) -> int:
    """Return the TLSH distance of two digests (0: identical; larger: more different)."""
    return int(tlsh.diff(a, b))
