"""Bar charts of the last runs as SVG geometry (pure): the template draws what this computes."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ["Bar", "Chart", "bar_chart", "nice_step"]

#: plot area inside the SVG: left margin for the axis labels, bottom margin for run ids
_LEFT, _RIGHT, _TOP, _BOTTOM = 48.0, 8.0, 8.0, 22.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Bar:
    """One bar (or one stacked segment): its box, its series index and its tooltip."""

    x: float
    y: float
    width: float
    height: float
    series: int
    title: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Chart:
    """What the template needs to draw one chart: every number is already in SVG units."""

    title: str
    width: int
    height: int
    bars: list[Bar] = field(default_factory=list)
    #: (y, label) of the horizontal grid lines
    ticks: list[tuple[float, str]] = field(default_factory=list)
    #: (x centre, label) under each group of bars
    labels: list[tuple[float, str]] = field(default_factory=list)
    #: (series index, name)
    legend: list[tuple[int, str]] = field(default_factory=list)
    #: the bottom of the plot area (y of the x axis)
    base: float = 0.0
    left: float = _LEFT
    right: float = 0.0
    note: str = ""

    @property
    def empty(self) -> bool:
        """True when no run has a value above zero."""
        return not any(b.height > 0 for b in self.bars)


def nice_step(top: float, lines: int = 4) -> float:
    """A grid step of 1, 2 or 5 times a power of ten giving about *lines* lines up to *top*."""
    if top <= 0:
        return 1.0
    raw = top / lines
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    return max(step, 1.0)


def _fmt(value: float) -> str:
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:g}"


def bar_chart(
    title: str,
    labels: Sequence[str],
    series: Mapping[str, Sequence[float]],
    *,
    stacked: bool = False,
    width: int = 640,
    height: int = 200,
    note: str = "",
) -> Chart:
    """Grouped (or *stacked*) bars: one group per label (a run, oldest first), one bar per series."""
    names = list(series)
    n = len(labels)
    right, base = width - _RIGHT, height - _BOTTOM
    if stacked:
        top = max((sum(series[s][i] for s in names) for i in range(n)), default=0.0)
    else:
        top = max((max(series[s]) for s in names if series[s]), default=0.0)
    step = nice_step(top)
    ceiling = step * max(math.ceil(top / step), 1)
    scale = (base - _TOP) / ceiling
    chart = Chart(
        title=title,
        width=width,
        height=height,
        base=base,
        right=right,
        note=note,
        legend=list(enumerate(names)),
        ticks=[(base - k * step * scale, _fmt(k * step)) for k in range(round(ceiling / step) + 1)],
    )
    if not n:
        return chart
    group = (right - _LEFT) / n
    gap = min(group * 0.2, 12.0)
    inner = group - gap
    bar_width = inner if stacked or not names else inner / len(names)
    for i, label in enumerate(labels):
        x0 = _LEFT + i * group + gap / 2
        chart.labels.append((x0 + inner / 2, label))
        y = base
        for k, name in enumerate(names):
            value = float(series[name][i])
            h = value * scale
            x = x0 if stacked else x0 + k * bar_width
            chart.bars.append(
                Bar(
                    x=round(x, 2),
                    y=round((y if stacked else base) - h, 2),
                    width=round(max(bar_width - 1, 1), 2),
                    height=round(h, 2),
                    series=k,
                    title=f"run {label}: {_fmt(value)} {name}",
                )
            )
            if stacked:
                y -= h
    return chart
