"""The ``recrawler`` command: inspect state, normalise URLs, start a crawl."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import sys
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from scrapy.settings import Settings
from scrapy.utils.project import get_project_settings

from recrawler import __version__, default_settings
from recrawler.detect.regions import volatile_regions
from recrawler.embedders import embedder_from_spec
from recrawler.exceptions import ConfigurationError, RecrawlerError
from recrawler.extract import ContentExtractor
from recrawler.index import open_kb
from recrawler.index.sqlite import embedder_spec
from recrawler.learning import NoiseRegistry
from recrawler.pipelines.index import embed_missing
from recrawler.redact import redact_text
from recrawler.schedule import SchedulePolicy, parse_now
from recrawler.state import RUN_HELD, TRUST_SIGNALS, store_from_uri, utcnow
from recrawler.urls import KeyMaker, key_host

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence
    from datetime import datetime

    from recrawler.state import PageRecord, StateStore


# C0 and C1 controls but tab and newline: what a page or a database holds never drives the terminal
_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_safe(text: str) -> str:
    """Return *text* with control characters shown as escapes (``\\x1b``); tab and newline stay."""
    return _UNSAFE.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class _TerminalOut:
    """Passes writes on to *out* made :func:`terminal_safe` (URLs, titles, chunks, diffs, ...)."""

    __slots__ = ("_out",)

    def __init__(self, out: TextIO) -> None:
        self._out = out

    def write(self, text: str) -> int:
        self._out.write(terminal_safe(text))
        return len(text)

    def flush(self) -> None:
        self._out.flush()


_T = TypeVar("_T")


def _settings() -> Settings:
    settings = Settings()
    settings.setmodule(default_settings, priority="default")
    return settings


def _project_settings() -> Settings:
    """The Scrapy project's settings when run inside one (extraction and noise), else defaults."""
    settings = (
        get_project_settings()
        if (Path("scrapy.cfg").exists() or os.environ.get("SCRAPY_SETTINGS_MODULE"))
        else Settings()
    )
    for name in dir(default_settings):
        if name.startswith("RECRAWLER_"):
            settings.set(name, getattr(default_settings, name), priority="default")
    return settings


def cmd_diff(args: argparse.Namespace, out: TextIO) -> int:
    """Show a page's last recorded change (``--all``: its whole history)."""
    key = KeyMaker()(args.url)
    rows = list(_store(args).iter_changes(key=key, limit=None if args.all else 1))
    if not rows:
        out.write(f"no recorded change for {key}\n")
        return 1
    for row in rows:
        if args.json:
            out.write(json.dumps(row) + "\n")
            continue
        fields = ", ".join(row["changed_fields"]) or "-"
        distance = "-" if row["distance"] is None else str(row["distance"])
        old_hash, new_hash = (row["old_hash"] or "-")[:12], (row["new_hash"] or "-")[:12]
        out.write(
            f"run {row['run_id']} at {row['at'][:19]}: {row['verdict']} {row['url']}\n"
            f"  fields: {fields}  tlsh distance: {distance}  {old_hash} -> {new_hash}\n"
        )
        for reason in row["critical"]:
            out.write(f"  critical: {reason}\n")
        out.write((row["diff"] or "") + "\n\n")
    return 0


def cmd_noise(args: argparse.Namespace, out: TextIO) -> int:
    """List what is being ignored per site: token patterns, boilerplate blocks, learned regions."""
    settings = _project_settings()
    registry = NoiseRegistry.from_settings(settings)
    report = _store(args).noise_report()
    sites = sorted(set(report) | {s for s in registry.patterns if s != "*"})
    if args.site:
        sites = [s for s in sites if s == args.site] or [args.site]
    for site in sites:
        data = report.get(site, {"boilerplate": [], "regions": []})
        patterns = [p.name for p in registry.site(site).normalizer.patterns]
        if args.json:
            out.write(json.dumps({"site": site, "patterns": patterns, **data}) + "\n")
            continue
        out.write(f"{site}\n  token patterns ({len(patterns)}): {', '.join(patterns)}\n")
        out.write(f"  boilerplate blocks ({len(data['boilerplate'])}):\n")
        for b in data["boilerplate"]:
            out.write(f"    on {b['pages']} pages: {' '.join((b['sample'] or '').split())[:100]}\n")
        out.write(f"  volatile regions ({len(data['regions'])}):\n")
        for r in data["regions"]:
            out.write(f"    {r['selector']}  ({r['source']}, {r['hits']}x, from {r['learned_from']})\n")
    return 0


