"""Benchmark recrawler against a bare SitemapSpider on a generated docs site served by nginx.

Usage: ``python -m benchmarks.bench_crawl [--pages N] [--keep] [--json PATH]`` (see README.md).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if __package__:
    from .nginx import NginxServer
else:  # run as a script: python benchmarks/bench_crawl.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks.nginx import NginxServer

if TYPE_CHECKING:
    from collections.abc import Sequence

    from benchmarks.nginx import AccessLogEntry

HERE = Path(__file__).resolve().parent
PROJECT_DIR = HERE.parent
BARE_SPIDER = HERE / "bare_spider.py"

PAGE_TARGET_BYTES = 8700  # mean page size; each page lands within +-500 bytes of it
TARGET_BYTES_RATIO = 0.02  # (a) run C body bytes / run B body bytes
TARGET_WALL_RATIO = 1.5  # (b) run B wall time / run A wall time

# Settings whose values decide throughput; runs A and B should agree on all of them.
THROUGHPUT_KEYS = (
    "CONCURRENT_REQUESTS",
    "CONCURRENT_REQUESTS_PER_DOMAIN",
    "CONCURRENT_REQUESTS_PER_IP",
    "DOWNLOAD_DELAY",
    "RANDOMIZE_DOWNLOAD_DELAY",
    "AUTOTHROTTLE_ENABLED",
    "HTTPCACHE_ENABLED",
    "ROBOTSTXT_OBEY",
    "LOG_LEVEL",
    "TELNETCONSOLE_ENABLED",
    "TWISTED_REACTOR",
)

# ---------------------------------------------------------------------------------------------
# Site generation
# ---------------------------------------------------------------------------------------------

SECTIONS = (
    "getting-started",
    "installation",
    "guides",
    "tutorials",
    "concepts",
    "configuration",
    "reference",
    "api",
    "cli",
    "integrations",
    "troubleshooting",
    "release-notes",
)

_WORDS_TEXT = (
    "access account action adapter agent alert api application archive argument attribute "
    "authentication authorization backend backup batch binary block boolean branch broker buffer "
    "build bundle cache callback certificate channel checksum client cluster column command "
    "commit component compression config connection consumer container context controller "
    "credential cursor daemon dashboard database dataset deadline default dependency deployment "
    "descriptor directory domain driver encoding endpoint engine environment error event "
    "exception export extension feature field filter fingerprint flag format framework function "
    "gateway handler hash header hook host identifier image index input instance integration "
    "interface job key latency layer library limit listener load lock log manifest mapping "
    "message metadata method metric middleware migration mode model module monitor namespace "
    "network node object operation option output package page parameter parser partition path "
    "payload permission pipeline plugin policy pool port process producer profile project "
    "protocol provider proxy query queue quota record redirect region registry release replica "
    "repository request resource response retry role route rule runtime schedule schema scope "
    "script secret selector server service session setting shard signal snapshot socket source "
    "spider stage state storage stream subscription table tag task template tenant thread "
    "timeout token topic trace transaction trigger type upload user validator value variable "
    "version volume webhook worker workflow workspace zone"
)
WORDS = _WORDS_TEXT.split()
_VERBS_TEXT = (
    "configure create delete deploy enable disable fetch install list load merge migrate "
    "monitor parse publish read register reload remove restart restore return rotate run scale "
    "send set start stop store sync update upgrade validate verify watch write"
)
VERBS = _VERBS_TEXT.split()
_GLUE_TEXT = (
    "the a an this each every your its our when if then so and or but with without for from "
    "to in on by after before during until unless because which that"
)
GLUE = _GLUE_TEXT.split()
IDENTS = (
    "client",
    "config",
    "session",
    "store",
    "pipeline",
    "worker",
    "request",
    "result",
    "index",
)


def _words(rng: random.Random, n: int) -> list[str]:
    pools = (WORDS, WORDS, GLUE, GLUE, VERBS)
    return [rng.choice(rng.choice(pools)) for _ in range(n)]


def _sentence(rng: random.Random) -> str:
    words = _words(rng, rng.randint(8, 20))
    if rng.random() < 0.25:
        i = rng.randrange(len(words))
        words[i] = f"<code>{rng.choice(IDENTS)}.{rng.choice(VERBS)}()</code>"
    text = " ".join(words)
    return text[0].upper() + text[1:] + rng.choice("........?")


def _paragraph(rng: random.Random) -> str:
    return "<p>" + " ".join(_sentence(rng) for _ in range(rng.randint(3, 6))) + "</p>"


def _title(rng: random.Random, n: int) -> str:
    return " ".join(w.capitalize() for w in _words(rng, n) if w not in GLUE) or "Overview"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "page"


def _code_block(rng: random.Random) -> str:
    ident = rng.choice(IDENTS)
    lines = [f"from acme import {ident.capitalize()}", ""]
    lines.append(f"{ident} = {ident.capitalize()}(timeout={rng.randint(1, 60)})")
    lines.extend(
        f"{ident}.{rng.choice(VERBS)}({rng.choice(WORDS)!r}, {rng.choice(WORDS)}={rng.randint(0, 999)})"
        for _ in range(rng.randint(4, 9))
    )
    lines.append(f"print({ident}.{rng.choice(VERBS)}())")
    code = escape("\n".join(lines), quote=False)
    return f'<pre><code class="language-python">{code}</code></pre>'


def _list(rng: random.Random) -> str:
    tag = rng.choice(("ul", "ol"))
    items = "".join(
        f"<li><strong>{_title(rng, 2)}</strong>: {' '.join(_words(rng, rng.randint(6, 14)))}.</li>"
        for _ in range(rng.randint(3, 7))
    )
    return f"<{tag}>{items}</{tag}>"


@dataclass(frozen=True, slots=True)
class PageSpec:
    """One generated page: its path on the site, its title and its lastmod."""

    index: int
    path: str
    section: str
    title: str
    lastmod: dt.datetime


def plan_site(pages: int, seed: int) -> list[PageSpec]:
    """Decide every page's path, title and lastmod (deterministic for a seed)."""
    rng = random.Random(f"{seed}:plan")
    base = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    specs = []
    for i in range(pages):
        section = SECTIONS[i % len(SECTIONS)]
        title = _title(rng, rng.randint(2, 5))
        lastmod = base + dt.timedelta(seconds=rng.randrange(600 * 86400))
        path = f"/docs/{section}/{_slug(title)}-{i:05d}.html"
        specs.append(PageSpec(i, path, section, title, lastmod))
    return specs


