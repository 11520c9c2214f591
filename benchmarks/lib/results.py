"""Results: ratios side by side, and every figure as JSON (``benchmarks/results/``, not in git)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse

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
