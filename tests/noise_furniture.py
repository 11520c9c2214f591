"""The block and pair counters of a database file, as stored and as counted from scratch (shared by
``tests/test_noise_furniture_*.py`` and the crash tests).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from recrawler.detect.boilerplate import block_pairs
from recrawler.detect.hashing import unpack_blocks
from tests.state_sqlite import query

if TYPE_CHECKING:
    from pathlib import Path


def counted_from_scratch(db: Path) -> tuple[dict[int, int], dict[tuple[int, int], int]]:
    """Pages holding each block and each block pair, counted from the stored block sets."""
    blocks: Counter[int] = Counter()
    pairs: Counter[tuple[int, int]] = Counter()
    for (blob,) in query(db, "SELECT blocks FROM page_fields"):
        hashes = unpack_blocks(blob)
        blocks.update(set(hashes))
        pairs.update(block_pairs(hashes))
    return dict(blocks), dict(pairs)


def counters(db: Path) -> tuple[dict[int, int], dict[tuple[int, int], int]]:
    """The stored counters (rows at zero count no page)."""
    blocks = dict(query(db, "SELECT block, pages FROM site_blocks WHERE pages > 0"))
    pairs = {(p, b): n for p, b, n in query(db, "SELECT prev, block, pages FROM site_pairs WHERE pages > 0")}
    return blocks, pairs
