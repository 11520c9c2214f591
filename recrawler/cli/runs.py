"""``recrawler runs``: list runs; approve or discard a held one."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from recrawler.cli.settings import db_uri, open_store
from recrawler.embedders import embedder_from_spec
from recrawler.exceptions import ConfigurationError
from recrawler.index.publish import embed_missing
from recrawler.index.sqlite import embedder_spec
from recrawler.redact import redact_url
from recrawler.state import RUN_HELD, utcnow
from recrawler.terminal import Progress

if TYPE_CHECKING:
    import argparse
    from typing import TextIO

    from scrapy.settings import Settings

    from recrawler.cli import Parsers

COUNTS = ("crawled", "new", "changed", "unchanged", "gone", "errors")


def cmd_runs(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """List runs, newest first; or approve / discard a held run."""
    if args.action in ("approve", "discard"):
        if args.run_id is None:
            raise ConfigurationError(f"runs {args.action}: give the RUN_ID of a held run")
        return asyncio.run(_approve_or_discard(args, settings, out))
    for run in open_store(settings).iter_runs():
        if args.json:
            out.write(json.dumps(run) + "\n")
            continue
        c = run["counts"] or {}
        counts = " ".join(f"{k}: {c.get(k, 0)}" for k in COUNTS)
        reasons = f"  [{', '.join(run['reasons'])}]" if run.get("reasons") else ""
        out.write(
            f"{run['id']:>5} {run['started_at'][:19]} {run['finish_reason'] or 'unfinished':<12} "
            f"{run.get('state') or '-':<11} {run['site'] or '-'}  {counts}{reasons}\n"
        )
    return 0


def embedder_options(settings: Settings) -> dict[str, Any]:
    """The embedder options of a run with *settings* (``--base-url`` sets the base URL)."""
    base_url = settings.get("RECRAWLER_EMBEDDER_BASE_URL")
    return {"base_url": base_url} if base_url else {}


async def _approve_or_discard(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    store = open_store(settings)
    await store.open()
    try:
        info = await store.run_info(args.run_id)
        if info is None:
            raise ConfigurationError(f"no run {args.run_id} in {redact_url(db_uri(settings))}")
        if info["state"] != RUN_HELD:
            raise ConfigurationError(f"run {args.run_id} is {info['state']}, not held")
        if args.action == "discard":
            result = await store.discard(args.run_id)
            out.write(
                f"run {args.run_id} discarded: {result['chunks_dropped']} staged chunks dropped, "
                f"{result['pages']} pages will be checked again next run\n"
            )
            return 0
        # the removals a mass-removal hold kept go first: they retire chunks in the held run
        removed = await store.apply_held(
            args.run_id,
            gone_after=settings.getint("RECRAWLER_GONE_AFTER_MISSES"),
            gone_statuses=[int(x) for x in settings.getlist("RECRAWLER_GONE_STATUSES")],
            at=utcnow(),
        )
        spec, options = embedder_spec(info["embedder"], embedder_options(settings))
        embedder = embedder_from_spec(args.embedder or spec, **options)
        try:
            with Progress(f"run {args.run_id}: embedding", unit="texts") as progress:
                texts, calls = await embed_missing(
                    store, embedder, include_run=args.run_id, progress=progress.advance
                )
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


def add_parsers(sub: Parsers, db: list[argparse.ArgumentParser]) -> None:
    """Register ``runs``."""
    p = sub.add_parser("runs", parents=db, help="list runs; approve or discard a held run")
    p.add_argument("action", nargs="?", choices=["list", "approve", "discard"], default="list")
    p.add_argument("run_id", nargs="?", type=int, metavar="RUN_ID")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--embedder", help="embedder spec for approve (default: the one the run used)")
    p.add_argument("--base-url", help="OpenAI-protocol base URL for approve (as RECRAWLER_EMBEDDER_BASE_URL)")
    p.set_defaults(func=cmd_runs)
