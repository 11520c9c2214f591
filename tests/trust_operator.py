"""What the operator-path tests (``tests/test_trust_operator_*.py``) read of a database file."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests import statedb

if TYPE_CHECKING:
    from pathlib import Path


def current(path: Path) -> list[tuple[str, str]]:
    """The chunks of each live page's current stored state."""
    rows = statedb.rows(
        path,
        """SELECT c.key, c.text FROM chunks c JOIN pages p ON p.key = c.key
           WHERE p.status = 'live' AND c.retired_run IS NULL""",
    )
    counts = statedb.rows(
        path,
        """SELECT p.key, p.chunks, (SELECT COUNT(*) FROM chunks c
                                    WHERE c.key = p.key AND c.retired_run IS NULL)
           FROM pages p WHERE p.status = 'live'""",
    )
    for key, stored, actual in counts:
        assert stored == actual, f"{key}: pages.chunks {stored} != {actual} current chunk rows"
    return sorted(rows)
