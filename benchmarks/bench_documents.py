"""What a PDF-heavy docs site costs per page against an HTML one: first runs and all-304 reruns of
both, side by side in one run, plus the readers alone in this process.

Usage: ``python -m benchmarks.bench_documents [--html N] [--pdfs N] [--repeat N] [--json PATH]``.

One nginx serves two sites: ``/html/`` (generated docs pages, as ``bench_crawl`` makes them) and
``/pdf/`` (PDF manuals of about ten A4 pages each: outline, running header and footer, code, made
with reportlab as ``tests/pdfs.py`` makes them). Each round runs, each on a database of its own
where it is a first run: Z (a one-page site: what any run costs before its first page), H1 and P1
(first runs of each site: every document read, chunked and embedded), H2 and P2 (reruns on the
same databases: every document a 304). A run's cost per document or page is its cost less Z's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

if not __package__:  # run as a script: python benchmarks/bench_documents.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.lib.nginx import NginxServer
from benchmarks.lib.results import add_json_option, fmt, ratio, write_json
from benchmarks.lib.runners import RunResult, compile_sources, crawl, format_table, scrapy_env, workdir
from benchmarks.lib.sites import generate_site

if TYPE_CHECKING:
    from collections.abc import Sequence

PROJECT_DIR = Path(__file__).resolve().parent.parent
RUNS = ("Z", "H1", "P1", "H2", "P2")


def pdf_site(root: Path, base_url: str, manuals: int, chapters: int) -> tuple[list[str], int]:
    """Write *manuals* PDF manuals and their sitemap under *root*; their paths and page count."""
    import io

    import pypdf

    from tests import pdfs

    paths, pages = [], 0
    for i in range(manuals):
        name = f"Topic{i:04d}"
        body = pdfs.manual(f"Acme {name}", pdfs.chapters(name, chapters))
        path = f"/manuals/{name.lower()}.pdf"
        (root / "manuals").mkdir(parents=True, exist_ok=True)
        (root / path.lstrip("/")).write_bytes(body)
        paths.append(path)
        pages += len(pypdf.PdfReader(io.BytesIO(body)).pages)
    entries = "".join(f"<url><loc>{base_url}{p}</loc></url>\n" for p in paths)
    (root / "sitemap.xml").write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
        f"{entries}</urlset>\n",
        encoding="utf-8",
    )
    return paths, pages


def readers_alone(site: Path, html: Sequence[str], pdf: Sequence[str], sample: int) -> dict[str, float]:
    """Reading alone, in this process: ms and text characters per document, for a sample of each."""
    from recrawler.extract import ContentExtractor
    from recrawler.pdf import read_pdf

    extractor = ContentExtractor()
    out: dict[str, float] = {}
    for kind, paths, read in (
        ("html", html, lambda b: extractor.extract(b, "utf-8")),
        ("pdf", pdf, lambda b: read_pdf(b)),
    ):
        bodies = [(site / kind / p.lstrip("/")).read_bytes() for p in paths[:sample]]
        read(bodies[0])  # imports, parser set-up
        started = time.process_time()
        chars = sum(len(read(b).text) for b in bodies)
        out[f"{kind}_ms_per_doc"] = (time.process_time() - started) * 1000 / len(bodies)
        out[f"{kind}_text_chars_per_doc"] = chars / len(bodies)
        out[f"{kind}_bytes_per_doc"] = sum(len(b) for b in bodies) / len(bodies)
    return out


def per_unit(
    runs: Sequence[RunResult], docs: dict[str, int], pdf_pages: int, chars: dict[str, float]
) -> dict[str, Any]:
    """Medians per run, less Z's, per document, per page (an HTML page is one page) and per
    1,000 characters of text (*chars*: per document of each kind); None within Z's own cost."""
    med: dict[str, dict[str, float]] = {}
    for name in RUNS:
        group = [r for r in runs if r.name == name and r.ok]
        if group:
            med[name] = {
                "wall_s": statistics.median(r.wall_s for r in group),
                "cpu_s": statistics.median(r.cpu_s for r in group),
                "body_bytes": statistics.median(r.body_bytes for r in group),
            }
    out: dict[str, Any] = {"medians": med}
    z = med.get("Z")
    for name, count in (("H1", docs["html"]), ("H2", docs["html"]), ("P1", docs["pdf"]), ("P2", docs["pdf"])):
        if z is None or name not in med:
            continue
        pages = pdf_pages if name.startswith("P") else count
        text = chars["pdf" if name.startswith("P") else "html"] * count
        for what in ("wall_s", "cpu_s"):
            extra = med[name][what] - z[what]
            # a run that cost no more than Z: nothing measurable per document
            ms = extra * 1000 if extra > 0 else None
            out[f"{name}_{what[:-2]}_ms_per_doc"] = ratio(ms, count)
            out[f"{name}_{what[:-2]}_ms_per_page"] = ratio(ms, pages)
            out[f"{name}_{what[:-2]}_ms_per_1000_chars"] = ratio(ms, text / 1000)
        out[f"{name}_bytes_per_doc"] = med[name]["body_bytes"] / count
    for unit in ("doc", "page", "1000_chars"):
        for what in ("cpu", "wall"):
            for run in ("1", "2"):
                out[f"{what}_per_{unit}_P{run}_over_H{run}"] = ratio(
                    out.get(f"P{run}_{what}_ms_per_{unit}"), out.get(f"H{run}_{what}_ms_per_{unit}")
                )
    return out


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--html", type=int, default=1000, help="HTML pages in the HTML site (default 1000)")
    p.add_argument("--pdfs", type=int, default=100, help="PDF manuals in the PDF site (default 100)")
    p.add_argument("--chapters", type=int, default=4, help="chapters per manual: 4 is about 9 pages")
    p.add_argument("--repeat", type=int, default=3, help="interleaved rounds; medians are used (default 3)")
    p.add_argument("--sample", type=int, default=20, help="documents of each kind read in-process")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per crawl (default 900)")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (sites, logs, databases)")
    p.add_argument("--seed", type=int, default=1, help="HTML site generator seed (default 1)")
    add_json_option(p, "bench_documents")
    args = p.parse_args(argv)
    if min(args.html, args.pdfs, args.repeat, args.chapters, args.sample) < 1:
        p.error("every count must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; exit 1 if a crawl process failed."""
    args = parse_args(argv)
    runs: list[RunResult] = []
    with workdir("bench-documents-", keep=args.keep, log=lambda m: print(m, file=sys.stderr)) as tmp:
        site = tmp / "site"
        for sub in ("html", "pdf", "one"):
            (site / sub).mkdir(parents=True)
        server = NginxServer(site, prefix=tmp / "nginx")
        server.start()
        try:
            t0 = time.monotonic()
            html = [s.path for s in generate_site(site / "html", f"{server.url}/html", args.html, args.seed)]
            pdf, pdf_pages = pdf_site(site / "pdf", f"{server.url}/pdf", args.pdfs, args.chapters)
            one = [s.path for s in generate_site(site / "one", f"{server.url}/one", 1, args.seed)]
            print(
                f"{len(html)} HTML pages, {len(pdf)} PDFs of {pdf_pages} pages in "
                f"{time.monotonic() - t0:.1f}s; nginx at {server.url}",
                file=sys.stderr,
            )
            import recrawler

            compile_sources(Path(recrawler.__file__).parent)
            alone = readers_alone(site, html, pdf, args.sample)
            paths = {
                "Z": {f"/one{p}" for p in one},
                "H": {f"/html{p}" for p in html},
                "P": {f"/pdf{p}" for p in pdf},
            }
            sitemaps = {
                k: f"{server.url}/{d}/sitemap.xml" for k, d in (("Z", "one"), ("H", "html"), ("P", "pdf"))
            }
            for round_no in range(1, args.repeat + 1):
                for name in RUNS:
                    kind = name[0]
                    cmd = [
                        sys.executable,
                        "-m",
                        "scrapy",
                        "crawl",
                        "docs",
                        "-a",
                        f"sitemap_url={sitemaps[kind]}",
                    ]
                    cmd += ["-s", f"RECRAWLER_DB_URI=sqlite:///{tmp / f'{kind}{round_no}.db'}"]
                    cmd += [
                        "-s",
                        "LOG_LEVEL=INFO",
                        "-s",
                        "RECRAWLER_SCHEDULE=all",
                        "-s",
                        "RECRAWLER_AUDIT_SAMPLE=0",
                    ]
                    label = {"Z": "one page", "1": "first run", "2": "rerun (304s)"}[name[-1]]
                    runs.append(
                        crawl(
                            name,
                            f"{ {'Z': 'baseline', 'H': 'html', 'P': 'pdf'}[kind] } {label}",
                            cmd,
                            cwd=PROJECT_DIR,
                            env=scrapy_env(keep_recrawler=False),
                            workdir=tmp,
                            server=server,
                            page_paths=paths[kind],
                            timeout=args.timeout,
                        )
                    )
        finally:
            server.stop()
    chars = {kind: alone[f"{kind}_text_chars_per_doc"] for kind in ("html", "pdf")}
    figures = per_unit(runs, {"html": len(html), "pdf": len(pdf)}, pdf_pages, chars)
    print()
    print(format_table(runs))
    print()
    print(f"HTML site: {len(html)} pages; PDF site: {len(pdf)} manuals, {pdf_pages} pages")
    per_page = alone["pdf_ms_per_doc"] * len(pdf) / pdf_pages
    print(f"read alone, in this process ({args.sample} documents of each):")
    for kind, what in (("html", "an HTML page"), ("pdf", "a PDF manual")):
        ms, chars = alone[f"{kind}_ms_per_doc"], alone[f"{kind}_text_chars_per_doc"]
        print(
            f"  {what}: {ms:.1f} ms, {chars:.0f} characters of text from "
            f"{alone[f'{kind}_bytes_per_doc'] / 1000:.1f} KB: {ms * 1000 / chars:.2f} ms per 1,000 characters"
        )
    print(f"  a PDF page: {per_page:.1f} ms")
    print("crawl cost less the one-page run Z (medians), per document and per page:")
    for name in ("H1", "P1", "H2", "P2"):
        print(
            f"  {name}: CPU {fmt(figures.get(f'{name}_cpu_ms_per_doc'), '.2f')} ms/doc, "
            f"{fmt(figures.get(f'{name}_cpu_ms_per_page'), '.2f')} ms/page; wall "
            f"{fmt(figures.get(f'{name}_wall_ms_per_doc'), '.2f')} ms/doc, "
            f"{fmt(figures.get(f'{name}_wall_ms_per_page'), '.2f')} ms/page; CPU "
            f"{fmt(figures.get(f'{name}_cpu_ms_per_1000_chars'), '.2f')} ms per 1,000 characters; "
            f"{fmt(figures.get(f'{name}_bytes_per_doc'), ',.0f')} bytes/doc"
        )
    print(
        f"PDF / HTML, first run: CPU per page {fmt(figures['cpu_per_page_P1_over_H1'], '.2f')}, "
        f"per document {fmt(figures['cpu_per_doc_P1_over_H1'], '.2f')}, per 1,000 characters "
        f"{fmt(figures['cpu_per_1000_chars_P1_over_H1'], '.2f')}; wall per page "
        f"{fmt(figures['wall_per_page_P1_over_H1'], '.2f')}"
    )
    print(
        f"PDF / HTML, rerun (all 304): CPU per document {fmt(figures['cpu_per_doc_P2_over_H2'], '.2f')}, "
        f"wall per document {fmt(figures['wall_per_doc_P2_over_H2'], '.2f')}"
    )
    write_json(
        args.json,
        {
            "html_pages": len(html),
            "pdfs": len(pdf),
            "pdf_pages": pdf_pages,
            "repeat": args.repeat,
            "alone": alone,
            "per_unit": figures,
            "runs": [asdict(r) | {"ok": r.ok} for r in runs],
        },
    )
    return 0 if all(r.ok for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
