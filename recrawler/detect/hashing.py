"""Content fingerprints of cleaned text (never of raw HTML): exact sha256, per-block hashes, TLSH."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import tlsh

# the stored form of a page's blocks (the state's column): fingerprints are made over it
from recrawler.state.records import pack_blocks as pack_blocks
from recrawler.state.records import unpack_blocks as unpack_blocks

if TYPE_CHECKING:
    from collections.abc import Sequence


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


def block_hash(normalized_block: str) -> int:
    """A 64-bit (signed, SQLite INTEGER-sized) hash of one normalised block of text."""
    digest = hashlib.blake2b(normalized_block.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def page_hash(kept: Sequence[int]) -> str:
    """The page fingerprint: sha256 over its kept blocks, in order.

    See :func:`~recrawler.detect.boilerplate.kept_blocks`.
    """
    return hashlib.sha256(pack_blocks(kept)).hexdigest()
