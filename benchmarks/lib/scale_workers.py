"""The scale benchmark's workers part: one site crawled by one process, by one scrapy-redis worker
and by two sharing one SQLite file, and whether they leave the same state."""

from __future__ import annotations

import contextlib
import sqlite3
from typing import TYPE_CHECKING, Any

from benchmarks.lib.results import fmt, log, print_ratios, ratio, table
from benchmarks.lib.scale_crawl import crawl_cmd, page_tally, read_counts, run_watched, serve_site
from benchmarks.lib.scale_servers import redis_server

if TYPE_CHECKING:
    import argparse
    from pathlib import Path


def final_state(db: Path) -> dict[str, Any]:
    """What the next run and the bot read: pages, the chunks no run retired, run states."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        pages = sorted(conn.execute("SELECT key, status, content_hash, chunks FROM pages").fetchall())
        chunks = sorted(
            conn.execute(
                "SELECT key, chunk_index, chunk_hash FROM chunks WHERE retired_run IS NULL"
            ).fetchall()
        )
        runs = [r[0] for r in conn.execute("SELECT state FROM runs ORDER BY id")]
    return {"pages": pages, "chunks": chunks, "runs": runs}


def part_workers(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """One site crawled by one process, by one worker and by two workers sharing one SQLite file."""
    n = args.worker_pages
    root = tmp / "site-workers"
    root.mkdir()
    server, page_paths = serve_site(root, n, args.seed)
    rows: list[dict[str, Any]] = []
    states: dict[str, Any] = {}
    with redis_server(tmp / "redis") as redis_url:
        for label, workers in (("1 process, no workers", 0), ("1 worker", 1), ("2 workers", 2)):
            db = tmp / f"workers-{workers}.db"
            extra: tuple[str, ...] = ()
            if workers:
                # a Redis database per configuration: no frontier or seen-set carries over
                extra = ("-s", "RECRAWLER_WORKERS_ENABLED=1", "-s", f"REDIS_URL={redis_url}/{workers}")
            reports = [tmp / f"workers-{workers}-{i}.json" for i in range(max(1, workers))]
            cmds = [crawl_cmd(f"{server.url}/sitemap.xml", f"sqlite:///{db}", rep, *extra) for rep in reports]
            log(f"workers: {label} ...")
            server.truncate_access_log()
            logs = [tmp / f"workers-{workers}-{i}.log" for i in range(len(cmds))]
            exits, wall, rss = run_watched(cmds, log_paths=logs, timeout=args.timeout)
            row: dict[str, Any] = {"config": label, "processes": len(cmds), "wall_s": wall, "exits": exits}
            row |= page_tally(server, page_paths)
            row["pages_per_s"] = row["pages"] / wall if wall else None
            row["peak_rss_mib_each"] = rss
            counts = [c for c in map(read_counts, reports) if c is not None]
            row["counts"] = counts[-1] if counts else None
            states[label] = final_state(db) if all(e == 0 for e in exits) else None
            row["final_pages"] = len(states[label]["pages"]) if states[label] else None
            row["final_chunks"] = len(states[label]["chunks"]) if states[label] else None
            rows.append(row)
            log(f"workers: {label}: {wall:.1f} s, {fmt(row['pages_per_s'], '.0f')} pages/s")
    server.stop()
    base = states.get("1 process, no workers")
    equal = {
        label: (s == base if s is not None and base is not None else None) for label, s in states.items()
    }
    for label, same in equal.items():
        if same is False and base is not None:
            # say where: which of pages, chunks and run states differ
            state = states[label]
            log(f"workers: {label} differs in {[k for k in base if base[k] != state[k]]}: {state['runs']}")
    return {"pages_in_site": n, "runs": rows, "final_state_equal_to_single_process": equal}


def print_workers(result: dict[str, Any]) -> dict[str, Any]:
    """The workers table and its ratios."""
    header = (
        "config",
        "procs",
        "wall s",
        "pages",
        "pages/s",
        "peak RSS MiB each",
        "final pages",
        "final chunks",
        "same state",
        "exits",
    )
    eq = result["final_state_equal_to_single_process"]
    body = [
        (
            r["config"],
            str(r["processes"]),
            f"{r['wall_s']:.1f}",
            str(r["pages"]),
            fmt(r["pages_per_s"], ".0f"),
            "/".join(f"{x:.0f}" for x in r["peak_rss_mib_each"]),
            str(r["final_pages"]),
            str(r["final_chunks"]),
            {True: "yes", False: "NO", None: "n/a"}[eq.get(r["config"])],
            ",".join(map(str, r["exits"])),
        )
        for r in result["runs"]
    ]
    print(f"\n## workers: one site of {result['pages_in_site']} pages, one SQLite file, Redis on loopback\n")
    print(table(header, body))
    by = {r["config"]: r for r in result["runs"]}
    one, two = by.get("1 worker"), by.get("2 workers")
    plain = by.get("1 process, no workers")
    ratios = {
        "wall_2_workers_over_1_worker": ratio(two and two["wall_s"], one and one["wall_s"]),
        "wall_1_worker_over_no_workers": ratio(one and one["wall_s"], plain and plain["wall_s"]),
    }
    print_ratios(ratios)
    return ratios