def cmd_tune(args: argparse.Namespace, out: TextIO) -> int:
    """Replay the recorded history: what each fuzzy threshold would suppress and what the guard keeps."""
    rows = [r for r in _store(args).iter_changes(site=args.site) if r["distance"] is not None]
    thresholds = [int(t) for t in args.thresholds.split(",")]
    results = []
    for t in thresholds:
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
            out.write(json.dumps(r) + "\n")
        return 0
    out.write(f"{len(rows)} recorded changes with a TLSH distance{' on ' + args.site if args.site else ''}\n")
    out.write("threshold  fuzzy would suppress  guard still catches  let through\n")
    for r in results:
        out.write(
            f"{r['threshold']:>9}  {r['suppressed']:>20}  {r['caught_by_guard']:>19}  {r['missed']:>11}\n"
        )
    return 0


def cmd_calibrate(args: argparse.Namespace, out: TextIO) -> int:
    """Fetch a sample of pages twice and learn the regions that differ as volatile."""
    settings = _project_settings()
    store = _store(args)
    urls = list(args.urls)
    if not urls:
        pages = [p for p in store.iter_pages(status="live") if not args.site or p.site == args.site]
        random.Random(args.seed).shuffle(pages)  # noqa: S311 (a sample, not a secret)
        urls = [p.url for p in pages[: args.sample]]
    if not urls:
        raise ConfigurationError("calibrate: no pages to sample (crawl first, or give URLs)")
    extractor = ContentExtractor(
        settings.getlist("RECRAWLER_CONTENT_SELECTORS"), settings.getlist("RECRAWLER_CONTENT_NOISE_SELECTORS")
    )
    registry = NoiseRegistry.from_settings(settings)
    learned: dict[str, set[str]] = {}
    noisy = 0
    for url in urls:
        first = _fetch(url, settings)
        time.sleep(args.delay)
        second = _fetch(url, settings)
        site = key_host(KeyMaker()(url))
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
    new = asyncio.run(_store_regions(args, learned))
    out.write(
        f"{len(urls)} pages fetched twice {args.delay:g} s apart: {noisy} differed; "
        f"{new} new volatile regions learned\n"
    )
    return 0


def _fetch(url: str, settings: Settings) -> bytes:
    if not url.startswith(("http://", "https://")):
        raise ConfigurationError(f"calibrate: not an http(s) URL: {url!r}")
    agent = str(settings.get("USER_AGENT") or "recrawler")
    request = urllib.request.Request(url, headers={"User-Agent": agent})  # noqa: S310 (http(s) checked)
    try:
        timeout = settings.getfloat("DOWNLOAD_TIMEOUT") or 30
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (http(s) checked above)  # noqa: S310
            return bytes(response.read())
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"calibrate: cannot fetch {url}: {exc}") from exc


async def _store_regions(args: argparse.Namespace, learned: dict[str, set[str]]) -> int:
    store = _store(args)
    await store.open()
    try:
        total = 0
        for site, selectors in learned.items():
            total += await store.add_regions(
                site, sorted(selectors), source="calibrate", learned_from="recrawler calibrate", at=utcnow()
            )
        return total
    finally:
        await store.close()


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
    """List runs, newest first; or approve / discard a held run."""
    if args.action in ("approve", "discard"):
        if args.run_id is None:
            raise ConfigurationError(f"runs {args.action}: give the RUN_ID of a held run")
        return asyncio.run(_approve_or_discard(args, out))
    for run in _store(args).iter_runs():
        if args.json:
            out.write(json.dumps(run) + "\n")
            continue
        c = run["counts"] or {}
        counts = " ".join(
            f"{k}: {c.get(k, 0)}" for k in ("crawled", "new", "changed", "unchanged", "gone", "errors")
        )
        reasons = f"  [{', '.join(run['reasons'])}]" if run.get("reasons") else ""
        out.write(
            f"{run['id']:>5} {run['started_at'][:19]} {run['finish_reason'] or 'unfinished':<12} "
            f"{run.get('state') or '-':<11} {run['site'] or '-'}  {counts}{reasons}\n"
        )
    return 0