def render_page(spec: PageSpec, specs: Sequence[PageSpec], base_url: str, seed: int) -> str:
    """Render one docs page of about PAGE_TARGET_BYTES of realistic HTML."""
    rng = random.Random(f"{seed}:page:{spec.index}")
    target = PAGE_TARGET_BYTES + rng.randint(-500, 500)
    section_title = spec.section.replace("-", " ").title()
    top_nav = "".join(f'<li><a href="/docs/{s}/">{s.replace("-", " ").title()}</a></li>' for s in SECTIONS)
    siblings = list(specs[spec.index % len(SECTIONS) :: len(SECTIONS)])
    pos = spec.index // len(SECTIONS)
    near = siblings[max(0, pos - 6) : pos + 7]
    aside = "".join(
        f'<li{" class=active" if s is spec else ""}><a href="{s.path}">{escape(s.title)}</a></li>'
        for s in near
    )
    head = (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{escape(spec.title)} | {section_title} | Acme Docs</title>\n"
        f'<meta name="description" content="{escape(" ".join(_words(rng, 18)))}.">\n'
        f'<link rel="canonical" href="{base_url}{spec.path}">\n'
        '<link rel="stylesheet" href="/static/site.css">\n</head>\n<body>\n'
        '<header class="site-header">\n<a class="logo" href="/">Acme Docs</a>\n'
        f'<nav class="top-nav" aria-label="Sections"><ul>{top_nav}</ul></nav>\n'
        '<form class="search" action="/search" role="search">'
        '<input type="search" name="q" placeholder="Search the docs"></form>\n</header>\n'
        '<div class="layout">\n'
        f'<aside class="sidebar"><h2>{section_title}</h2><ul>{aside}</ul></aside>\n'
        '<main id="content">\n'
        f'<nav class="breadcrumbs"><a href="/">Docs</a> / <a href="/docs/{spec.section}/">'
        f"{section_title}</a></nav>\n"
        f"<h1>{escape(spec.title)}</h1>\n"
        f'<p class="lead">{_sentence(rng)} {_sentence(rng)}</p>\n'
    )
    prev_next = []
    if pos > 0:
        prev_next.append(f'<a rel="prev" href="{siblings[pos - 1].path}">Previous</a>')
    if pos + 1 < len(siblings):
        prev_next.append(f'<a rel="next" href="{siblings[pos + 1].path}">Next</a>')
    foot = (
        "\n</main>\n</div>\n"
        f'<footer class="site-footer">\n<nav class="pager">{" ".join(prev_next)}</nav>\n'
        '<ul class="footer-links"><li><a href="/about/">About</a></li>'
        '<li><a href="/privacy/">Privacy</a></li><li><a href="/status/">Status</a></li>'
        '<li><a href="https://github.com/acme/docs">Edit on GitHub</a></li></ul>\n'
        f"<p>Last updated {spec.lastmod:%B %d, %Y}. &copy; 2025 Acme, Inc.</p>\n</footer>\n"
        '<script src="/static/site.js" defer></script>\n</body>\n</html>\n'
    )
    body: list[str] = []
    size = len(head) + len(foot)
    n = 0
    while size < target - 300:
        n += 1
        heading = _title(rng, rng.randint(2, 4))
        parts = [f'<section id="{_slug(heading)}-{n}">', f"<h2>{heading}</h2>"]
        parts.append(_paragraph(rng))
        if n == 2:
            parts.append(_code_block(rng))
        elif rng.random() < 0.5:
            parts.append(_list(rng))
        parts.append("</section>")
        chunk = "\n".join(parts) + "\n"
        size += len(chunk)
        body.append(chunk)
    # Trim or pad the last section's tail to land near the target size.
    last = body[-1].removesuffix("</section>\n") if body else ""
    while size > target + 200 and len(last) > 400 and "</p>" in last:
        cut = last.rfind(". ", 0, last.rfind("</p>"))
        if cut < 0:
            break
        tail = last.rfind("</p>")
        size -= tail - cut - 1
        last = last[: cut + 1] + last[tail:]
    if body:
        body[-1] = last + "</section>\n"
    return head + "".join(body) + foot


