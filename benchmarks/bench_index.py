"""Benchmark recrawler's knowledge base: what a small docs edit re-embeds, and search latency at 50k chunks.

Usage: ``python -m benchmarks.bench_index [--pages N] [--repeat N] [--keep] [--json PATH]
[--skip-embed-ratio] [--skip-search]`` (see README.md). Progress goes to stderr, results to stdout.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import random
import re
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if not __package__:  # run as a script: python benchmarks/bench_index.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.lib.nginx import NginxServer
from benchmarks.lib.results import add_json_option, fmt, meets, ratio, write_json
from benchmarks.lib.runners import (
    RunResult,
    crawl,
    format_table,
    git_state,
    peak_rss_bytes,
    proc_status_mib,
    recrawler_cli,
    run_process,
    scrapy_env,
)
from benchmarks.lib.sites import GLUE, VERBS, WORDS, generate_site

if TYPE_CHECKING:
    from collections.abc import Sequence

    from benchmarks.lib.sites import PageSpec

SCRIPT = Path(__file__).resolve()
PROJECT_DIR = SCRIPT.parent.parent

CHANGE_SHARE = 0.05  # share of pages that get one sentence rewritten before run 2
TARGET_EMBED_RATIO = 0.02  # texts embedded by run 2a / texts a full re-embed would send
MIN_SEARCH_CHUNKS = 50_000  # published chunks the search benchmark needs
SEARCH_K = 5

# Short questions a support bot gets, filled from the generated pages' vocabulary.
QUESTION_TEMPLATES = (
    "how do I {verb} the {noun} {noun2}?",
    "why does {noun} {verb} fail with a {noun2} error?",
    "what is the default {noun} for the {noun2}?",
    "can I {verb} a {noun} without a {noun2}?",
    "{verb} {noun} {noun2} after upgrade",
    "where is the {noun} {noun2} setting?",
    "{noun} {noun2} timeout",
)

_PARAGRAPH = re.compile(r"<p(?: class=\"lead\")?>(.*?)</p>", re.S)
_SENTENCE_GAP = re.compile(r"(?<=[.?!]) ")


# ---------------------------------------------------------------------------------------------
# Generated content
# ---------------------------------------------------------------------------------------------


def plain_sentence(rng: random.Random, lo: int = 8, hi: int = 18) -> str:
    """A sentence of site vocabulary (no markup), capitalised, ending with a full stop."""
    pools = (WORDS, WORDS, GLUE, GLUE, VERBS)
    text = " ".join(rng.choice(rng.choice(pools)) for _ in range(rng.randint(lo, hi)))
    return text[0].upper() + text[1:] + "."


def question(rng: random.Random) -> str:
    """A short, realistic question built from the site's vocabulary."""
    return rng.choice(QUESTION_TEMPLATES).format(
        verb=rng.choice(VERBS), noun=rng.choice(WORDS), noun2=rng.choice(WORDS)
    )


@dataclass(frozen=True, slots=True)
class SentenceChange:
    """One page whose file got one sentence rewritten."""

    path: str
    old: str
    new: str


def change_one_sentence(file: Path, rng: random.Random) -> tuple[str, str] | None:
    """Replace one sentence of one ``<p>`` inside ``<main>`` of *file*; every other byte stays.

    Returns ``(old, new)``, or None when the page has no paragraph to edit. The rewrite gives the
    file a new mtime and size, so nginx serves a new ETag and Last-Modified.
    """
    html = file.read_text(encoding="utf-8")
    start, end = html.find("<main"), html.find("</main>")
    if start < 0 or end < 0:
        return None
    candidates: list[tuple[int, int, list[str], int]] = []  # (inner start, inner end, sentences, i)
    for m in _PARAGRAPH.finditer(html, start, end):
        sentences = _SENTENCE_GAP.split(m.group(1))
        if " ".join(sentences) != m.group(1):
            continue  # not rebuildable byte for byte: leave it alone
        candidates.extend((m.start(1), m.end(1), sentences, i) for i in range(len(sentences)))
    if not candidates:
        return None
    inner_start, inner_end, sentences, i = rng.choice(candidates)
    old = sentences[i]
    new = plain_sentence(rng)
    while new == old:
        new = plain_sentence(rng)
    sentences = [*sentences[:i], new, *sentences[i + 1 :]]
    file.write_text(html[:inner_start] + " ".join(sentences) + html[inner_end:], encoding="utf-8")
    now = time.time()
    os.utime(file, (now, now))
    return old, new


