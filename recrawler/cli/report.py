"""``recrawler report``: write a run's HTML report, or the digest of a period (``--since 7d``)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from recrawler.cli.periods import parse_since
from recrawler.cli.settings import db_uri, open_store
from recrawler.project import project_data_path
from recrawler.reports import collect, render, write_report
from recrawler.state import utcnow

if TYPE_CHECKING:
    import argparse
    from typing import TextIO

    from scrapy.settings import Settings

    from recrawler.cli import Parsers

#: where reports go unless ``-o`` says otherwise: Scrapy's project data directory (``.scrapy/``),
#: beside the default database, not the working directory
REPORT_FILE = "reports/recrawler-report-{run_id}.html"
DIGEST_FILE = "reports/recrawler-digest-{date}.html"


def cmd_report(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """Write the HTML report of a run (default: the latest), or with ``--since`` the digest of the
    period, to a file (default: under ``.scrapy/reports/``), or ``-o -`` to stdout."""
    store = open_store(settings)
    bound = settings.getfloat("RECRAWLER_MAX_INTERVAL_SECS")
    if args.since is not None:
        return _digest(args, settings, out, bound)
    runs = args.runs if args.runs is not None else settings.getint("RECRAWLER_REPORT_HTML_RUNS")
    if args.output == "-":
        sys.stdout.write(
            render(collect(store.readers, args.run_id, runs=runs, db=db_uri(settings), bound_secs=bound))
        )
        return 0
    path = args.output or project_data_path(REPORT_FILE, create=True)
    run_id, written = write_report(
        store.readers, path, args.run_id, runs=runs, db=db_uri(settings), bound_secs=bound
    )
    out.write(f"report of run {run_id} written to {written}\n")
    return 0


def _digest(args: argparse.Namespace, settings: Settings, out: TextIO, bound: float) -> int:
    from recrawler.reports.digest import collect_digest, render_digest, write_digest

    store = open_store(settings)
    now = utcnow()
    since = parse_since(args.since, now)
    options = {"since": since, "now": now, "bound_secs": bound, "site": args.site, "db": db_uri(settings)}
    if args.output == "-":
        sys.stdout.write(render_digest(collect_digest(store.readers, **options)))
        return 0
    written = write_digest(
        store.readers, args.output or project_data_path(DIGEST_FILE, create=True), **options
    )
    out.write(f"digest of {since:%Y-%m-%d %H:%M} to {now:%Y-%m-%d %H:%M} UTC written to {written}\n")
    return 0


def add_parsers(sub: Parsers, db: list[argparse.ArgumentParser]) -> None:
    """Register ``report``."""
    p = sub.add_parser(
        "report",
        parents=db,
        help="write a run's HTML report, or with --since the digest of a period (what changed, left, waits)",
    )
    p.add_argument("run_id", nargs="?", type=int, metavar="RUN", help="the run (default: the latest)")
    p.add_argument(
        "--since",
        metavar="AGE",
        help="write the digest of a period instead: 7d, 12h, 2w or an ISO 8601 time, to now",
    )
    p.add_argument("--site", help="the digest of this site only (default: every site)")
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="where to write it ({run_id} and {date} are replaced; - is stdout; default: "
        f".scrapy/{REPORT_FILE}, with --since .scrapy/{DIGEST_FILE})",
    )
    p.add_argument(
        "--runs", type=int, metavar="N", help="runs in the charts (default: RECRAWLER_REPORT_HTML_RUNS)"
    )
    p.set_defaults(func=cmd_report)