def generate_site(root: Path, base_url: str, pages: int, seed: int) -> list[PageSpec]:
    """Write pages, sitemap.xml and robots.txt under root; page mtimes equal their lastmod."""
    specs = plan_site(pages, seed)
    for spec in specs:
        path = root / spec.path.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_page(spec, specs, base_url, seed), encoding="utf-8")
        ts = spec.lastmod.timestamp()
        os.utime(path, (ts, ts))
    entries = "".join(
        f"<url><loc>{base_url}{s.path}</loc><lastmod>{s.lastmod:%Y-%m-%dT%H:%M:%S+00:00}</lastmod></url>\n"
        for s in specs
    )
    (root / "sitemap.xml").write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
        f"{entries}</urlset>\n",
        encoding="utf-8",
    )
    (root / "robots.txt").write_text("User-agent: *\nAllow: /\n", encoding="utf-8")
    return specs


# ---------------------------------------------------------------------------------------------
# Running crawls
# ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class RunResult:
    """What one crawl process cost and what the server sent it."""

    name: str
    label: str
    command: list[str]
    log_file: str
    returncode: int = 0
    timed_out: bool = False
    wall_s: float = 0.0
    peak_rss_mib: float = 0.0
    requests: int = 0
    pages: int = 0
    status_200: int = 0
    status_304: int = 0
    status_other: int = 0
    body_bytes: int = 0
    page_body_bytes: int = 0
    bytes_sent: int = 0
    conditional_requests: int = 0
    finish_reason: str | None = None
    elapsed_time_seconds: float | None = None
    summary_line: str | None = None
    settings: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """The process exited 0 within the timeout."""
        return self.returncode == 0 and not self.timed_out

    @property
    def pages_per_s(self) -> float:
        """Page requests answered per second of wall time."""
        return self.pages / self.wall_s if self.wall_s else 0.0


def run_process(
    cmd: list[str], *, cwd: Path, env: dict[str, str], log_path: Path, timeout: float
) -> tuple[int, bool, float, int]:
    """Run cmd, output to log_path; return (exit code, timed out, wall s, peak RSS KiB).

    os.wait4 reaps the child and gives its own rusage, so ru_maxrss is this crawl's peak
    (KiB on Linux) with no extra tools and no mixing with earlier runs.
    """
    with log_path.open("wb") as log:
        start = time.monotonic()
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )
        timed_out = threading.Event()

        def kill() -> None:
            timed_out.set()
            proc.kill()

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        wall = time.monotonic() - start
        # Reaped by wait4: tell Popen so it neither waits again nor warns.
        proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, timed_out.is_set(), wall, usage.ru_maxrss


