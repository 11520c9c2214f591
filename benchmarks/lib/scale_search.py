"""The scale benchmark's search part: both backends filled with the same chunks, then
``open_kb(uri).search(q, k=5)`` timed in a fresh process each, recall against numpy's exact top k."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.lib.results import fmt, log, mib, print_ratios, ratio, table
from benchmarks.lib.runners import proc_status_mib
from benchmarks.lib.scale_fill import PostgresFill, SQLiteFill, chunk_batches, hnsw_scans, make_queries

if TYPE_CHECKING:
    import argparse

    from benchmarks.lib.scale_servers import Postgres

PROJECT_DIR = Path(__file__).resolve().parents[2]
K = 5


def search_child(uri: str, queries_path: Path) -> dict[str, Any]:
    """In a fresh process: open the knowledge base, one warm-up search, then time every query."""
    queries = json.loads(queries_path.read_text(encoding="utf-8"))
    rss0 = proc_status_mib("VmRSS")
    t0 = time.perf_counter()
    from recrawler.kb.reader import open_kb

    kb = open_kb(uri)
    open_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    kb.search(queries[0], k=K)
    first_s = time.perf_counter() - t0
    times, hits = [], []
    for q in queries[1:]:
        t0 = time.perf_counter()
        found = kb.search(q, k=K)
        times.append(time.perf_counter() - t0)
        hits.append([[h.chunk.key, h.chunk.chunk_index, h.score] for h in found])
    kb.close()
    ms = sorted(t * 1000 for t in times)
    return {
        "open_s": open_s,
        "first_search_ms": first_s * 1000,
        "queries": len(ms),
        "p50_ms": statistics.median(ms),
        "p95_ms": ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))],
        "mean_ms": statistics.fmean(ms),
        "max_ms": ms[-1],
        "rss_before_mib": rss0,
        "peak_rss_mib": proc_status_mib("VmHWM"),
        "hits": hits,
    }


def run_search_child(
    uri: str, queries_path: Path, timeout: float, ef_search: int | None = None
) -> dict[str, Any]:
    """:func:`search_child` in a subprocess (its memory is the search's alone); *ef_search* goes
    to pgvector through libpq's ``PGOPTIONS`` (the knowledge base keeps the server's default)."""
    cmd = [sys.executable, "-m", "benchmarks.bench_scale", "--search-child", uri, str(queries_path)]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_DIR), os.environ.get("PYTHONPATH")])),
    }
    if ef_search is not None:
        env["PGOPTIONS"] = f"-c hnsw.ef_search={ef_search}"
    proc = subprocess.run(
        cmd, cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if proc.returncode != 0:
        log(f"search child failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        return {"exit": proc.returncode}
    return {"exit": 0, **json.loads(proc.stdout.strip().splitlines()[-1])}


def part_search(args: argparse.Namespace, pg: Postgres | None, tmp: Path) -> list[dict[str, Any]]:
    """Fill both backends with the same chunks, then search each in its own process."""
    from recrawler.kb.embedders import HashingEmbedder

    embedder = HashingEmbedder()
    queries_path = tmp / "queries.json"
    queries_path.write_text(json.dumps(make_queries(args.queries + 1, args.seed)), encoding="utf-8")
    rows: list[dict[str, Any]] = []
    for n in args.chunks:
        log(f"search: filling {n} chunks ...")
        fills: dict[str, Any] = {"numpy": SQLiteFill(tmp / f"kb-{n}.db")}
        if pg is not None:
            fills["pgvector"] = PostgresFill(pg.database(f"bench_kb_{n}"))
        t0 = time.perf_counter()
        for batch in chunk_batches(n, args.seed):
            for fill in fills.values():
                fill.add(*batch, embedder.id)
        total = time.perf_counter() - t0
        made = total - sum(f.seconds for f in fills.values())
        done = {"numpy": fills["numpy"].finish()}
        if "pgvector" in fills:
            log("search: building the HNSW index ...")
            done["pgvector"] = fills["pgvector"].finish(embedder.dim, embedder.id, args.maintenance_work_mem)
        exact: list[Any] | None = None
        runs = [("numpy", "numpy", None), ("pgvector", "pgvector", None)]
        runs += [("pgvector", f"pgvector ef_search={ef}", ef) for ef in args.ef_search]
        for backend, label, ef in runs:
            row: dict[str, Any] = {"chunks": n, "backend": label, "ef_search": ef, "generate_embed_s": made}
            rows.append(row)
            if backend not in done:
                row["exit"] = "n/a"
                continue
            row |= done[backend]
            uri = fills[backend].uri
            scans = hnsw_scans(uri, embedder.dim, embedder.id) if backend == "pgvector" else None
            log(f"search: {n} chunks, {label}: {args.queries} queries ...")
            row |= run_search_child(uri, queries_path, args.timeout, ef)
            if scans is not None and row["exit"] == 0:
                row["hnsw_index_scans"] = hnsw_scans(uri, embedder.dim, embedder.id) - scans
            hits = row.pop("hits", None)
            if backend == "numpy":
                exact = hits
            elif hits is not None and exact is not None:
                row |= against_exact(hits, exact)
    return rows


def against_exact(hits: list[Any], exact: list[Any]) -> dict[str, float]:
    """Recall of the exact top k (same chunks), and the found top k's summed score over the
    exact one's (near-ties make recall strict: 1.0 means as good an answer)."""
    found = scored = best = 0.0
    for got, want in zip(hits, exact, strict=True):
        found += len({(h[0], h[1]) for h in got} & {(h[0], h[1]) for h in want})
        scored += sum(h[2] for h in got)
        best += sum(h[2] for h in want)
    return {
        "recall_at_k_vs_numpy": found / max(1, sum(len(w) for w in exact)),
        "score_at_k_vs_numpy": scored / best if best else 0.0,
    }


