"""The ``recrawler`` command: inspect state, normalise URLs, start a crawl."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any, TextIO

from scrapy.settings import Settings

from recrawler import __version__, default_settings
from recrawler.exceptions import RecrawlerError
from recrawler.state import store_from_uri
from recrawler.urls import KeyMaker

if TYPE_CHECKING:
    from collections.abc import Sequence

    from recrawler.state import PageRecord, StateStore


def _settings() -> Settings:
    settings = Settings()
    settings.setmodule(default_settings, priority="default")
    return settings


def _store(args: argparse.Namespace) -> StateStore:
    return store_from_uri(args.db, _settings())


def _page_json(rec: PageRecord) -> dict[str, Any]:
    return {
        "key": rec.key,
        "url": rec.url,
        "status": rec.status,
        "content_hash": rec.content_hash,
        "etag": rec.etag,
        "last_modified": rec.last_modified,
        "lastmod": rec.lastmod,
        "first_seen": rec.first_seen.isoformat(),
        "last_checked": rec.last_checked.isoformat() if rec.last_checked else None,
        "last_changed": rec.last_changed.isoformat() if rec.last_changed else None,
        "misses": rec.misses,
    }


def cmd_pages(args: argparse.Namespace, out: TextIO) -> int:
    """List stored pages."""
    for rec in _store(args).iter_pages(status=args.status):
        if args.json:
            out.write(json.dumps(_page_json(rec)) + "\n")
        else:
            checked = rec.last_checked.strftime("%Y-%m-%d %H:%M") if rec.last_checked else "-"
            changed = rec.last_changed.strftime("%Y-%m-%d %H:%M") if rec.last_changed else "-"
            out.write(f"{rec.status:<11} {checked:<16} {changed:<16} {rec.url}\n")
    return 0


def cmd_runs(args: argparse.Namespace, out: TextIO) -> int:
    """List runs, newest first."""
    for run in _store(args).iter_runs():
        if args.json:
            out.write(json.dumps(run) + "\n")
            continue
        c = run["counts"] or {}
        counts = " ".join(
            f"{k}: {c.get(k, 0)}" for k in ("crawled", "new", "changed", "unchanged", "gone", "errors")
        )
        out.write(
            f"{run['id']:>5} {run['started_at'][:19]} {run['finish_reason'] or 'unfinished':<12} "
            f"{run['site'] or '-'}  {counts}\n"
        )
    return 0


def cmd_normalize(args: argparse.Namespace, out: TextIO) -> int:
    """Print the page key of each URL."""
    s = _settings()
    km = KeyMaker(
        args.drop if args.drop is not None else s.getlist("RECRAWLER_URL_DROP_PARAMS"),
        args.keep if args.keep is not None else s.getlist("RECRAWLER_URL_KEEP_PARAMS"),
    )
    for url in args.urls:
        out.write(f"{km(url)}\t{url}\n")
    return 0


def cmd_crawl(args: argparse.Namespace, out: TextIO) -> int:  # pragma: no cover - hands over to Scrapy
    """Run ``scrapy crawl docs`` with recrawler's project settings from anywhere."""
    from scrapy.cmdline import execute

    os.environ.setdefault("SCRAPY_SETTINGS_MODULE", "recrawler.settings")
    os.environ["RECRAWLER_DB_URI"] = args.db
    argv = ["scrapy", "crawl", "docs", "-a", f"sitemap_url={args.sitemap_url}", *args.scrapy_args]
    execute(argv)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (also used to document the commands)."""
    db_default = os.environ.get("RECRAWLER_DB_URI", default_settings.RECRAWLER_DB_URI)
    parser = argparse.ArgumentParser(prog="recrawler", description="Incremental recrawls of docs sites.")
    parser.add_argument("--version", action="version", version=f"recrawler {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def with_db(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--db",
            default=db_default,
            help="state database URI (default: $RECRAWLER_DB_URI or %(default)s)",
        )

    p = sub.add_parser("pages", help="list stored pages")
    with_db(p)
    p.add_argument("--status", choices=["live", "quarantined", "gone"])
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(func=cmd_pages)

    p = sub.add_parser("runs", help="list runs, newest first")
    with_db(p)
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(func=cmd_runs)

    p = sub.add_parser("normalize", help="print the page key of each URL")
    p.add_argument("urls", nargs="+", metavar="URL")
    p.add_argument("--drop", action="append", help="query parameter pattern to drop (repeatable)")
    p.add_argument("--keep", action="append", help="keep only these query parameter patterns (repeatable)")
    p.set_defaults(func=cmd_normalize)

    p = sub.add_parser("crawl", help="run the docs spider (scrapy crawl docs) from any directory")
    with_db(p)
    p.add_argument("sitemap_url")
    p.add_argument(
        "scrapy_args", nargs=argparse.REMAINDER, help="further scrapy arguments, e.g. -s KEY=VALUE"
    )
    p.set_defaults(func=cmd_crawl)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Entry point of the ``recrawler`` console script."""
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args, out or sys.stdout)
    except RecrawlerError as exc:
        sys.stderr.write(f"recrawler: error: {exc}\n")
        return 2
    except BrokenPipeError:
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
