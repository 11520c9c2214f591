"""Change detection commands: ``diff``, ``noise``, ``tune``, ``calibrate``, ``normalize``."""

from __future__ import annotations

import asyncio
import random
import time
import urllib.request
from typing import TYPE_CHECKING, Any

from recrawler.cli.output import Column, Table, json_line, when
from recrawler.cli.pages import page_json
from recrawler.cli.settings import key_maker, open_store, write
from recrawler.detect.regions import volatile_regions
from recrawler.exceptions import ConfigurationError
from recrawler.extract import ContentExtractor
from recrawler.learning import NoiseRegistry
from recrawler.state import LIVE, utcnow
from recrawler.terminal import Progress
from recrawler.times import parse_duration
from recrawler.urls import UrlPolicy, key_host

if TYPE_CHECKING:
    import argparse
    from typing import TextIO

    from scrapy.settings import Settings

    from recrawler.cli import Parsers
    from recrawler.state import History, PageRecord


def cmd_diff(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """Show a page's last recorded change (``--all``: its whole history)."""
    key = key_maker(settings)(args.url)
    store = open_store(settings)
    rows = list(store.readers.iter_changes(key=key, limit=None if args.all else 1))
    # the page as the knowledge base shows it first; what a held run changed after, labelled
    held = list(store.readers.iter_changes(key=key, held=True, limit=None if args.all else 1))
    code = 0
    if rows:
        _changes(rows, args, out)
    else:
        code = _page_state(store.readers.page_state(key), key, args, settings, out)
    _changes(held, args, out, held=True)
    return code if not held else 0


def _changes(
    rows: list[dict[str, Any]], args: argparse.Namespace, out: TextIO, *, held: bool = False
) -> None:
    for row in rows:
        # the blocks before the change are the store's own (for taking a change back), not output
        row.pop("old_blocks", None)
        if args.json:
            out.write(json_line({**row, "held": True} if held else row))
            continue
        fields = ", ".join(row["changed_fields"]) or "-"
        distance = "-" if row["distance"] is None else str(row["distance"])
        old_hash, new_hash = (row["old_hash"] or "-")[:12], (row["new_hash"] or "-")[:12]
        waits = (
            " (held: not published; `recrawler runs approve` or `discard` the run that carries it)"
            if held
            else ""
        )
        out.write(
            f"run {row['run_id']} at {row['at'][:19]}: {row['verdict']} {row['url']}{waits}\n"
            f"  fields: {fields}  tlsh distance: {distance}  {old_hash} -> {new_hash}\n"
        )
        for reason in row["critical"]:
            out.write(f"  critical: {reason}\n")
        out.write((row["diff"] or "") + "\n\n")


def _page_state(
    state: dict[str, Any] | None, key: str, args: argparse.Namespace, settings: Settings, out: TextIO
) -> int:
    """A page with no recorded change: its first state (a new page), or its last (a page gone,
    quarantined or moved); exit 1 only when the page is unknown."""
    if state is None:
        out.write(f"no page {key} stored (see `recrawler pages`)\n")
        return 1
    rec: PageRecord = state["record"]
    text = state["text"]
    if args.json:
        out.write(
            json_line(
                {
                    **page_json(rec),
                    "first_run": state["first_run"],
                    "removed_run": state["removed_run"],
                    "text": text,
                }
            )
        )
        return 0
    if state.get("pending") == "new":
        # stored by a run no publication covers yet: the knowledge base does not hold it
        run = f"run {state['first_run']}" if state["first_run"] else "a run"
        out.write(f"{run} at {rec.first_seen.isoformat()[:19]}: new {rec.url} (not published yet)\n")
        label = "first state"
    elif rec.status == LIVE:
        run = f"run {state['first_run']}" if state["first_run"] else "a run"
        out.write(
            f"{run} at {rec.first_seen.isoformat()[:19]}: new {rec.url}, unchanged since "
            f"(last verified {when(rec.last_checked)})\n"
        )
        label = "first state"
    else:
        run = f"run {state['removed_run']}" if state["removed_run"] else "a run"
        moved = f" to {rec.moved_to}" if rec.moved_to else ""
        out.write(f"{run} at {when(rec.last_checked)}: {rec.status}{moved} {rec.url}\n")
        label = "last state"
    out.write(f"  {label}: title {rec.title or '-'!s}  hash {(rec.content_hash or '-')[:12]}\n")
    if text is None:
        out.write("  (its text is no longer kept)\n")
        return 0
    limit = settings.getint("RECRAWLER_DIFF_MAX_BYTES")
    shown = text if len(text) <= limit else text[:limit] + "\n..."
    out.write("".join(f"  {line}\n" for line in shown.splitlines()))
    return 0


def cmd_noise(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """List what is being ignored per site: token patterns, boilerplate blocks, learned regions."""
    registry = NoiseRegistry.from_settings(settings)
    report = open_store(settings).readers.noise_report()
    sites = sorted(set(report) | {s for s in registry.patterns if s != "*"})
    if args.site:
        sites = [s for s in sites if s == args.site] or [args.site]
    table = Table(
        out,
        [Column("SITE", 24), Column("KIND", 11), Column("COUNT", right=True), Column("WHAT")],
        empty="nothing learned yet: no boilerplate blocks or volatile regions stored",
    )
    for site in sites:
        data = report.get(site, {"boilerplate": [], "regions": []})
        patterns = [p.name for p in registry.site(site).normalizer.patterns]
        if args.json:
            out.write(json_line({"site": site, "patterns": patterns, **data}))
            continue
        # COUNT: token patterns in use; pages a boilerplate block is on; times a region was seen
        table.row(site, "patterns", len(patterns), ", ".join(patterns))
        for b in data["boilerplate"]:
            table.row(site, "boilerplate", b["pages"], " ".join((b["sample"] or "").split())[:100])
        for r in data["regions"]:
            table.row(
                site, "region", r["hits"], f"{r['selector']}  ({r['source']}, from {r['learned_from']})"
            )
    if not args.json:
        table.end()
    return 0


def cmd_tune(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """Replay the recorded history: what each fuzzy threshold would suppress and what the guard keeps."""
    rows = [r for r in open_store(settings).readers.iter_changes(site=args.site) if r["distance"] is not None]
    results = []
    for t in (int(t) for t in args.thresholds.split(",")):
        suppressed = [r for r in rows if r["distance"] <= t]
        caught = [r for r in suppressed if r["critical"]]
        results.append(
            {
                "threshold": t,
                "changes": len(rows),
                "suppressed": len(suppressed),
                "caught_by_guard": len(caught),
                "missed": len(suppressed) - len(caught),
                "missed_urls": sorted({r["url"] for r in suppressed if not r["critical"]})[:10],
            }
        )
    if args.json:
        for r in results:
            out.write(json_line(r))
        return 0
    where = f" on {args.site}" if args.site else ""
    if not rows:
        out.write(f"no recorded changes with a TLSH distance{where} yet (changed pages record one)\n")
        return 0
    out.write(f"{len(rows)} recorded changes with a TLSH distance{where}\n")
    table = Table(
        out,
        [
            Column("THRESHOLD", right=True),
            Column("FUZZY WOULD SUPPRESS", right=True),
            Column("GUARD STILL CATCHES", right=True),
            Column("LET THROUGH", right=True),
        ],
        empty="",
    )
    for r in results:
        table.row(r["threshold"], r["suppressed"], r["caught_by_guard"], r["missed"])
    return 0


def cmd_calibrate(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """Fetch a sample of pages twice, ``--delay`` seconds apart, and learn the regions that differ
    as volatile. Every page is fetched once, then each again once its delay has passed, so the
    whole takes about one delay; a terminal shows what is being done and how long is left."""
    args.delay = parse_duration(args.delay, name="calibrate: --delay")
    store = open_store(settings)
    # read first: a database that cannot be read fails now, not after the fetches
    store.readers.noise_report()
    urls = list(args.urls)
    if not urls:
        pages = [p for p in store.readers.iter_pages(status="live") if not args.site or p.site == args.site]
        random.Random(args.seed).shuffle(pages)  # noqa: S311 (a sample, not a secret)
        urls = [p.url for p in pages[: args.sample]]
    if not urls:
        raise ConfigurationError("calibrate: no pages to sample (crawl first, or give URLs)")
    pairs = _fetch_twice(urls, settings, args.delay)
    extractor = ContentExtractor(
        settings.getlist("RECRAWLER_CONTENT_SELECTORS"), settings.getlist("RECRAWLER_CONTENT_NOISE_SELECTORS")
    )
    registry = NoiseRegistry.from_settings(settings)
    keys = key_maker(settings)
    learned: dict[str, set[str]] = {}
    noisy = 0
    for url, (first, second) in zip(urls, pairs, strict=True):
        site = key_host(keys(url))
        normalize = registry.site(site).normalizer.normalize
        _, a = extractor.main(first)
        _, b = extractor.main(second)
        if a is None or b is None:
            out.write(f"  {url}: no main content\n")
            continue
        regions = volatile_regions(a, b, normalize)
        if regions:
            noisy += 1
            learned.setdefault(site, set()).update(regions)
        out.write(f"  {url}: {', '.join(regions) if regions else 'stable'}\n")

    async def add(history: History) -> int:
        total = 0
        for site, selectors in learned.items():
            total += await history.add_regions(
                site, sorted(selectors), source="calibrate", learned_from="recrawler calibrate", at=utcnow()
            )
        return total

    new = asyncio.run(write(settings, lambda store: add(store.history)))
    out.write(
        f"{len(urls)} pages fetched twice {args.delay:g} s apart: {noisy} differed; "
        f"{new} new volatile regions learned\n"
    )
    return 0


def _fetch_twice(urls: list[str], settings: Settings, delay: float) -> list[tuple[bytes, bytes]]:
    """Each URL's body, then again *delay* seconds after its first fetch (the pages wait together)."""
    clock = time.monotonic
    spent: list[float] = []

    def fetch(url: str) -> tuple[bytes, float]:
        started = clock()
        body = _fetch(url, settings)
        spent.append(clock() - started)
        return body, clock()

    def left(first_left: int, until: float) -> float:
        # the fetches still to make, at the mean time of those made, plus the wait still ahead
        mean = sum(spent) / len(spent) if spent else 0.0
        return max(until - clock(), 0.0) + mean * (first_left + 1)

    firsts: list[tuple[bytes, float]] = []
    pairs: list[tuple[bytes, bytes]] = []
    with Progress("calibrate", total=2 * len(urls), unit="fetches") as progress:
        for i, url in enumerate(urls):
            progress.status(f"fetching {url}", left=left(len(urls) - i, clock() + delay) if spent else None)
            firsts.append(fetch(url))
            progress.advance()
        last_due = firsts[-1][1] + delay
        for url, (first, at) in zip(urls, firsts, strict=True):
            while (wait := at + delay - clock()) > 0:
                progress.status(f"waiting {wait:.0f}s to fetch {url} again", left=left(0, last_due))
                # on a terminal the countdown moves each second; elsewhere the wait is one sleep
                time.sleep(min(wait, 1.0) if progress.active else wait)
            progress.status(f"fetching {url} again", left=left(0, last_due))
            pairs.append((first, fetch(url)[0]))
            progress.advance()
    return pairs


def _fetch(url: str, settings: Settings) -> bytes:
    if not url.startswith(("http://", "https://")):
        raise ConfigurationError(f"calibrate: not an http(s) URL: {url!r}")
    agent = str(settings.get("USER_AGENT") or "recrawler")
    request = urllib.request.Request(url, headers={"User-Agent": agent})  # noqa: S310 (http(s) checked)
    try:
        timeout = settings.getfloat("DOWNLOAD_TIMEOUT") or 30
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (http(s) checked above)
            return bytes(response.read())
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"calibrate: cannot fetch {url}: {exc}") from exc


def cmd_normalize(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """Print the page key of each URL (``--drop``/``--keep`` replace ``RECRAWLER_URL_*_PARAMS``)."""
    keys = key_maker(settings)
    # the checks every URL passes before it is fetched or stored (any host: no site is known here)
    policy = UrlPolicy(any_host=True)
    refused = 0
    for url in args.urls:
        reason = policy.refusal(url)
        try:
            key = keys(url)
        except ValueError:
            key = "-"
        if reason is None:
            out.write(f"{key}\t{url}\n")
            continue
        refused += 1
        out.write(f"{key}\t{url}\trefused ({reason}): recrawler never fetches or stores this URL\n")
    # a script can tell: some URL is one the crawler would refuse
    return 1 if refused else 0


def add_parsers(sub: Parsers, db: list[argparse.ArgumentParser]) -> None:
    """Register ``diff``, ``noise``, ``tune``, ``calibrate`` and ``normalize``."""
    p = sub.add_parser("diff", parents=db, help="show a page's last recorded change")
    p.add_argument("url")
    p.add_argument("--all", action="store_true", help="the whole history, newest first")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_diff)

    p = sub.add_parser("noise", parents=db, help="list what is being ignored, per site")
    p.add_argument("--site")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_noise)

    p = sub.add_parser("tune", parents=db, help="replay recorded changes against candidate fuzzy thresholds")
    p.add_argument("--site")
    p.add_argument("--thresholds", default="10,20,30,40,50,75,100,150,200")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser(
        "calibrate", parents=db, help="fetch pages twice and learn the regions that differ as volatile"
    )
    p.add_argument(
        "urls", nargs="*", metavar="URL", help="pages to fetch (default: a sample of stored pages)"
    )
    p.add_argument("--site", help="sample only this site's pages")
    p.add_argument("--sample", type=int, default=10, help="pages to sample (default %(default)s)")
    p.add_argument(
        "--delay", default="60", help="time between the two fetches: seconds, or 90s, 2m, 1h (default 60)"
    )
    p.add_argument("--seed", type=int, default=None)
    p.set_defaults(func=cmd_calibrate)

    # --db too, though it reads no database: one habit for every command
    p = sub.add_parser("normalize", parents=db, help="print the page key of each URL")
    p.add_argument("urls", nargs="+", metavar="URL")
    p.add_argument("--drop", action="append", help="query parameter pattern to drop (repeatable)")
    p.add_argument("--keep", action="append", help="keep only these query parameter patterns (repeatable)")
    p.set_defaults(func=cmd_normalize)
