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
import datetime as dt
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

if not __package__:  # run as a script: python benchmarks/bench_detect.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.lib.detect_corpus import print_corpus, run_corpus
from benchmarks.lib.detect_runs import (
    COMMON_SETTINGS,
    PROJECT_DIR,
    log,
)
from benchmarks.lib.detect_synth import print_synthetic, run_synthetic
from benchmarks.lib.results import add_json_option, write_json
from benchmarks.lib.runners import git_state, workdir

if TYPE_CHECKING:
    from collections.abc import Sequence

DEFAULT_CORPUS = PROJECT_DIR.parent / "shared" / "corpus" / "mesonbuild"


# ---------------------------------------------------------------------------------------------
# Running crawls and reading what they produced
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# Part A: the labelled corpus
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# Part B: a synthetic site with noise inside the main content
# ---------------------------------------------------------------------------------------------


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
