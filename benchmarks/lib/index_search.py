"""The index benchmark's search part: questions against a published knowledge base of 50,000+
chunks, in a worker process of its own (latency, RSS)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.lib.index_site import (
    docs_cmd,
    generate_search_site,
    page_chunks,
    question,
    read_report,
    summary,
)
from benchmarks.lib.nginx import NginxServer
from benchmarks.lib.results import fmt
from benchmarks.lib.runners import (
    RunResult,
    crawl,
    format_table,
    peak_rss_bytes,
    proc_status_mib,
    recrawler_cli,
    run_process,
)

if TYPE_CHECKING:
    import argparse

    pass

#: the benchmark script, run again as the search worker
BENCH_INDEX = Path(__file__).resolve().parent.parent / "bench_index.py"


MIN_SEARCH_CHUNKS = 50_000  # published chunks the search benchmark needs


SEARCH_K = 5


def _rss_mib() -> float:
    """``ru_maxrss`` in MiB. On Linux it carries the spawning parent's RSS over ``exec``."""
    return peak_rss_bytes() / (1 << 20)


def search_worker(db: Path, queries: int, seed: int, out: Path) -> int:
    """Runs in its own process so its peak RSS is search's alone: writes timings as JSON to *out*."""
    rng = random.Random(f"{seed}:queries")
    first_q = question(rng)
    qs = [question(rng) for _ in range(queries)]
    rss_start, hwm_start = _rss_mib(), proc_status_mib("VmHWM")
    t0 = time.perf_counter()
    for module in ("recrawler.kb.sqlite", "recrawler.state.sqlite"):  # what open_kb imports
        importlib.import_module(module)
    from recrawler.kb.reader import open_kb

    import_s = time.perf_counter() - t0
    hwm_import = proc_status_mib("VmHWM")
    t0 = time.perf_counter()
    kb = open_kb(f"sqlite:///{db}")
    open_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    first_hits = kb.search(first_q, k=SEARCH_K)
    first_s = time.perf_counter() - t0
    hwm_loaded = proc_status_mib("VmHWM")
    latencies = []
    nonempty = 0
    for q in qs:
        t0 = time.perf_counter()
        hits = kb.search(q, k=SEARCH_K)
        latencies.append(time.perf_counter() - t0)
        nonempty += bool(hits and hits[0].score > 0)
    matrix = getattr(kb, "_matrix", None)  # the in-memory vectors (private: for sizing only)
    matrix_mib = matrix.nbytes / 2**20 if matrix is not None else None
    kb.close()
    cuts = statistics.quantiles(latencies, n=20, method="inclusive") if len(latencies) > 1 else latencies
    result = {
        "embedder": kb.embedder.id,
        "queries": len(latencies),
        "first_query": first_q,
        "first_hits": len(first_hits),
        "first_top": first_hits[0].url if first_hits else None,
        "import_s": import_s,
        "open_s": open_s,
        "first_search_s": first_s,
        "p50_s": statistics.median(latencies) if latencies else None,
        "p95_s": cuts[-1] if latencies else None,
        "mean_s": statistics.fmean(latencies) if latencies else None,
        "max_s": max(latencies) if latencies else None,
        "queries_with_hits": nonempty,
        "ru_maxrss_start_mib": rss_start,
        "ru_maxrss_mib": _rss_mib(),
        "vm_hwm_start_mib": hwm_start,
        "vm_hwm_after_import_mib": hwm_import,
        "vm_hwm_after_first_search_mib": hwm_loaded,
        "vm_hwm_mib": proc_status_mib("VmHWM"),
        "matrix_mib": matrix_mib,
        "recrawler_file": sys.modules["recrawler"].__file__,
        "sample_queries": qs[:3],
    }
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


@dataclass(slots=True)
class SearchResult:
    """Section 2's numbers."""

    pages: int = 0
    sections: int = 0
    crawl: RunResult | None = None
    report: dict[str, Any] | None = None
    chunks: int | None = None
    count_s: float | None = None
    worker: dict[str, Any] | None = None
    worker_error: str | None = None
    cli_cmd: list[str] = field(default_factory=list)
    cli_wall_s: float | None = None
    cli_rc: int | None = None
    cli_hits: int | None = None
    failed: bool = False


