"""recrawler against the pipeline a bot team builds today with LangChain, on a real docs site
deployed four times.

Usage: ``python -m benchmarks.bench_peer [--corpus DIR] [--pages N] [--keep] [--json PATH]``

The mesonbuild corpus (v1..v4, hand-labelled) is served by nginx with its validators (an ETag of
mtime and size, as a real deploy gives: every file of a new version answers 200), under a
generated ``sitemap.xml`` (the site has none). After each deploy, and once more with nothing
deployed, both keep a knowledge base of the site current:

- recrawler: ``scrapy crawl docs`` with every listed page checked (``RECRAWLER_SCHEDULE=all``, as
  the run after a deploy does), its default detector, chunker and hashing embedder;
- LangChain: ``SitemapLoader`` -> ``RecursiveCharacterTextSplitter`` (the same chunk size and
  overlap) -> ``index(..., cleanup="full")`` with a ``SQLRecordManager`` into a persistent Chroma
  collection, embedding with the same hashing embedder (``benchmarks/lib/peer_langchain.py``).

Each update is a process of its own (as from cron), timed from outside: wall and CPU time (the
process and the children it waited for), the requests nginx answered and the bytes it sent,
texts embedded, chunks written and deleted, and against the labels (truth.tsv): false changes
(pages labelled noise or identical that a side rewrote) and missed edits (pages labelled changed
that it did not).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if not __package__:  # run as a script: python benchmarks/bench_peer.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.lib.detect_runs import (
    PROJECT_DIR,
    deploy,
    extract_versions,
    load_truth,
    run_crawl,
    url_path,
)
from benchmarks.lib.nginx import NginxServer
from benchmarks.lib.results import add_json_option, log, table, write_json
from benchmarks.lib.runners import git_state, workdir

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

#: the corpus beside any folder above the checkout (a worktree's too)
DEFAULT_CORPUS = next(
    (c for d in PROJECT_DIR.parents if (c := d / "shared" / "corpus" / "mesonbuild").exists()),
    PROJECT_DIR.parent / "shared" / "corpus" / "mesonbuild",
)
#: what each update deploys (0: nothing) and the labelled step it is
PLAN = (
    ("v1 (first load)", 1, None),
    ("v1 -> v2", 2, "v1->v2"),
    ("v2 -> v3", 3, "v2->v3"),
    ("v3 -> v4", 4, "v3->v4"),
    ("v4 again (no deploy)", 0, "none"),
)
#: recrawler's settings for every run: each listed page checked, as the run after a deploy does
RECRAWLER_SETTINGS = {"RECRAWLER_SCHEDULE": "all"}


@dataclass(slots=True)
class Update:
    """One side's one update, measured and scored."""

    step: str
    side: str
    ok: bool = True
    wall_s: float = 0.0
    cpu_s: float = 0.0
    requests: int = 0
    bytes_sent: int = 0
    texts_embedded: int = 0
    chunks_written: int = 0
    chunks_deleted: int = 0
    pages_changed: int = 0
    pages_new: int = 0
    pages_gone: int = 0
    false_changes: int | None = None
    missed_edits: int | None = None
    missed_added: int | None = None
    missed_removed: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)


def children_cpu() -> float:
    """CPU seconds of every child process waited for so far (user and system)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measured(run: Callable[[], Any]) -> tuple[Any, float, float]:
    """*run*'s result, its wall time and the CPU time of the processes it ran."""
    cpu, start = children_cpu(), time.monotonic()
    result = run()
    return result, time.monotonic() - start, children_cpu() - cpu


def served(server: NginxServer) -> tuple[int, int]:
    """Requests nginx answered since the last truncation, and the bytes it sent (headers too)."""
    entries = server.read_access_log()
    return len(entries), sum(e.bytes_sent for e in entries)


