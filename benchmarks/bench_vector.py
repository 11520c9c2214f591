"""Benchmark vector search for recrawler's knowledge base: numpy exact search vs sqlite-vec.

Usage: ``python benchmarks/bench_vector.py [--chunks N] [--dim D] [--queries Q] [--python PATH]``
(see README.md). Every candidate runs in its own subprocess (``--candidate NAME``, internal), which
prints one JSON line; this parent prints them side by side. A candidate whose imports fail is
reported as "not installed", so the script runs in the project environment as it is.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if not __package__:  # run as a script (the candidates run so): python benchmarks/bench_vector.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.lib.results import add_json_option, write_json
from benchmarks.lib.runners import workdir
from benchmarks.lib.vector_data import (
    DB_NAME,
    LIVE_VECTORS_SQL,
    OPENBLAS_VARS,
    PORTABILITY,
    SHORT_PORTABILITY,
    K,
    _emit,
    _log,
    prepare,
)
from benchmarks.lib.vector_runs import LOADERS, VARIANTS, run_numpy, run_vec

if TYPE_CHECKING:
    from collections.abc import Sequence


SCRIPT = Path(__file__).resolve()


# --- shared helpers -------------------------------------------------------------------------------


# --- prepare: the synthetic knowledge base ------------------------------------------------------------


# --- numpy exact search -------------------------------------------------------------------------------


# --- sqlite-vec through apsw or pysqlite3 -------------------------------------------------------------


# --- parent: orchestration and the table ---------------------------------------------------------------


@dataclass
class Run:
    label: str
    family: str  # numpy | apsw | pysqlite3
    python: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    unset: tuple[str, ...] = ()
    results: list[dict[str, Any]] = field(default_factory=list)  # one per round

    def summary(self) -> dict[str, Any]:
        """The first failure, else the median of every number over the rounds."""
        for r in self.results:
            if r.get("status") != "ok":
                return r
        out = dict(self.results[0])
        for key, value in out.items():
            if isinstance(value, float):
                out[key] = statistics.median(r[key] for r in self.results)
        out["rounds"] = len(self.results)
        out["p50_ms_rounds"] = [r["p50_ms"] for r in self.results]
        notes = [r["exit_note"] for r in self.results if "exit_note" in r]
        if notes:
            out["exit_note"] = f"{notes[0]} ({len(notes)}/{len(self.results)} rounds)"
        return out


def _child(run: Run, workdir: Path, timeout: float) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in run.unset}
    env.update(run.env)
    cmd = [run.python, str(SCRIPT), "--workdir", str(workdir), *run.args]
    _log(f"{run.label}: {' '.join(cmd[1:])}")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, check=False)
    except FileNotFoundError as exc:
        return {"status": "no interpreter", "error": str(exc)}
    except subprocess.TimeoutExpired:
        return {"status": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    result: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    if proc.returncode != 0:
        why = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
        if result:
            result["exit_note"] = f"process ended with {why} after printing its result"
        else:
            tail = proc.stderr.strip().splitlines()[-3:]
            result = {"status": f"failed ({why})", "error": " | ".join(tail)}
    return result


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _notes(run: Run, r: dict[str, Any]) -> str:
    notes: list[str] = []
    blas = r.get("blas")
    if blas:
        setvars = ",".join(f"{k}={v}" for k, v in blas["env"].items() if v is not None)
        threads = run.env.get("OPENBLAS_NUM_THREADS", blas.get("threads"))
        notes.append(f"{blas.get('kernel')} x{threads}" + (f" ({setvars})" if setvars else ""))
    if run.family != "numpy" and r.get("variant") != "vec0":
        notes.append("reuses the vec0 table" if r["variant"] == "vec0-mmap" else "no index, no copy")
    if r.get("variant") == "scan-mmap":
        notes.append(f"{r['queries']} queries")
    spread = r.get("p50_ms_rounds")
    if spread and len(spread) > 1:
        notes.append("p50/round " + "/".join(f"{x:.1f}" for x in spread))
    if "exit_note" in r:
        notes.append(r["exit_note"])
    return "; ".join(notes)


def _table(runs: Sequence[Run]) -> str:
    headers = [
        "candidate",
        "build/load s",
        "p50 ms",
        "p95 ms",
        "recall@10",
        "RSS MiB",
        "disk +MiB",
        "portable?",
        "notes",
    ]
    rows: list[list[str]] = []
    for run in runs:
        r = run.summary()
        if r.get("status") != "ok":
            rows.append(
                [
                    run.label,
                    "-",
                    "-",
                    "-",
                    "-",
                    "-",
                    "-",
                    SHORT_PORTABILITY[run.family],
                    f"{r.get('status')}: {r.get('error', '')}"[:100],
                ]
            )
            continue
        rows.append(
            [
                run.label,
                _fmt(r.get("build_s"), ".3f"),
                _fmt(r.get("p50_ms"), ".2f"),
                _fmt(r.get("p95_ms"), ".2f"),
                _fmt(r.get("recall_at_10"), ".4f"),
                _fmt(r.get("rss_peak_added_mib"), ".1f"),
                _fmt(r.get("disk_added_mib"), ".1f"),
                SHORT_PORTABILITY[run.family],
                _notes(run, r),
            ]
        )
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines.extend("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)
    return "\n".join(lines)


def _plan(args: argparse.Namespace) -> list[Run]:
    me = sys.executable
    wanted = set(args.only.split(","))
    runs: list[Run] = []
    if "numpy" in wanted:
        base = ["--candidate", "numpy", "--load-repeats", str(args.load_repeats)]
        best = [*base, "--load-method", "memview", "--load-sql", "embeddings-first"]
        runs.extend(Run(f"numpy [{m}]", "numpy", me, [*base, "--load-method", m]) for m in LOADERS)
        runs.append(
            Run(
                "numpy [memview, chunks-first SQL]",
                "numpy",
                me,
                [*base, "--load-method", "memview", "--load-sql", "chunks-first"],
            )
        )
        # OpenBLAS kernels: as this environment has them, with both variables unset, and with
        # OPENBLAS_CORETYPE forced (--simulate-coretype); each at the default thread count and at one
        # thread (one thread is the stable comparison when another process holds the other core)
        one = {"OPENBLAS_NUM_THREADS": "1"}
        blas_runs: list[tuple[str, dict[str, str], tuple[str, ...]]] = [
            ("", {}, ()),
            (" OPENBLAS_* unset", {}, OPENBLAS_VARS),
            *(
                (f" OPENBLAS_CORETYPE={core}", {"OPENBLAS_CORETYPE": core}, ())
                for core in filter(None, args.simulate_coretype.split(","))
            ),
        ]
        for suffix, env, unset in blas_runs:
            if suffix:
                runs.append(Run(f"numpy [memview]{suffix}", "numpy", me, best, env=env, unset=unset))
            runs.append(
                Run(f"numpy [memview]{suffix}, 1 thread", "numpy", me, best, env={**env, **one}, unset=unset)
            )
    for driver in ("apsw", "pysqlite3"):
        if driver in wanted:
            runs.extend(
                Run(
                    f"sqlite-vec/{driver} [{v}]",
                    driver,
                    args.python,
                    ["--candidate", driver, "--variant", v, "--scan-queries", str(args.scan_queries)],
                )
                for v in VARIANTS
            )
    return runs


def _prepare(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    cmd_args = [
        "--candidate",
        "prepare",
        "--chunks",
        str(args.chunks),
        "--dim",
        str(args.dim),
        "--queries",
        str(args.queries),
        "--seed",
        str(args.seed),
    ]
    result: dict[str, Any] = {}
    for python in dict.fromkeys([sys.executable, args.python]):  # needs numpy: try this env first
        result = _child(Run("prepare", "numpy", python, cmd_args), workdir, args.timeout)
        if result.get("status") == "ok":
            result["python"] = python
            return result
    raise SystemExit(f"cannot build the test data (needs numpy): {result}")


def _run_child_mode(args: argparse.Namespace) -> None:
    workdir = Path(args.workdir)
    name = args.candidate
    if name == "prepare":
        try:
            result = prepare(workdir, args.chunks, args.dim, args.queries, args.seed)
        except ImportError as exc:
            result = {"candidate": name, "status": "not installed", "error": str(exc)}
        _emit(result)
        return
    if name == "numpy":
        result = run_numpy(workdir, args.dim, args.load_method, args.load_sql, args.load_repeats)
    else:
        result = run_vec(workdir, args.dim, name, args.variant, args.scan_queries)
    result.update({"candidate": name, "python": sys.executable, "python_version": platform.python_version()})
    _emit(result)


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chunks", type=int, default=50_000, help="live chunks (plus 5%% retired ones)")
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--python", default=sys.executable, help="interpreter for the sqlite-vec candidates")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--only", default="numpy,apsw,pysqlite3", help="comma list of numpy, apsw, pysqlite3")
    p.add_argument("--repeat", type=int, default=3, help="interleaved rounds of every run (medians shown)")
    p.add_argument("--load-repeats", type=int, default=3, help="numpy loads per process (median kept)")
    p.add_argument("--scan-queries", type=int, default=50, help="queries for the slow scan-mmap variant")
    p.add_argument(
        "--simulate-coretype",
        default="",
        help="comma list of OPENBLAS_CORETYPE values to also run numpy with (e.g. Haswell)",
    )
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per subprocess")
    add_json_option(p, "bench_vector")
    p.add_argument("--keep", action="store_true", help="keep the work dir (databases, queries, truth)")
    # internal: one candidate in this process
    p.add_argument("--candidate", choices=["prepare", "numpy", "apsw", "pysqlite3"], help=argparse.SUPPRESS)
    p.add_argument("--workdir", help=argparse.SUPPRESS)
    p.add_argument("--load-method", choices=sorted(LOADERS), default="memview", help=argparse.SUPPRESS)
    p.add_argument(
        "--load-sql", choices=sorted(LIVE_VECTORS_SQL), default="embeddings-first", help=argparse.SUPPRESS
    )
    p.add_argument("--variant", choices=VARIANTS, default="vec0", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _busy_processes() -> list[str]:
    """Other processes using CPU right now (a shared 2-core machine makes timings drift)."""
    try:
        out = subprocess.run(
            ["ps", "-eo", "pid,pcpu,comm", "--sort=-pcpu"],
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    busy = []
    for line in out.splitlines()[1:]:
        parts = line.split(None, 2)
        if len(parts) == 3 and int(parts[0]) != os.getpid() and float(parts[1]) >= 20.0:
            busy.append(f"{parts[2]}({parts[1]}%)")
    return busy


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    if args.candidate:
        _run_child_mode(args)
        return 0
    load_before = os.getloadavg()
    busy = _busy_processes()
    with workdir("bench_vector-", keep=args.keep, log=_log) as work:
        _log(f"building {args.chunks} chunks x {args.dim} in {work}")
        prep = _prepare(args, work)
        runs = _plan(args)
        for rnd in range(args.repeat):
            _log(f"round {rnd + 1}/{args.repeat}")
            for run in runs:
                if "--variant" in run.args and run.args[run.args.index("--variant") + 1] == "vec0":
                    shutil.copyfile(work / DB_NAME, work / f"{run.family}.db")  # fresh copy per round
                run.results.append(_child(run, work, args.timeout))
    load_after = os.getloadavg()
    print(
        f"vector search: {prep['chunks']} live chunks (+{prep['retired_chunks']} retired) x {prep['dim']}"
        f" float32, {prep['queries']} queries, top-{K}; kb.db {prep['db_mib']:.0f} MiB; medians of"
        f" {args.repeat} interleaved rounds; python {platform.python_version()}, stdlib sqlite"
        f" {sqlite3.sqlite_version}, {os.cpu_count()} CPUs"
    )
    state = ", ".join(f"{v}={os.environ[v]}" for v in OPENBLAS_VARS if v in os.environ) or "not set"
    print(f"OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE in this environment: {state}")
    print(
        f"load average before/after: {load_before[0]:.2f} / {load_after[0]:.2f}"
        + (f"; busy before start: {', '.join(busy)}" if busy else "")
    )
    print()
    print(_table(runs))
    print()
    versions: set[str] = {str(r.summary()["versions"]) for r in runs if r.summary().get("versions")}
    for v in sorted(versions):
        print(f"  {v}")
    for family, text in PORTABILITY.items():
        print(f"  portable? {family}: {text}")
    print(
        "  build/load s: numpy = SQLite rows -> one (n, dim) float32 matrix, paid at every process start"
        " or KB change; vec0 = CREATE VIRTUAL TABLE + INSERT ... SELECT, paid once (then kept in sync)"
    )
    print(
        "  RSS MiB: peak RSS added by load/build + queries (ru_maxrss minus RSS before); recall@10 vs the"
        " exact float64 top-10; p50/p95 per query, warm (after a few warm-up queries)"
    )
    write_json(
        args.json,
        {
            "prepare": prep,
            "runs": [{"label": r.label, "summary": r.summary(), "rounds": r.results} for r in runs],
        },
        newline=False,
    )
    bad = [r for r in runs if r.summary().get("status") not in ("ok", "not installed")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