_STAT_FINISH = re.compile(r"'finish_reason': '([^']*)'")
_STAT_ELAPSED = re.compile(r"'elapsed_time_seconds': ([0-9.]+)")
_OVERRIDDEN = re.compile(r"Overridden settings:\s*\n?(\{.*?\})\s*\n(?=\d{4}-\d\d-\d\d |\Z)", re.S)


def parse_log(text: str, result: RunResult) -> None:
    """Fill finish reason, Scrapy's elapsed time, summary line and throughput settings."""
    if m := _STAT_FINISH.search(text):
        result.finish_reason = m.group(1)
    if m := _STAT_ELAPSED.search(text):
        result.elapsed_time_seconds = float(m.group(1))
    summaries = [line for line in text.splitlines() if "crawled:" in line]
    if summaries:
        result.summary_line = summaries[-1].strip()
    if m := _OVERRIDDEN.search(text):
        block = m.group(1)
        for key in THROUGHPUT_KEYS:
            if km := re.search(rf"'{key}': ('[^']*'|[^,}}\n]+)", block):
                result.settings[key] = km.group(1).strip().strip("'")


def count_requests(entries: Sequence[AccessLogEntry], page_paths: set[str], r: RunResult) -> None:
    """Count what nginx served during one run."""
    for e in entries:
        r.requests += 1
        r.body_bytes += e.body_bytes_sent
        r.bytes_sent += e.bytes_sent
        if e.status == 200:
            r.status_200 += 1
        elif e.status == 304:
            r.status_304 += 1
        else:
            r.status_other += 1
        if e.if_none_match or e.if_modified_since:
            r.conditional_requests += 1
        if urlsplit(e.uri).path in page_paths:
            r.pages += 1
            r.page_body_bytes += e.body_bytes_sent


def crawl(
    name: str,
    label: str,
    cmd: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    workdir: Path,
    server: NginxServer,
    page_paths: set[str],
    timeout: float,
) -> RunResult:
    """Run one crawl with a fresh access log and measure it."""
    log_path = workdir / f"run_{name}.log"
    result = RunResult(name=name, label=label, command=cmd, log_file=str(log_path))
    server.truncate_access_log()
    print(f"run {name}: {label} ...", file=sys.stderr, flush=True)
    rc, timed_out, wall, maxrss_kib = run_process(cmd, cwd=cwd, env=env, log_path=log_path, timeout=timeout)
    result.returncode, result.timed_out, result.wall_s = rc, timed_out, wall
    result.peak_rss_mib = maxrss_kib / 1024
    count_requests(server.read_access_log(), page_paths, result)
    parse_log(log_path.read_text(encoding="utf-8", errors="replace"), result)
    if not result.ok:
        tail = "\n".join(log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-25:])
        why = "timed out" if timed_out else f"exited {rc}"
        print(f"run {name} {why}; last log lines ({log_path}):\n{tail}", file=sys.stderr)
    return result