async def _approve_or_discard(args: argparse.Namespace, out: TextIO) -> int:
    store = _store(args)
    await store.open()
    try:
        info = await store.run_info(args.run_id)
        if info is None:
            raise ConfigurationError(f"no run {args.run_id} in {args.db}")
        if info["state"] != RUN_HELD:
            raise ConfigurationError(f"run {args.run_id} is {info['state']}, not held")
        if args.action == "discard":
            result = await store.discard(args.run_id)
            out.write(
                f"run {args.run_id} discarded: {result['chunks_dropped']} staged chunks dropped, "
                f"{result['pages']} pages will be checked again next run\n"
            )
            return 0
        settings = _project_settings()
        # the removals a mass-removal hold kept go first: they retire chunks in the held run
        removed = await store.apply_held(
            args.run_id,
            gone_after=settings.getint("RECRAWLER_GONE_AFTER_MISSES"),
            gone_statuses=[int(x) for x in settings.getlist("RECRAWLER_GONE_STATUSES")],
            at=utcnow(),
        )
        spec, options = embedder_spec(info["embedder"], _embedder_options(args))
        embedder = embedder_from_spec(args.embedder or spec, **options)
        try:
            texts, calls = await embed_missing(store, embedder, include_run=args.run_id)
        finally:
            embedder.close()
        gc = await store.publish(args.run_id, utcnow())
        out.write(
            f"run {args.run_id} approved and published: {texts} texts embedded in {calls} calls, "
            f"{removed.quarantined} pages quarantined, {sum(removed.gone.values())} gone, "
            f"{removed.moved} moved, {gc['chunks_deleted']} retired chunks removed\n"
        )
        return 0
    finally:
        await store.close()


def _embedder_options(args: argparse.Namespace) -> dict[str, Any]:
    return {"base_url": args.base_url} if getattr(args, "base_url", None) else {}


def cmd_search(args: argparse.Namespace, out: TextIO) -> int:
    """Search the published knowledge base."""
    with open_kb(args.db, embedder=args.embedder, **_embedder_options(args)) as kb:
        hits = kb.search(args.query, k=args.k)
        for hit in hits:
            if args.json:
                out.write(json.dumps(hit.to_dict()) + "\n")
                continue
            verified = hit.last_checked.strftime("%Y-%m-%d %H:%M") if hit.last_checked else "-"
            changed = hit.last_changed.strftime("%Y-%m-%d %H:%M") if hit.last_changed else "-"
            body = " ".join(hit.text.split())
            out.write(
                f"{hit.score:.3f}  {hit.url}\n       {hit.heading or hit.title or ''}"
                f"  (verified {verified}, changed {changed})\n"
                f"       {body[:240]}{'...' if len(body) > 240 else ''}\n\n"
            )
    return 0


def cmd_chunks(args: argparse.Namespace, out: TextIO) -> int:
    """Dump the published knowledge base, one chunk per line."""
    with open_kb(args.db, embedder="hashing") as kb:
        for chunk in kb.chunks():
            if args.json:
                out.write(json.dumps(chunk.to_dict()) + "\n")
            else:
                out.write(f"{chunk.url}\t{chunk.chunk_index}\t{chunk.heading}\t{len(chunk.text)} chars\n")
    return 0


def cmd_check(args: argparse.Namespace, out: TextIO) -> int:
    """Verify the database's invariants; ``--repair`` mends what drifted (exit 1: problems found)."""
    settings = _project_settings()
    key_maker = KeyMaker(
        settings.getlist("RECRAWLER_URL_DROP_PARAMS"), settings.getlist("RECRAWLER_URL_KEEP_PARAMS")
    )
    store = _store(args)
    findings = store.check_sync(key_maker)  # type: ignore[attr-defined]  # SQLite's own reader
    for f in findings:
        if args.json:
            out.write(json.dumps({"check": f.check, "key": f.key, "detail": f.detail}) + "\n")
        else:
            out.write(f"{f.check:<18} {f.key}  {f.detail}\n")
    if not findings:
        if not args.json:
            out.write("ok: every invariant holds\n")
        return 0
    if not args.repair:
        if not args.json:
            out.write(f"{len(findings)} problem(s); `recrawler check --repair` mends them\n")
        return 1
    repaired: dict[str, int] = asyncio.run(_write(args, lambda s: s.repair(findings)))  # type: ignore[attr-defined]
    if not args.json:
        done = ", ".join(f"{k}: {v}" for k, v in sorted(repaired.items())) or "nothing to change"
        out.write(f"repaired ({done}); the next run fetches and indexes the re-queued pages\n")
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


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if value is not None else "-"


