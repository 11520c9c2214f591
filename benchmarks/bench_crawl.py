"""Benchmark recrawler against a bare SitemapSpider on a generated docs site served by nginx.

Usage: ``python -m benchmarks.bench_crawl [--pages N] [--keep] [--json PATH]`` (see README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

if not __package__:  # run as a script: python benchmarks/bench_crawl.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.lib.nginx import NginxServer
from benchmarks.lib.results import add_json_option, fmt, load_average, load_line, meets, ratio, write_json
from benchmarks.lib.runners import THROUGHPUT_KEYS, RunResult, compile_sources, crawl, format_table
from benchmarks.lib.sites import PAGE_TARGET_BYTES, corpus_site, generate_site

if TYPE_CHECKING:
    from collections.abc import Sequence

HERE = Path(__file__).resolve().parent
PROJECT_DIR = HERE.parent
BARE_SPIDER = HERE / "bare_spider.py"

TARGET_BYTES_RATIO = 0.02  # (a) run C body bytes / run B body bytes
TARGET_WALL_RATIO = 1.2  # (b) run B wall time / run A wall time
TARGET_RSS_RATIO = 1.0  # (c) run B peak RSS / run A peak RSS (below the bare fetch's)
TARGET_RSS_PAGES = 100_000  # (c) applies from this many pages on
TARGET_RERUN_RATIO = 0.5  # (e) run C (all 304) wall time / run A wall time

# ---------------------------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------------------------


def compute_ratios(by_name: dict[str, RunResult]) -> dict[str, Any]:
    """The four headline numbers, each None when its runs are missing or failed."""
    a, b, c, x = (by_name.get(k) for k in "ABCX")
    b_ok = b is not None and b.ok
    c_ok = c is not None and c.ok
    return {
        "bytes_C_over_B": ratio(c.body_bytes, b.body_bytes) if b and c and b_ok and c_ok else None,
        "page_bytes_C_over_B": (
            ratio(c.page_body_bytes, b.page_body_bytes) if b and c and b_ok and c_ok else None
        ),
        "wall_B_over_A": ratio(b.wall_s, a.wall_s) if a and b and a.ok and b_ok else None,
        "crawl_B_over_A": (
            ratio(b.elapsed_time_seconds, a.elapsed_time_seconds)
            if a and b and a.ok and b_ok and a.elapsed_time_seconds and b.elapsed_time_seconds
            else None
        ),
        "wall_C_over_A": ratio(c.wall_s, a.wall_s) if a and c and a.ok and c_ok else None,
        "crawl_C_over_A": (
            ratio(c.elapsed_time_seconds, a.elapsed_time_seconds)
            if a and c and a.ok and c_ok and a.elapsed_time_seconds and c.elapsed_time_seconds
            else None
        ),
        "cpu_B_over_A": ratio(b.cpu_s, a.cpu_s) if a and b and a.ok and b_ok else None,
        "cpu_C_over_A": ratio(c.cpu_s, a.cpu_s) if a and c and a.ok and c_ok else None,
        "bytes_C": c.body_bytes if c and c_ok else None,
        "wall_X_over_A": ratio(x.wall_s, a.wall_s) if a and x and a.ok and x.ok else None,
        "wall_B_over_X": ratio(b.wall_s, x.wall_s) if b and x and b_ok and x.ok else None,
        "cpu_B_over_X": ratio(b.cpu_s, x.cpu_s) if b and x and b_ok and x.ok else None,
        "peak_rss_B_mib": b.peak_rss_mib if b and b_ok else None,
        "peak_rss_A_mib": a.peak_rss_mib if a and a.ok else None,
        "rss_B_over_A": ratio(b.peak_rss_mib, a.peak_rss_mib) if a and b and a.ok and b_ok else None,
        "pages_per_s_B": b.pages_per_s if b and b_ok else None,
        "pages_per_s_C": c.pages_per_s if c and c_ok else None,
    }


def median_runs(runs: Sequence[RunResult]) -> dict[str, RunResult]:
    """Per run name, the run with the median wall time (the upper median for even counts)."""
    by_name: dict[str, list[RunResult]] = {}
    for r in runs:
        by_name.setdefault(r.name, []).append(r)
    chosen = {}
    for name, group in by_name.items():
        ok = sorted((r for r in group if r.ok), key=lambda r: r.wall_s) or group
        chosen[name] = ok[len(ok) // 2]
    return chosen


def print_report(
    runs: Sequence[RunResult],
    ratios: dict[str, Any],
    reports: dict[str, Any],
    pages: int,
    mean_bytes: float = PAGE_TARGET_BYTES,
    source: str = "generated",
    load: tuple[list[float], list[float]] | None = None,
) -> None:
    """Print the table, ratios against targets, settings check and recrawler's own counts."""
    print()
    print(f"site: {pages} {source} pages of ~{mean_bytes / 1000:.1f} KB + sitemap.xml, nginx")
    print(format_table(runs))
    if load is not None:
        print(load_line(*load))
    print()
    print("pages = page URLs requested; requests include robots.txt and sitemap.xml;")
    print("wall s = process start to exit; crawl s = Scrapy's elapsed_time_seconds stat;")
    print("load = the 1-minute load average when the run started and when it ended.")
    rounds = max(sum(1 for r in runs if r.name == n) for n in "ABC" if any(r.name == n for r in runs))
    print(f"ratios below use each run's median over {rounds} interleaved round(s).")
    print()
    rb, rw = ratios["bytes_C_over_B"], ratios["wall_B_over_A"]
    print(
        f"(a) body bytes C / B          {fmt(rb, '.4f'):>8}   target <= {TARGET_BYTES_RATIO}"
        f"  {meets(rb, TARGET_BYTES_RATIO)}"
        f"   (pages only: {fmt(ratios['page_bytes_C_over_B'], '.4f')})"
    )
    print(
        f"(b) wall time B / A           {fmt(rw, '.3f'):>8}   target <= {TARGET_WALL_RATIO}"
        f"  {meets(rw, TARGET_WALL_RATIO)}"
        f"   (crawl time only: {fmt(ratios['crawl_B_over_A'], '.3f')})"
    )
    rr = ratios["rss_B_over_A"]
    # the bare fetch holds every listed request in memory, recrawler a fixed start-up cost: the
    # target is a large site's (a small one's bare fetch holds little)
    rss_verdict = (
        ("n/a" if rr is None else "OK" if rr < TARGET_RSS_RATIO else "MISSED")
        if pages >= TARGET_RSS_PAGES
        else f"(target at {TARGET_RSS_PAGES:,} pages)"
    )
    print(
        f"(c) peak RSS B / A            {fmt(rr, '.3f'):>8}   target <  {TARGET_RSS_RATIO}  {rss_verdict}"
        f"   (B {fmt(ratios['peak_rss_B_mib'], '.1f')} MiB, A {fmt(ratios['peak_rss_A_mib'], '.1f')} MiB)"
    )
    rc = ratios["wall_C_over_A"]
    print(
        f"(e) wall time C / A           {fmt(rc, '.3f'):>8}   target <= {TARGET_RERUN_RATIO}"
        f"  {meets(rc, TARGET_RERUN_RATIO)}"
        f"   (crawl time only: {fmt(ratios['crawl_C_over_A'], '.3f')})"
    )
    print(
        f"(f) CPU time B / A, C / A     {fmt(ratios['cpu_B_over_A'], '.3f'):>8}"
        f", {fmt(ratios['cpu_C_over_A'], '.3f')}   (all threads of each process)"
    )
    print(
        f"(g) body bytes of C           {fmt(ratios['bytes_C'], ',.0f'):>8}   (every response, sitemaps too)"
    )
    print(
        f"(d) pages/s B, C              {fmt(ratios['pages_per_s_B'], '.0f'):>8}"
        f", {fmt(ratios['pages_per_s_C'], '.0f')}"
    )
    if any(r.name == "X" for r in runs):
        print(
            f"(x) wall time X / A           {fmt(ratios['wall_X_over_A'], '.3f'):>8}"
            f"   B / X: wall {fmt(ratios['wall_B_over_X'], '.3f')}, CPU {fmt(ratios['cpu_B_over_X'], '.3f')}"
            "   (X: the first run with --compare settings)"
        )
    by_name = {r.name: r for r in runs}
    a, b = by_name.get("A"), by_name.get("B")
    if a and b and (a.settings or b.settings):
        print()
        print("throughput settings (Overridden settings in each log; '-' = Scrapy default):")
        mismatched = False
        for key in THROUGHPUT_KEYS:
            va, vb = a.settings.get(key, "-"), b.settings.get(key, "-")
            if va == "-" and vb == "-":
                continue
            flag = "" if va == vb else "   <- differs"
            mismatched = mismatched or bool(flag)
            print(f"  {key:32} A={va:<10} B={vb}{flag}")
        if not mismatched:
            print("  A and B agree.")
    for r in runs:
        if r.name in "BC":
            print()
            print(f"run {r.name} summary: {r.summary_line or '(no line containing crawled:)'}")
            if r.finish_reason not in (None, "finished"):
                print(f"run {r.name} finish_reason: {r.finish_reason}")
    for name, report in reports.items():
        if report is None:
            print(f"{name}: absent")
        elif isinstance(report, dict) and "counts" in report:
            print(f"{name} counts: {json.dumps(report['counts'], sort_keys=True)}")
        else:
            print(f"{name}: present, no 'counts' key")
    check = reports.get("report2.json")
    if isinstance(check, dict) and isinstance(check.get("counts"), dict):
        counts = check["counts"]
        unchanged = counts.get("unchanged")
        if isinstance(unchanged, int):
            print(f"report2.json: {unchanged} of {pages} pages unchanged")


