"""Benchmark recrawler's knowledge base: what a small docs edit re-embeds, and search latency at 50k chunks.

Usage: ``python -m benchmarks.bench_index [--pages N] [--repeat N] [--keep] [--json PATH]
[--skip-embed-ratio] [--skip-search]`` (see README.md). Progress goes to stderr, results to stdout.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if not __package__:  # run as a script: python benchmarks/bench_index.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.lib.index_search import BENCH_INDEX, SearchResult, bench_search, print_search, search_worker
from benchmarks.lib.index_site import (
    change_pages,
    clean_env,
    copy_db,
    diagnose,
    docs_cmd,
    median,
    page_chunks,
    provenance,
    read_report,
    summary,
)
from benchmarks.lib.nginx import NginxServer
from benchmarks.lib.results import add_json_option, fmt, meets, ratio, write_json
from benchmarks.lib.runners import (
    RunResult,
    crawl,
    format_table,
)
from benchmarks.lib.sites import generate_site

if TYPE_CHECKING:
    from collections.abc import Sequence


PROJECT_DIR = BENCH_INDEX.parent.parent

CHANGE_SHARE = 0.05  # share of pages that get one sentence rewritten before run 2
TARGET_EMBED_RATIO = 0.02  # texts embedded by run 2a / texts a full re-embed would send


# ---------------------------------------------------------------------------------------------
# Generated content
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# 1. What a small edit re-embeds, and what indexing costs a recrawl
# ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class EmbedResult:
    """Section 1's numbers."""

    pages: int = 0
    changed_files: int = 0
    runs: list[RunResult] = field(default_factory=list)
    reports: dict[str, Any] = field(default_factory=dict)
    changed_detected: int | None = None
    texts_embedded: int | None = None
    texts_embedded_all_rounds: list[int | None] = field(default_factory=list)
    full_reembed: int | None = None
    distinct_texts: int | None = None
    page_level_reembed: int | None = None
    wall_2a: list[float] = field(default_factory=list)
    wall_2b: list[float] = field(default_factory=list)
    paired_wall_ratios: list[float] = field(default_factory=list)
    crawl_2a: list[float] = field(default_factory=list)
    crawl_2b: list[float] = field(default_factory=list)
    diagnosis: dict[str, Any] | None = None
    first_ok_round: int | None = None
    failed: bool = False

    def ratios(self) -> dict[str, float | None]:
        """Headline ratios (None where a number is missing)."""
        w2a, w2b = median(self.wall_2a), median(self.wall_2b)
        c2a, c2b = median(self.crawl_2a), median(self.crawl_2b)
        return {
            "embedded_over_full": ratio(self.texts_embedded, self.full_reembed),
            "embedded_over_page_level": ratio(self.texts_embedded, self.page_level_reembed),
            "wall_median_2a": w2a,
            "wall_median_2b": w2b,
            "wall_2a_over_2b": ratio(w2a, w2b),
            "wall_2a_over_2b_paired_median": median(self.paired_wall_ratios),
            "crawl_median_2a": c2a,
            "crawl_median_2b": c2b,
            "crawl_2a_over_2b": ratio(c2a, c2b),
        }


