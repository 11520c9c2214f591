"""Change-detection benchmark: precision and recall of ``changed`` on a labelled real docs site, and
volatility learning on a synthetic site whose main content is full of noise.

Usage: ``python -m benchmarks.bench_detect [--keep] [--json PATH] [--skip-corpus] [--skip-synthetic]``
(see README.md, section ``bench_detect.py``).

Part A serves the mesonbuild corpus (4 versions, ``truth.tsv``) from one directory with nginx,
deploys v1..v4 in place (files keep the version's commit time as mtime), crawls after each deploy
and scores the ``changed`` events of every step against the labels, for five detector
configurations. Part B serves ~200 generated pages from a small threaded HTTP server whose main
content carries a "Last updated" time, a relative time, a view counter, a request id, a live
reader count and a rotating "related articles" block on every request; 5% of the pages get a real
edit between runs.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import unquote, urlsplit

if not __package__:  # run as a script: python benchmarks/bench_detect.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.lib.nginx import NginxServer
from benchmarks.lib.results import add_json_option, write_json
from benchmarks.lib.runners import git_state, recrawler_cli, workdir
from recrawler.urls import KeyMaker

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

HERE = Path(__file__).resolve().parent
PROJECT_DIR = HERE.parent
DEFAULT_CORPUS = PROJECT_DIR.parent / "shared" / "corpus" / "mesonbuild"
VERSIONS = (1, 2, 3, 4)
STEPS = ("v1->v2", "v2->v3", "v3->v4")
LABELS = ("added", "removed", "changed", "noise", "identical")

TARGET_RECALL = 1.0
TARGET_NOISE_SHARE = 0.01  # false changes on noise pages, default detector

# Settings every crawl runs with: every listed page checked (the adaptive schedule would find
# nothing due in runs seconds apart), no spike hold (events and counts are the same either way, but
# a held run would stay unpublished); the knowledge base stays on as by default (hashing embedder).
COMMON_SETTINGS = {
    "RECRAWLER_SCHEDULE": "all",
    "RECRAWLER_CHANGE_ALERT_RATIO": "1.0",
    "LOG_LEVEL": "INFO",
    "TELNETCONSOLE_ENABLED": "False",
}


@dataclass(frozen=True, slots=True)
class Config:
    """One detector configuration: a name and the ``-s`` settings that select it."""

    name: str
    what: str
    settings: dict[str, str]
    #: run ``recrawler calibrate`` before every run but the first (synthetic site only)
    calibrate: bool = False


CORPUS_CONFIGS = (
    Config(
        "exact",
        "exact hash of the cleaned text",
        {"RECRAWLER_BOILERPLATE_ENABLED": "False", "RECRAWLER_VOLATILE_ENABLED": "False"},
    ),
    Config(
        "+boilerplate",
        "site boilerplate blocks dropped, no volatile tokens",
        {"RECRAWLER_BOILERPLATE_ENABLED": "True", "RECRAWLER_VOLATILE_ENABLED": "False"},
    ),
    Config("default", "boilerplate + volatile tokens + region learning (the default)", {}),
    Config("fuzzy50", "default + RECRAWLER_FUZZY_THRESHOLD=50", {"RECRAWLER_FUZZY_THRESHOLD": "50"}),
    Config("fuzzy150", "default + RECRAWLER_FUZZY_THRESHOLD=150", {"RECRAWLER_FUZZY_THRESHOLD": "150"}),
)

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


def log(msg: str) -> None:
    """Progress goes to stderr; results go to stdout."""
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Running crawls and reading what they produced
# ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class CrawlResult:
    """One ``scrapy crawl docs`` run: its exit, report, events, stats and history rows."""

    label: str
    returncode: int = 0
    timed_out: bool = False
    wall_s: float = 0.0
    run_id: int | None = None
    finish_reason: str | None = None
    counts: dict[str, int] = field(default_factory=dict)
    index_state: str | None = None
    noise: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    #: recrawler/* stats from the log's stats dump
    stats: dict[str, int] = field(default_factory=dict)
    #: page_changes rows of this run, by verdict
    verdicts: dict[str, int] = field(default_factory=dict)
    #: HTTP statuses the server logged for this run (nginx only)
    http: dict[str, int] = field(default_factory=dict)
    log_file: str = ""

    @property
    def ok(self) -> bool:
        """True when the crawl exited 0 within its time limit and finished its run."""
        return self.returncode == 0 and not self.timed_out and self.finish_reason == "finished"

    def paths(self, *actions: str) -> set[str]:
        """Site-relative paths of the events with one of *actions*."""
        return {url_path(e["url"]) for e in self.events if e.get("action") in actions}


def url_path(url: str) -> str:
    """``http://host/dir/page.html`` -> ``dir/page.html``."""
    return unquote(urlsplit(url).path).lstrip("/")


