"""Critical tokens marked in a stored diff (recrawler.reports.diffs)."""

from __future__ import annotations

import pytest

from recrawler.reports.diffs import critical_tokens, diff_lines


@pytest.mark.parametrize(
    ("reason", "tokens"),
    [
        ("number: '8 MB' -> '16 MB'", ["16 MB", "8 MB"]),
        ("identifier: -max_retries +retry_limit", ["max_retries", "retry_limit"]),
        ("identifier: -'--max-retries' +'--retries'", ["--max-retries", "--retries"]),
        ("negation: -not +'no longer'", ["no longer", "not"]),
        ("sentence added: 'Open the file.'", ["Open the file."]),
        ("sentence added: 'A long sentence the guard cut\u2026'", ["A long sentence the guard cut"]),
        ("code: -'make -j4' +'make -j8' (+3 lines)", ["make -j4", "make -j8"]),
        # no token named: nothing to mark
        ("sentence removed: 3 more", []),
        ("heading: order changed", []),
        ("garbled", []),
    ],
)
def test_critical_tokens(reason: str, tokens: list[str]) -> None:
    assert critical_tokens([reason]) == tokens


def test_diff_lines_mark_whole_words_on_changed_lines_only() -> None:
    diff = "--- before\n+++ after\n@@ -1,2 +1,2 @@\n-Parts are 8 MB, not notes.\n+Parts are 16 MB.\n 8 MB"
    lines = diff_lines(diff, ["number: '8 MB' -> '16 MB'", "negation: -not"])
    assert [line.kind for line in lines] == ["meta", "meta", "hunk", "del", "add", "ctx"]
    assert lines[3].parts == [
        ("-", False),
        ("Parts are ", False),
        ("8 MB", True),
        (", ", False),
        ("not", True),
        (" notes.", False),
    ]
    assert lines[4].parts == [("+", False), ("Parts are ", False), ("16 MB", True), (".", False)]
    assert lines[5].parts == [(" 8 MB", False)]
    assert diff_lines("-a\n+b")[1].parts == [("+", False), ("b", False)]