def bench_embed_ratio(args: argparse.Namespace, workdir: Path, env: dict[str, str]) -> EmbedResult:
    """Run 1, rewrite one sentence in 5% of pages, then interleaved rounds of runs 2a / 2b."""
    res = EmbedResult(pages=args.pages)
    site = workdir / "site"
    site.mkdir()
    server = NginxServer(site, prefix=workdir / "nginx")
    try:
        server.start()
        t0 = time.monotonic()
        specs = generate_site(site, server.url, args.pages, args.seed)
        page_paths = {s.path for s in specs}
        print(
            f"[1] generated {len(specs)} pages in {time.monotonic() - t0:.1f}s; nginx at {server.url}",
            file=sys.stderr,
        )
        sitemap_url = f"{server.url}/sitemap.xml"

        def run(name: str, label: str, db: Path, report: str, *extra: str) -> RunResult:
            r = crawl(
                name,
                label,
                docs_cmd(sitemap_url, db, workdir / report, *extra),
                cwd=args.project_dir,
                env=env,
                workdir=workdir,
                server=server,
                page_paths=page_paths,
                timeout=args.timeout,
            )
            res.runs.append(r)
            res.reports[report] = read_report(workdir / report)
            res.failed = res.failed or not r.ok
            return r

        run1_db = workdir / "run1.db"
        if not run("1", "first crawl", run1_db, "report1.json").ok:
            return res
        changes = change_pages(site, specs, CHANGE_SHARE, args.seed)
        res.changed_files = len(changes)
        changed_paths = {c.path for c in changes}
        (workdir / "changes.json").write_text(
            json.dumps([asdict(c) for c in changes], indent=1) + "\n", encoding="utf-8"
        )
        print(f"[1] rewrote one sentence in {len(changes)} pages", file=sys.stderr)

        first_2a: tuple[int, Path] | None = None
        for round_no in range(1, args.repeat + 1):
            # Alternate the order so drift over the rounds favours neither variant.
            order = ("a", "b") if round_no % 2 else ("b", "a")
            walls: dict[str, float] = {}
            for variant in order:
                db = workdir / f"run2{variant}_{round_no}.db"
                copy_db(run1_db, db)
                if variant == "a":
                    r = run(f"2a#{round_no}", "recrawl, index on", db, f"report2a_{round_no}.json")
                    report = res.reports[f"report2a_{round_no}.json"] or {}
                    res.texts_embedded_all_rounds.append((report.get("index") or {}).get("texts_embedded"))
                    if r.ok:
                        walls["a"] = r.wall_s
                        res.wall_2a.append(r.wall_s)
                        if r.elapsed_time_seconds is not None:
                            res.crawl_2a.append(r.elapsed_time_seconds)
                        if first_2a is None:
                            first_2a = (round_no, db)
                else:
                    r = run(
                        f"2b#{round_no}",
                        "recrawl, index off",
                        db,
                        f"report2b_{round_no}.json",
                        "RECRAWLER_INDEX_ENABLED=False",
                    )
                    if r.ok:
                        walls["b"] = r.wall_s
                        res.wall_2b.append(r.wall_s)
                        if r.elapsed_time_seconds is not None:
                            res.crawl_2b.append(r.elapsed_time_seconds)
            if len(walls) == 2:
                res.paired_wall_ratios.append(walls["a"] / walls["b"])
    finally:
        server.stop()

    if first_2a is not None:
        round_no, db = first_2a
        res.first_ok_round = round_no
        report = res.reports.get(f"report2a_{round_no}.json") or {}
        res.changed_detected = (report.get("counts") or {}).get("changed")
        res.texts_embedded = (report.get("index") or {}).get("texts_embedded")
        total, distinct, kept = page_chunks(db, changed_paths)
        res.full_reembed, res.distinct_texts = total, distinct
        res.page_level_reembed = sum(len(pc.rows) for pc in kept.values())
        res.diagnosis = diagnose(run1_db, db, changed_paths, kept)
    return res