def score(
    update: Update, labels: dict[str, str] | None, changed: set[str], new: set[str], gone: set[str]
) -> None:
    """Fill *update*'s page counts, and its errors against the step's *labels* (None: a first load)."""
    update.pages_changed, update.pages_new, update.pages_gone = len(changed), len(new), len(gone)
    if labels is None:
        return
    by = {
        lab: {p for p, x in labels.items() if x == lab}
        for lab in ("changed", "noise", "identical", "added", "removed")
    }
    update.false_changes = len(changed - by["changed"])
    update.missed_edits = len(by["changed"] - changed)
    update.missed_added = len(by["added"] - new)
    update.missed_removed = len(by["removed"] - gone)
    update.detail["false"] = sorted(changed - by["changed"])[:20]
    update.detail["missed"] = sorted(by["changed"] - changed)


def subset(
    versions: dict[int, Path], dest: Path, pages: int, truth: dict[str, dict[str, str]]
) -> dict[int, Path]:
    """Each version cut down to the same *pages* pages (half of them ones the labels say changed,
    came or went, when there are that many), with every asset."""
    names = sorted({p.name for v in versions.values() for p in v.glob("*.html")})
    moving = sorted(
        {
            p
            for labels in truth.values()
            for p, lab in labels.items()
            if lab in ("changed", "added", "removed")
        }
    )
    chosen = set(moving[: pages // 2])
    chosen |= set([n for n in names if n not in chosen][: pages - len(chosen)])
    out = {}
    for v, src in versions.items():
        target = dest / f"v{v}"
        for path in src.rglob("*"):
            rel = path.relative_to(src)
            if path.is_file() and (len(rel.parts) > 1 or path.suffix != ".html" or path.name in chosen):
                (target / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target / rel)
        out[v] = target
    for step, labels in truth.items():
        truth[step] = {p: lab for p, lab in labels.items() if p in chosen}
    return out


def recrawler_update(step: str, sitemap: str, db: Path, run_dir: Path, timeout: float) -> Update:
    crawl, wall, cpu = measured(
        lambda: run_crawl(step, sitemap, db, run_dir, RECRAWLER_SETTINGS, timeout=timeout, page_cap=100_000)
    )
    report_path = run_dir / "report.json"
    report = json.loads(report_path.read_text(encoding="utf-8")) if report_path.exists() else {}
    index = report.get("index") or {}
    update = Update(step=step, side="recrawler", ok=crawl.ok, wall_s=wall, cpu_s=cpu)
    update.texts_embedded = int(index.get("texts_embedded") or 0)
    update.chunks_written = int(index.get("chunks_added") or 0)
    update.chunks_deleted = int(index.get("chunks_retired") or 0)
    update.detail["counts"] = crawl.counts
    update.detail["index_state"] = index.get("state")
    update.detail["changed_paths"] = sorted(crawl.paths("changed"))
    update.detail["sets"] = (crawl.paths("changed"), crawl.paths("new"), crawl.paths("quarantined", "gone"))
    return update


def langchain_update(step: str, sitemap: str, state: Path, out: Path, timeout: float) -> Update:
    argv = [
        sys.executable, "-m", "benchmarks.lib.peer_langchain",
        "--sitemap", sitemap, "--state", str(state), "--out", str(out),
    ]  # fmt: skip
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_DIR), os.environ.get("PYTHONPATH")])),
    }
    proc, wall, cpu = measured(
        lambda: subprocess.run(
            argv, cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
    )
    update = Update(step=step, side="LangChain", ok=proc.returncode == 0, wall_s=wall, cpu_s=cpu)
    if proc.returncode != 0:
        log(f"LangChain {step} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
        update.detail["sets"] = (set(), set(), set())
        return update
    result = json.loads(out.read_text(encoding="utf-8"))
    update.texts_embedded = result["texts_embedded"]
    update.chunks_written = result["num_added"] + result["num_updated"]
    update.chunks_deleted = result["num_deleted"]
    update.detail["phases_s"] = result["phases_s"]
    update.detail["chunks"] = result["chunks"]
    update.detail["sets"] = tuple(
        {url_path(u) for u in result[k]} for k in ("sources_changed", "sources_new", "sources_gone")
    )
    return update


def run(args: argparse.Namespace, tmp: Path) -> list[Update]:
    corpus = Path(args.corpus)
    truth = load_truth(corpus / "truth.tsv")
    versions = extract_versions(corpus, tmp / "versions")
    if args.pages:
        versions = subset(versions, tmp / "subset", args.pages, truth)
    site = tmp / "site"
    site.mkdir()
    updates: list[Update] = []
    with NginxServer(site, prefix=tmp / "nginx") as server:
        sitemap = f"{server.url}/sitemap.xml"
        for n, (step, version, labelled) in enumerate(PLAN):
            if version:
                sitemap, pages = deploy(versions[version], site, server.url)
            else:
                pages = len(list(site.glob("*.html")))
            labels = None if labelled is None else ({} if labelled == "none" else truth[labelled])
            if labelled == "none":
                labels = {p.name: "identical" for p in site.glob("*.html")}
            log(f"[peer] {step}: {pages} pages")
            for side in ("recrawler", "LangChain"):
                server.truncate_access_log()
                if side == "recrawler":
                    update = recrawler_update(
                        step, sitemap, tmp / "recrawler.db", tmp / "runs" / str(n), args.timeout
                    )
                else:
                    update = langchain_update(
                        step, sitemap, tmp / "langchain", tmp / f"langchain-{n}.json", args.timeout
                    )
                update.requests, update.bytes_sent = served(server)
                score(update, labels, *update.detail.pop("sets"))
                log(
                    f"  {side}: {update.wall_s:.1f} s wall, {update.cpu_s:.1f} s CPU,"
                    f" {update.requests} requests, {update.texts_embedded} texts embedded,"
                    f" {update.pages_changed} pages changed"
                )
                updates.append(update)
    return updates


def print_table(updates: Sequence[Update]) -> None:
    def opt(value: int | None) -> str:
        return "-" if value is None else str(value)

    rows = [
        [
            u.step if u.side == "recrawler" else "",
            u.side + ("" if u.ok else " (FAILED)"),
            f"{u.wall_s:.1f}",
            f"{u.cpu_s:.1f}",
            str(u.requests),
            f"{u.bytes_sent / 1e6:.2f}",
            str(u.texts_embedded),
            str(u.chunks_written),
            str(u.chunks_deleted),
            opt(u.false_changes),
            opt(u.missed_edits),
        ]
        for u in updates
    ]
    print(
        table(
            [
                "update",
                "pipeline",
                "wall s",
                "CPU s",
                "requests",
                "MB sent",
                "texts embedded",
                "chunks written",
                "chunks deleted",
                "false changes",
                "missed edits",
            ],
            rows,
        )
    )
    print(
        "\nfalse changes: pages labelled noise or identical that the update rewrote (their chunks or the"
        " page's events);\nmissed edits: pages labelled changed that it did not. Added and removed pages"
        " each side missed are in the JSON."
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=str(DEFAULT_CORPUS), help="the mesonbuild corpus folder")
    parser.add_argument("--pages", type=int, default=0, help="serve this many pages of each version (0: all)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds for one update")
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    add_json_option(parser, "bench_peer")
    args = parser.parse_args(argv)
    if not (Path(args.corpus) / "v1.tar.gz").exists():
        print(f"bench_peer: no corpus at {args.corpus} (--corpus DIR)", file=sys.stderr)
        return 2
    load_before = os.getloadavg()
    with workdir("bench-peer-", keep=args.keep, log=log) as tmp:
        updates = run(args, tmp)
    load_after = os.getloadavg()
    git = git_state(PROJECT_DIR)
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    print(f"bench_peer: the mesonbuild corpus{f', {args.pages} pages of each version' if args.pages else ''}")
    print(f"machine: {machine}; load (1, 5, 15 min) before {load_before}, after {load_after}")
    if git:
        print(f"checkout: {git[0]}{f' ({git[1]} uncommitted paths under recrawler/)' if git[1] else ''}")
    print()
    print_table(updates)
    write_json(
        args.json,
        {
            "machine": machine,
            "load_before": load_before,
            "load_after": load_after,
            "pages": args.pages or None,
            "updates": [asdict(u) for u in updates],
        },
    )
    return 0 if all(u.ok for u in updates) else 1


if __name__ == "__main__":
    sys.exit(main())