def change_pages(root: Path, specs: Sequence[PageSpec], share: float, seed: int) -> list[SentenceChange]:
    """Rewrite one sentence in ``share`` of the pages, chosen deterministically from *seed*."""
    rng = random.Random(f"{seed}:change")
    count = max(1, round(len(specs) * share))
    chosen = sorted(rng.sample(range(len(specs)), min(count, len(specs))))
    changes = []
    for index in chosen:
        spec = specs[index]
        result = change_one_sentence(root / spec.path.lstrip("/"), random.Random(f"{seed}:change:{index}"))
        if result is not None:
            changes.append(SentenceChange(spec.path, *result))
    return changes


def generate_search_site(root: Path, base_url: str, pages: int, sections: int, seed: int) -> list[str]:
    """Pages with a lead paragraph and *sections* short ``h2`` sections each (one chunk per heading).

    Returns the page paths; writes ``sitemap.xml`` and ``robots.txt`` too.
    """
    rng = random.Random(f"{seed}:kb")
    paths = []
    for i in range(pages):
        title = " ".join(w.capitalize() for w in (rng.choice(WORDS) for _ in range(rng.randint(2, 4))))
        path = f"/kb/{rng.choice(VERBS)}/{re.sub(r'[^a-z0-9]+', '-', title.lower())}-{i:05d}.html"
        body = [f"<h1>{escape(title)}</h1>", f'<p class="lead">{plain_sentence(rng)}</p>']
        for n in range(1, sections + 1):
            heading = " ".join(w.capitalize() for w in (rng.choice(WORDS) for _ in range(rng.randint(2, 3))))
            text = " ".join(plain_sentence(rng, 6, 14) for _ in range(rng.randint(1, 2)))
            body.append(f'<section><h2 id="s{n}">{escape(heading)}</h2><p>{text}</p></section>')
        html = (
            '<!DOCTYPE html>\n<html lang="en">\n<head><meta charset="utf-8">'
            f"<title>{escape(title)} | Acme KB</title></head>\n<body>\n"
            '<header class="site-header"><a href="/">Acme KB</a></header>\n<main>\n'
            + "\n".join(body)
            + "\n</main>\n<footer>&copy; 2025 Acme, Inc.</footer>\n</body>\n</html>\n"
        )
        file = root / path.lstrip("/")
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(html, encoding="utf-8")
        paths.append(path)
    entries = "".join(f"<url><loc>{base_url}{p}</loc></url>\n" for p in paths)
    (root / "sitemap.xml").write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n{entries}</urlset>\n',
        encoding="utf-8",
    )
    (root / "robots.txt").write_text("User-agent: *\nAllow: /\n", encoding="utf-8")
    return paths


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def copy_db(src: Path, dst: Path) -> None:
    """Copy a SQLite database whose writer has exited (it checkpoints on close; a WAL is copied too)."""
    shutil.copyfile(src, dst)
    wal = src.with_name(src.name + "-wal")
    if wal.exists() and wal.stat().st_size:
        shutil.copyfile(wal, dst.with_name(dst.name + "-wal"))


def summary(run: RunResult) -> str:
    """The run's recrawler summary line, without the log prefix."""
    line = run.summary_line or ""
    return line[line.find("crawled:") :] if "crawled:" in line else "(no line containing crawled:)"


