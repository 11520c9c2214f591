"""``recrawler report``: write a run's HTML report."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from recrawler.cli.settings import db_uri, open_store
from recrawler.reports import collect, render, write_report

if TYPE_CHECKING:
    import argparse
    from typing import TextIO

    from scrapy.settings import Settings

    from recrawler.cli import Parsers


def cmd_report(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """Write the HTML report of a run (default: the latest) to a file, or ``-o -`` to stdout."""
    store = open_store(settings)
    runs = args.runs if args.runs is not None else settings.getint("RECRAWLER_REPORT_HTML_RUNS")
    if args.output == "-":
        sys.stdout.write(render(collect(store, args.run_id, runs=runs, db=db_uri(settings))))
        return 0
    run_id, path = write_report(store, args.output, args.run_id, runs=runs, db=db_uri(settings))
    out.write(f"report of run {run_id} written to {path}\n")
    return 0


def add_parsers(sub: Parsers, db: list[argparse.ArgumentParser]) -> None:
    """Register ``report``."""
    p = sub.add_parser("report", parents=db, help="write a run's HTML report (changes, diffs, holds, trends)")
    p.add_argument("run_id", nargs="?", type=int, metavar="RUN", help="the run (default: the latest)")
    p.add_argument(
        "-o",
        "--output",
        default="recrawler-report-{run_id}.html",
        metavar="FILE",
        help="where to write it; {run_id} is replaced, - is stdout (default: %(default)s)",
    )
    p.add_argument(
        "--runs", type=int, metavar="N", help="runs in the charts (default: RECRAWLER_REPORT_HTML_RUNS)"
    )
    p.set_defaults(func=cmd_report)
