"""The vector benchmark's data and measures: a knowledge base of synthetic vectors, its queries and
exact answers, and the figures every child reports."""

from __future__ import annotations

import hashlib
import json
import os
import random
import sqlite3
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np
    from numpy.typing import NDArray


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
