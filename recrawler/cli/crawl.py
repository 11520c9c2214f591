"""``recrawler crawl``: ``scrapy crawl docs`` from any directory."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from recrawler.cli.settings import FALLBACK_SETTINGS_MODULE

if TYPE_CHECKING:
    from typing import TextIO

    from scrapy.settings import Settings

    from recrawler.cli import Parsers


def crawl_argv(args: argparse.Namespace) -> list[str]:
    """The ``scrapy crawl docs`` command line: ``-s`` flags given to ``recrawler`` go first."""
    flags = [
        f"{name}={value}" for name, value in (*(args.global_set or ()), *(getattr(args, "set", None) or ()))
    ]
    argv = ["scrapy", "crawl", "docs", "-a", f"sitemap_url={args.sitemap_url}"]
    for flag in flags:
        argv += ["-s", flag]
    return [*argv, *args.scrapy_args]


def cmd_crawl(
    args: argparse.Namespace, settings: Settings, out: TextIO
) -> int:  # pragma: no cover - hands over
    """Run ``scrapy crawl docs`` with recrawler's project settings from anywhere."""
    from scrapy.cmdline import execute

    os.environ.setdefault("SCRAPY_SETTINGS_MODULE", FALLBACK_SETTINGS_MODULE)
    if args.db:
        # the environment, not -s: a password in the URI stays out of the process list
        os.environ["RECRAWLER_DB_URI"] = args.db
    execute(crawl_argv(args))
    return 0


def add_parsers(sub: Parsers, db: list[argparse.ArgumentParser]) -> None:
    """Register ``crawl``."""
    p = sub.add_parser("crawl", parents=db, help="run the docs spider (scrapy crawl docs) from any directory")
    p.add_argument("sitemap_url")
    p.add_argument(
        "scrapy_args", nargs=argparse.REMAINDER, help="further scrapy arguments, e.g. -s KEY=VALUE"
    )
    p.set_defaults(func=cmd_crawl)
