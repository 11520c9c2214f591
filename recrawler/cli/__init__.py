"""The ``recrawler`` command: inspect state, normalise URLs, start a crawl.

Every command reads the settings a run would have (:func:`recrawler.cli.settings.build_settings`):
command-line flags > environment > the Scrapy project's settings > recrawler's defaults.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from recrawler import __version__
from recrawler.cli import kb
from recrawler.cli.output import TerminalOut, terminal_safe
from recrawler.cli.settings import build_settings, setting_pair
from recrawler.exceptions import RecrawlerError
from recrawler.extras import missing_extra
from recrawler.redact import redact_text

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import TextIO

    Parsers = argparse._SubParsersAction[argparse.ArgumentParser]

__all__ = ["build_parser", "build_settings", "main", "terminal_safe"]


def _flag_parsers(default: object) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """``-s`` alone, and ``-s`` with ``--db`` (every command takes both)."""
    flags = argparse.ArgumentParser(add_help=False)
    flags.add_argument(
        "-s",
        dest="set" if default is argparse.SUPPRESS else "global_set",
        action="append",
        type=setting_pair,
        default=default,
        metavar="NAME=VALUE",
        help="set a Scrapy or recrawler setting (repeatable; over the environment and the project)",
    )
    db = argparse.ArgumentParser(add_help=False, parents=[flags])
    db.add_argument(
        "--db",
        default=default,
        metavar="URI",
        help="database URI (as RECRAWLER_DB_URI; default: $RECRAWLER_DB_URI, the project's, "
        ".scrapy/recrawler.db)",
    )
    return flags, db


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (also used to document the commands)."""
    _, top = _flag_parsers(None)
    parser = argparse.ArgumentParser(
        prog="recrawler",
        description="Incremental recrawls of docs sites.",
        epilog="Settings: flags > environment > the Scrapy project's settings > recrawler's defaults.",
        parents=[top],
    )
    parser.add_argument("--version", action="version", version=f"recrawler {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    # --db and -s after the command too (SUPPRESS: a flag given before it is not overwritten)
    _, db = _flag_parsers(argparse.SUPPRESS)
    # the commands' modules load Scrapy and the store: only when a command needs the whole parser
    from recrawler.cli import check, crawl, detect, events, pages, report, runs, schedule

    pages.add_parsers(sub, [db])
    runs.add_parsers(sub, [db])
    report.add_parsers(sub, [db])
    kb.add_parsers(sub, [db])
    schedule.add_parsers(sub, [db])
    check.add_parsers(sub, [db])
    events.add_parsers(sub, [db])
    detect.add_parsers(sub, [db])
    crawl.add_parsers(sub, [db])
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Entry point of the ``recrawler`` console script."""
    try:
        # `recrawler search --db URI` outside a Scrapy project: the settings it reads are its flags
        # and the environment, so it answers without loading Scrapy (see cli/kb.py)
        terminal: Any = TerminalOut(out or sys.stdout)  # a TextIO for the commands
        fast = kb.fast_search(argv, _flag_parsers, terminal)
        if fast is not None:
            return fast
        args = build_parser().parse_args(argv)
        settings = build_settings(args)
        code: int = args.func(args, settings, terminal)
    except (RecrawlerError, ModuleNotFoundError) as exc:
        # a module an extra installs (psycopg for a postgresql:// database) is one line too
        error = exc if isinstance(exc, RecrawlerError) else missing_extra(exc)
        if error is None:
            raise
        # one line, whatever the driver's message spans
        line = " ".join(redact_text(str(error)).split())
        sys.stderr.write(f"recrawler: error: {terminal_safe(line)}\n")
        return 2
    except BrokenPipeError:
        return 0
    return code
