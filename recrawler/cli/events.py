"""``recrawler events deliver``: send the committed events waiting in the outbox."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from recrawler.cli.settings import open_store
from recrawler.exceptions import ConfigurationError

if TYPE_CHECKING:
    import argparse
    from typing import TextIO

    from scrapy.settings import Settings

    from recrawler.cli import Parsers


def cmd_events(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """Deliver the outbox to the webhook and events file (exit 1: events still wait)."""
    if not (settings.get("RECRAWLER_WEBHOOK_URL") or settings.get("RECRAWLER_EVENTS_URI")):
        raise ConfigurationError(
            "events deliver: nowhere to deliver to; set RECRAWLER_WEBHOOK_URL (with "
            "RECRAWLER_WEBHOOK_SECRET) or RECRAWLER_EVENTS_URI"
        )
    left = asyncio.run(_deliver(settings))
    if left:
        out.write(f"{left} events wait in the outbox: delivery failed (see above); run it again later\n")
        return 1
    out.write("delivered: no events wait in the outbox\n")
    return 0


async def _deliver(settings: Settings) -> int:
    store = open_store(settings)
    await store.open()
    try:
        await store.deliver()
        return await store.pending_events()
    finally:
        await store.close()


def add_parsers(sub: Parsers, db: list[argparse.ArgumentParser]) -> None:
    """Register ``events``."""
    p = sub.add_parser(
        "events", parents=db, help="deliver the events waiting in the outbox (webhook, events file)"
    )
    p.add_argument("action", choices=["deliver"])
    p.set_defaults(func=cmd_events)
