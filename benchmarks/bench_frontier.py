"""Peak RSS and the first page request against the size of the listing: 10k, 100k and 1M listed
URLs, frontier on and off.

Usage: ``python -m benchmarks.bench_frontier [--sizes 10000,100000,1000000] [--json PATH]``.
Each size is a sitemap index of files of ``--per-file`` URLs (50,000: the most the sitemaps
protocol allows a file) served by nginx (every page URL answers with one real docs page). A crawl
reads the whole listing and then ``--batches`` more batches of pages, and stops (``bench_listed``):
its peak RSS covers the listing's ingest and the first batches. Pages are crawled while the listing
is read (they are fed from the database as it comes in): the first page request should leave within
seconds of the first sitemap file's arrival, whatever the listing's size. ``--delay``
(DOWNLOAD_DELAY) slows page downloads so that a run reaches the end of a million-URL listing
without crawling the whole site first (a page in flight costs the same memory however long the
listing is). ``--off-up-to`` also runs sizes up to that with RECRAWLER_FRONTIER_ENABLED=False
(every listed URL waits in Scrapy's in-memory scheduler) for comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

if not __package__:  # run as a script: python benchmarks/bench_frontier.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.lib.nginx import NginxServer
from benchmarks.lib.results import add_json_option, fmt, load_average, load_line, write_json
from benchmarks.lib.runners import RunResult, crawl, format_load
from benchmarks.lib.sites import plan_site, render_page

if TYPE_CHECKING:
    from collections.abc import Sequence

    from benchmarks.lib.nginx import AccessLogEntry

PROJECT_DIR = Path(__file__).resolve().parent.parent
# every /p/... URL answers with the one page (a listing of a million URLs without a million files)
LOCATIONS = "        location /p/ { try_files /page.html =404; }"
#: the first page request within this many seconds of the first sitemap file's arrival
TARGET_FIRST_PAGE_S = 10.0
#: peak RSS of the largest listing over the smallest's (frontier on)
TARGET_RSS_RATIO = 1.3


def write_listing(root: Path, base_url: str, urls: int, per_file: int) -> int:
    """The page, sitemap files of *per_file* URLs each and their index; returns the file count."""
    specs = plan_site(1, 1)
    (root / "page.html").write_text(render_page(specs[0], specs, base_url, 1), encoding="utf-8")
    rng = random.Random(urls)
    files = []
    for n, start in enumerate(range(0, urls, per_file)):
        name = f"sitemap-{n}.xml"
        with (root / name).open("w", encoding="utf-8") as out:
            out.write('<?xml version="1.0" encoding="UTF-8"?>\n')
            out.write('<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n')
            for i in range(start, min(start + per_file, urls)):
                day = rng.randint(1, 28)
                out.write(
                    f"<url><loc>{base_url}/p/{i}.html</loc><lastmod>2026-01-{day:02d}</lastmod></url>\n"
                )
            out.write("</urlset>\n")
        files.append(name)
    index = "".join(f"<sitemap><loc>{base_url}/{name}</loc></sitemap>\n" for name in files)
    (root / "sitemap.xml").write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n{index}</sitemapindex>\n',
        encoding="utf-8",
    )
    return len(files)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--sizes", default="10000,100000,1000000", help="listed URLs per run, comma-separated")
    p.add_argument(
        "--per-file",
        type=int,
        default=50_000,
        help="URLs per sitemap file (default 50000, the protocol's most; more than --sizes: one file)",
    )
    p.add_argument("--batch", type=int, default=500, help="RECRAWLER_FRONTIER_BATCH_SIZE (default 500)")
    p.add_argument("--batches", type=int, default=1, help="batches of pages after the listing (default 1)")
    p.add_argument(
        "--delay", type=float, default=0.05, help="DOWNLOAD_DELAY, seconds (default 0.05: about 20 pages/s)"
    )
    p.add_argument(
        "--off-up-to", type=int, default=100_000, help="also run without the frontier up to this size"
    )
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per crawl (default 3600)")
    p.add_argument("--keep", action="store_true", help="keep the temp dirs")
    add_json_option(p, "bench_frontier")
    args = p.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    return args


def first_page(entries: Sequence[AccessLogEntry], started: float) -> dict[str, float | None]:
    """When the first page was asked for (nginx's log: its time less its request time), in seconds
    after the first sitemap file of pages was served (``first_page_s``) and after the crawl
    process started (``first_page_from_start_s``)."""
    pages = [e.msec - e.request_time for e in entries if e.uri.startswith("/p/")]
    files = [e.msec for e in entries if e.uri.startswith("/sitemap-")]
    if not pages:
        return {"first_page_s": None, "first_page_from_start_s": None}
    first = min(pages)
    return {
        "first_page_s": round(first - min(files), 2) if files else None,
        "first_page_from_start_s": round(first - started, 2),
    }


def run_size(args: argparse.Namespace, urls: int, frontier: bool) -> tuple[RunResult, dict[str, Any]]:
    """One crawl of a listing of *urls* URLs; (its measures, the listing's figures)."""
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-frontier-{urls}-"))
    site = workdir / "site"
    site.mkdir()
    server = NginxServer(site, prefix=workdir / "nginx", locations=LOCATIONS)
    try:
        server.start()
        t0 = time.monotonic()
        files = write_listing(site, server.url, urls, args.per_file)
        print(f"{urls:,} URLs in {files} sitemap files, {time.monotonic() - t0:.1f}s", file=sys.stderr)
        cmd = [sys.executable, "-m", "scrapy", "crawl", "docs", "-a", f"sitemap_url={server.url}/sitemap.xml"]
        for setting in (
            f"RECRAWLER_DB_URI=sqlite:///{workdir / 'state.db'}",
            "LOG_LEVEL=INFO",
            "RECRAWLER_SCHEDULE=all",
            "RECRAWLER_AUDIT_SAMPLE=0",
            f"RECRAWLER_LISTING_MAX_URLS={max(urls, 5_000_000)}",
            f"RECRAWLER_FRONTIER_ENABLED={frontier}",
            f"RECRAWLER_FRONTIER_BATCH_SIZE={args.batch}",
            f"DOWNLOAD_DELAY={args.delay}",
            f"BENCH_SITEMAP_FILES={files + 1}",
            f"BENCH_BATCHES_AFTER={args.batches}",
            "EXTENSIONS=" + json.dumps({"benchmarks.lib.stop.StopAfterListing": 0}),
        ):
            cmd += ["-s", setting]
        env = {k: v for k, v in os.environ.items() if k not in ("SCRAPY_SETTINGS_MODULE", "SCRAPY_PROJECT")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_DIR), env.get("PYTHONPATH")]))
        name = f"{urls}-{'on' if frontier else 'off'}"
        started = time.time()
        result = crawl(
            name,
            f"{urls:,} listed, frontier {'on' if frontier else 'off'}",
            cmd,
            cwd=PROJECT_DIR,
            env=env,
            workdir=workdir,
            server=server,
            page_paths=set(),
            timeout=args.timeout,
        )
        listed = answered = None
        for line in Path(result.log_file).read_text(encoding="utf-8", errors="replace").splitlines():
            if "bench: listing in" in line:
                listed = line.split("bench: ", 1)[1]
            if "'recrawler/request/count'" in line:
                answered = int(line.split(":")[-1].strip(" ,}"))
        return result, {
            "files": files,
            "at_listing": listed,
            "pages_answered": answered,
            **first_page(server.read_access_log(), started),
        }
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run each size (frontier on, and off up to ``--off-up-to``); print RSS side by side."""
    args = parse_args(argv)
    rows: list[dict[str, Any]] = []
    load_start = load_average()
    for urls in args.sizes:
        for frontier in (True, False):
            if not frontier and urls > args.off_up_to:
                continue
            result, extra = run_size(args, urls, frontier)
            rows.append(
                {"urls": urls, "frontier": frontier, **extra}
                | asdict(result)
                | {"ok": result.ok or result.finish_reason == "bench_listed"}
            )
    load_end = load_average()
    print()
    print(
        f"{'listed URLs':>12} {'files':>6} {'frontier':>8} {'peak RSS MiB':>13} {'first page s':>13}"
        f" {'from start s':>13} {'wall s':>8} {'pages':>8} {'load':>9}  stop"
    )
    for r in rows:
        print(
            f"{r['urls']:>12,} {r['files']:>6} {'on' if r['frontier'] else 'off':>8}"
            f" {fmt(r['peak_rss_mib'], '.1f'):>13} {fmt(r['first_page_s'], '.2f'):>13}"
            f" {fmt(r['first_page_from_start_s'], '.2f'):>13} {fmt(r['wall_s'], '.1f'):>8}"
            f" {r['pages_answered'] or 0:>8} {format_load(r['load_start'], r['load_end']):>9}"
            f"  {r['finish_reason']}"
        )
    print(
        "first page s: from the first sitemap file of pages served to the first page requested (nginx's log)"
    )
    print(load_line(load_start, load_end))
    on = [r for r in rows if r["frontier"]]
    late = [
        r["first_page_s"] for r in on if r["first_page_s"] is None or r["first_page_s"] > TARGET_FIRST_PAGE_S
    ]
    print(
        f"\nfirst page request within {TARGET_FIRST_PAGE_S:.0f} s of the first sitemap file"
        f" (every size, frontier on): {'OK' if on and not late else 'MISSED'}"
    )
    rss_ratio = None
    if len({r["urls"] for r in on}) > 1:
        lo = min(on, key=lambda r: r["urls"])
        hi = max(on, key=lambda r: r["urls"])
        rss_ratio = hi["peak_rss_mib"] / lo["peak_rss_mib"] if lo["peak_rss_mib"] else None
        verdict = "n/a" if rss_ratio is None else "OK" if rss_ratio <= TARGET_RSS_RATIO else "MISSED"
        print(
            f"peak RSS {hi['urls']:,} / {lo['urls']:,} listed URLs (frontier on): {fmt(rss_ratio, '.2f')}x"
            f"   target <= {TARGET_RSS_RATIO}  {verdict}"
        )
    write_json(
        args.json,
        {
            "batch": args.batch,
            "batches_after": args.batches,
            "delay": args.delay,
            "per_file": args.per_file,
            "targets": {"first_page_s": TARGET_FIRST_PAGE_S, "rss_ratio": TARGET_RSS_RATIO},
            "rss_ratio": rss_ratio,
            "load_average": {"start": load_start, "end": load_end},
            "runs": rows,
        },
    )
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
