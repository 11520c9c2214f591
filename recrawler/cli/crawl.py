"""``recrawler crawl``: ``scrapy crawl docs`` from any directory."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from recrawler.project import FALLBACK_SETTINGS_MODULE

if TYPE_CHECKING:
    from typing import TextIO

    from scrapy.settings import Settings

    from recrawler.cli import Parsers


def _split_db(scrapy_args: list[str]) -> tuple[str | None, list[str]]:
    """``--db URI`` (or ``--db=URI``) among the arguments after SITEMAP_URL, and the others
    (``--deployed`` left out: see :func:`crawl_deployed`)."""
    db, rest = None, []
    words = iter(scrapy_args)
    for word in words:
        if word == "--db":
            db = next(words, None)
        elif word.startswith("--db="):
            db = word.removeprefix("--db=")
        elif word != "--deployed":
            rest.append(word)
    return db, rest


def crawl_deployed(args: argparse.Namespace) -> bool:
    """``--deployed`` anywhere on a ``recrawler crawl`` command line: the docs were just deployed."""
    return bool(getattr(args, "deployed", False)) or "--deployed" in args.scrapy_args


def crawl_db(args: argparse.Namespace) -> str | None:
    """The database URI of a ``recrawler crawl`` command line: ``--db`` goes anywhere (the last wins)."""
    return _split_db(args.scrapy_args)[0] or args.db


def crawl_argv(args: argparse.Namespace) -> list[str]:
    """The ``scrapy crawl docs`` command line: ``-s`` flags given to ``recrawler`` go first."""
    flags = [
        f"{name}={value}" for name, value in (*(args.global_set or ()), *(getattr(args, "set", None) or ()))
    ]
    argv = ["scrapy", "crawl", "docs", "-a", f"sitemap_url={args.sitemap_url}"]
    if crawl_deployed(args):
        # the run checks every listed page of the site now (as it does when it detects a deploy)
        argv += ["-a", "deployed=1"]
    for flag in flags:
        argv += ["-s", flag]
    return [*argv, *_split_db(args.scrapy_args)[1]]


def cmd_crawl(
    args: argparse.Namespace, settings: Settings, out: TextIO
) -> int:  # pragma: no cover - hands over
    """Run ``scrapy crawl docs`` with recrawler's project settings from anywhere."""
    from scrapy.cmdline import execute

    os.environ.setdefault("SCRAPY_SETTINGS_MODULE", FALLBACK_SETTINGS_MODULE)
    db = crawl_db(args)
    if db:
        # the environment, not -s: a password in the URI stays out of the process list
        os.environ["RECRAWLER_DB_URI"] = db
    execute(crawl_argv(args))
    return 0


def add_parsers(sub: Parsers, db: list[argparse.ArgumentParser]) -> None:
    """Register ``crawl``."""
    p = sub.add_parser("crawl", parents=db, help="run the docs spider (scrapy crawl docs) from any directory")
    p.add_argument(
        "--deployed",
        action="store_true",
        help="the docs were just deployed: check every listed page now (-a deployed=1; run it from the "
        "docs' CI after each deploy, and hourly as a safety net)",
    )
    p.add_argument("sitemap_url")
    rest = p.add_argument(
        "scrapy_args", nargs=argparse.REMAINDER, help="further scrapy arguments, e.g. -s KEY=VALUE"
    )
    # optional: argparse counts a REMAINDER positional as required ("required: ..., scrapy_args")
    rest.required = False
    p.set_defaults(func=cmd_crawl)