def print_search(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The search table and its ratios."""
    header = (
        "chunks", "backend", "fill s", "index s", "db MiB", "open s", "first ms", "p50 ms", "p95 ms",
        "peak RSS MiB", f"recall@{K}", f"score@{K}", "HNSW scans", "exit",
    )  # fmt: skip
    body = [
        (
            f"{r['chunks']:,}",
            r["backend"],
            fmt(r.get("fill_s"), ".0f"),
            fmt(r.get("index_s"), ".0f"),
            fmt(mib(r.get("db_bytes")), ".0f"),
            fmt(r.get("open_s"), ".2f"),
            fmt(r.get("first_search_ms"), ".0f"),
            fmt(r.get("p50_ms"), ".1f"),
            fmt(r.get("p95_ms"), ".1f"),
            fmt(r.get("peak_rss_mib"), ".0f"),
            fmt(r.get("recall_at_k_vs_numpy"), ".3f") if r["backend"] != "numpy" else "exact",
            fmt(r.get("score_at_k_vs_numpy"), ".3f") if r["backend"] != "numpy" else "exact",
            str(r.get("hnsw_index_scans", "-")),
            str(r["exit"]),
        )
        for r in rows
    ]
    print(
        f"\n## search: open_kb(uri).search(q, k={K}), one warm-up then the rest timed, fresh process each\n"
    )
    print(table(header, body))
    by = {(r["chunks"], r["backend"]): r for r in rows if r["exit"] == 0}
    ratios: dict[str, Any] = {}
    for n in sorted({r["chunks"] for r in rows}):
        a, b = by.get((n, "numpy")), by.get((n, "pgvector"))
        for key in ("p50_ms", "p95_ms"):
            ratios[f"{n}:{key}_numpy_over_pgvector"] = ratio(a and a[key], b and b[key])
        ratios[f"{n}:first_search_ms_numpy_over_pgvector"] = ratio(
            a and a["first_search_ms"], b and b["first_search_ms"]
        )
    print_ratios(ratios)
    return ratios