def bench_search(args: argparse.Namespace, workdir: Path, env: dict[str, str]) -> SearchResult:
    """Crawl a site of many short sections once, then time searches over its knowledge base."""
    res = SearchResult(pages=args.search_pages, sections=args.sections)
    site = workdir / "kbsite"
    site.mkdir()
    db = workdir / "search.db"
    server = NginxServer(site, prefix=workdir / "nginx-kb")
    try:
        server.start()
        t0 = time.monotonic()
        paths = generate_search_site(site, server.url, args.search_pages, args.sections, args.seed)
        print(
            f"[2] generated {len(paths)} pages x {args.sections} sections in "
            f"{time.monotonic() - t0:.1f}s; nginx at {server.url}",
            file=sys.stderr,
        )
        res.crawl = crawl(
            "S",
            "search-site crawl",
            docs_cmd(f"{server.url}/sitemap.xml", db, workdir / "report_search.json"),
            cwd=args.project_dir,
            env=env,
            workdir=workdir,
            server=server,
            page_paths=set(paths),
            timeout=args.timeout,
        )
        res.report = read_report(workdir / "report_search.json")
    finally:
        server.stop()
    if not res.crawl.ok:
        res.failed = True
        return res

    t0 = time.monotonic()
    res.chunks, _, _ = page_chunks(db, set())
    res.count_s = time.monotonic() - t0

    print("[2] timing searches in a fresh process ...", file=sys.stderr)
    out = workdir / "search_worker.json"
    worker_cmd = [sys.executable, str(BENCH_INDEX), "--search-worker", str(db), "--worker-out", str(out)]
    worker_cmd += ["--queries", str(args.queries), "--seed", str(args.seed)]
    rc, timed_out, _, _ = run_process(
        worker_cmd,
        cwd=args.project_dir,
        env=env,
        log_path=workdir / "search_worker.log",
        timeout=args.timeout,
    )
    if rc == 0 and not timed_out and out.exists():
        res.worker = json.loads(out.read_text(encoding="utf-8"))
    else:
        tail = (workdir / "search_worker.log").read_text(encoding="utf-8", errors="replace")[-2000:]
        res.worker_error = f"search worker {'timed out' if timed_out else f'exited {rc}'}: {tail}"

    print("[2] cold CLI search ...", file=sys.stderr)
    res.cli_cmd = [*recrawler_cli(), "search", "how do I rotate the token secret?", "--db", f"sqlite:///{db}"]
    cli_log = workdir / "cli_search.log"
    rc, timed_out, wall, _ = run_process(
        res.cli_cmd, cwd=workdir, env=env, log_path=cli_log, timeout=args.timeout
    )
    res.cli_rc = -1 if timed_out else rc
    res.cli_wall_s = wall
    res.cli_hits = sum(
        1 for line in cli_log.read_text(encoding="utf-8", errors="replace").splitlines() if "  http" in line
    )
    return res


def print_search(res: SearchResult) -> None:
    """Section 2's numbers."""
    print()
    print(f"== 2. search latency at {MIN_SEARCH_CHUNKS:,} chunks (default embedder) ==")
    print(
        f"site: {res.pages} pages x {res.sections} short h2 sections, nginx; one crawl into a fresh database"
    )
    if res.crawl is not None:
        print(format_table([res.crawl]))
        print(f"run S summary: {summary(res.crawl)}")
    if res.chunks is None:
        return
    enough = "OK" if res.chunks >= MIN_SEARCH_CHUNKS else "MISSED"
    print(
        f"published chunks (kb.chunks())        {res.chunks:>10,}   >= {MIN_SEARCH_CHUNKS:,}  {enough}"
        f"   (counted in {fmt(res.count_s, '.2f')} s)"
    )
    w = res.worker
    if w is None:
        print(f"search worker failed: {res.worker_error}")
    else:
        ms = 1000.0
        print(f"embedder                              {w['embedder']:>10}")
        print(
            f"imports (index + state backends)      {w['import_s'] * ms:>10.1f} ms"
            f"   open_kb {w['open_s'] * ms:.1f} ms"
        )
        print(f"first search (loads vectors)          {w['first_search_s'] * ms:>10.1f} ms")
        print(
            f"{w['queries']} further queries: p50          {w['p50_s'] * ms:>10.2f} ms"
            f"   p95 {w['p95_s'] * ms:.2f} ms   mean {w['mean_s'] * ms:.2f} ms   max {w['max_s'] * ms:.2f} ms"
        )
        print(f"queries with a hit (score > 0)        {w['queries_with_hits']:>10} of {w['queries']}")
        print(
            f"peak RSS of the search process        {fmt(w['vm_hwm_mib'], '10.1f')} MiB"
            f"   (VmHWM; after imports {fmt(w['vm_hwm_after_import_mib'], '.1f')}, after first search "
            f"{fmt(w['vm_hwm_after_first_search_mib'], '.1f')}; vectors {fmt(w['matrix_mib'], '.1f')})"
        )
        print(
            f"  getrusage ru_maxrss                 {w['ru_maxrss_mib']:>10.1f} MiB"
            f"   (already {w['ru_maxrss_start_mib']:.1f} at interpreter start: Linux carries the"
            " spawning parent's RSS over exec)"
        )
        print(f"sample queries: {'; '.join(w['sample_queries'])}")
    if res.cli_wall_s is not None:
        print(
            f"cold CLI search (wall)                {res.cli_wall_s:>10.2f} s"
            f"    exit {res.cli_rc}, {res.cli_hits} hits"
        )
        shown = [Path(res.cli_cmd[0]).name, *res.cli_cmd[1:]]
        print(f"  {' '.join(json.dumps(a) if ' ' in a else a for a in shown)}")
