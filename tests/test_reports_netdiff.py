"""A page's net change over several stored diffs (recrawler.reports.netdiff)."""

from __future__ import annotations

import difflib
import itertools

from hypothesis import given
from hypothesis import strategies as st

from recrawler.pipelines.commit import unified_diff
from recrawler.reports.netdiff import net_diff, unapply

LINES = st.lists(st.sampled_from(["", "a", "b", "Set max_retries to 3.", "# Limits", "- item"]), max_size=12)


@given(st.lists(LINES, min_size=2, max_size=5))
def test_the_text_before_several_changes_comes_back_from_the_text_now(versions: list[list[str]]) -> None:
    texts = ["\n".join(v) for v in versions]
    # as the history stores them: one diff per change, read newest first
    diffs = [unified_diff(a, b, url="u", limit=10**6) for a, b in itertools.pairwise(texts)]
    net = net_diff(texts[-1], diffs[::-1], limit=10**6)
    assert net is not None
    before, diff = net
    assert before == texts[0].splitlines()
    expected = difflib.unified_diff(
        texts[0].splitlines(), texts[-1].splitlines(), "before", "after", n=2, lineterm=""
    )
    assert diff == "\n".join(expected)


def test_a_diff_cut_short_or_that_does_not_fit_is_no_net_diff() -> None:
    old, new = "\n".join(f"line {i}" for i in range(50)), "\n".join(f"line {i}!" for i in range(50))
    cut = unified_diff(old, new, url="http://x/a", limit=100)
    assert unapply(new.splitlines(), cut) is None
    whole = unified_diff(old, new, url="http://x/a", limit=10**6)
    assert unapply(new.splitlines(), whole) == old.splitlines()
    # the text moved on since the diff was made
    assert unapply(["something else"], whole) is None
    assert net_diff(new, [cut], limit=1000) is None
