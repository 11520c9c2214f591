"""Reconciliation at size: a database of N stored pages (filled by SQL), the closing work timed.

Usage: ``python -m benchmarks.bench_reconcile [--pages 1000000] [--json PATH]`` (see README.md).
Times, on one SQLite file: beginning a run (the site's counts), folding the changed pages' block
statistics, draining the unseen-page check in batches, the removal plan, applying the staged
misses, publishing the run's chunks; and the process's peak RSS, which stays flat because every
step is set work in SQL, in batches.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import shutil
import sqlite3
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if not __package__:  # run as a script: python benchmarks/bench_reconcile.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.lib.results import add_json_option, write_json
from recrawler.detect.boilerplate import PAGE_BLOCKS
from recrawler.detect.hashing import pack_blocks
from recrawler.state.records import SETTLE_APPLY
from recrawler.state.sqlite import SQLiteStateStore

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

SITE = "docs.example.com"
T = "2026-01-01T00:00:00+00:00"


def rss_mib() -> float:
    """Peak RSS of this process so far (MiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def fill(path: Path, pages: int, miss_share: float, unseen_share: float) -> None:
    """N live pages with one chunk each; a previous run (1) listed them all."""
    conn = sqlite3.connect(path)
    conn.executescript(
        f"""
        PRAGMA journal_mode = WAL;
        INSERT INTO runs (id, spider, site, started_at, state, listed)
            VALUES (1, 'docs', '{SITE}', '{T}', 'published', {pages});
        WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < {pages})
        INSERT INTO pages (key, site, url, content_hash, status, first_seen, last_checked,
                           last_seen_run, listed_run, chunks)
            SELECT '{SITE}/p/' || i, '{SITE}', 'https://{SITE}/p/' || i, hex(randomblob(16)), 'live',
                   '{T}', '{T}', 1, 1, 1 FROM n;
        INSERT INTO chunks (key, chunk_index, chunk_hash, url, heading, text, added_run)
            SELECT key, 0, content_hash, url, 'Page', 'text of ' || key, 1 FROM pages;
        """
    )
    conn.commit()
    conn.close()


def stage_run(path: Path, run_id: int, pages: int, miss_share: float, unseen_share: float) -> dict[str, int]:
    """What a crawl of run *run_id* leaves before closing: listed pages, staged misses, new chunks."""
    misses = int(pages * miss_share)
    unseen = int(pages * unseen_share)
    conn = sqlite3.connect(path)
    with conn:
        # the run saw or listed every page but the unseen tail
        conn.execute(
            "UPDATE pages SET listed_run = ?, last_seen_run = ? WHERE CAST(substr(key, ?) AS INTEGER) < ?",
            (run_id, run_id, len(f"{SITE}/p/") + 1, pages - unseen),
        )
        conn.execute(
            """INSERT INTO run_misses (run_id, key, http_status)
               SELECT ?, key, 404 FROM pages ORDER BY key LIMIT ?""",
            (run_id, misses),
        )
        # 1% of the pages changed: their chunk is replaced by a new one
        changed = max(pages // 100, 1)
        conn.execute(
            "UPDATE chunks SET retired_run = ? WHERE id IN (SELECT id FROM chunks ORDER BY id DESC LIMIT ?)",
            (run_id, changed),
        )
        conn.execute(
            """INSERT INTO chunks (key, chunk_index, chunk_hash, url, heading, text, added_run)
               SELECT key, 0, hex(randomblob(16)), url, 'Page', 'new text', ? FROM chunks
               WHERE retired_run = ?""",
            (run_id, run_id),
        )
        # the changed pages' block-set changes, waiting for the fold: 30 blocks a page, 10 of them
        # the site's furniture, 2 of its own edited
        rng = random.Random(1)
        furniture = [rng.getrandbits(63) for _ in range(10)]
        rows = []
        for _ in range(changed):
            own = [rng.getrandbits(63) for _ in range(20)]
            edited = [*own[:18], rng.getrandbits(63), rng.getrandbits(63)]
            added = {str(b): f"block {b}" for b in edited[18:]}
            rows.append(
                (SITE, pack_blocks([*furniture, *own]), pack_blocks([*furniture, *edited]), json.dumps(added))
            )
        conn.executemany(
            "INSERT INTO block_deltas (site, old_blocks, new_blocks, samples) VALUES (?, ?, ?, ?)", rows
        )
    conn.close()
    return {"misses": misses, "unseen": unseen, "changed": changed}


async def timed(label: str, figures: dict[str, Any], work: Callable[[], Awaitable[Any]]) -> Any:
    t0 = time.monotonic()
    result = await work()
    figures[label] = round(time.monotonic() - t0, 3)
    print(f"  {label:28} {figures[label]:8.3f} s", flush=True)
    return result


async def measure(
    path: Path, pages: int, batch: int, miss_share: float, unseen_share: float
) -> dict[str, Any]:
    """Open the store on a filled database and time each closing step of a run."""
    figures: dict[str, Any] = {}
    store = SQLiteStateStore(f"sqlite:///{path}", blocks=PAGE_BLOCKS)
    await timed("open_migrate_s", figures, store.open)
    run = await timed(
        "begin_run_s", figures, lambda: store.runs.begin_run("docs", SITE, datetime.now(UTC), holder="bench")
    )
    await store.close()
    staged = stage_run(path, run.id, pages, miss_share, unseen_share)
    store = SQLiteStateStore(f"sqlite:///{path}", blocks=PAGE_BLOCKS)
    await store.open()
    figures.update(staged)
    # first, as the Reconciler does: the block statistics of the run's page writes
    figures["deltas_folded"] = await timed("fold_block_stats_s", figures, store.history.fold_block_stats)

    async def drain() -> int:
        n = batches = 0
        while True:
            got = await store.pages.unseen(run, batch)
            batches += 1
            if not got:
                break
            n += len(got)
        figures["unseen_batches"] = batches
        return n

    figures["unseen_found"] = await timed("unseen_all_batches_s", figures, drain)
    plan = await timed(
        "removal_plan_s",
        figures,
        lambda: store.decisions.removal_plan(run, gone_after=2, gone_statuses=[410]),
    )
    figures["removals_planned"] = plan.removals
    await store.decisions.settle_misses(run, SETTLE_APPLY)
    # the run's misses are applied in the transaction that publishes it
    result, _ = await timed(
        "reconcile_publish_s",
        figures,
        lambda: store.decisions.publish_run(run, at=datetime.now(UTC), gone_after=2, gone_statuses=[410]),
    )
    figures["quarantined"] = result.quarantined
    await store.close()
    figures["peak_rss_mib"] = round(rss_mib(), 1)
    return figures


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--pages", type=int, default=1_000_000, help="stored pages (default 1,000,000)")
    p.add_argument("--batch", type=int, default=500, help="unseen-check batch (RECRAWLER_VERIFY_BATCH_SIZE)")
    p.add_argument("--misses", type=float, default=0.01, help="share of pages answering 404 (default 0.01)")
    p.add_argument("--unseen", type=float, default=0.001, help="share of pages not listed (default 0.001)")
    p.add_argument("--keep", action="store_true", help="keep the database")
    add_json_option(p, "bench_reconcile")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Fill, then time the closing work; print each figure and write them as JSON."""
    args = parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="bench-reconcile-"))
    path = workdir / "state.db"
    try:
        store = SQLiteStateStore(f"sqlite:///{path}", blocks=PAGE_BLOCKS)
        asyncio.run(store.open())
        asyncio.run(store.close())
        t0 = time.monotonic()
        fill(path, args.pages, args.misses, args.unseen)
        fill_s = round(time.monotonic() - t0, 1)
        print(f"filled {args.pages:,} pages + chunks by SQL in {fill_s} s ({path.stat().st_size >> 20} MiB)")
        rss_before = round(rss_mib(), 1)
        figures = asyncio.run(measure(path, args.pages, args.batch, args.misses, args.unseen))
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    figures |= {"pages": args.pages, "batch": args.batch, "fill_s": fill_s, "rss_before_mib": rss_before}
    print(f"  peak RSS {figures['peak_rss_mib']} MiB (after filling: {rss_before} MiB)")
    write_json(args.json, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