def _read_report(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return {"error": f"unreadable: {exc}"}


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--pages", type=int, default=2000, help="pages in the site (default 2000)")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (site, logs, db)")
    add_json_option(p, "bench_crawl")
    p.add_argument("--seed", type=int, default=1, help="site generator seed (default 1)")
    p.add_argument(
        "--corpus",
        type=Path,
        default=None,
        metavar="TARBALL",
        help="serve a real docs site instead of generated pages: the tarball's HTML pages, copied "
        "until there are --pages of them (e.g. ../shared/corpus/mesonbuild/v1.tar.gz)",
    )
    p.add_argument(
        "--runs",
        default="ABC",
        help="which runs, e.g. A for the baseline only (default ABC; C needs B)",
    )
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per crawl (default 900)")
    p.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="rounds of A, B, C, interleaved; ratios use each run's median (default 3)",
    )
    p.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="add run X each round: a first run (own database) with this setting too, side by side "
        "with B, e.g. --compare RECRAWLER_CPU_PROCESSES=0",
    )
    p.add_argument("--project-dir", type=Path, default=PROJECT_DIR, help="recrawler project (scrapy.cfg)")
    p.add_argument(
        "-s",
        dest="settings",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting for the recrawler runs (B, C), e.g. -s RECRAWLER_CPU_THREADS=0",
    )
    args = p.parse_args(argv)
    args.runs = args.runs.upper()
    if not args.runs or set(args.runs) - set("ABC"):
        p.error("--runs takes letters from A, B, C")
    if args.pages < 1:
        p.error("--pages must be at least 1")
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; exit 1 if any crawl process failed."""
    args = parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="bench-crawl-"))
    site = workdir / "site"
    site.mkdir()
    base_env = {k: v for k, v in os.environ.items() if k not in ("SCRAPY_SETTINGS_MODULE", "SCRAPY_PROJECT")}
    server = NginxServer(site, prefix=workdir / "nginx")
    runs: list[RunResult] = []
    reports: dict[str, Any] = {}
    load_start = load_average()
    try:
        server.start()
        t0 = time.monotonic()
        if args.corpus is not None:
            specs = corpus_site(site, server.url, args.pages, args.corpus)
        else:
            specs = generate_site(site, server.url, args.pages, args.seed)
        page_paths = {s.path for s in specs}
        total = sum((site / s.path.lstrip("/")).stat().st_size for s in specs)
        mean_bytes = total / len(specs)
        print(
            f"generated {len(specs)} pages ({total / len(specs):.0f} B mean) in "
            f"{time.monotonic() - t0:.1f}s; nginx at {server.url}; workdir {workdir}",
            file=sys.stderr,
        )
        sitemap_url = f"{server.url}/sitemap.xml"
        py = sys.executable
        # both runs load bytecode, as from an installed package (none compiles its source)
        import recrawler

        compile_sources(Path(recrawler.__file__).parent, BARE_SPIDER)

        def run(name: str, label: str, cmd: list[str], cwd: Path) -> RunResult:
            return crawl(
                name,
                label,
                cmd,
                cwd=cwd,
                env=base_env,
                workdir=workdir,
                server=server,
                page_paths=page_paths,
                timeout=args.timeout,
            )

        def recrawl(
            name: str, label: str, report: str, db: str = "state.db", extra: Sequence[str] = ()
        ) -> RunResult:
            cmd = [py, "-m", "scrapy", "crawl", "docs", "-a", f"sitemap_url={sitemap_url}"]
            cmd += ["-s", f"RECRAWLER_DB_URI=sqlite:///{workdir / db}"]
            cmd += ["-s", f"RECRAWLER_REPORT_FILE={workdir / report}", "-s", "LOG_LEVEL=INFO"]
            # every page each run, no audit: C measures a full conditional recrawl, not the schedule
            cmd += ["-s", "RECRAWLER_SCHEDULE=all", "-s", "RECRAWLER_AUDIT_SAMPLE=0"]
            for setting in [*args.settings, *extra]:
                cmd += ["-s", setting]
            return run(name, label, cmd, args.project_dir)

        for round_no in range(1, args.repeat + 1):
            # Interleaved rounds: machine drift hits A, B and C alike; medians drop outliers.
            db = f"state{round_no}.db"
            if "A" in args.runs:
                # From workdir, which has no scrapy.cfg above it: only the spider's settings apply.
                cmd = [py, "-m", "scrapy", "runspider", str(BARE_SPIDER), "-a"]
                cmd += [f"sitemap_url={sitemap_url}", "-s", "LOG_LEVEL=INFO"]
                runs.append(run("A", "bare", cmd, workdir))
            if "B" in args.runs:
                runs.append(recrawl("B", "recrawler 1st", "report1.json", db))
                reports["report1.json"] = _read_report(workdir / "report1.json")
            if "C" in args.runs:
                runs.append(recrawl("C", "recrawler 2nd", "report2.json", db))
                reports["report2.json"] = _read_report(workdir / "report2.json")
            if args.compare:
                label = "1st " + " ".join(args.compare)
                runs.append(recrawl("X", label[:40], "reportX.json", f"stateX{round_no}.db", args.compare))
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    load = (load_start, load_average())
    ratios = compute_ratios(median_runs(runs))
    source = f"corpus ({args.corpus.name})" if args.corpus is not None else "generated"
    print_report(runs, ratios, reports, args.pages, mean_bytes, source, load)
    if args.keep:
        print(f"\nkept {workdir}")
    payload = {
        "pages": args.pages,
        "site": str(args.corpus) if args.corpus is not None else "generated",
        "seed": args.seed,
        "targets": {
            "bytes_C_over_B": TARGET_BYTES_RATIO,
            "wall_B_over_A": TARGET_WALL_RATIO,
            "rss_B_over_A": TARGET_RSS_RATIO,
            "wall_C_over_A": TARGET_RERUN_RATIO,
        },
        "load_average": {"start": load[0], "end": load[1]},
        "ratios": ratios,
        "runs": [asdict(r) | {"ok": r.ok, "pages_per_s": r.pages_per_s} for r in runs],
        "reports": reports,
    }
    write_json(args.json, payload)
    return 0 if all(r.ok for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
