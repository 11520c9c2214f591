"""The search benchmark's scale part: a knowledge base of N synthetic chunks on SQLite and
PostgreSQL, searched cold (``recrawler search`` as a fresh process) and warm (one ``open_kb``),
recall against an exact scan."""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from benchmarks.lib.results import fmt, table
from benchmarks.lib.runners import proc_status_mib, run_process, scrapy_env
from benchmarks.lib.scale_fill import PostgresFill, SQLiteFill, chunk_batches, make_queries, page_of
from benchmarks.lib.scale_servers import postgres_server

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

PROJECT_DIR = Path(__file__).resolve().parents[2]
K = 10


def log(msg: str) -> None:
    sys.stderr.write(f"[bench_search] {msg}\n")
    sys.stderr.flush()


def exact_top(n: int, seed: int, queries: Sequence[str]) -> list[list[tuple[str, int]]]:
    """The exact top K chunks (page key, position) of each query: a float64 scan of every vector."""
    import numpy as np

    from recrawler.kb.embedders import HashingEmbedder

    q = HashingEmbedder().embed(list(queries)).astype(np.float64)
    best_s = np.full((len(queries), 0), -np.inf)
    best_i = np.zeros((len(queries), 0), dtype=np.int64)
    for first, _, _, vectors in chunk_batches(n, seed):
        s = q @ vectors.astype(np.float64).T
        ids = np.arange(first, first + len(vectors), dtype=np.int64)
        all_s = np.concatenate([best_s, s], axis=1)
        all_i = np.concatenate([best_i, np.broadcast_to(ids, s.shape)], axis=1)
        keep = np.argsort(-all_s, axis=1, kind="stable")[:, :K]
        best_s = np.take_along_axis(all_s, keep, axis=1)
        best_i = np.take_along_axis(all_i, keep, axis=1)
    return [
        [page_of(int(i)) for i, s in zip(row_i, row_s, strict=True) if s > 0]
        for row_i, row_s in zip(best_i, best_s, strict=True)
    ]


def reused_exact(path: Path) -> list[list[tuple[str, int]]] | None:
    """The exact top K an earlier run kept in *path* (None: none kept)."""
    if not path.exists():
        return None
    return [[(key, int(index)) for key, index in row] for row in json.loads(path.read_text(encoding="utf-8"))]


def build_blocks_now(path: Path, embedder: str) -> float:
    """Write the vector blocks as a publishing run does; seconds."""
    from recrawler.state.sql.dialect import drive
    from recrawler.state.sql.search import build_blocks
    from recrawler.state.sqlite.versions import _execute

    t0 = time.perf_counter()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        drive(build_blocks(embedder), lambda op: _execute(conn, op))
        conn.execute("COMMIT")
    finally:
        conn.close()
    return time.perf_counter() - t0


def filled(db: Path) -> int | None:
    """The chunks a database filled by a finished earlier run holds (None: no such database)."""
    if not db.exists():
        return None
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("SELECT MAX(id) FROM chunks").fetchone()[0] or 0)
    except sqlite3.Error:
        return None
    finally:
        conn.close()


def search_child(uri: str, queries_path: Path, mode: str) -> dict[str, Any]:
    """In a fresh process: open the knowledge base, one warm-up search, then time every query."""
    queries = json.loads(queries_path.read_text(encoding="utf-8"))
    from recrawler.kb.reader import open_kb

    t0 = time.perf_counter()
    kb = open_kb(uri)
    open_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    kb.search(queries[0], k=K, mode=mode)
    first_s = time.perf_counter() - t0
    times, cpu, hits = [], [], []
    for q in queries[1:]:
        t0, c0 = time.perf_counter(), time.process_time()
        found = kb.search(q, k=K, mode=mode)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        hits.append([[h.chunk.key, h.chunk.chunk_index] for h in found])
    kb.close()
    ms = sorted(t * 1000 for t in times)
    return {
        "open_s": open_s,
        "first_ms": first_s * 1000,
        "p50_ms": statistics.median(ms),
        "p95_ms": ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))],
        # this process's own CPU time: what the query costs, however busy the machine is
        "cpu_p95_ms": sorted(cpu)[min(len(cpu) - 1, round(0.95 * (len(cpu) - 1)))] * 1000,
        "max_ms": ms[-1],
        "peak_rss_mib": proc_status_mib("VmHWM"),
        "hits": hits,
    }


