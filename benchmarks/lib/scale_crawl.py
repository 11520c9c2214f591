"""The scale benchmark's crawl part: a generated site on nginx, ``scrapy crawl docs`` watched for
wall time and peak RSS, first run and unchanged rerun on each backend."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.lib.nginx import NginxServer
from benchmarks.lib.results import fmt, log, mib, print_ratios, ratio, table
from benchmarks.lib.runners import RunResult, count_requests, scrapy_env
from benchmarks.lib.scale_servers import Postgres, database_size
from benchmarks.lib.sites import generate_site

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence


PROJECT_DIR = Path(__file__).resolve().parents[2]


def crawl_cmd(sitemap: str, uri: str, report: Path, *extra: str) -> list[str]:
    """``scrapy crawl docs`` as the brief runs it (recrawler's own throughput settings)."""
    return [
        sys.executable, "-m", "scrapy", "crawl", "docs", "-a", f"sitemap_url={sitemap}",
        "-s", f"RECRAWLER_DB_URI={uri}", "-s", "RECRAWLER_SCHEDULE=all", "-s", "RECRAWLER_AUDIT_SAMPLE=0",
        "-s", "LOG_LEVEL=WARNING", "-s", f"RECRAWLER_REPORT_FILE={report}", *extra,
    ]  # fmt: skip


def read_counts(report: Path) -> dict[str, Any] | None:
    """The ``counts`` of a run report, or None."""
    try:
        data = json.loads(report.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    counts = data.get("counts") if isinstance(data, dict) else None
    return counts if isinstance(counts, dict) else None


def page_tally(server: NginxServer, page_paths: set[str]) -> dict[str, int]:
    """What nginx served since its log was emptied."""
    r = RunResult(name="", label="", command=[], log_file="")
    count_requests(server.read_access_log(), page_paths, r)
    return {
        "requests": r.requests,
        "pages": r.pages,
        "status_200": r.status_200,
        "status_304": r.status_304,
        "status_other": r.status_other,
        "body_bytes": r.body_bytes,
    }


def vm_hwm_kib(pid: int) -> int | None:
    """``VmHWM`` of a live process (KiB), or None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def run_watched(
    cmds: Sequence[list[str]], *, log_paths: Sequence[Path], timeout: float
) -> tuple[list[int | str], float, list[float]]:
    """Start every command at once; return their exits, the wall time until the last one ended,
    and each one's peak RSS in MiB.

    The peak is ``VmHWM`` polled from /proc every 0.1 s (exec starts it afresh), not wait4's
    ``ru_maxrss``, which on Linux never drops below the parent's RSS at fork time.
    """
    env = scrapy_env(keep_recrawler=False)
    start = time.monotonic()
    procs = []
    for cmd, path in zip(cmds, log_paths, strict=True):
        with path.open("wb") as out:
            procs.append(
                subprocess.Popen(
                    cmd, cwd=PROJECT_DIR, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out
                )
            )
    hwm = [0] * len(procs)
    exits: list[int | str | None] = [None] * len(procs)
    while None in exits:
        for i, proc in enumerate(procs):
            if exits[i] is not None:
                continue
            hwm[i] = max(hwm[i], vm_hwm_kib(proc.pid) or 0)
            pid, status, _ = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                exits[i] = proc.returncode if exits[i] is None else exits[i]
            elif time.monotonic() - start > timeout:
                proc.kill()
                exits[i] = "timeout"
                proc.wait()
        time.sleep(0.1)
    return [e for e in exits if e is not None], time.monotonic() - start, [k / 1024 for k in hwm]


def one_crawl(
    cmd: list[str], *, log_path: Path, server: NginxServer, page_paths: set[str], timeout: float
) -> dict[str, Any]:
    """Run one crawl process; its wall time, peak RSS and what nginx served."""
    server.truncate_access_log()
    exits, wall, rss = run_watched([cmd], log_paths=[log_path], timeout=timeout)
    rc = exits[0]
    out: dict[str, Any] = {"exit": rc, "wall_s": wall, "peak_rss_mib": rss[0]}
    out |= page_tally(server, page_paths)
    out["pages_per_s"] = out["pages"] / wall if wall else None
    if rc != 0:
        tail = "\n".join(log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-20:])
        log(f"crawl failed ({out['exit']}); last log lines of {log_path}:\n{tail}")
    return out


def serve_site(root: Path, pages: int, seed: int) -> tuple[NginxServer, set[str]]:
    """Generate a site of *pages* pages under *root* and serve it (sitemap URLs need the port first)."""
    server = NginxServer(root).start()
    t0 = time.monotonic()
    specs = generate_site(root, server.url, pages, seed)
    log(f"generated {pages} pages in {time.monotonic() - t0:.0f} s")
    return server, {s.path for s in specs}


def part_crawl(args: argparse.Namespace, pg: Postgres | None, tmp: Path) -> list[dict[str, Any]]:
    """First run and unchanged rerun of each site size on each backend, ``--rounds`` times with
    fresh databases, the backends' order alternating from round to round (side by side: what the
    machine does meanwhile weighs on both)."""
    rows: list[dict[str, Any]] = []
    for n in args.pages:
        root = tmp / f"site-{n}"
        root.mkdir()
        server, page_paths = serve_site(root, n, args.seed)
        try:
            for rnd in range(1, args.rounds + 1):
                backends: list[tuple[str, str | None]] = [
                    ("sqlite", f"sqlite:///{tmp / f'crawl-{n}-{rnd}.db'}"),
                    ("postgresql", pg.database(f"bench_crawl_{n}") if pg else None),
                ]
                if rnd % 2 == 0:
                    backends.reverse()
                for backend, uri in backends:
                    for run in ("first", "rerun"):
                        row: dict[str, Any] = {"pages_in_site": n, "round": rnd}
                        row |= {"backend": backend, "run": run}
                        rows.append(row)
                        if uri is None:
                            row["exit"] = "n/a"
                            continue
                        name = f"crawl-{n}-{rnd}-{backend}-{run}"
                        log(f"{name} ...")
                        report = tmp / f"{name}.json"
                        cmd = crawl_cmd(f"{server.url}/sitemap.xml", uri, report)
                        row["command"] = " ".join(cmd[1:]).replace(str(tmp), "TMP")
                        row |= one_crawl(
                            cmd,
                            log_path=tmp / f"{name}.log",
                            server=server,
                            page_paths=page_paths,
                            timeout=args.timeout,
                        )
                        row["db_bytes"] = database_size(uri)
                        row["counts"] = read_counts(report)
                        log(f"{name}: {fmt(row['pages_per_s'], '.0f')} pages/s, {row['wall_s']:.1f} s")
        finally:
            server.stop()
            shutil.rmtree(root, ignore_errors=True)
    return rows


def print_crawl(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The crawl table and its ratios."""
    header = (
        "site pages",
        "round",
        "backend",
        "run",
        "pages",
        "304s",
        "wall s",
        "pages/s",
        "peak RSS MiB",
        "db MiB",
        "exit",
    )
    body = [
        (
            str(r["pages_in_site"]),
            str(r.get("round", 1)),
            r["backend"],
            r["run"],
            str(r.get("pages", "-")),
            str(r.get("status_304", "-")),
            fmt(r.get("wall_s"), ".1f"),
            fmt(r.get("pages_per_s"), ".0f"),
            fmt(r.get("peak_rss_mib"), ".0f"),
            fmt(mib(r.get("db_bytes")), ".1f"),
            str(r["exit"]),
        )
        for r in rows
    ]
    print(
        "\n## crawl: first run and unchanged rerun\n"
        "(peak RSS: the crawl process's own; PostgreSQL's server processes are not included)\n"
    )
    print(table(header, body))
    by = {(r["pages_in_site"], r.get("round", 1), r["backend"], r["run"]): r for r in rows if r["exit"] == 0}
    ratios: dict[str, Any] = {}

    def median_ratio(n: int, field: str, num: tuple[str, str], den: tuple[str, str]) -> float | None:
        # the ratio within each round (side by side), then the median over the rounds
        found = []
        for rnd in sorted({r.get("round", 1) for r in rows if r["pages_in_site"] == n}):
            a, b = by.get((n, rnd, *num)), by.get((n, rnd, *den))
            value = ratio(a and a[field], b and b[field])
            if value is not None:
                found.append(value)
        return statistics.median(found) if found else None

    for n in sorted({r["pages_in_site"] for r in rows}):
        for run in ("first", "rerun"):
            for field, label in (
                ("pages_per_s", "pages_per_s"),
                ("db_bytes", "db_bytes"),
                ("peak_rss_mib", "peak_rss"),
            ):
                ratios[f"{n}:{run}:{label}_pg_over_sqlite"] = median_ratio(
                    n, field, ("postgresql", run), ("sqlite", run)
                )
            per_round = [
                ratio(
                    by.get((n, rnd, "postgresql", run), {}).get("pages_per_s"),
                    by.get((n, rnd, "sqlite", run), {}).get("pages_per_s"),
                )
                for rnd in sorted({r.get("round", 1) for r in rows if r["pages_in_site"] == n})
            ]
            by_round = ", ".join(fmt(v, ".2f") for v in per_round)
            ratios[f"{n}:{run}:pages_per_s_pg_over_sqlite_by_round"] = by_round
        for backend in ("sqlite", "postgresql"):
            ratios[f"{n}:{backend}:pages_per_s_rerun_over_first"] = median_ratio(
                n, "pages_per_s", (backend, "rerun"), (backend, "first")
            )
    print_ratios(ratios)
    return ratios
