"""Bar-chart geometry of the HTML report (recrawler.reports.charts)."""

from __future__ import annotations

import pytest

from recrawler.reports.charts import bar_chart, nice_step


@pytest.mark.parametrize(("top", "step"), [(0, 1), (3, 1), (10, 5), (40, 10), (1234, 500), (9e6, 5e6)])
def test_nice_step(top: float, step: float) -> None:
    assert nice_step(top) == step


def test_grouped_bars_share_one_scale() -> None:
    chart = bar_chart("Pages", ["1", "2"], {"new": [4, 1], "changed": [0, 2]}, width=200, height=100)
    assert [b.series for b in chart.bars] == [0, 1, 0, 1]
    new1, changed1, new2, changed2 = chart.bars
    assert changed1.height == 0
    assert new1.height == pytest.approx(4 * new2.height)
    assert new1.y + new1.height == chart.base
    assert new1.x < changed1.x < new2.x < changed2.x
    assert [label for _, label in chart.labels] == ["1", "2"]
    assert chart.ticks[-1][1] == "4"
    assert new2.title == "run 2: 1 new"
    assert not chart.empty


def test_stacked_bars_sit_on_each_other() -> None:
    chart = bar_chart("Saved", ["7"], {"a": [3], "b": [2000]}, stacked=True)
    a, b = chart.bars
    assert a.x == b.x
    assert b.y + b.height == pytest.approx(a.y)
    assert b.title == "run 7: 2k b"


def test_no_runs_or_only_zeros_is_empty() -> None:
    assert bar_chart("x", [], {"a": []}).empty
    assert bar_chart("x", ["1"], {"a": [0]}).empty
