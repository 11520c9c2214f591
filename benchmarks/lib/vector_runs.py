"""The vector benchmark's contenders, each run in a child process: numpy over vectors read three
ways, and sqlite-vec's vec0 table and scan."""

from __future__ import annotations

import ctypes
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.lib.runners import peak_rss_bytes
from benchmarks.lib.vector_data import (
    DB_NAME,
    EMBEDDER,
    LIVE_COUNT_SQL,
    LIVE_VECTORS_SQL,
    MMAP_BYTES,
    OPENBLAS_VARS,
    WARMUP,
    K,
    _db_bytes,
    _latency_summary,
    _load_queries,
    _load_truth,
    _recall,
    _rss_bytes,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np
    from numpy.typing import NDArray


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
