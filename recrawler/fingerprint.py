"""Content fingerprints: sha256 of cleaned text (never of raw HTML)."""

from __future__ import annotations

import hashlib


def content_hash(text: str) -> str:
    """Return the hex sha256 of cleaned text; callers never pass raw HTML or empty text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