def _duration(secs: float | None) -> str:
    if secs is None:
        return "-"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if secs >= size:
            return f"{secs / size:.1f}{unit}"
    return f"{secs:.0f}s"


def cmd_due(args: argparse.Namespace, out: TextIO) -> int:
    """List the stored pages the next run will check, and why (the run's own decision)."""
    settings = _settings()
    if args.lastmod_mode:
        settings.set("RECRAWLER_LASTMOD_MODE", args.lastmod_mode)
    if args.schedule:
        settings.set("RECRAWLER_SCHEDULE", args.schedule)
    policy = SchedulePolicy.from_settings(settings, now=parse_now(args.now))
    store = _store(args)
    off = {(t.host, t.signal) for t in store.iter_trust() if not t.trusted}
    total = due = shown = 0
    for page in store.iter_schedule(site=args.site):
        decision = policy.decide(
            page.revisit,
            url=page.url,
            status=page.status,
            lastmod=page.lastmod,
            lastmod_trusted=(key_host(page.key), "lastmod") not in off,
        )
        total += 1
        due += decision.due
        if not (decision.due or args.all) or (args.limit and shown >= args.limit):
            continue
        shown += 1
        rev = page.revisit
        if args.json:
            row = {
                "key": page.key,
                "url": page.url,
                "due": decision.due,
                "reason": decision.reason,
                "last_check_at": rev.last_check_at.isoformat() if rev.last_check_at else None,
                "next_check_at": rev.next_check_at.isoformat() if rev.next_check_at else None,
                "interval_secs": rev.interval,
                "changes_per_day": rev.rate * 86400 if rev.rate is not None else None,
                "checks": rev.checks,
                "changes": rev.changes,
            }
            out.write(json.dumps(row) + "\n")
            continue
        label = decision.reason if decision.due else f"not due ({decision.reason})"
        out.write(
            f"{label:<22} next {_when(rev.next_check_at):<16} every {_duration(rev.interval):<7} {page.url}\n"
        )
    if not args.json:
        out.write(
            f"{due} of {total} stored pages due at {policy.now.isoformat(timespec='seconds')} "
            f"(schedule {policy.mode}, lastmod {policy.lastmod_mode}); "
            "URLs new to the sitemap or a feed are due at once too\n"
        )
    return 0


def cmd_trust(args: argparse.Namespace, out: TextIO) -> int:
    """Show each host's trust records; ``--reset [HOST]`` trusts its signals again."""
    if args.reset is not None:
        host = None if args.reset == "*" else args.reset
        n = asyncio.run(_write(args, lambda store: store.reset_trust(host, args.signal)))
        out.write(f"{n} trust record(s) reset: {host or 'every host'} {args.signal or 'every signal'}\n")
        return 0
    for rec in _store(args).iter_trust():
        if args.json:
            data = {
                "host": rec.host,
                "signal": rec.signal,
                "checks": rec.checks,
                "lies": rec.lies,
                "trusted": rec.trusted,
                "last_lie_at": rec.last_lie_at.isoformat() if rec.last_lie_at else None,
                "last_lie_url": rec.last_lie_url,
            }
            out.write(json.dumps(data) + "\n")
            continue
        state = "trusted" if rec.trusted else "OFF"
        lie = f"  last lie {_when(rec.last_lie_at)} {rec.last_lie_url}" if rec.last_lie_url else ""
        out.write(f"{rec.host:<28} {rec.signal:<14} {state:<8} checks: {rec.checks} lies: {rec.lies}{lie}\n")
    return 0


def cmd_immutable(args: argparse.Namespace, out: TextIO) -> int:
    """List the pages deltafetch skips; ``--reset [PATTERN]`` fetches them again next run."""
    if args.reset is not None:
        try:
            re.compile(args.reset)
        except re.error as exc:
            raise ConfigurationError(f"immutable --reset: bad pattern {args.reset!r}: {exc}") from exc
        pattern = args.reset or None
        n = asyncio.run(_write(args, lambda store: store.immutable_reset(args.spider, pattern)))
        out.write(f"{n} immutable page(s) forgotten: fetched again on the next run\n")
        return 0
    for row in _store(args).iter_immutable():
        if args.spider and row["spider"] != args.spider:
            continue
        if args.json:
            out.write(json.dumps(row) + "\n")
        else:
            out.write(f"{row['spider']:<12} {row['stored_at'][:16]:<16} {row['url']}\n")
    return 0


