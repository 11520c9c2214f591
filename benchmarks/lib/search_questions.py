"""The search benchmark's questions part: a real docs site crawled with each embedder, then
labelled questions asked in each mode (recall@5, MRR)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.lib.results import fmt, table
from benchmarks.lib.runners import recrawler_cli, run_process, scrapy_env
from benchmarks.lib.search_scale import K, log

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

QUESTIONS = Path(__file__).resolve().parents[1] / "data" / "questions.tsv"
MODES = ("vector", "keyword", "hybrid")
TEMPLATES = (
    "how does {h} work?",
    "tell me about {h}",
    "what is {h}?",
    "{h} in meson",
    "where is {h} explained?",
)


def make_questions(tarball: Path, count: int = 150) -> list[tuple[str, str, str]]:
    """(question, answer page, the heading it comes from): a heading of the page's main text
    (``#page-description``) that no other page has, of two words or more, turned into a question
    by a template; at most two per page, pages in a seeded order (release notes last)."""
    import hashlib
    import random
    import tarfile

    import lxml.html

    pages: dict[str, list[str]] = {}
    with tarfile.open(tarball) as tar:
        for m in sorted(tar.getmembers(), key=lambda m: m.name):
            if not (m.isfile() and m.name.endswith(".html")):
                continue
            root = lxml.html.fromstring(tar.extractfile(m).read())  # type: ignore[union-attr]
            main = root.xpath('//div[@id="page-description"]')
            if main:
                pages[Path(m.name).name] = [
                    " ".join(h.text_content().split()) for h in main[0].xpath(".//h1|.//h2|.//h3")
                ]
    seen: dict[str, int] = {}
    for heads in pages.values():
        for h in {h.lower() for h in heads}:
            seen[h] = seen.get(h, 0) + 1
    order = sorted(
        pages, key=lambda p: (p.startswith("Release-notes"), hashlib.sha256(p.encode()).hexdigest())
    )
    rng = random.Random(1)
    out: list[tuple[str, str, str]] = []
    for name in order:
        usable = [h for h in pages[name] if seen[h.lower()] == 1 and len(h.split()) >= 2]
        for h in rng.sample(usable, min(2, len(usable))):
            text = h.rstrip(".:?!").lower()
            out.append((rng.choice(TEMPLATES).format(h=text), name, h))
        if len(out) >= count:
            break
    return out[:count]


def load_questions() -> list[tuple[str, str]]:
    """(question, answer page file name) pairs of the labelled set."""
    out = []
    for line in QUESTIONS.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            question, page, *_ = line.split("\t")
            out.append((question, page))
    return out


def part_questions(args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    from benchmarks.lib.nginx import NginxServer
    from benchmarks.lib.sites import corpus_site

    questions = load_questions()
    rows: list[dict[str, Any]] = []
    root = tmp / "site"
    root.mkdir()
    with NginxServer(root, prefix=tmp / "nginx") as server:
        corpus_site(root, server.url, args.corpus_pages, args.corpus)
        for spec in args.embedders:
            db = tmp / f"questions-{spec.split(':')[0]}.db"
            log(f"questions: crawling the corpus with {spec} ...")
            cmd = [
                *recrawler_cli(), "crawl", "--db", f"sqlite:///{db}", f"{server.url}/sitemap.xml",
                "-s", f"RECRAWLER_EMBEDDER={spec}", "-s", "LOG_LEVEL=WARNING",
            ]  # fmt: skip
            rc, timed_out, _, _ = run_process(
                cmd,
                cwd=tmp,
                env=scrapy_env(keep_recrawler=False),
                log_path=tmp / "crawl.log",
                timeout=args.timeout,
            )
            if rc != 0 or timed_out:
                log(f"crawl failed ({rc}): {(tmp / 'crawl.log').read_text()[-3000:]}")
                continue
            rows.extend(ask(f"sqlite:///{db}", spec, questions))
    return rows


def ask(uri: str, spec: str, questions: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    from recrawler.kb.reader import open_kb

    rows = []
    with open_kb(uri) as kb:
        for mode in MODES:
            found5 = 0
            rr = 0.0
            for question, page in questions:
                hits = kb.search(question, k=K, mode=mode)
                pages = [Path(h.chunk.key.split("#")[0]).name for h in hits]
                rank = next((i for i, p in enumerate(pages, 1) if p == page), None)
                found5 += rank is not None and rank <= 5
                rr += 1.0 / rank if rank else 0.0
            rows.append(
                {
                    "embedder": spec,
                    "mode": mode,
                    "questions": len(questions),
                    "recall_at_5": found5 / len(questions),
                    "mrr": rr / len(questions),
                }
            )
    return rows


def print_questions(rows: list[dict[str, Any]]) -> None:
    header = ("embedder", "mode", "questions", "recall@5", "MRR@10")
    body = [
        (r["embedder"], r["mode"], str(r["questions"]), fmt(r["recall_at_5"], ".3f"), fmt(r["mrr"], ".3f"))
        for r in rows
    ]
    print("\n## questions: the page that answers each question, among the hits (SQLite)\n")
    print(table(header, body))