def run_child(uri: str, queries_path: Path, mode: str, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.bench_search", "--search-child", uri, str(queries_path), mode]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_DIR), os.environ.get("PYTHONPATH")])),
    }
    proc = subprocess.run(
        cmd, cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if proc.returncode != 0:
        log(f"search child failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        return {"exit": proc.returncode}
    return {"exit": 0, **json.loads(proc.stdout.strip().splitlines()[-1])}


def cold_searches(uri: str, queries: Sequence[str], mode: str, tmp: Path, timeout: float) -> dict[str, Any]:
    """``recrawler search`` once per query, each a fresh process: wall seconds and peak RSS."""
    walls, rss, cpu = [], [], []
    env = {
        **scrapy_env(),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_DIR), os.environ.get("PYTHONPATH")])),
    }
    for i, q in enumerate(queries):
        # the console script's own steps (python, import recrawler.cli, main) in a process that
        # reports its own peak RSS (a forked child's ru_maxrss starts at its parent's)
        hwm = tmp / f"cold-{i}.hwm"
        cmd = [sys.executable, "-m", "benchmarks.bench_search", "--cold-child", str(hwm), "search", q,
               "-k", str(K), "--mode", mode, "--json", "--db", uri]  # fmt: skip
        rc, timed_out, wall, _ = run_process(
            cmd, cwd=tmp, env=env, log_path=tmp / f"cold-{i}.log", timeout=timeout
        )
        if rc != 0 or timed_out:
            log(f"cold search failed ({rc}): {(tmp / f'cold-{i}.log').read_text()[-2000:]}")
            return {"cold_exit": rc}
        walls.append(wall)
        peak, seconds = hwm.read_text().split()
        rss.append(float(peak))
        cpu.append(float(seconds))
    return {
        "cold_s": statistics.median(walls),
        "cold_max_s": max(walls),
        "cold_cpu_max_s": max(cpu),
        "cold_rss_mib": max(rss),
    }


def recall(hits: Sequence[Sequence[Sequence[Any]]], exact: Sequence[Sequence[tuple[str, int]]]) -> float:
    found = want = 0
    for got, truth in zip(hits, exact, strict=True):
        found += len({(h[0], h[1]) for h in got} & set(truth))
        want += len(truth)
    return found / want if want else 1.0


