"""``recrawler check [--repair]``: the database's invariants."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from recrawler.cli.output import json_line
from recrawler.cli.settings import key_maker, open_store, write
from recrawler.state.sql.check import UNREPAIRED
from recrawler.urls import UrlPolicy

if TYPE_CHECKING:
    import argparse
    from typing import TextIO

    from scrapy.settings import Settings

    from recrawler.cli import Parsers


def cmd_check(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """Verify the database's invariants; ``--repair`` mends what drifted (exit 1: problems found)."""
    store = open_store(settings)
    if hasattr(store, "integrity_check"):
        # this command checks the file itself (a damaged one is its first finding): its read is
        # not refused beforehand, as every other command's is (SQLite only)
        store.integrity_check = False
    findings = store.readers.check_sync(
        key_maker(settings),
        lease_secs=settings.getfloat("RECRAWLER_LEASE_SECS"),
        refusal=UrlPolicy(any_host=True).refusal,
    )
    for f in findings:
        if args.json:
            out.write(json_line({"check": f.check, "key": f.key, "detail": f.detail}))
        else:
            out.write(f"{f.check:<18} {f.key}  {f.detail}\n")
    if not findings:
        if not args.json:
            out.write("ok: every invariant holds\n")
        return 0
    if any(f.check == "integrity" for f in findings):
        # writing to a damaged file spreads the damage: nothing to mend here
        if not args.json:
            out.write("the database file is damaged: restore it from a backup (nothing was changed)\n")
        return 1
    if not args.repair:
        if not args.json:
            out.write(f"{len(findings)} problem(s); `recrawler check --repair` mends them\n")
        return 1
    repaired: dict[str, int] = asyncio.run(write(settings, lambda s: s.readers.repair(findings)))
    if not args.json:
        done = ", ".join(f"{k}: {v}" for k, v in sorted(repaired.items())) or "nothing to change"
        out.write(f"repaired ({done}); the next run fetches and indexes the re-queued pages\n")
    left = sorted({f.check for f in findings if f.check in UNREPAIRED})
    if left:
        if not args.json:
            out.write(f"not repaired ({', '.join(left)}): the site decides which address is the page\n")
        return 1
    return 0


def add_parsers(sub: Parsers, db: list[argparse.ArgumentParser]) -> None:
    """Register ``check``."""
    p = sub.add_parser(
        "check", parents=db, help="verify the database's invariants; --repair mends what drifted"
    )
    p.add_argument("--repair", action="store_true", help="re-queue drifted pages, retire stray chunks")
    p.add_argument("--json", action="store_true", help="one JSON object per problem")
    p.set_defaults(func=cmd_check)
