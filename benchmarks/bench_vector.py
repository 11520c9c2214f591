"""Benchmark vector search for recrawler's knowledge base: numpy exact search vs sqlite-vec.

Usage: ``python benchmarks/bench_vector.py [--chunks N] [--dim D] [--queries Q] [--python PATH]``
(see README.md). Every candidate runs in its own subprocess (``--candidate NAME``, internal), which
prints one JSON line; this parent prints them side by side. A candidate whose imports fail is
reported as "not installed", so the script runs in the project environment as it is.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import platform
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if not __package__:  # run as a script (the candidates run so): python benchmarks/bench_vector.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.lib.results import add_json_option, write_json
from benchmarks.lib.runners import peak_rss_bytes, workdir

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np
    from numpy.typing import NDArray

SCRIPT = Path(__file__).resolve()
EMBEDDER = "bench-embedder-384"
K = 10
WARMUP = 5
OPENBLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
MMAP_BYTES = 1 << 30
DB_NAME = "kb.db"
QUERIES_NAME = "queries.f32"
TRUTH_NAME = "truth.json"

# What `pip download --only-binary=:all: --platform ... --python-version 3.11` found on PyPI for
# apsw 3.54.1.0, sqlite-vec 0.1.9 and pysqlite3-binary 0.5.4.post2 (checked when this was written).
PORTABILITY = {
    "numpy": "yes: stdlib sqlite3 + numpy wheel, no extension loading",
    "apsw": "binary wheels: apsw + sqlite-vec (linux x86_64/aarch64, macOS, Windows; no musl)",
    "pysqlite3": "no: pysqlite3-binary has a linux x86_64 (glibc) wheel only",
}
SHORT_PORTABILITY = {
    "numpy": "yes (no ext)",
    "apsw": "2 binary wheels",
    "pysqlite3": "linux x86_64 only",
}

# The part of recrawler's schema (migration 002) that search reads.
SCHEMA = """
CREATE TABLE chunks (
    id           INTEGER PRIMARY KEY,
    key          TEXT NOT NULL,
    chunk_index  INTEGER NOT NULL,
    chunk_hash   TEXT NOT NULL,
    url          TEXT NOT NULL,
    heading      TEXT NOT NULL,
    text         TEXT NOT NULL,
    added_run    INTEGER NOT NULL,
    retired_run  INTEGER,
    retired_why  INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX chunks_key ON chunks (key, retired_run);
CREATE INDEX chunks_added ON chunks (added_run);
CREATE INDEX chunks_retired ON chunks (retired_run);
CREATE INDEX chunks_hash ON chunks (chunk_hash);
CREATE TABLE embeddings (
    embedder   TEXT NOT NULL,
    text_hash  TEXT NOT NULL,
    vector     BLOB NOT NULL,
    PRIMARY KEY (embedder, text_hash)
) WITHOUT ROWID;
"""

# Live chunks with their vectors, two ways. "embeddings-first" reads the embeddings table in key
# order and looks each hash up in the chunks_hash index (CROSS JOIN fixes that loop order);
# "chunks-first" is what SQLite's planner picks for the plain JOIN: walk chunks_retired, then one
# random lookup per chunk into the (large, WITHOUT ROWID) embeddings table.
LIVE_VECTORS_SQL = {
    "embeddings-first": (
        "SELECT c.id, e.vector FROM embeddings AS e CROSS JOIN chunks AS c ON c.chunk_hash = e.text_hash "
        "WHERE e.embedder = ? AND c.retired_run IS NULL"
    ),
    "chunks-first": (
        "SELECT c.id, e.vector FROM chunks AS c "
        "JOIN embeddings AS e ON e.embedder = ? AND e.text_hash = c.chunk_hash "
        "WHERE c.retired_run IS NULL"
    ),
}
LIVE_COUNT_SQL = "SELECT count(*) FROM chunks WHERE retired_run IS NULL"  # upper bound: live chunks


# --- shared helpers -------------------------------------------------------------------------------


def _emit(result: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


def _log(msg: str) -> None:
    sys.stderr.write(f"[bench_vector] {msg}\n")
    sys.stderr.flush()


def _rss_bytes() -> int:
    """Current resident set size of this process (Linux /proc; 0 where unavailable)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


def _percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile of a non-empty sequence."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(pct / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def _latency_summary(lat_s: Sequence[float]) -> dict[str, float]:
    return {
        "p50_ms": _percentile(lat_s, 50) * 1000,
        "p95_ms": _percentile(lat_s, 95) * 1000,
        "mean_ms": sum(lat_s) / len(lat_s) * 1000,
    }


def _load_queries(workdir: Path, dim: int) -> list[bytes]:
    raw = (workdir / QUERIES_NAME).read_bytes()
    size = dim * 4
    return [raw[i : i + size] for i in range(0, len(raw), size)]


def _load_truth(workdir: Path) -> list[list[int]]:
    truth: list[list[int]] = json.loads((workdir / TRUTH_NAME).read_text())["ids"]
    return truth


def _recall(found: Sequence[Sequence[int]], truth: Sequence[Sequence[int]]) -> float:
    hits = sum(len(set(f) & set(t[:K])) for f, t in zip(found, truth, strict=True))
    return hits / (K * len(truth))


def _db_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


# --- prepare: the synthetic knowledge base ------------------------------------------------------------


def _unit_rows(m: NDArray[np.float64]) -> NDArray[np.float64]:
    import numpy as np

    out: NDArray[np.float64] = m / np.linalg.norm(m, axis=-1, keepdims=True)
    return out


def _make_vectors(
    rng: np.random.Generator, n: int, q: int, dim: int
) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
    """Unit vectors shaped a little like sentence embeddings (all seeded).

    Every vector leans towards one shared direction (real embedding spaces are anisotropic: two
    unrelated texts still score ~0.2), 60% fall in topic clusters, 30% are spread out, and 10% are
    near-duplicates of another vector (boilerplate, lightly edited chunks). Queries are noisy
    copies of stored vectors (a question about a topic the docs cover), 20% are off-topic.
    """
    import numpy as np

    def noise(rows: int) -> NDArray[np.float64]:
        return _unit_rows(rng.standard_normal((rows, dim)))

    common = _unit_rows(rng.standard_normal(dim))
    n_clusters = max(1, n // 250)
    centers = _unit_rows(0.5 * common + noise(n_clusters))
    m = np.empty((n, dim))
    kind = rng.choice(3, size=n, p=[0.6, 0.3, 0.1])
    clustered = np.flatnonzero(kind == 0)
    m[clustered] = centers[rng.integers(0, n_clusters, clustered.size)] + 0.9 * noise(clustered.size)
    spread = np.flatnonzero(kind != 0)  # near-duplicates start spread out, then copy one below
    m[spread] = 0.5 * common + noise(spread.size)
    m = _unit_rows(m)
    dups = np.flatnonzero(kind == 2)
    sources = rng.choice(np.flatnonzero(kind != 2), size=dups.size)
    m[dups] = _unit_rows(m[sources] + 0.1 * noise(dups.size))

    on_topic = rng.random(q) < 0.8
    queries = np.empty((q, dim))
    n_on = int(on_topic.sum())
    queries[on_topic] = m[rng.integers(0, n, n_on)] + 1.0 * noise(n_on)
    queries[~on_topic] = 0.5 * common + noise(q - n_on)
    queries = _unit_rows(queries)
    return m.astype(np.float32), queries.astype(np.float32)


def _words(rnd: random.Random, count: int) -> list[str]:
    syllables = [
        "con",
        "fig",
        "ser",
        "ver",
        "re",
        "quest",
        "pa",
        "ge",
        "in",
        "dex",
        "craw",
        "ler",
        "da",
        "ta",
        "ba",
        "se",
        "py",
        "thon",
        "mo",
        "del",
        "ro",
        "ute",
        "ca",
        "che",
    ]
    return ["".join(rnd.choices(syllables, k=rnd.randint(1, 4))) for _ in range(count)]


def prepare(workdir: Path, n: int, dim: int, q: int, seed: int) -> dict[str, Any]:
    """Write kb.db (chunks + embeddings, 5% extra retired chunks), queries.f32 and truth.json."""
    import numpy as np

    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    rnd = random.Random(seed)
    n_retired = n // 20
    total = n + n_retired
    vectors, queries = _make_vectors(rng, total, q, dim)
    retired = set(rnd.sample(range(total), n_retired))
    vocab = _words(rnd, 3000)
    chunk_rows: list[tuple[Any, ...]] = []
    emb_rows: list[tuple[str, str, bytes]] = []
    live_ids: list[int] = []
    for i in range(total):
        cid = i + 1
        page = i // 12
        text = f"chunk {cid}. " + " ".join(rnd.choices(vocab, k=rnd.randint(60, 140)))
        digest = hashlib.sha256(text.encode()).hexdigest()
        is_retired = i in retired
        chunk_rows.append(
            (
                cid,
                f"https://docs.example/p/{page}.html",
                i % 12,
                digest,
                f"https://docs.example/p/{page}.html",
                f"Section {i % 12}",
                text,
                1,
                2 if is_retired else None,
            )
        )
        emb_rows.append((EMBEDDER, digest, vectors[i].tobytes()))
        if not is_retired:
            live_ids.append(cid)
    gen_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    db = workdir / DB_NAME
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.executescript(SCHEMA)
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO chunks (id, key, chunk_index, chunk_hash, url, heading, text, added_run, retired_run)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        chunk_rows,
    )
    conn.executemany("INSERT INTO embeddings (embedder, text_hash, vector) VALUES (?, ?, ?)", emb_rows)
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    insert_s = time.perf_counter() - t0

    # ground truth: exact top-K by float64 dot product over the live chunks
    live = np.array(live_ids, dtype=np.int64)
    m64 = vectors[live - 1].astype(np.float64)
    scores = m64 @ queries.astype(np.float64).T  # (n, q)
    truth: list[list[int]] = []
    gaps: list[float] = []
    for j in range(q):
        col = scores[:, j]
        top = np.argpartition(col, -(K + 1))[-(K + 1) :]
        top = top[np.argsort(-col[top], kind="stable")]
        truth.append([int(x) for x in live[top[:K]]])
        gaps.append(float(col[top[K - 1]] - col[top[K]]))
    (workdir / QUERIES_NAME).write_bytes(queries.tobytes())
    (workdir / TRUTH_NAME).write_text(json.dumps({"ids": truth, "chunks": n, "dim": dim}))
    return {
        "candidate": "prepare",
        "status": "ok",
        "chunks": n,
        "retired_chunks": n_retired,
        "dim": dim,
        "queries": q,
        "generate_s": gen_s,
        "insert_s": insert_s,
        "db_mib": _db_bytes(db) / 2**20,
        "min_gap_10th_11th": min(gaps),
        "top1_score_median": float(np.median(scores.max(axis=0))),
    }


# --- numpy exact search -------------------------------------------------------------------------------


def _blas_info() -> dict[str, Any]:
    """Which BLAS numpy runs, with which kernel and threads (threadpoolctl, else ctypes)."""
    env = {name: os.environ.get(name) for name in OPENBLAS_VARS}
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        pass
    else:
        for lib in threadpool_info():
            if lib.get("user_api") == "blas":
                return {
                    "env": env,
                    "lib": lib.get("internal_api"),
                    "version": lib.get("version"),
                    "kernel": lib.get("architecture"),
                    "threads": lib.get("num_threads"),
                    "via": "threadpoolctl",
                }
    # fallback: find a loaded OpenBLAS and ask it directly (what threadpoolctl does)
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return {"env": env, "kernel": None, "via": "unavailable"}
    paths = sorted({line.split()[-1] for line in maps.splitlines() if "openblas" in line.lower()})
    for path in paths:
        try:
            lib_handle = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix in ("scipy_openblas", "openblas"):
            for suffix in ("64_", ""):
                getter = getattr(lib_handle, f"{prefix}_get_corename{suffix}", None)
                threads = getattr(lib_handle, f"{prefix}_get_num_threads{suffix}", None)
                if getter is None:
                    continue
                getter.restype = ctypes.c_char_p
                raw = getter()
                return {
                    "env": env,
                    "lib": "openblas",
                    "kernel": raw.decode() if raw else None,
                    "threads": int(threads()) if threads is not None else None,
                    "via": "ctypes",
                    "path": path,
                }
    return {"env": env, "kernel": None, "via": "no openblas found"}


Loader = Callable[[sqlite3.Connection, int, str], tuple[Any, Any]]


def _load_join(conn: sqlite3.Connection, dim: int, sql: str) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
    """fetchall, then one bytes join and one np.frombuffer (read-only result, no further copy)."""
    import numpy as np

    rows = conn.execute(sql, (EMBEDDER,)).fetchall()
    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    matrix = np.frombuffer(b"".join([r[1] for r in rows]), dtype=np.float32).reshape(len(rows), dim)
    return ids, matrix


def _load_prealloc(
    conn: sqlite3.Connection, dim: int, sql: str
) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
    """count(*), np.empty((n, dim)), then fill row by row with np.frombuffer while iterating."""
    import numpy as np

    n = conn.execute(LIVE_COUNT_SQL).fetchone()[0]
    ids = np.empty(n, dtype=np.int64)
    matrix = np.empty((n, dim), dtype=np.float32)
    i = -1
    for i, (cid, blob) in enumerate(conn.execute(sql, (EMBEDDER,))):
        ids[i] = cid
        matrix[i] = np.frombuffer(blob, dtype=np.float32)  # ValueError on a blob of the wrong size
    return ids[: i + 1], matrix[: i + 1]


def _load_memview(
    conn: sqlite3.Connection, dim: int, sql: str
) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
    """count(*), np.empty((n, dim)), then copy each blob into a byte memoryview slice (no numpy per row)."""
    import numpy as np

    n = conn.execute(LIVE_COUNT_SQL).fetchone()[0]
    matrix = np.empty((n, dim), dtype=np.float32)
    buf = matrix.data.cast("B")
    row = dim * 4
    ids: list[int] = []
    append = ids.append
    off = 0
    for cid, blob in conn.execute(sql, (EMBEDDER,)):
        buf[off : off + row] = blob  # ValueError on a blob of the wrong size
        append(cid)
        off += row
    return np.array(ids, dtype=np.int64), matrix[: len(ids)]


LOADERS: dict[str, Loader] = {"join": _load_join, "prealloc": _load_prealloc, "memview": _load_memview}


def _read_all(db: Path, loader: Loader, dim: int, sql: str) -> tuple[Any, Any]:
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("BEGIN")  # one read snapshot for count(*) and the rows
        out = loader(conn, dim, sql)
        conn.execute("COMMIT")
    finally:
        conn.close()
    return out


def run_numpy(workdir: Path, dim: int, method: str, sql_name: str, load_repeats: int) -> dict[str, Any]:
    try:
        import numpy as np
    except ImportError as exc:
        return {"status": "not installed", "error": str(exc)}
    db = workdir / DB_NAME
    queries = [np.frombuffer(b, dtype=np.float32) for b in _load_queries(workdir, dim)]
    truth = _load_truth(workdir)
    loader = LOADERS[method]
    sql = LIVE_VECTORS_SQL[sql_name]

    rss0 = _rss_bytes()
    t0 = time.perf_counter()
    ids, matrix = _read_all(db, loader, dim, sql)
    loads = [time.perf_counter() - t0]
    peak_added = peak_rss_bytes() - rss0
    held_added = _rss_bytes() - rss0
    for _ in range(load_repeats - 1):  # later loads: timing only (RSS was taken on the first)
        del ids, matrix
        t0 = time.perf_counter()
        ids, matrix = _read_all(db, loader, dim, sql)
        loads.append(time.perf_counter() - t0)

    def search(qv: NDArray[np.float32]) -> list[int]:
        scores = matrix @ qv  # cosine = dot product: the vectors are unit length
        top = np.argpartition(scores, -K)[-K:]
        top = top[np.argsort(-scores[top])]
        return [int(x) for x in ids[top]]

    t0 = time.perf_counter()
    search(queries[0])
    first_ms = (time.perf_counter() - t0) * 1000
    for qv in queries[:WARMUP]:
        search(qv)
    lat: list[float] = []
    found: list[list[int]] = []
    for qv in queries:
        t0 = time.perf_counter()
        hits = search(qv)
        lat.append(time.perf_counter() - t0)
        found.append(hits)
    return {
        "status": "ok",
        "load_method": method,
        "load_sql": sql_name,
        "vectors": int(matrix.shape[0]),
        "build_s": sorted(loads)[len(loads) // 2],
        "load_runs_s": loads,
        "first_query_ms": first_ms,
        **_latency_summary(lat),
        "queries": len(lat),
        "recall_at_10": _recall(found, truth),
        "rss_peak_added_mib": peak_added / 2**20,
        "rss_held_added_mib": held_added / 2**20,
        "matrix_mib": matrix.nbytes / 2**20,
        "numpy": np.__version__,
        "sqlite": sqlite3.sqlite_version,
        "blas": _blas_info(),
    }


# --- sqlite-vec through apsw or pysqlite3 -------------------------------------------------------------


@dataclass
class _Db:
    """The few calls this benchmark needs, over an apsw or a pysqlite3 (DB-API) connection."""

    conn: Any
    sqlite_version: str
    close: Callable[[], None]

    def rows(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        return list(self.conn.execute(sql, params))

    def run(self, sql: str, params: Sequence[object] = ()) -> None:
        for _ in self.conn.execute(sql, params):
            pass


def _open_vec(driver: str, db: Path) -> tuple[_Db, str]:
    """Open *db* with sqlite-vec loaded; ImportError when the driver or sqlite_vec is missing."""
    import sqlite_vec

    if driver == "apsw":
        import apsw

        aconn = apsw.Connection(str(db))
        aconn.enable_load_extension(True)
        aconn.load_extension(sqlite_vec.loadable_path())
        aconn.enable_load_extension(False)
        handle = _Db(aconn, apsw.sqlite_lib_version(), aconn.close)
        label = f"apsw {apsw.apsw_version()}"
    else:
        from pysqlite3 import dbapi2

        pconn = dbapi2.connect(str(db), isolation_level=None)
        pconn.enable_load_extension(True)
        pconn.load_extension(sqlite_vec.loadable_path())
        pconn.enable_load_extension(False)
        handle = _Db(pconn, dbapi2.sqlite_version, pconn.close)
        label = "pysqlite3-binary"
    version = handle.rows("SELECT vec_version()")[0][0]
    return handle, f"{label}: sqlite {handle.sqlite_version}, sqlite-vec {version}"


VEC_TABLE = "vec_chunks"
VARIANTS = ("vec0", "vec0-mmap", "scan-mmap")
VEC0_DDL = "CREATE VIRTUAL TABLE {table} USING vec0(embedding float[{dim}] distance_metric=cosine)"
VEC0_FILL = (
    "INSERT INTO {table}(rowid, embedding) SELECT c.id, e.vector "
    "FROM embeddings AS e CROSS JOIN chunks AS c ON c.chunk_hash = e.text_hash "
    "WHERE e.embedder = ? AND c.retired_run IS NULL"
)
VEC0_KNN = "SELECT rowid, distance FROM {table} WHERE embedding MATCH ? AND k = {k} ORDER BY distance"
# no virtual table: sqlite-vec's distance function over the embeddings rows recrawler already has
SCAN_KNN = (
    "SELECT c.id FROM embeddings AS e CROSS JOIN chunks AS c ON c.chunk_hash = e.text_hash "
    "WHERE e.embedder = ? AND c.retired_run IS NULL ORDER BY vec_distance_cosine(e.vector, ?) LIMIT {k}"
)


def run_vec(workdir: Path, dim: int, driver: str, variant: str, scan_queries: int) -> dict[str, Any]:
    db = workdir / f"{driver}.db"
    try:
        handle, versions = _open_vec(driver, db)
    except ImportError as exc:
        return {"status": "not installed", "error": str(exc)}
    queries = _load_queries(workdir, dim)
    truth = _load_truth(workdir)
    if variant == "scan-mmap":
        queries, truth = queries[:scan_queries], truth[:scan_queries]
    rss0 = _rss_bytes()
    out: dict[str, Any] = {"status": "ok", "variant": variant, "versions": versions, "build_s": 0.0}
    try:
        if variant == "vec0":  # this run builds the table (in the driver's own copy of kb.db)
            before = _db_bytes(db)
            t0 = time.perf_counter()
            handle.run(VEC0_DDL.format(table=VEC_TABLE, dim=dim))
            handle.run("BEGIN")
            handle.run(VEC0_FILL.format(table=VEC_TABLE), (EMBEDDER,))
            handle.run("COMMIT")
            out["build_s"] = time.perf_counter() - t0
            handle.run("PRAGMA wal_checkpoint(TRUNCATE)")
            out["disk_added_mib"] = (_db_bytes(db) - before) / 2**20
            out["vectors"] = handle.rows(f"SELECT count(*) FROM {VEC_TABLE}")[0][0]
        else:
            handle.run(f"PRAGMA mmap_size = {MMAP_BYTES}")
        scan = variant == "scan-mmap"
        sql = (SCAN_KNN if scan else VEC0_KNN).format(table=VEC_TABLE, k=K)

        def search(qb: bytes) -> list[int]:
            params: tuple[object, ...] = (EMBEDDER, qb) if scan else (qb,)
            return [int(r[0]) for r in handle.rows(sql, params)]

        t0 = time.perf_counter()
        search(queries[0])
        out["first_query_ms"] = (time.perf_counter() - t0) * 1000
        for qb in queries[: min(WARMUP, len(queries))]:
            search(qb)
        lat: list[float] = []
        found: list[list[int]] = []
        for qb in queries:
            t0 = time.perf_counter()
            hits = search(qb)
            lat.append(time.perf_counter() - t0)
            found.append(hits)
        out.update(_latency_summary(lat))
        out["queries"] = len(lat)
        out["recall_at_10"] = _recall(found, truth)
        out["rss_peak_added_mib"] = (peak_rss_bytes() - rss0) / 2**20
        out["rss_held_added_mib"] = (_rss_bytes() - rss0) / 2**20
    finally:
        handle.close()
    return out


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
