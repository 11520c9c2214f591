"""``recrawler events``: list what runs did to pages; deliver the committed events waiting in the outbox."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from recrawler.cli.output import Column, Table, json_line
from recrawler.cli.periods import parse_since
from recrawler.cli.settings import open_store, require_database
from recrawler.exceptions import ConfigurationError

if TYPE_CHECKING:
    import argparse
    from typing import TextIO

    from scrapy.settings import Settings

    from recrawler.cli import Parsers


def cmd_events(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """List events (``list``), or deliver the outbox to the webhook and events file (``deliver``;
    exit 1: events still wait)."""
    if args.action == "list":
        return _list(args, settings, out)
    if not (settings.get("RECRAWLER_WEBHOOK_URL") or settings.get("RECRAWLER_EVENTS_URI")):
        raise ConfigurationError(
            "events deliver: nowhere to deliver to; set RECRAWLER_WEBHOOK_URL (with "
            "RECRAWLER_WEBHOOK_SECRET) or RECRAWLER_EVENTS_URI"
        )
    waiting, left = asyncio.run(_deliver(settings))
    delivered = waiting - left
    if left:
        out.write(
            f"{delivered} {_events(delivered)} delivered; {left} still wait in the outbox: delivery failed "
            "(see above); run it again later\n"
        )
        return 1
    out.write(f"{delivered} {_events(delivered)} delivered; none wait in the outbox\n")
    return 0


def _events(n: int) -> str:
    return "event" if n == 1 else "events"


def _list(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """What runs did to pages, oldest first, read from the database (whatever
    ``RECRAWLER_EVENTS_URI`` was when they ran)."""
    store = open_store(settings)
    since = parse_since(args.since) if args.since and args.run is None else None
    table = Table(
        out,
        [Column("AT", 16), Column("RUN", right=True), Column("ACTION", 11), Column("URL")],
        empty="no events" + (f" since {args.since}" if since else ""),
    )
    for event in store.readers.iter_events(site=args.site, run_id=args.run, since=since):
        if args.json:
            out.write(json_line(event))
            continue
        url = event["url"]
        if event.get("moved_to"):
            url += f" -> {event['moved_to']}"
        table.row(str(event["at"])[:16].replace("T", " "), event["run_id"], event["action"], url)
    if not args.json:
        table.end()
    return 0


async def _deliver(settings: Settings) -> tuple[int, int]:
    """Deliver the outbox; (events waiting before, events left)."""
    store = open_store(settings)
    require_database(store.readers)
    await store.open()
    try:
        waiting = await store.pending_events()
        await store.deliver()
        return waiting, await store.pending_events()
    finally:
        await store.close()


def add_parsers(sub: Parsers, db: list[argparse.ArgumentParser]) -> None:
    """Register ``events`` with its actions ``list`` and ``deliver``."""
    p = sub.add_parser(
        "events",
        parents=db,
        help="list what runs did to pages; deliver the events waiting in the outbox (webhook, events file)",
    )
    p.add_argument("action", choices=["list", "deliver"])
    p.add_argument(
        "--since",
        default="7d",
        metavar="AGE",
        help="list: events at most this old (7d, 12h, 30m, or an ISO 8601 time; default %(default)s)",
    )
    p.add_argument("--run", type=int, metavar="RUN_ID", help="list: only this run's events (any age)")
    p.add_argument("--site", help="list: only this site's events")
    p.add_argument("--json", action="store_true", help="list: one JSON object per event")
    p.set_defaults(func=cmd_events)
