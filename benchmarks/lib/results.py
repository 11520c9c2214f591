"""Results: progress on stderr, tables and ratios side by side on stdout, and every figure as JSON
(``benchmarks/results/``, not in git)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

RESULTS_DIR = Path(__file__).resolve().parent.parent / "results"


def add_json_option(parser: argparse.ArgumentParser, script: str) -> None:
    """``--json PATH``: where the results go (default ``benchmarks/results/<script>.json``)."""
    default = RESULTS_DIR / f"{script}.json"
    parser.add_argument(
        "--json",
        type=Path,
        metavar="PATH",
        default=default,
        help=f"write every figure as JSON here (default benchmarks/results/{default.name})",
    )


def write_json(path: Path, payload: Any, *, indent: int = 2, newline: bool = True) -> None:
    """Write *payload* to *path* (``default=str`` for paths and dates) and say where it went."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(payload, indent=indent, default=str) + ("\n" if newline else ""), encoding="utf-8"
    )
    sys.stderr.write(f"results: {path}\n")


def ratio(num: float | None, den: float | None) -> float | None:
    """*num* / *den*, or None when either is missing (or *den* is 0)."""
    return num / den if num is not None and den else None


def fmt(value: float | None, spec: str) -> str:
    """*value* formatted with *spec*, or ``n/a``."""
    return "n/a" if value is None else format(value, spec)


def meets(value: float | None, target: float) -> str:
    """``OK`` when *value* is at most *target*, ``MISSED`` above it, ``n/a`` without a value."""
    if value is None:
        return "n/a"
    return "OK" if value <= target else "MISSED"


def log(msg: str) -> None:
    """Progress on stderr."""
    print(msg, file=sys.stderr, flush=True)


def sizes(text: str) -> list[int]:
    """``10000,100000`` -> ``[10000, 100000]``."""
    return [int(part.replace("_", "")) for part in text.split(",") if part.strip()]


def mib(n: float | None) -> float | None:
    """Bytes in MiB."""
    return None if n is None else n / (1 << 20)


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, the first left-aligned."""
    all_rows = [list(header), *[list(r) for r in rows]]
    widths = [max(len(r[i]) for r in all_rows) for i in range(len(header))]
    lines = []
    for n, row in enumerate(all_rows):
        lines.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def print_ratios(ratios: dict[str, Any]) -> None:
    """One ratio a line."""
    print()
    for key, value in ratios.items():
        print(f"  {key:55s} {value if isinstance(value, str) else fmt(value, '.2f')}")


def load_average() -> list[float]:
    """The machine's load average over 1, 5 and 15 minutes (``os.getloadavg``)."""
    return [round(x, 2) for x in os.getloadavg()]


def load_line(start: Sequence[float], end: Sequence[float]) -> str:
    """One line for a benchmark's output: the load average when it started and when it ended. On
    a shared machine the ratios printed beside it are only as good as it was quiet."""
    return (
        "load average (1, 5, 15 min): start "
        + ", ".join(f"{x:.2f}" for x in start)
        + "; end "
        + ", ".join(f"{x:.2f}" for x in end)
        + f" (on {os.cpu_count()} cores)"
    )