def read_report(path: Path) -> dict[str, Any] | None:
    """The JSON run report, or None when absent or unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def median(values: Sequence[float]) -> float | None:
    """Median, or None for no values."""
    return statistics.median(values) if values else None


def _embedding_hashes(db: Path) -> set[str]:
    conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return {r[0] for r in conn.execute("SELECT text_hash FROM embeddings")}
    finally:
        conn.close()


@dataclass(slots=True)
class PageChunks:
    """Published chunks of one page: (chunk_index, chunk_hash, section) in order.

    A section is the chunk's URL with its heading's anchor plus its heading path: two sections
    of a page may share a heading title, never an anchor.
    """

    rows: list[tuple[int, str, str]] = field(default_factory=list)


def page_chunks(db: Path, paths: set[str] | None = None) -> tuple[int, int, dict[str, PageChunks]]:
    """Count published chunks with ``kb.chunks()``; keep those of pages at *paths*.

    Returns (chunks, distinct chunk texts, {path: PageChunks}).
    """
    from recrawler.kb.reader import open_kb

    total = 0
    hashes: set[str] = set()
    kept: dict[str, PageChunks] = {}
    with open_kb(f"sqlite:///{db}") as kb:
        for chunk in kb.chunks():
            total += 1
            hashes.add(chunk.chunk_hash)
            path = urlsplit(chunk.url).path
            if paths is None or path in paths:
                kept.setdefault(path, PageChunks()).rows.append(
                    (chunk.chunk_index, chunk.chunk_hash, f"{chunk.url} {chunk.heading}")
                )
    return total, len(hashes), kept


def diagnose(
    before_db: Path, after_db: Path, changed: set[str], after: dict[str, PageChunks]
) -> dict[str, Any]:
    """Why run 2 embedded what it did: per changed page, chunk texts the run-1 cache lacked."""
    _, _, before = page_chunks(before_db, changed)
    cached = _embedding_hashes(before_db)
    per_page: dict[str, int] = {}
    multi_same_section = 0
    multi_count_changed = 0
    examples: list[dict[str, Any]] = []
    for path in sorted(changed):
        new_rows = after.get(path, PageChunks()).rows
        old_rows = before.get(path, PageChunks()).rows
        fresh = [r for r in new_rows if r[1] not in cached]
        per_page[path] = len(fresh)
        if len(fresh) > 1:
            if len({r[2] for r in fresh}) == 1:
                multi_same_section += 1
            if len(new_rows) != len(old_rows):
                multi_count_changed += 1
            if len(examples) < 3:
                examples.append(
                    {
                        "path": path,
                        "chunks_before": len(old_rows),
                        "chunks_after": len(new_rows),
                        "new_chunk_indexes": [r[0] for r in fresh],
                        "sections": sorted({r[2].split("#", 1)[-1] for r in fresh}),
                    }
                )
    # chunks of the section that holds a fresh chunk, per page: >1 means that section was split
    section_pieces = Counter(
        sum(1 for r in after[p].rows if r[2] == section)
        for p, n in per_page.items()
        if n and p in after
        for section in {r[2] for r in after[p].rows if r[1] not in cached}
    )
    return {
        "fresh_texts_total": sum(per_page.values()),
        "fresh_texts_per_page": dict(sorted(Counter(per_page.values()).items())),
        "pages_multi_fresh": sum(1 for n in per_page.values() if n > 1),
        "pages_multi_fresh_one_section": multi_same_section,
        "pages_multi_fresh_chunk_count_changed": multi_count_changed,
        "pieces_of_changed_sections": dict(sorted(section_pieces.items())),
        "embeddings_before": len(cached),
        "embeddings_after": len(_embedding_hashes(after_db)),
        "examples": examples,
    }


def clean_env() -> dict[str, str]:
    """Our environment without Scrapy project overrides or RECRAWLER_* settings."""
    return scrapy_env(keep_recrawler=False)


def docs_cmd(sitemap_url: str, db: Path, report: Path, *extra: str) -> list[str]:
    """``python -m scrapy crawl docs`` into *db*, writing *report*."""
    cmd = [sys.executable, "-m", "scrapy", "crawl", "docs", "-a", f"sitemap_url={sitemap_url}"]
    cmd += ["-s", f"RECRAWLER_DB_URI=sqlite:///{db}", "-s", f"RECRAWLER_REPORT_FILE={report}"]
    # every page checked on every run (runs seconds apart would find nothing due), no audit
    # re-fetches: the knowledge-base cost alone
    cmd += ["-s", "LOG_LEVEL=INFO", "-s", "RECRAWLER_SCHEDULE=all", "-s", "RECRAWLER_AUDIT_SAMPLE=0"]
    for setting in extra:
        cmd += ["-s", setting]
    return cmd


def provenance(project_dir: Path) -> str:
    """Which recrawler the runs use, and whether its tree has uncommitted edits (others edit it)."""
    spec = importlib.util.find_spec("recrawler")
    origin = Path(spec.origin).parent if spec and spec.origin else "?"
    git = git_state(project_dir)
    if git is None:
        state = "not a git checkout"
    else:
        head, edits = git
        state = head + (f", {edits} uncommitted paths under recrawler/" if edits else ", clean")
    return f"recrawler: imported from {origin}; crawls run in {project_dir} (git {state})"


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
    worker_cmd = [sys.executable, str(SCRIPT), "--search-worker", str(db), "--worker-out", str(out)]
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
