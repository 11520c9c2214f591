"""The index benchmark's site and readings: one-sentence edits, a site of questions to search,
the run reports and each page's chunks."""

from __future__ import annotations

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
import time
from collections import Counter
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from benchmarks.lib.runners import (
    RunResult,
    git_state,
    scrapy_env,
)
from benchmarks.lib.sites import GLUE, VERBS, WORDS

if TYPE_CHECKING:
    from collections.abc import Sequence

    from benchmarks.lib.sites import PageSpec


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
