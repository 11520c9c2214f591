"""Shared by the detection benchmark's corpus and synthetic parts: crawl runs, their stats and tables."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from benchmarks.lib.runners import recrawler_cli
from recrawler.urls import KeyMaker

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from benchmarks.lib.nginx import NginxServer


HERE = Path(__file__).resolve().parent


PROJECT_DIR = HERE.parent


VERSIONS = (1, 2, 3, 4)


# Settings every crawl runs with: every listed page checked (the adaptive schedule would find
# nothing due in runs seconds apart), no spike hold (events and counts are the same either way, but
# a held run would stay unpublished); the knowledge base stays on as by default (hashing embedder).
COMMON_SETTINGS = {
    "RECRAWLER_SCHEDULE": "all",
    "RECRAWLER_CHANGE_ALERT_RATIO": "1.0",
    "LOG_LEVEL": "INFO",
    "TELNETCONSOLE_ENABLED": "False",
}


def log(msg: str) -> None:
    """Progress goes to stderr; results go to stdout."""
    print(msg, file=sys.stderr, flush=True)


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


@dataclass(frozen=True, slots=True)
class Config:
    """One detector configuration: a name and the ``-s`` settings that select it."""

    name: str
    what: str
    settings: dict[str, str]
    #: run ``recrawler calibrate`` before every run but the first (synthetic site only)
    calibrate: bool = False