# ---------------------------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------------------------


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def format_table(runs: Sequence[RunResult]) -> str:
    """The side-by-side table of all runs."""
    header = (
        "run",
        "pages",
        "requests",
        "200s",
        "304s",
        "other",
        "body bytes",
        "wall s",
        "crawl s",
        "pages/s",
        "peak RSS MiB",
        "exit",
    )
    rows = [header]
    rows.extend(
        (
            f"{r.name} {r.label}",
            str(r.pages),
            str(r.requests),
            str(r.status_200),
            str(r.status_304),
            str(r.status_other),
            f"{r.body_bytes:,}",
            f"{r.wall_s:.2f}",
            "-" if r.elapsed_time_seconds is None else f"{r.elapsed_time_seconds:.2f}",
            f"{r.pages_per_s:.0f}",
            f"{r.peak_rss_mib:.1f}",
            "timeout" if r.timed_out else str(r.returncode),
        )
        for r in runs
    )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for n, row in enumerate(rows):
        cells = [
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _check(value: float | None, target: float) -> str:
    if value is None:
        return "n/a"
    return "OK" if value <= target else "MISSED"


def compute_ratios(by_name: dict[str, RunResult]) -> dict[str, Any]:
    """The four headline numbers, each None when its runs are missing or failed."""
    a, b, c = (by_name.get(k) for k in "ABC")
    b_ok = b is not None and b.ok
    c_ok = c is not None and c.ok
    return {
        "bytes_C_over_B": _ratio(c.body_bytes, b.body_bytes) if b and c and b_ok and c_ok else None,
        "page_bytes_C_over_B": (
            _ratio(c.page_body_bytes, b.page_body_bytes) if b and c and b_ok and c_ok else None
        ),
        "wall_B_over_A": _ratio(b.wall_s, a.wall_s) if a and b and a.ok and b_ok else None,
        "crawl_B_over_A": (
            _ratio(b.elapsed_time_seconds, a.elapsed_time_seconds)
            if a and b and a.ok and b_ok and a.elapsed_time_seconds and b.elapsed_time_seconds
            else None
        ),
        "peak_rss_B_mib": b.peak_rss_mib if b and b_ok else None,
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


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def print_report(
    runs: Sequence[RunResult], ratios: dict[str, Any], reports: dict[str, Any], pages: int
) -> None:
    """Print the table, ratios against targets, settings check and recrawler's own counts."""
    print()
    print(f"site: {pages} pages of ~{PAGE_TARGET_BYTES / 1000:.1f} KB + sitemap.xml, nginx")
    print(format_table(runs))
    print()
    print("pages = page URLs requested; requests include robots.txt and sitemap.xml;")
    print("wall s = process start to exit; crawl s = Scrapy's elapsed_time_seconds stat.")
    rounds = max(sum(1 for r in runs if r.name == n) for n in "ABC" if any(r.name == n for r in runs))
    print(f"ratios below use each run's median over {rounds} interleaved round(s).")
    print()
    rb, rw = ratios["bytes_C_over_B"], ratios["wall_B_over_A"]
    print(
        f"(a) body bytes C / B          {_fmt(rb, '.4f'):>8}   target <= {TARGET_BYTES_RATIO}"
        f"  {_check(rb, TARGET_BYTES_RATIO)}"
        f"   (pages only: {_fmt(ratios['page_bytes_C_over_B'], '.4f')})"
    )
    print(
        f"(b) wall time B / A           {_fmt(rw, '.3f'):>8}   target <= {TARGET_WALL_RATIO}"
        f"  {_check(rw, TARGET_WALL_RATIO)}"
        f"   (crawl time only: {_fmt(ratios['crawl_B_over_A'], '.3f')})"
    )
    print(f"(c) peak RSS of B (MiB)       {_fmt(ratios['peak_rss_B_mib'], '.1f'):>8}")
    print(
        f"(d) pages/s B, C              {_fmt(ratios['pages_per_s_B'], '.0f'):>8}"
        f", {_fmt(ratios['pages_per_s_C'], '.0f')}"
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
    p.add_argument("--json", type=Path, metavar="PATH", help="also write results as JSON")
    p.add_argument("--seed", type=int, default=1, help="site generator seed (default 1)")
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
    p.add_argument("--project-dir", type=Path, default=PROJECT_DIR, help="recrawler project (scrapy.cfg)")
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
    try:
        server.start()
        t0 = time.monotonic()
        specs = generate_site(site, server.url, args.pages, args.seed)
        page_paths = {s.path for s in specs}
        total = sum((site / s.path.lstrip("/")).stat().st_size for s in specs)
        print(
            f"generated {len(specs)} pages ({total / len(specs):.0f} B mean) in "
            f"{time.monotonic() - t0:.1f}s; nginx at {server.url}; workdir {workdir}",
            file=sys.stderr,
        )
        sitemap_url = f"{server.url}/sitemap.xml"
        py = sys.executable

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

        def recrawl(name: str, label: str, report: str, db: str = "state.db") -> RunResult:
            cmd = [py, "-m", "scrapy", "crawl", "docs", "-a", f"sitemap_url={sitemap_url}"]
            cmd += ["-s", f"RECRAWLER_DB_URI=sqlite:///{workdir / db}"]
            cmd += ["-s", f"RECRAWLER_REPORT_FILE={workdir / report}", "-s", "LOG_LEVEL=INFO"]
            # every page each run, no audit: C measures a full conditional recrawl, not the schedule
            cmd += ["-s", "RECRAWLER_SCHEDULE=all", "-s", "RECRAWLER_AUDIT_SAMPLE=0"]
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
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    ratios = compute_ratios(median_runs(runs))
    print_report(runs, ratios, reports, args.pages)
    if args.keep:
        print(f"\nkept {workdir}")
    if args.json:
        payload = {
            "pages": args.pages,
            "seed": args.seed,
            "targets": {"bytes_C_over_B": TARGET_BYTES_RATIO, "wall_B_over_A": TARGET_WALL_RATIO},
            "ratios": ratios,
            "runs": [asdict(r) | {"ok": r.ok, "pages_per_s": r.pages_per_s} for r in runs],
            "reports": reports,
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return 0 if all(r.ok for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
