"""``recrawler pages``: the stored pages."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from recrawler.cli.output import Column, Table, json_line, when
from recrawler.cli.settings import open_store
from recrawler.state import GONE, LIVE, MOVED, QUARANTINED

if TYPE_CHECKING:
    import argparse
    from typing import TextIO

    from scrapy.settings import Settings

    from recrawler.cli import Parsers
    from recrawler.state import PageRecord


def page_json(rec: PageRecord) -> dict[str, Any]:
    """One page as a JSON object."""
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


def cmd_pages(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """List stored pages."""
    table = Table(
        out,
        [Column("STATUS", 11), Column("LAST CHECKED", 16), Column("LAST CHANGED", 16), Column("URL")],
        empty=f"no {args.status + ' ' if args.status else ''}pages stored",
    )
    for rec in open_store(settings).readers.iter_pages(status=args.status):
        if args.json:
            out.write(json_line(page_json(rec)))
        else:
            table.row(rec.status, when(rec.last_checked), when(rec.last_changed), rec.url)
    if not args.json:
        table.end()
    return 0


def add_parsers(sub: Parsers, db: list[argparse.ArgumentParser]) -> None:
    """Register ``pages``."""
    p = sub.add_parser("pages", parents=db, help="list stored pages")
    p.add_argument("--status", choices=[LIVE, QUARANTINED, GONE, MOVED], help="only pages in this state")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(func=cmd_pages)