def part_scale(args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    from recrawler.kb.embedders import HashingEmbedder

    embedder = HashingEmbedder()
    queries = make_queries(args.queries + 1, args.seed)
    queries_path = tmp / "queries.json"
    queries_path.write_text(json.dumps(queries), encoding="utf-8")
    rows: list[dict[str, Any]] = []
    with postgres_server(args.postgres_uri, wanted=args.postgres) as pg:
        for n in args.chunks:
            folder = args.reuse or tmp
            db = folder / f"kb-{n}-seed{args.seed}.db"
            folder.mkdir(parents=True, exist_ok=True)
            reused = args.reuse is not None and filled(db) == n
            fills: dict[str, Any] = {}
            if not reused:
                db.unlink(missing_ok=True)
                fills["sqlite"] = SQLiteFill(db)
            if pg is not None and n <= args.postgres_max:
                fills["postgresql"] = PostgresFill(pg.database(f"bench_search_{n}"))
            log(f"scale: filling {n:,} chunks on {', '.join(fills) or 'nothing'} ...")
            for batch in chunk_batches(n, args.seed) if fills else ():
                for fill in fills.values():
                    fill.add(*batch, embedder.id)
            done = {"sqlite": fills["sqlite"].finish() if not reused else {"db_bytes": db.stat().st_size}}
            # a reused database gets the blocks the current code writes (nothing when they are written)
            done["sqlite"]["index_s"] = build_blocks_now(db, embedder.id)
            fills.setdefault("sqlite", SimpleNamespace(uri=f"sqlite:///{db}"))
            if "postgresql" in fills:
                log("scale: building the HNSW index ...")
                done["postgresql"] = fills["postgresql"].finish(embedder.dim, embedder.id, "512MB")
            # the exact answers are kept beside a reused database (the same chunks and queries)
            kept = folder / f"exact-{n}-seed{args.seed}-q{args.queries}.json"
            exact = reused_exact(kept) if reused else None
            if exact is None:
                log("scale: exact top 10 ...")
                exact = exact_top(n, args.seed, queries[1:])
                if args.reuse is not None:
                    kept.write_text(json.dumps(exact), encoding="utf-8")
            for backend in ("sqlite", "postgresql"):
                row: dict[str, Any] = {"chunks": n, "backend": backend}
                rows.append(row)
                if backend not in done:
                    row["exit"] = "n/a"
                    continue
                row |= done[backend]
                uri = fills[backend].uri
                log(f"scale: {n:,} chunks, {backend}: cold ...")
                row |= cold_searches(uri, queries[1 : 1 + args.cold], "vector", tmp, args.timeout)
                hybrid = cold_searches(uri, queries[1 : 1 + args.cold], "hybrid", tmp, args.timeout)
                row["cold_hybrid_s"] = hybrid.get("cold_s")
                row["cold_hybrid_rss_mib"] = hybrid.get("cold_rss_mib")
                log(f"scale: {n:,} chunks, {backend}: warm ...")
                warm = run_child(uri, queries_path, "vector", args.timeout)
                row |= {f"warm_{k}": v for k, v in warm.items() if k != "hits"}
                if warm.get("exit") == 0:
                    row["recall_at_10"] = recall(warm["hits"], exact)
                warm_h = run_child(uri, queries_path, "hybrid", args.timeout)
                row["warm_hybrid_p95_ms"] = warm_h.get("p95_ms")
                row["warm_hybrid_cpu_p95_ms"] = warm_h.get("cpu_p95_ms")
                row["exit"] = 0
    return rows


def print_scale(rows: list[dict[str, Any]]) -> None:
    header = (
        "chunks", "backend", "index s", "db MiB", "cold s", "cold max s", "cold CPU s", "cold RSS MiB",
        "cold hybrid s", "warm p50 ms", "warm p95 ms", "warm CPU p95 ms", "hybrid p95 ms",
        "hybrid CPU p95 ms", "warm RSS MiB", "recall@10",
    )  # fmt: skip
    body = [
        (
            f"{r['chunks']:,}",
            r["backend"],
            fmt(r.get("index_s"), ".1f"),
            fmt(r["db_bytes"] / 2**20 if r.get("db_bytes") else None, ".0f"),
            fmt(r.get("cold_s"), ".2f"),
            fmt(r.get("cold_max_s"), ".2f"),
            fmt(r.get("cold_cpu_max_s"), ".2f"),
            fmt(r.get("cold_rss_mib"), ".0f"),
            fmt(r.get("cold_hybrid_s"), ".2f"),
            fmt(r.get("warm_p50_ms"), ".1f"),
            fmt(r.get("warm_p95_ms"), ".1f"),
            fmt(r.get("warm_cpu_p95_ms"), ".1f"),
            fmt(r.get("warm_hybrid_p95_ms"), ".1f"),
            fmt(r.get("warm_hybrid_cpu_p95_ms"), ".1f"),
            fmt(r.get("warm_peak_rss_mib"), ".0f"),
            fmt(r.get("recall_at_10"), ".3f"),
        )
        for r in rows
    ]
    print(f"\n## scale: k={K}, cold = `recrawler search` in a fresh process, warm = one open_kb\n")
    print(f"machine load (1, 5, 15 min) at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}\n")
    print(table(header, body))
