"""``recrawler runs``: list runs; approve or discard a held one."""

from __future__ import annotations

import argparse
import asyncio
from typing import TYPE_CHECKING, Any

from recrawler import outcome
from recrawler.cli.output import Column, Table, json_line
from recrawler.cli.settings import open_store, require_database
from recrawler.exceptions import ConfigurationError, StateStoreError
from recrawler.kb.embedders import embedder_from_spec
from recrawler.kb.publish import embed_missing
from recrawler.kb.sqlite import embedder_spec
from recrawler.state import RUN_HELD, utcnow
from recrawler.terminal import Progress

if TYPE_CHECKING:
    from typing import TextIO

    from scrapy.settings import Settings

    from recrawler.cli import Parsers

#: why a run is held (what approving it decides)
HOLDS = (outcome.HOLD_MASS_REMOVAL, outcome.HOLD_SPIKE, outcome.HOLD_SAME_CONTENT)
#: the counts a run's row shows, as the summary line names them
COUNTS = ("crawled", "new", "changed", "unchanged", "gone", "quarantined", "errors")


def cmd_runs(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """List runs, newest first; or approve / discard a held run."""
    if args.action in ("approve", "discard"):
        return asyncio.run(_approve_or_discard(args, settings, out))
    table = Table(
        out,
        [
            Column("ID", 4, right=True),
            Column("STARTED", 16),
            Column("STATE", 9),
            Column("EXIT", right=True),
            Column("SITE", 20),
            *(Column(name.upper(), right=True) for name in COUNTS),
            Column("REASONS"),
        ],
        empty="no runs yet",
    )
    for run in open_store(settings).readers.iter_runs():
        if args.json:
            out.write(json_line(run))
            continue
        c = run["counts"] or {}
        table.row(
            run["id"],
            run["started_at"][:16].replace("T", " "),
            run.get("state"),
            run.get("exit_code"),
            run["site"],
            *(c.get(k, 0) if run["counts"] else None for k in COUNTS),
            ", ".join(run.get("reasons") or ()) or None,
        )
    if not args.json:
        table.end()
    return 0


def embedder_options(settings: Settings) -> dict[str, Any]:
    """The embedder options of a run with *settings* (``--base-url`` sets the base URL)."""
    base_url = settings.get("RECRAWLER_EMBEDDER_BASE_URL")
    return {"base_url": base_url} if base_url else {}


async def _approve_or_discard(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    store = open_store(settings)
    require_database(store.readers)
    await store.open()
    try:
        try:
            run = await store.decisions.decision(args.run_id)
        except StateStoreError as exc:
            raise ConfigurationError(str(exc)) from None
        info = await store.kb.run_info(run.id)
        assert info is not None
        if args.action == "discard":
            try:
                result = await store.decisions.discard(run.id)
            except StateStoreError as exc:
                raise ConfigurationError(str(exc)) from None
            parts = []
            if info["state"] == RUN_HELD:
                parts.append(
                    f"{result['chunks_dropped']} staged chunks dropped, {result['pages']} pages back as "
                    "published (checked again next run)"
                )
            parts.append(f"{result['misses']} removals dropped")
            out.write(f"run {args.run_id} discarded: {', '.join(parts)}\n")
            return 0
        gone_after = settings.getint("RECRAWLER_GONE_AFTER_MISSES")
        gone_statuses = [int(x) for x in settings.getlist("RECRAWLER_GONE_STATUSES")]
        texts = calls = 0
        if info["state"] == RUN_HELD:
            # embedded before the decision is taken: a cache, paid for whichever decision wins
            spec, options = embedder_spec(info["embedder"], embedder_options(settings))
            embedder = embedder_from_spec(args.embedder or spec, **options)
            try:
                with Progress(f"run {args.run_id}: embedding", unit="texts") as progress:
                    texts, calls = await embed_missing(
                        store.kb, embedder, include_run=args.run_id, progress=progress.advance
                    )
            finally:
                embedder.close()
        # approved, the run ends as it would have unheld: 0, or what its other reasons say
        reasons = set((store.readers.run_report(args.run_id) or {}).get("reasons") or ()) - set(HOLDS)
        code = outcome.exit_code(
            state_errors="state_error" in reasons,
            lease_lost="lease_lost" in reasons,
            held=False,
            skipped=bool(reasons),
        )
        try:
            # the decision, the removals kept for it and the publication: one transaction
            removed, gc = await store.decisions.approve(
                run, at=utcnow(), gone_after=gone_after, gone_statuses=gone_statuses, exit_code=code
            )
        except StateStoreError as exc:
            raise ConfigurationError(str(exc)) from None
        # the vector blocks search reads, for the vectors the run added
        spec, options = embedder_spec(info["embedder"], embedder_options(settings))
        vectors = embedder_from_spec(args.embedder or spec, **options)
        try:
            await store.search_index.index_vectors(vectors.id)
        finally:
            vectors.close()
        await store.deliver()
        out.write(
            f"run {args.run_id} approved and published: {texts} texts embedded in {calls} calls, "
            f"{removed.quarantined} pages quarantined, {sum(removed.gone.values())} gone, "
            f"{removed.moved} moved, {gc['chunks_deleted']} retired chunks removed\n"
        )
        return 0
    finally:
        await store.close()


def add_parsers(sub: Parsers, db: list[argparse.ArgumentParser]) -> None:
    """Register ``runs`` with its actions ``list`` (the default), ``approve`` and ``discard``."""

    def listing(default: object) -> argparse.ArgumentParser:
        flags = argparse.ArgumentParser(add_help=False)
        flags.add_argument("--json", action="store_true", default=default, help="one JSON object per line")
        return flags

    p = sub.add_parser("runs", parents=[*db, listing(False)], help="list runs; approve or discard a held run")
    p.set_defaults(func=cmd_runs, action="list")
    actions = p.add_subparsers(dest="action", metavar="{list,approve,discard}")
    actions.add_parser(
        "list", parents=[*db, listing(argparse.SUPPRESS)], help="list runs, newest first (the default)"
    )
    a = actions.add_parser(
        "approve", parents=db, help="publish a held run (embedding it), and apply the removals it keeps"
    )
    a.add_argument("run_id", type=int, metavar="RUN_ID")
    a.add_argument("--embedder", help="embedder spec (default: the one the run used)")
    a.add_argument("--base-url", help="OpenAI-protocol base URL (as RECRAWLER_EMBEDDER_BASE_URL)")
    d = actions.add_parser(
        "discard", parents=db, help="drop a held run's changes (as if it never ran) and the removals it keeps"
    )
    d.add_argument("run_id", type=int, metavar="RUN_ID")