_STAT = re.compile(r"'(recrawler/[^']+)': (-?\d+)\b")


def parse_stats(text: str) -> dict[str, int]:
    """The recrawler/* integer stats of the log's last stats dump."""
    start = text.rfind("Dumping Scrapy stats")
    if start < 0:
        return {}
    return {m.group(1): int(m.group(2)) for m in _STAT.finditer(text, start)}


def sqlite_uri(path: Path) -> str:
    """``sqlite:////abs/path.db``."""
    return "sqlite:///" + str(path.resolve())


def run_crawl(
    label: str,
    sitemap_url: str,
    db: Path,
    run_dir: Path,
    settings: dict[str, str],
    *,
    timeout: float,
    page_cap: int,
) -> CrawlResult:
    """Run ``python -m scrapy crawl docs`` in the project directory and collect its outputs.

    *page_cap* (``CLOSESPIDER_PAGECOUNT``) stops a runaway crawl (a re-fetch loop) early; such a
    crawl ends with ``closespider_pagecount`` and counts as failed.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    events_path = run_dir / "events.jsonl"
    report_path = run_dir / "report.json"
    log_path = run_dir / "crawl.log"
    all_settings = {
        **COMMON_SETTINGS,
        **settings,
        "CLOSESPIDER_PAGECOUNT": str(page_cap),
        "RECRAWLER_DB_URI": sqlite_uri(db),
        "RECRAWLER_EVENTS_URI": "file://" + str(events_path.resolve()),
        "RECRAWLER_REPORT_FILE": str(report_path.resolve()),
    }
    cmd = [sys.executable, "-m", "scrapy", "crawl", "docs", "-a", f"sitemap_url={sitemap_url}"]
    for name, value in all_settings.items():
        cmd += ["-s", f"{name}={value}"]
    result = CrawlResult(label=label, log_file=str(log_path))
    start = time.monotonic()
    with log_path.open("wb") as out:
        try:
            proc = subprocess.run(
                cmd,
                cwd=PROJECT_DIR,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
            )
            result.returncode = proc.returncode
        except subprocess.TimeoutExpired:
            result.timed_out, result.returncode = True, -9
    result.wall_s = time.monotonic() - start
    text = log_path.read_text(encoding="utf-8", errors="replace")
    result.stats = parse_stats(text)
    if report_path.exists():
        report = json.loads(report_path.read_text(encoding="utf-8"))
        result.run_id = report.get("run_id")
        result.finish_reason = report.get("finish_reason")
        result.counts = dict(report.get("counts") or {})
        result.index_state = (report.get("index") or {}).get("state")
        result.noise = dict(report.get("noise") or {})
    if events_path.exists():
        result.events = [
            json.loads(line) for line in events_path.read_text(encoding="utf-8").splitlines() if line.strip()
        ]
    if result.run_id is not None and db.exists():
        with sqlite3.connect(db) as conn:
            result.verdicts = dict(
                conn.execute(
                    "SELECT verdict, COUNT(*) FROM page_changes WHERE run_id = ? GROUP BY verdict",
                    (result.run_id,),
                ).fetchall()
            )
    if not result.ok:
        tail = "\n".join(text.splitlines()[-25:])
        why = (
            "timed out"
            if result.timed_out
            else f"exited {result.returncode}, finish reason {result.finish_reason}"
        )
        log(f"crawl {label} {why}; last log lines ({log_path}):\n{tail}")
    return result


def run_cli(args: Sequence[str], *, timeout: float = 600) -> tuple[int, str]:
    """Run a ``recrawler`` subcommand in the project directory; (exit code, stdout + stderr)."""
    try:
        proc = subprocess.run(
            [*recrawler_cli(), *args],
            cwd=PROJECT_DIR,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return -9, f"recrawler {' '.join(args)}: timed out"
    return proc.returncode, proc.stdout + proc.stderr


def change_row(db: Path, key: str, run_id: int | None) -> dict[str, Any] | None:
    """The page_changes row of *key* written by *run_id*, if any."""
    if run_id is None or not db.exists():
        return None
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        row = conn.execute(
            "SELECT verdict, changed_fields, distance, critical, diff FROM page_changes "
            "WHERE run_id = ? AND key = ? ORDER BY id DESC LIMIT 1",
            (run_id, key),
        ).fetchone()
    if row is None:
        return None
    data = dict(row)
    data["changed_fields"] = json.loads(data["changed_fields"] or "[]")
    data["critical"] = json.loads(data["critical"] or "[]")
    return data


def diff_lines(diff: str | None, limit: int = 6) -> list[str]:
    """The first changed lines of a stored unified diff (no headers, no context)."""
    out = []
    for line in (diff or "").splitlines():
        if line.startswith(("+++", "---", "@@")) or not line.startswith(("+", "-")):
            continue
        out.append(line if len(line) <= 150 else line[:147] + "...")
        if len(out) >= limit:
            break
    return out


def explain(db: Path, url: str, run_id: int | None) -> list[str]:
    """Why a page was (not) called changed in a run: its history row, or its absence."""
    row = change_row(db, KeyMaker()(url), run_id)
    if row is None:
        return ["no history row this run: the normalised text hashed the same (or a 304)"]
    fields = ",".join(row["changed_fields"]) or "-"
    head = f"history: {row['verdict']}  fields={fields}  tlsh={row['distance']}"
    lines = [head]
    lines += [f"critical: {c}" for c in row["critical"][:3]]
    lines += [f"diff: {d}" for d in diff_lines(row["diff"])]
    return lines


def pct(num: int, den: int) -> str:
    return f"{100.0 * num / den:.1f}%" if den else "-"


def ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def fmt3(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A plain left-aligned text table."""
    cells = [[str(h) for h in headers], *([str(c) for c in r] for r in rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Part A: the labelled corpus
# ---------------------------------------------------------------------------------------------

SERVER_FILES = ("sitemap.xml", "robots.txt")
ROBOTS = "User-agent: *\nAllow: /\n"


def extract_versions(corpus: Path, dest: Path) -> dict[int, Path]:
    """Extract v1..v4.tar.gz (file mtimes are each version's commit time)."""
    out = {}
    for v in VERSIONS:
        target = dest / f"v{v}"
        target.mkdir(parents=True)
        with tarfile.open(corpus / f"v{v}.tar.gz") as tar:
            tar.extractall(target, filter="data")
        out[v] = target
    return out


def load_truth(path: Path) -> dict[str, dict[str, str]]:
    """``truth.tsv`` as {step: {path: label}}."""
    truth: dict[str, dict[str, str]] = {}
    with path.open(encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            truth.setdefault(row["step"], {})[row["path"]] = row["label"]
    return truth


def write_sitemap(site: Path, base_url: str, paths: Sequence[str]) -> str:
    """Write ``sitemap.xml`` (absolute URLs, no lastmod) and ``robots.txt``; return the sitemap URL."""
    urls = "".join(f"  <url><loc>{base_url}/{p}</loc></url>\n" for p in paths)
    (site / "sitemap.xml").write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n{urls}</urlset>\n',
        encoding="utf-8",
    )
    (site / "robots.txt").write_text(ROBOTS, encoding="utf-8")
    return f"{base_url}/sitemap.xml"


def deploy(src: Path, site: Path, base_url: str, *, mtime: float | None = None) -> tuple[str, int]:
    """Make *site* hold exactly *src*'s files, copied in place with their mtimes (or *mtime*);
    write the sitemap of its top-level pages. Returns (sitemap URL, page count)."""
    wanted = {p.relative_to(src) for p in src.rglob("*") if p.is_file()}
    for p in sorted(site.rglob("*"), reverse=True):  # children before their directories
        rel = p.relative_to(site)
        if p.is_file() and rel not in wanted and rel.as_posix() not in SERVER_FILES:
            p.unlink()
        elif p.is_dir() and not any(p.iterdir()):
            p.rmdir()
    for rel in sorted(wanted):
        dst = site / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / rel, dst)
        if mtime is not None:
            os.utime(dst, (mtime, mtime))
    pages = sorted(r.as_posix() for r in wanted if len(r.parts) == 1 and r.suffix == ".html")
    return write_sitemap(site, base_url, pages), len(pages)


def http_counts(server: NginxServer) -> dict[str, int]:
    """Statuses of the page requests in nginx's access log since the last truncation."""
    c: Counter[str] = Counter()
    for e in server.read_access_log():
        if e.uri.endswith(".html"):
            c[str(e.status)] += 1
    return dict(sorted(c.items()))


@dataclass(slots=True)
class StepScore:
    """One configuration's verdicts on one step, scored against the labels."""

    config: str
    step: str
    labelled: int
    detected: int
    tp: int
    precision: float | None
    recall: float | None
    false_noise: int
    n_noise: int
    false_identical: int
    n_identical: int
    false_other: int
    added: int
    added_new: int
    extra_new: int
    removed: int
    removed_gone: int
    report_changed: int
    fuzzy_let_through: int
    index_state: str | None
    missed: list[str]
    false: list[list[str]]


def score_step(config: str, step: str, labels: dict[str, str], run: CrawlResult) -> StepScore:
    """Compare a run's events with the step's labels."""
    by = {lab: {p for p, x in labels.items() if x == lab} for lab in LABELS}
    changed = run.paths("changed")
    new = run.paths("new")
    gone = run.paths("quarantined", "gone")
    tp = changed & by["changed"]
    return StepScore(
        config=config,
        step=step,
        labelled=len(by["changed"]),
        detected=len(changed),
        tp=len(tp),
        precision=ratio(len(tp), len(changed)),
        recall=ratio(len(tp), len(by["changed"])),
        false_noise=len(changed & by["noise"]),
        n_noise=len(by["noise"]),
        false_identical=len(changed & by["identical"]),
        n_identical=len(by["identical"]),
        false_other=len(changed - by["changed"] - by["noise"] - by["identical"]),
        added=len(by["added"]),
        added_new=len(new & by["added"]),
        extra_new=len(new - by["added"]),
        removed=len(by["removed"]),
        removed_gone=len(gone & by["removed"]),
        report_changed=run.counts.get("changed", -1),
        fuzzy_let_through=run.verdicts.get("unchanged_fuzzy", 0),
        index_state=run.index_state,
        missed=sorted(by["changed"] - changed),
        false=sorted([p, labels.get(p, "unlabelled")] for p in changed - by["changed"]),
    )


@dataclass(slots=True)
class CorpusConfigResult:
    """Every crawl of one configuration and its scores."""

    config: str
    what: str
    db: str
    base_url: str
    runs: list[CrawlResult] = field(default_factory=list)
    steps: list[StepScore] = field(default_factory=list)


def run_corpus(args: argparse.Namespace, tmp: Path) -> tuple[list[CorpusConfigResult], bool]:
    """Part A: crawl v1..v4 (then v4 twice more) per configuration; score each step."""
    corpus = Path(args.corpus)
    truth = load_truth(corpus / "truth.tsv")
    versions = extract_versions(corpus, tmp / "versions")
    site = tmp / "site"
    site.mkdir()
    results: list[CorpusConfigResult] = []
    ok = True
    with NginxServer(site, prefix=tmp / "nginx") as server:
        for cfg in CORPUS_CONFIGS:
            cdir = tmp / "corpus" / cfg.name
            db = cdir / "state.db"
            res = CorpusConfigResult(config=cfg.name, what=cfg.what, db=str(db), base_url=server.url)
            plan: list[tuple[str, int, float | None]] = [(f"v{v}", v, None) for v in VERSIONS]
            # the same version twice in a row: nothing deployed (304s), then redeployed
            # byte for byte with new mtimes (new validators: 200s, the hash decides)
            plan += [("v4 again", 0, None), ("v4 redeployed", 4, time.time())]
            for label, version, mtime in plan:
                pages = 0
                if version:
                    sitemap, pages = deploy(versions[version], site, server.url, mtime=mtime)
                else:
                    sitemap = f"{server.url}/sitemap.xml"
                server.truncate_access_log()
                log(f"[corpus] {cfg.name}: crawl {label} ({pages or 'same'} pages) ...")
                run = run_crawl(
                    f"{cfg.name} {label}",
                    sitemap,
                    db,
                    cdir / label.replace(" ", "_"),
                    cfg.settings,
                    timeout=args.timeout,
                    page_cap=20 * max(pages, 250),
                )
                run.http = http_counts(server)
                ok &= run.ok
                res.runs.append(run)
            for i, step in enumerate(STEPS, start=1):
                res.steps.append(score_step(cfg.name, step, truth[step], res.runs[i]))
            results.append(res)
    return results, ok


def print_corpus(results: Sequence[CorpusConfigResult], base_url_note: str) -> dict[str, Any]:
    """Print Part A side by side; return the target checks."""
    print("=" * 100)
    print("PART A: mesonbuild corpus, v1 -> v2 -> v3 -> v4 served by nginx from one directory")
    print("=" * 100)
    print(base_url_note)
    for r in results:
        print(f"  {r.config:<13} {r.what}")
    print()
    rows = []
    for step in STEPS:
        for r in results:
            s = next(x for x in r.steps if x.step == step)
            rows.append(
                [
                    step,
                    s.config,
                    s.labelled,
                    s.detected,
                    s.tp,
                    fmt3(s.precision),
                    fmt3(s.recall),
                    f"{s.false_noise}/{s.n_noise} ({pct(s.false_noise, s.n_noise)})",
                    f"{s.false_identical}/{s.n_identical} ({pct(s.false_identical, s.n_identical)})",
                    f"{s.added_new}/{s.added}" + (f" +{s.extra_new}" if s.extra_new else ""),
                    f"{s.removed_gone}/{s.removed}",
                    s.fuzzy_let_through,
                    s.report_changed,
                    s.index_state or "-",
                ]
            )
    print(
        table(
            [
                "step",
                "config",
                "labelled",
                "detected",
                "TP",
                "precision",
                "recall",
                "false@noise",
                "false@identical",
                "added->new",
                "removed->q/gone",
                "fuzzy-ok",
                "report",
                "index",
            ],
            rows,
        )
    )
    print(
        "\nlabelled: pages labelled changed; detected: `changed` events; false@X: changed events on pages"
        " labelled X;\nadded->new: added pages with a `new` event (+N: other new events); fuzzy-ok:"
        " history rows `unchanged_fuzzy`;\nreport: counts.changed of the run report; index: the run's"
        " knowledge-base state."
    )

    print("\nThe same version twice in a row (after the v4 crawl):")
    rows = []
    for r in results:
        again, redeploy = r.runs[4], r.runs[5]
        rows.append(
            [
                r.config,
                again.counts.get("crawled", "-"),
                again.counts.get("changed", "-"),
                again.counts.get("not_modified", "-"),
                json.dumps(again.http),
                redeploy.counts.get("crawled", "-"),
                redeploy.counts.get("changed", "-"),
                redeploy.counts.get("unchanged_by_hash", "-"),
                json.dumps(redeploy.http),
            ]
        )
    print(
        table(
            [
                "config",
                "again:crawled",
                "changed",
                "304s",
                "nginx",
                "redeployed:crawled",
                "changed",
                "unchanged_by_hash",
                "nginx",
            ],
            rows,
        )
    )

    print("\nEvery run (report counts):")
    rows = []
    for r in results:
        for run in r.runs:
            c = run.counts
            rows.append(
                [
                    run.label,
                    c.get("crawled", "-"),
                    c.get("new", "-"),
                    c.get("changed", "-"),
                    c.get("unchanged", "-"),
                    c.get("quarantined", "-"),
                    c.get("gone", "-"),
                    c.get("errors", "-"),
                    c.get("not_modified", "-"),
                    c.get("unchanged_by_hash", "-"),
                    run.noise.get("boilerplate_on", "-"),
                    run.noise.get("taken_back", "-"),
                    json.dumps(run.verdicts, sort_keys=True),
                    f"{run.wall_s:.1f}",
                ]
            )
    print(
        table(
            [
                "run",
                "crawled",
                "new",
                "changed",
                "unchanged",
                "quar.",
                "gone",
                "errors",
                "304",
                "by_hash",
                "bp_on",
                "taken_back",
                "history verdicts",
                "wall s",
            ],
            rows,
        )
    )

    # every page falsely called changed, or missed, with what the history says about it
    print("\nPages falsely detected or missed (history row of the first configuration listed):")
    seen: dict[tuple[str, str, str], list[str]] = {}
    for r in results:
        for s in r.steps:
            for p, lab in s.false:
                seen.setdefault((s.step, p, f"false ({lab})"), []).append(r.config)
            for p in s.missed:
                seen.setdefault((s.step, p, "missed (changed)"), []).append(r.config)
    if not seen:
        print("  none")
    by_name = {r.config: r for r in results}
    for (step, path, what), configs in sorted(seen.items()):
        first = by_name[configs[0]]
        run = first.runs[STEPS.index(step) + 1]
        url = f"{first.base_url}/{path}"
        print(f"  {step}  {path}: {what} in {', '.join(configs)}")
        for line in explain(Path(first.db), url, run.run_id):
            print(f"      {line}")

    checks: dict[str, Any] = {}
    default = by_name.get("default")
    if default is not None:
        recall_ok = all(s.recall is None or s.recall >= TARGET_RECALL for s in default.steps)
        noise_ok = all(s.false_noise <= TARGET_NOISE_SHARE * s.n_noise for s in default.steps)
        twice_ok = default.runs[4].counts.get("changed") == 0 and default.runs[5].counts.get("changed") == 0
        checks = {"recall": recall_ok, "noise": noise_ok, "twice": twice_ok}
        print("\nTargets, default detector:")
        print(f"  recall 1.0 on every step:                 {'PASS' if recall_ok else 'FAIL'}")
        print(f"  false changes <= 1% of noise pages:       {'PASS' if noise_ok else 'FAIL'}")
        print(f"  same version crawled twice: 0 changed:    {'PASS' if twice_ok else 'FAIL'}")
    return checks


# ---------------------------------------------------------------------------------------------
# Part B: a synthetic site with noise inside the main content
# ---------------------------------------------------------------------------------------------

T0 = dt.datetime(2026, 1, 5, 9, 0, tzinfo=dt.UTC).timestamp()
_NOUNS = (
    "upload",
    "backup",
    "cache",
    "session",
    "webhook",
    "export",
    "import",
    "mirror",
    "queue",
    "report",
    "archive",
    "invoice",
    "snapshot",
    "token",
    "tenant",
    "bucket",
    "schedule",
    "audit",
    "search",
    "index",
    "stream",
    "ledger",
    "profile",
    "gateway",
    "worker",
)
_OBJECTS = (
    "client",
    "server",
    "agent",
    "proxy",
    "runner",
    "scheduler",
    "collector",
    "replica",
    "broker",
    "indexer",
    "uploader",
    "watcher",
)
_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
RELATED_POOL = tuple(
    f"{a.capitalize()} {b}"
    for a, b in zip(
        (
            "migrating",
            "scaling",
            "securing",
            "monitoring",
            "debugging",
            "tuning",
            "testing",
            "deploying",
            "backing up",
            "observing",
        )
        * 3,
        (
            "your first project",
            "large teams",
            "multi-region setups",
            "the CLI",
            "webhooks at scale",
            "the API quotas",
            "on Kubernetes",
            "with Terraform",
            "in CI pipelines",
            "a legacy setup",
            "storage costs",
            "cold starts",
            "for compliance",
            "with SSO",
            "from v1 to v2",
        ),
        strict=False,
    )
)[:30]
APPENDED = " Running jobs keep their old settings until they finish."
EDIT_KINDS = (
    "number",
    "identifier-list",
    "identifier-prose",
    "appended",
    "number-near-counter-word",
    "date",
    "removed-paragraph",
    "number",
    "appended",
    "removed-paragraph",
)


@dataclass(slots=True)
class SynthPage:
    """One generated page: its facts (edited between runs) and its Last-Modified time."""

    path: str
    title: str
    noun: str
    obj: str
    seconds: int
    keep: int
    comments: int
    month: int
    day: int
    ident: str
    options: list[tuple[str, str]] | None
    appended: bool = False
    removed: bool = False
    mtime: float = T0


def plan_pages(n: int, seed: int) -> list[SynthPage]:
    """Deterministic pages; every third one has an options list of linked identifiers."""
    rng = random.Random(seed)
    pages = []
    for i in range(n):
        noun, obj = _NOUNS[i % len(_NOUNS)], _OBJECTS[(i // len(_NOUNS)) % len(_OBJECTS)]
        ident = f"{noun}_{obj}_retries"
        options = None
        if i % 3 == 0:
            options = [
                (f"{noun}_{obj}_timeout", f"seconds before a {noun} request to the {obj} gives up"),
                (f"{noun}_{obj}_workers", f"how many {obj} workers handle {noun} jobs at once"),
                (f"{noun}_{obj}_dir", f"where the {obj} keeps {noun} files"),
            ]
        pages.append(
            SynthPage(
                path=f"docs/{noun}-{obj}-{i:03d}.html",
                title=f"{noun.capitalize()} {obj} guide {i}",
                noun=noun,
                obj=obj,
                seconds=rng.randrange(5, 120),
                keep=rng.randrange(2, 50),
                comments=rng.choice((20, 50, 100, 200)),
                month=rng.randrange(12),
                day=rng.randrange(1, 28),
                ident=ident,
                options=options,
            )
        )
    return pages


class SynthSite:
    """The site's pages, rendered with fresh noise on every request (thread-safe reads)."""

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.seed = n, seed
        self.pages: dict[str, SynthPage] = {}
        self.requests: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._views = 10_000
        self.reset()

    def reset(self) -> None:
        """Back to the unedited site (each configuration starts from it)."""
        self.pages = {p.path: p for p in plan_pages(self.n, self.seed)}

    def edit(self, step: int) -> dict[str, str]:
        """Give 5% of the pages a real edit; return {path: edit kind}. Deterministic per step."""
        rng = random.Random(self.seed * 1000 + step)
        count = max(1, round(self.n * 0.05))
        kinds = [EDIT_KINDS[k % len(EDIT_KINDS)] for k in range(count)]
        edited: dict[str, str] = {}
        with_list = [p for p in self.pages.values() if p.options and not p.appended and not p.removed]
        plain = [p for p in self.pages.values() if not p.appended and not p.removed]
        for kind in kinds:
            pool = with_list if kind == "identifier-list" else plain
            page = rng.choice([p for p in pool if p.path not in edited])
            edited[page.path] = kind
            self._apply(page, kind, step)
        return edited

    @staticmethod
    def _apply(page: SynthPage, kind: str, step: int) -> None:
        if kind == "number":
            page.seconds += 15
        elif kind == "identifier-list":
            assert page.options is not None
            old, desc = page.options[0]
            page.options[0] = (old.replace("_timeout", "_deadline"), desc)
        elif kind == "identifier-prose":
            page.ident = page.ident.replace("_retries", "_retry_limit")
        elif kind == "appended":
            page.appended = True
        elif kind == "number-near-counter-word":
            page.comments *= 2
        elif kind == "date":
            page.month = (page.month + 3) % 12
        elif kind == "removed-paragraph":
            page.removed = True
        page.mtime = T0 + step * 86_400

    def sitemap(self, base: str) -> bytes:
        urls = "".join(f"  <url><loc>{base}/{p}</loc></url>\n" for p in self.pages)
        return (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n{urls}</urlset>\n'
        ).encode()

    def render(self, path: str) -> tuple[bytes, float] | None:
        page = self.pages.get(path)
        if page is None:
            return None
        with self._lock:
            self.requests[path] += 1
            self._views += 1
            views = self._views
        now = dt.datetime.now(dt.UTC)
        p = page
        related = "".join(
            f'<li><a href="/blog/{i}.html">{RELATED_POOL[i]}</a></li>'
            for i in random.sample(range(len(RELATED_POOL)), 3)
        )
        options = ""
        if p.options:
            items = "".join(
                f'<li><a href="#opt-{name}"><code>{name}</code></a>: {desc}.</li>' for name, desc in p.options
            )
            options = f"<h2>Options</h2>\n<ul>{items}</ul>\n"
        when = f"{_MONTHS[now.month - 1]} {now.day}, {now.year}, {now:%H:%M:%S} UTC"
        extra = APPENDED if p.appended else ""
        fallback = (
            ""
            if p.removed
            else f"<p>If the {p.obj} is unreachable, {p.noun} jobs fall back to the local cache "
            f"and a warning is logged once per hour.</p>\n"
        )
        html = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{p.title} - Acme Docs</title></head>
<body>
<header class="site-header"><a href="/">Acme Docs</a> <nav><a href="/docs/">Guides</a></nav></header>
<main>
<article>
<h1>{p.title}</h1>
<div class="page-meta">
<p>Last updated: {when}</p>
<p>Edited {random.randint(1, 23)} hours ago · {views:,} views</p>
<p>Request ID: {uuid.uuid4()}</p>
</div>
<p class="presence">{random.randint(2, 60)} people are reading this page right now</p>
<h2>Overview</h2>
<p>This guide explains how {p.noun} jobs run on the {p.obj} and how to configure them.</p>
<p>By default the {p.obj} waits {p.seconds} seconds before it retries a failed {p.noun} request.{extra}</p>
{fallback}<h2>Configuration</h2>
<p>Set <code>{p.ident}</code> in <code>acme.toml</code> to change how often a {p.noun} request is retried;
the {p.obj} keeps the last {p.keep} attempts in its log.</p>
<p>The {p.noun} API returns up to {p.comments} comments per page; use the cursor to read the rest.</p>
<pre><code>acme {p.noun} sync --{p.obj}-timeout {p.seconds}
acme {p.noun} status</code></pre>
{options}<h2>Support</h2>
<p>Support for the legacy {p.noun} format ends on {_MONTHS[p.month]} {p.day}, 2027.</p>
<div class="related"><h3>Related articles</h3><ul>{related}</ul></div>
</article>
</main>
<footer>&copy; 2026 Acme Inc.</footer>
</body></html>
"""
        return html.encode(), p.mtime


class _Handler(BaseHTTPRequestHandler):
    """Pages always answer 200 with a stable Last-Modified (no ETag) and ignore If-Modified-Since,
    like a CMS that renders every request: the recheck path of volatility learning."""

    protocol_version = "HTTP/1.1"
    site: ClassVar[SynthSite]
    base: ClassVar[str]

    def do_GET(self) -> None:
        path = unquote(urlsplit(self.path).path).lstrip("/")
        if path == "robots.txt":
            self._send(200, ROBOTS.encode(), "text/plain")
        elif path == "sitemap.xml":
            self._send(200, self.site.sitemap(self.base), "application/xml")
        elif (rendered := self.site.render(path)) is not None:
            body, mtime = rendered
            last_modified = {"Last-Modified": formatdate(mtime, usegmt=True)}
            self._send(200, body, "text/html; charset=utf-8", last_modified)
        else:
            self._send(404, b"<html><body><h1>404 Not Found</h1></body></html>", "text/html")

    def _send(self, status: int, body: bytes, ctype: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the site counts requests itself."""


def serve_synthetic(site: SynthSite) -> tuple[ThreadingHTTPServer, str]:
    """Start the synthetic site on 127.0.0.1 in a daemon thread; return (server, base URL)."""

    class Handler(_Handler):
        pass

    Handler.site = site
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    base = f"http://127.0.0.1:{server.server_address[1]}"
    Handler.base = base
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, base


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


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--keep", action="store_true", help="keep the temp dir (sites, databases, logs, events)")
    add_json_option(p, "bench_detect")
    p.add_argument("--skip-corpus", action="store_true", help="skip part A (the labelled corpus)")
    p.add_argument("--skip-synthetic", action="store_true", help="skip part B (the synthetic site)")
    p.add_argument("--corpus", default=str(DEFAULT_CORPUS), help="corpus dir (default %(default)s)")
    p.add_argument("--synthetic-pages", type=int, default=200, help="synthetic pages (default %(default)s)")
    p.add_argument("--seed", type=int, default=1, help="synthetic site seed (default %(default)s)")
    p.add_argument("--timeout", type=float, default=600, help="seconds per crawl (default %(default)s)")
    return p.parse_args(argv)


def revision() -> str:
    """The checkout's commit, and whether recrawler/ has uncommitted changes."""
    state = git_state(PROJECT_DIR)
    if state is None:
        return "unknown"
    head, dirty = state
    return head + (" (recrawler/ has uncommitted changes)" if dirty else "")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    with workdir("bench-detect-", keep=args.keep, log=log) as tmp:
        return _run(args, tmp)


def _run(args: argparse.Namespace, tmp: Path) -> int:
    log(f"work dir: {tmp}")
    started = time.monotonic()
    ok = True
    rev = revision()
    print(f"bench_detect at {rev}, {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC")
    out: dict[str, Any] = {"revision": rev, "settings": COMMON_SETTINGS}
    if not args.skip_corpus:
        corpus, corpus_ok = run_corpus(args, tmp)
        ok &= corpus_ok
        note = (
            "Every crawl: -s "
            + " -s ".join(f"{k}={v}" for k, v in COMMON_SETTINGS.items())
            + " (knowledge base on, hashing embedder).\nFresh database per configuration; v1..v4 copied"
            " in place with the tarball mtimes, sitemap of every top-level *.html page."
        )
        checks = print_corpus(corpus, note)
        out["corpus"] = {"configs": [asdict(c) for c in corpus], "targets": checks}
    if not args.skip_synthetic:
        synth, synth_ok = run_synthetic(args, tmp)
        ok &= synth_ok
        print_synthetic(synth, args.synthetic_pages)
        out["synthetic"] = [asdict(c) for c in synth]
    verdict = "all ok" if ok else "FAILED (see stderr)"
    print(f"\ntotal {time.monotonic() - started:.0f} s; crawls {verdict}")
    write_json(args.json, out, indent=1, newline=False)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