async def _write(args: argparse.Namespace, work: Callable[[StateStore], Awaitable[_T]]) -> _T:
    store = _store(args)
    await store.open()
    try:
        return await work(store)
    finally:
        await store.close()


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

    p = sub.add_parser("runs", help="list runs; approve or discard a held run")
    with_db(p)
    p.add_argument("action", nargs="?", choices=["list", "approve", "discard"], default="list")
    p.add_argument("run_id", nargs="?", type=int, metavar="RUN_ID")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--embedder", help="embedder spec for approve (default: the one the run used)")
    p.add_argument("--base-url", help="OpenAI-protocol base URL for approve")
    p.set_defaults(func=cmd_runs)

    p = sub.add_parser("search", help="search the published knowledge base")
    with_db(p)
    p.add_argument("query")
    p.add_argument("-k", type=int, default=5, help="number of chunks (default %(default)s)")
    p.add_argument("--json", action="store_true", help="one JSON object per hit")
    p.add_argument("--embedder", help="embedder spec (default: the one the last published run used)")
    p.add_argument("--base-url", help="OpenAI-protocol base URL")
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("chunks", help="dump the published knowledge base")
    with_db(p)
    p.add_argument("--json", action="store_true", help="one JSON object per chunk")
    p.set_defaults(func=cmd_chunks)

    p = sub.add_parser("due", help="list the stored pages the next run will check, and why")
    with_db(p)
    p.add_argument("--now", help="the run clock, ISO 8601 (default: now; like RECRAWLER_NOW)")
    p.add_argument("--site", help="only pages of this host")
    p.add_argument("--schedule", choices=["adaptive", "all"], help="as RECRAWLER_SCHEDULE")
    p.add_argument("--lastmod-mode", choices=["skip", "hint", "ignore"], help="as RECRAWLER_LASTMOD_MODE")
    p.add_argument("--all", action="store_true", help="also list pages that are not due")
    p.add_argument("--limit", type=int, default=0, help="list at most this many pages")
    p.add_argument("--json", action="store_true", help="one JSON object per page")
    p.set_defaults(func=cmd_due)

    p = sub.add_parser("trust", help="show which signals of each host are trusted; reset them")
    with_db(p)
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

    p = sub.add_parser("immutable", help="list immutable pages deltafetch skips; reset them")
    with_db(p)
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

    p = sub.add_parser("check", help="verify the database's invariants; --repair mends what drifted")
    with_db(p)
    p.add_argument("--repair", action="store_true", help="re-queue drifted pages, retire stray chunks")
    p.add_argument("--json", action="store_true", help="one JSON object per problem")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("normalize", help="print the page key of each URL")
    p.add_argument("urls", nargs="+", metavar="URL")
    p.add_argument("--drop", action="append", help="query parameter pattern to drop (repeatable)")
    p.add_argument("--keep", action="append", help="keep only these query parameter patterns (repeatable)")
    p.set_defaults(func=cmd_normalize)

    p = sub.add_parser("diff", help="show a page's last recorded change")
    with_db(p)
    p.add_argument("url")
    p.add_argument("--all", action="store_true", help="the whole history, newest first")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_diff)

    p = sub.add_parser("noise", help="list what is being ignored, per site")
    with_db(p)
    p.add_argument("--site")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_noise)

    p = sub.add_parser("tune", help="replay recorded changes against candidate fuzzy thresholds")
    with_db(p)
    p.add_argument("--site")
    p.add_argument("--thresholds", default="10,20,30,40,50,75,100,150,200")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser("calibrate", help="fetch pages twice and learn the regions that differ as volatile")
    with_db(p)
    p.add_argument(
        "urls", nargs="*", metavar="URL", help="pages to fetch (default: a sample of stored pages)"
    )
    p.add_argument("--site", help="sample only this site's pages")
    p.add_argument("--sample", type=int, default=10, help="pages to sample (default %(default)s)")
    p.add_argument("--delay", type=float, default=60.0, help="seconds between the two fetches (default 60)")
    p.add_argument("--seed", type=int, default=None)
    p.set_defaults(func=cmd_calibrate)

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
        code: int = args.func(args, _TerminalOut(out or sys.stdout))
    except RecrawlerError as exc:
        sys.stderr.write(f"recrawler: error: {terminal_safe(redact_text(str(exc)))}\n")
        return 2
    except BrokenPipeError:
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
