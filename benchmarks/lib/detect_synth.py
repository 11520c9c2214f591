"""The detection benchmark's synthetic runs: a generated site with planned edits of every kind,
crawled twice and scored."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.lib.detect_runs import (
    Config,
    CrawlResult,
    explain,
    log,
    run_cli,
    run_crawl,
    sqlite_uri,
    table,
)
from benchmarks.lib.detect_synthsite import EDIT_KINDS, SynthSite, serve_synthetic

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence


SYNTH_CONFIGS = (
    Config(
        "exact",
        "exact hash of the cleaned text",
        {"RECRAWLER_BOILERPLATE_ENABLED": "False", "RECRAWLER_VOLATILE_ENABLED": "False"},
    ),
    Config("default", "boilerplate + volatile tokens + region learning on rechecks (the default)", {}),
    Config("no-learn", "default with RECRAWLER_VOLATILE_LEARN=False", {"RECRAWLER_VOLATILE_LEARN": "False"}),
    Config(
        "no-learn+calibrate",
        "RECRAWLER_VOLATILE_LEARN=False, `recrawler calibrate --delay 1` before runs 2 and 3",
        {"RECRAWLER_VOLATILE_LEARN": "False"},
        calibrate=True,
    ),
)


@dataclass(slots=True)
class SynthRun:
    """One run on the synthetic site, scored against the edits made before it."""

    config: str
    run: int
    crawled: int
    new: int
    edited: int
    detected: int
    false: int
    missed: int
    rechecks: int
    learned: int
    rebaselined: int
    regions_total: int
    page_requests: int
    missed_pages: list[list[str]]
    false_pages: list[str]
    calibrate: str | None = None


@dataclass(slots=True)
class SynthConfigResult:
    config: str
    what: str
    db: str
    base_url: str
    runs: list[CrawlResult] = field(default_factory=list)
    scores: list[SynthRun] = field(default_factory=list)
    noise_output: str = ""
    calibrate_output: list[str] = field(default_factory=list)


def regions_count(db: Path) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM site_regions").fetchone()[0])


def run_synthetic(args: argparse.Namespace, tmp: Path) -> tuple[list[SynthConfigResult], bool]:
    """Part B: 3 runs per configuration, 5% of the pages edited before runs 2 and 3."""
    site = SynthSite(args.synthetic_pages, args.seed)
    server, base = serve_synthetic(site)
    sitemap = f"{base}/sitemap.xml"
    results: list[SynthConfigResult] = []
    ok = True
    try:
        for cfg in SYNTH_CONFIGS:
            site.reset()
            cdir = tmp / "synthetic" / cfg.name
            db = cdir / "state.db"
            res = SynthConfigResult(config=cfg.name, what=cfg.what, db=str(db), base_url=base)
            edits: dict[str, str] = {}
            for n in (1, 2, 3):
                calibrate_line = None
                if n > 1:
                    edits = site.edit(n)
                    if cfg.calibrate:
                        log(f"[synthetic] {cfg.name}: recrawler calibrate before run {n} ...")
                        calibrate = ["calibrate", "--db", sqlite_uri(db), "--delay", "1", "--seed", str(n)]
                        rc, out = run_cli(calibrate)
                        res.calibrate_output.append(out)
                        lines = out.strip().splitlines()
                        calibrate_line = (lines[-1] if lines else "") + ("" if rc == 0 else f" (exit {rc})")
                site.requests.clear()
                log(f"[synthetic] {cfg.name}: run {n} ...")
                run = run_crawl(
                    f"{cfg.name} run {n}",
                    sitemap,
                    db,
                    cdir / f"run{n}",
                    cfg.settings,
                    timeout=args.timeout,
                    page_cap=20 * max(args.synthetic_pages, 50),
                )
                ok &= run.ok
                res.runs.append(run)
                changed = run.paths("changed")
                missed = sorted(set(edits) - changed)
                res.scores.append(
                    SynthRun(
                        config=cfg.name,
                        run=n,
                        crawled=run.counts.get("crawled", -1),
                        new=len(run.paths("new")),
                        edited=len(edits),
                        detected=len(changed),
                        false=len(changed - set(edits)),
                        missed=len(missed),
                        rechecks=run.stats.get("recrawler/volatile/recheck", 0),
                        learned=run.stats.get("recrawler/volatile/learned", 0),
                        rebaselined=run.verdicts.get("unchanged_rebaseline", 0),
                        regions_total=regions_count(db),
                        page_requests=sum(site.requests.values()),
                        missed_pages=[[p, edits[p]] for p in missed],
                        false_pages=sorted(changed - set(edits))[:5],
                        calibrate=calibrate_line,
                    )
                )
            rc, out = run_cli(["noise", "--db", sqlite_uri(db)])
            res.noise_output = out if rc == 0 else f"(exit {rc}) {out}"
            results.append(res)
    finally:
        server.shutdown()
        server.server_close()
    return results, ok


def print_synthetic(results: Sequence[SynthConfigResult], n_pages: int) -> None:
    print()
    print("=" * 100)
    print(f"PART B: synthetic site, {n_pages} pages, noise inside <main>, 5% of pages edited between runs")
    print("=" * 100)
    print(
        "Every request: 'Last updated: <now>', 'Edited N hours ago · <n> views', 'Request ID: <uuid4>',\n"
        "'<k> people are reading this page right now', 3 of 30 'related articles' at random. Pages answer\n"
        "200 with a stable Last-Modified (no ETag) and ignore If-Modified-Since, so an unedited page is a\n"
        "200 whose validator equals the stored one: the recheck path that learns volatile regions.\n"
        f"Edits (10 per step, cycling): {', '.join(EDIT_KINDS)}; an edited page gets a new Last-Modified."
    )
    for r in results:
        print(f"  {r.config:<19} {r.what}")
    print()
    rows = []
    for run_no in (1, 2, 3):
        for r in results:
            s = r.scores[run_no - 1]
            rows.append(
                [
                    s.run,
                    s.config,
                    s.crawled,
                    s.new,
                    s.edited,
                    s.detected,
                    s.false,
                    s.missed,
                    s.rechecks,
                    s.learned,
                    s.regions_total,
                    s.rebaselined,
                    s.page_requests,
                ]
            )
    print(
        table(
            [
                "run",
                "config",
                "crawled",
                "new",
                "edited",
                "detected",
                "false",
                "missed",
                "rechecks",
                "learned",
                "regions",
                "rebaselined",
                "requests",
            ],
            rows,
        )
    )
    print(
        "\ndetected: `changed` events; false: changed events on unedited pages; missed: edited pages without"
        " one;\nrechecks/learned: recrawler/volatile/{recheck,learned} stats; regions: rows in site_regions"
        " after the run;\nrebaselined: history rows `unchanged_rebaseline`; requests: page requests the"
        " server answered."
    )
    for r in results:
        for s in r.scores:
            if s.calibrate:
                print(f"  {r.config} before run {s.run}: {s.calibrate}")
    print("\nMissed edits:")
    any_missed = False
    for r in results:
        for s in r.scores:
            for path, kind in s.missed_pages:
                any_missed = True
                run = r.runs[s.run - 1]
                print(f"  {r.config} run {s.run}: {path} ({kind})")
                for line in explain(Path(r.db), f"{r.base_url}/{path}", run.run_id):
                    print(f"      {line}")
    if not any_missed:
        print("  none")
    print("\nFalse changes (first 5 per run):")
    for r in results:
        for s in r.scores:
            if s.false_pages:
                print(f"  {r.config} run {s.run}: {s.false} pages, e.g. {', '.join(s.false_pages)}")
    for r in results:
        if r.config in ("default", "no-learn+calibrate"):
            print(f"\n`recrawler noise --db ...` after the {r.config} runs:")
            print("  " + "\n  ".join(r.noise_output.rstrip().splitlines()))