def print_embed(res: EmbedResult, repeat: int) -> None:
    """Section 1's table, ratios against the target, and the diagnosis."""
    expected = max(1, round(res.pages * CHANGE_SHARE))
    print()
    print("== 1. what one edited sentence per page costs the knowledge base ==")
    print(
        f"site: {res.pages} pages (~8.7 KB) + sitemap.xml, nginx; one sentence rewritten in "
        f"{res.changed_files} pages ({CHANGE_SHARE:.0%}, seeded)"
    )
    if res.runs:
        print(format_table(res.runs))
    r = res.ratios()
    print()
    detected = res.changed_detected
    print(
        f"changed pages detected (run 2a counts.changed)       {fmt(detected, 'd'):>8}"
        f"   expected {expected}  {'OK' if detected == expected else 'DIFFERS'}"
    )
    print(f"texts embedded by run 2a (index.texts_embedded)      {fmt(res.texts_embedded, 'd'):>8}")
    print(
        f"texts a full re-embed would send (published chunks) {fmt(res.full_reembed, 'd'):>8}"
        f"   ({fmt(res.distinct_texts, 'd')} distinct texts)"
    )
    print(f"texts a page-level re-embed would send              {fmt(res.page_level_reembed, 'd'):>8}")
    ef, ep = r["embedded_over_full"], r["embedded_over_page_level"]
    print(
        f"recrawler / full                                    {fmt(ef, '.4f'):>8}"
        f"   target <= {TARGET_EMBED_RATIO}  {meets(ef, TARGET_EMBED_RATIO)}"
    )
    print(f"recrawler / page-level                              {fmt(ep, '.4f'):>8}")
    if len(set(res.texts_embedded_all_rounds)) > 1:
        print(f"  note: texts_embedded differs between rounds: {res.texts_embedded_all_rounds}")
    print(
        f"indexing overhead: wall 2a / 2b                     {fmt(r['wall_2a_over_2b'], '.3f'):>8}"
        f"   (medians of {len(res.wall_2a)}/{len(res.wall_2b)} of {repeat} rounds: "
        f"2a {fmt(r['wall_median_2a'], '.2f')} s, 2b {fmt(r['wall_median_2b'], '.2f')} s;"
        f" Scrapy crawl s only: {fmt(r['crawl_2a_over_2b'], '.3f')})"
    )
    if res.paired_wall_ratios:
        print(
            f"  median of per-round ratios {fmt(r['wall_2a_over_2b_paired_median'], '.3f')}"
            f" ({', '.join(f'{x:.3f}' for x in res.paired_wall_ratios)}); rounds alternate the order"
            " (a,b then b,a), each run starts from a copy of run 1's database"
        )
    n = res.first_ok_round or 1
    for run in res.runs:
        if run.name in ("1", f"2a#{n}", f"2b#{n}"):
            print(f"run {run.name} summary: {summary(run)}")
    report = res.reports.get(f"report2a_{n}.json")
    if isinstance(report, dict) and report.get("index"):
        print(f"run 2a#{n} index: {json.dumps(report['index'], sort_keys=True)}")
    d = res.diagnosis
    if d:
        print()
        print(
            "where run 2a's embeddings went (published chunks of changed pages vs run 1's embedding cache):"
        )
        print(f"  chunk texts not in run 1's cache, per changed page: {d['fresh_texts_per_page']}")
        print(
            f"  total {d['fresh_texts_total']} (report says {res.texts_embedded}); "
            f"pages with more than one: {d['pages_multi_fresh']} "
            f"(all in one section: {d['pages_multi_fresh_one_section']}, "
            f"page's chunk count changed: {d['pages_multi_fresh_chunk_count_changed']})"
        )
        print(f"  chunks in the edited section (count: pages): {d['pieces_of_changed_sections']}")
        print(f"  embeddings rows: run 1 {d['embeddings_before']}, after run 2a {d['embeddings_after']}")
        for ex in d["examples"]:
            print(f"  e.g. {json.dumps(ex)}")


# ---------------------------------------------------------------------------------------------
# 2. Search latency at 50k chunks
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--pages", type=int, default=2000, help="pages of the edited site (default 2000)")
    p.add_argument(
        "--repeat", type=int, default=3, help="interleaved rounds of runs 2a / 2b; medians (default 3)"
    )
    p.add_argument("--keep", action="store_true", help="keep the temp dir (sites, logs, databases)")
    add_json_option(p, "bench_index")
    p.add_argument("--skip-embed-ratio", action="store_true", help="skip part 1 (edit, recrawl)")
    p.add_argument("--skip-search", action="store_true", help="skip part 2 (search latency)")
    p.add_argument("--search-pages", type=int, default=2000, help="pages of the search site (default 2000)")
    p.add_argument("--sections", type=int, default=25, help="h2 sections per search-site page (default 25)")
    p.add_argument("--queries", type=int, default=200, help="timed queries after the first (default 200)")
    p.add_argument("--seed", type=int, default=1, help="generator seed (default 1)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per process (default 900)")
    p.add_argument("--project-dir", type=Path, default=PROJECT_DIR, help="recrawler project (scrapy.cfg)")
    p.add_argument("--search-worker", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--worker-out", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for name in ("pages", "repeat", "search_pages", "sections", "queries"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; exit 1 only if a crawl process failed."""
    args = parse_args(argv)
    if args.search_worker is not None:
        return search_worker(args.search_worker, args.queries, args.seed, args.worker_out)
    workdir = Path(tempfile.mkdtemp(prefix="bench-index-"))
    print(f"workdir {workdir}", file=sys.stderr)
    env = clean_env()
    embed: EmbedResult | None = None
    search: SearchResult | None = None
    try:
        if not args.skip_embed_ratio:
            embed = bench_embed_ratio(args, workdir, env)
        if not args.skip_search:
            search = bench_search(args, workdir, env)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print(provenance(args.project_dir))
    if embed is not None:
        print_embed(embed, args.repeat)
    if search is not None:
        print_search(search)
    if args.keep:
        print(f"\nkept {workdir}")
    payload: dict[str, Any] = {"seed": args.seed, "targets": {"embedded_over_full": TARGET_EMBED_RATIO}}
    if embed is not None:
        payload["embed"] = asdict(embed) | {"ratios": embed.ratios()}
    if search is not None:
        payload["search"] = asdict(search)
    write_json(args.json, payload)
    failed = (embed is not None and embed.failed) or (search is not None and search.failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
