"""Schedule commands: ``due``, ``trust``, ``immutable``."""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING

from recrawler.cli.output import Column, Table, duration, json_line, when
from recrawler.cli.settings import open_store, write
from recrawler.exceptions import ConfigurationError
from recrawler.intervals import SchedulePolicy, parse_now
from recrawler.reports.freshness import freshness_view
from recrawler.state import TRUST_SIGNALS
from recrawler.urls import key_host

if TYPE_CHECKING:
    import argparse
    from typing import TextIO

    from scrapy.settings import Settings

    from recrawler.cli import Parsers
    from recrawler.intervals import Revisit
    from recrawler.state import Freshness


#: a change rate needs this much observed time: checks seconds apart say nothing per day
MIN_RATE_WINDOW_SECS = 86400.0


def changes_per_day(rev: Revisit) -> float | None:
    """The page's estimated changes per day, or None until its checks span a day."""
    if rev.rate is None or rev.checked_secs < MIN_RATE_WINDOW_SECS:
        return None
    return round(rev.rate * 86400, 3)


def cmd_due(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """List the stored pages the next run will check, and why (the run's own decision): a deploy
    a run detected and could not check through leaves its pages due."""
    policy = SchedulePolicy.from_settings(settings, now=parse_now(args.now, name="--now"))
    store = open_store(settings)
    trust = list(store.readers.iter_trust())
    off = {(t.host, t.signal) for t in trust if not t.trusted}
    trust_after = settings.getint("RECRAWLER_AUDIT_TRUST_AFTER")
    honest = {(t.host, t.signal) for t in trust if t.trusted and not t.lies and t.checks >= trust_after}
    for build in store.readers.iter_site_builds():
        if build.deploy_at is not None:
            policy.deployed(build.site, build.deploy_at)
    table = Table(
        out,
        [
            Column("DUE", 22),
            Column("NEXT CHECK", 16),
            Column("EVERY", 7),
            Column("VERIFIED", 16),
            Column("BY", 7),
            Column("CHANGES/DAY", right=True),
            Column("URL"),
        ],
        empty="",
    )
    total = due = shown = 0
    for page in store.readers.iter_schedule(site=args.site):
        host = key_host(page.key)
        decision = policy.decide(
            page.revisit,
            url=page.url,
            status=page.status,
            site=host,
            lastmod=page.lastmod,
            lastmod_trusted=(host, "lastmod") not in off,
            lastmod_honest=(host, "lastmod") in honest,
        )
        total += 1
        due += decision.due
        if not (decision.due or args.all) or (args.limit and shown >= args.limit):
            continue
        shown += 1
        rev = page.revisit
        rate = changes_per_day(rev)
        if args.json:
            row = {
                "key": page.key,
                "url": page.url,
                "due": decision.due,
                "reason": decision.reason,
                "last_check_at": rev.last_check_at,
                "verified_at": page.verified_at,
                "verified_by": page.verified_by,
                "next_check_at": rev.next_check_at,
                "interval_secs": rev.interval,
                "changes_per_day": rate,
                "observed_secs": rev.checked_secs,
                "checks": rev.checks,
                "changes": rev.changes,
            }
            out.write(json_line(row))
            continue
        label = decision.reason if decision.due else f"not due ({decision.reason})"
        table.row(
            label,
            when(rev.next_check_at),
            duration(rev.interval),
            when(page.verified_at),
            page.verified_by,
            f"{rate:.2f}" if rate is not None else None,
            page.url,
        )
    if not args.json:
        if not total:
            out.write("no pages stored\n")
        elif not shown:
            out.write("no pages due (--all lists every page)\n")
        out.write(
            f"{due} of {total} stored pages due at {policy.now.isoformat(timespec='seconds')} "
            f"(schedule {policy.mode}, lastmod {policy.lastmod_mode}); "
            "URLs new to the sitemap or a feed are due at once too\n"
        )
        if total:
            bound = settings.getfloat("RECRAWLER_MAX_INTERVAL_SECS")
            # one site stored: its own figures (its last complete listing), as --site would give
            sites = {r["site"] for r in store.readers.iter_runs() if r["site"]}
            site = args.site or (sites.pop() if len(sites) == 1 else None)
            out.write(freshness_line(store.readers.freshness(site, bound_secs=bound, now=policy.now)) + "\n")
    return 0


def freshness_line(f: Freshness) -> str:
    """How current the live pages are, in one line (``recrawler due``)."""
    view = freshness_view(f)
    by = view["by"]
    line = (
        f"freshness: {view['verified']} of {view['live']} live pages ({view['percent']}) verified within "
        f"{view['bound']} (RECRAWLER_MAX_INTERVAL_SECS; by request {by['request']}, lastmod {by['lastmod']}, "
        f"feed {by['feed']}); oldest verification {view['oldest']}"
    )
    if f.deploy_unchecked:
        line += (
            f"; deploy detected {view['deploy_at']} ({f.deploy_reason}): {f.deploy_unchecked} live pages "
            "not checked since (due)"
        )
    if f.oldest_url:
        line += f" ({view['oldest_ago']}): {f.oldest_url}"
    if f.delisted:
        where = f" (not in run {f.listing_run}'s complete listing)" if f.listing_run else ""
        more = ", ..." if f.delisted > len(f.delisted_urls) else ""
        line += f"; {f.delisted} delisted but still live{where}: {', '.join(f.delisted_urls)}{more}"
    else:
        line += "; none delisted but still live"
    return line


def cmd_trust(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """Show each host's trust records; ``--reset [HOST]`` trusts its signals again."""
    if args.reset is not None:
        host = None if args.reset == "*" else args.reset
        n = asyncio.run(write(settings, lambda store: store.host_trust.reset_trust(host, args.signal)))
        out.write(f"{n} trust record(s) reset: {host or 'every host'} {args.signal or 'every signal'}\n")
        return 0
    table = Table(
        out,
        [
            Column("HOST", 28),
            Column("SIGNAL", 13),
            Column("STATE", 7),
            Column("CHECKS", right=True),
            Column("LIES", right=True),
            Column("LAST LIE", 16),
            Column("LAST LIE URL"),
        ],
        empty="no trust records yet (the audit has checked no host's signals)",
    )
    for rec in open_store(settings).readers.iter_trust():
        if args.json:
            data = {
                "host": rec.host,
                "signal": rec.signal,
                "checks": rec.checks,
                "lies": rec.lies,
                "trusted": rec.trusted,
                "last_lie_at": rec.last_lie_at,
                "last_lie_url": rec.last_lie_url,
            }
            out.write(json_line(data))
            continue
        state = "trusted" if rec.trusted else "OFF"
        table.row(rec.host, rec.signal, state, rec.checks, rec.lies, when(rec.last_lie_at), rec.last_lie_url)
    if not args.json:
        table.end()
    return 0


def cmd_immutable(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """List the pages deltafetch skips; ``--reset [PATTERN]`` fetches them again next run."""
    if args.reset is not None:
        try:
            re.compile(args.reset)
        except re.error as exc:
            raise ConfigurationError(f"immutable --reset: bad pattern {args.reset!r}: {exc}") from exc
        pattern = args.reset or None
        n = asyncio.run(write(settings, lambda store: store.host_trust.immutable_reset(args.spider, pattern)))
        out.write(f"{n} immutable page(s) forgotten: fetched again on the next run\n")
        return 0
    table = Table(
        out,
        [Column("SPIDER", 12), Column("STORED", 16), Column("URL")],
        empty="no immutable pages stored (RECRAWLER_IMMUTABLE_PATTERNS names them)",
    )
    for row in open_store(settings).readers.iter_immutable():
        if args.spider and row["spider"] != args.spider:
            continue
        if args.json:
            out.write(json_line(row))
        else:
            table.row(row["spider"], row["stored_at"][:16].replace("T", " "), row["url"])
    if not args.json:
        table.end()
    return 0


def add_parsers(sub: Parsers, db: list[argparse.ArgumentParser]) -> None:
    """Register ``due``, ``trust`` and ``immutable``."""
    p = sub.add_parser("due", parents=db, help="list the stored pages the next run will check, and why")
    p.add_argument(
        "--now",
        help="the run clock: an ISO 8601 time, or from now: +2d, 12h (12 hours ago); default: now "
        "(like RECRAWLER_NOW)",
    )
    p.add_argument("--site", help="only pages of this host")
    p.add_argument("--schedule", choices=["adaptive", "all"], help="as RECRAWLER_SCHEDULE")
    p.add_argument("--lastmod-mode", choices=["skip", "hint", "ignore"], help="as RECRAWLER_LASTMOD_MODE")
    p.add_argument("--all", action="store_true", help="also list pages that are not due")
    p.add_argument("--limit", type=int, default=0, help="list at most this many pages")
    p.add_argument("--json", action="store_true", help="one JSON object per page")
    p.set_defaults(func=cmd_due)

    p = sub.add_parser("trust", parents=db, help="show which signals of each host are trusted; reset them")
    p.add_argument(
        "--reset",
        nargs="?",
        const="*",
        metavar="HOST",
        help="trust HOST's signals again (no HOST: every host)",
    )
    p.add_argument("--signal", choices=list(TRUST_SIGNALS), help="with --reset: only this signal")
    p.add_argument("--json", action="store_true", help="one JSON object per record")
    p.set_defaults(func=cmd_trust)

    p = sub.add_parser("immutable", parents=db, help="list immutable pages deltafetch skips; reset them")
    p.add_argument(
        "--reset",
        nargs="?",
        const="",
        metavar="PATTERN",
        help="forget pages whose URL matches PATTERN (a regex; none: all), fetched again next run",
    )
    p.add_argument("--spider", help="only this spider's pages")
    p.add_argument("--json", action="store_true", help="one JSON object per page")
    p.set_defaults(func=cmd_immutable)
