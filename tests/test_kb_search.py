"""The bot's search: exact vectors without loading them, keywords fused in, no padding, both
backends alike (recrawler.kb.ranking, recrawler.state.sqlite.vectors, the readers in recrawler.kb.reader)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from recrawler.integrations.langchain import RecrawlerRetriever
from recrawler.kb.embedders import HashingEmbedder
from recrawler.kb.ranking import Ranked, fuse
from recrawler.kb.reader import open_kb
from recrawler.state.sql.search import BLOCK
from recrawler.words import chunk_words, keyword_terms
from tests import statedb
from tests.kbfill import fill_sync

PROJECT = Path(__file__).resolve().parent.parent

# 120 pages of two sections each; a few carry an exact token a question names
WORDS = [
    "upload",
    "download",
    "mirror",
    "cache",
    "index",
    "build",
    "deploy",
    "config",
    "proxy",
    "token",
    "retry",
    "backoff",
]


def docs_pages() -> dict[str, list[str]]:
    pages = {}
    for i in range(120):
        a, b, c = WORDS[i % 12], WORDS[(i * 5) % 12], WORDS[(i * 7 + 3) % 12]
        pages[f"page{i:03d}"] = [
            f"The {a} step runs before the {b} step; see the {c} guide for details.",
            f"When {a} fails the {c} service logs it and the {b} queue waits.",
        ]
    pages["errors"] = ["Error E4711 means the proxy refused the upload.", "Other errors are logged."]
    pages["settings"] = ["Set max_upload_bytes to cap an upload.", "Settings live in acme.toml."]
    pages["cli"] = ["The --dry-run flag prints what a deploy would do.", "Run acme --help for more."]
    return pages


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def kb_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    uri = (
        f"sqlite:///{tmp_path / 'kb.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("postgres_uri")
    )
    fill_sync(uri, docs_pages())
    return uri


def test_no_zero_score_padding_in_python_retriever_and_cli(kb_uri: str) -> None:
    import io

    from recrawler.cli import main as cli_main

    with open_kb(kb_uri) as kb:
        for mode in ("hybrid", "vector", "keyword"):
            # nothing in common with any page: no hit at all (was: k chunks scoring 0.0)
            assert kb.search("???", k=5, mode=mode) == []
            assert kb.search("zeppelin", k=5, mode=mode) == []
            hits = kb.search("E4711", k=5, mode=mode)
            assert all(h.score > 0 for h in hits)
        # one chunk has the word: the keyword list has one hit, not five
        assert [h.chunk.key.rsplit("/", 1)[1] for h in kb.search("E4711", k=5, mode="keyword")] == ["errors"]
        assert kb.search("E4711", k=5)[0].chunk.key.endswith("/errors")
    retriever = RecrawlerRetriever(uri=kb_uri, k=4)
    try:
        assert retriever.invoke("???") == []
        assert retriever.invoke("E4711")[0].metadata["key"].endswith("/errors")
        assert len(retriever.invoke("E4711", k=1)) == 1
    finally:
        retriever.close()
    out = io.StringIO()
    assert cli_main(["search", "E4711", "-k", "5", "--json", "--db", kb_uri], out=out) == 0
    hits = [json.loads(line) for line in out.getvalue().splitlines()]
    assert hits[0]["key"].endswith("/errors")
    assert all(h["score"] > 0 for h in hits)
    out = io.StringIO()
    assert cli_main(["search", "???", "--json", "--db", kb_uri], out=out) == 0
    assert out.getvalue() == ""


@pytest.mark.parametrize(
    ("question", "page"),
    [
        ("what does error E4711 mean?", "errors"),
        ("how do I cap uploads with max_upload_bytes", "settings"),
        ("what does --dry-run do", "cli"),
    ],
)
def test_an_exact_token_finds_its_page_with_the_hashing_embedder(
    kb_uri: str, question: str, page: str
) -> None:
    with open_kb(kb_uri) as kb:
        assert kb.search(question, k=3)[0].chunk.key.endswith(f"/{page}")
        assert kb.search(question, k=3, mode="keyword")[0].chunk.key.endswith(f"/{page}")


@pytest.mark.postgres
def test_both_backends_return_the_same_hits(tmp_path: Path, postgres_uri: str) -> None:
    lite = f"sqlite:///{tmp_path / 'kb.db'}"
    for uri in (lite, postgres_uri):
        fill_sync(uri, docs_pages())
    questions = [
        "???",
        "E4711",
        "retry backoff",
        "upload proxy token",
        "--dry-run deploy",
        "max_upload_bytes",
    ]
    with open_kb(lite) as a, open_kb(postgres_uri) as b:
        for q in questions:
            for mode in ("vector", "hybrid", "keyword"):
                left = [
                    (h.chunk.key, h.chunk.chunk_index, round(h.score, 4)) for h in a.search(q, k=5, mode=mode)
                ]
                right = [
                    (h.chunk.key, h.chunk.chunk_index, round(h.score, 4)) for h in b.search(q, k=5, mode=mode)
                ]
                assert left == right, (q, mode)


def test_keyword_terms_and_fusion() -> None:
    assert keyword_terms("How do I set retry_limit in acme.toml?") == [
        "set",
        "retry",
        "limit",
        "acme",
        "toml",
    ]
    assert keyword_terms("???") == []
    # a chunk is found by the words a query can look for: split alike, function words left out,
    # each once; a word longer than PostgreSQL's full-text index takes is left out too
    words = chunk_words("Limits", f"Set retry_limit in acme.toml: the limit is 5. {'x' * 2047} Übergröße")
    assert sorted(words.split()) == ["5", "acme", "limit", "limits", "retry", "set", "toml", "übergröße"]
    assert chunk_words("", "") == ""
    # ASCII text takes a faster split: the same words as a query's split
    ascii_words = chunk_words("Limits", "Set retry_limit in acme.toml: the limit is 5.")
    assert sorted(ascii_words.split()) == ["5", "acme", "limit", "limits", "retry", "set", "toml"]
    every_ascii = "".join(map(chr, range(128))) + " Tab\tSep_X\x1fz--dry-RUN {k: v} " + "y" * 600
    assert sorted(chunk_words("", every_ascii).split()) == sorted(keyword_terms(every_ascii))
    assert chunk_words("", f"a {'y' * 3000} b") == "b"
    v = [Ranked(1, "a", 0, 0.9), Ranked(2, "b", 0, 0.5)]
    k = [Ranked(2, "b", 0), Ranked(3, "c", 0)]
    fused = fuse(v, k, "hybrid", 5)
    assert [r.id for r, _ in fused] == [2, 1, 3]
    assert fused[0][1] == pytest.approx((1 / 62 + 1 / 61) / (2 / 61))
    assert fused[0][0].similarity == 0.5
    assert [s for _, s in fuse(v, k, "vector", 5)] == [0.9, 0.5]
    assert fuse([], [], "hybrid", 5) == []


def synthetic_kb(path: Path, n: int, seed: int = 7) -> np.ndarray:
    """A published knowledge base of *n* chunks (one page per 10) with random unit vectors stored
    as the hashing embedder's; half of the pages on a second site; the vector blocks written.
    Random vectors are all about as far from a query (cosines near 0): the tests over them search
    with no similarity floor (``min_similarity=0.0``), what they check is the scan."""
    from recrawler.state.sql.dialect import drive
    from recrawler.state.sql.search import build_blocks
    from recrawler.state.sqlite.versions import _execute, migrate

    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    emb = HashingEmbedder().id
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    migrate(conn, str(path), dry_run=False)
    conn.execute("BEGIN")
    stamp = "2026-01-01T00:00:00+00:00"
    for site_run, site in ((1, "a.example"), (2, "b.example")):
        conn.execute(
            "INSERT INTO runs (id, spider, site, started_at, state, published_at, embedder) "
            "VALUES (?, 'docs', ?, ?, 'published', ?, 'hashing')",
            (site_run, site, stamp, stamp),
        )
    conn.execute(
        "INSERT INTO runs (id, spider, site, started_at, state) VALUES (3, 'docs', 'a.example', ?, 'held')",
        (stamp,),
    )
    pages, chunks, embeddings = [], [], []
    for i in range(n):
        site = "a.example" if (i // 10) % 2 == 0 else "b.example"
        key = f"{site}/p{i // 10}"
        if i % 10 == 0:
            pages.append((key, site, f"https://{key}", stamp))
        # every 7th chunk is only in the held run: invisible
        run = 3 if i % 7 == 3 else (1 if site == "a.example" else 2)
        h = f"{i:064x}"
        chunks.append((i + 1, key, i % 10, h, f"https://{key}#s{i % 10}", "H", f"text {i}", run))
        embeddings.append((emb, h, vectors[i].tobytes()))
    conn.executemany("INSERT INTO pages (key, site, url, first_seen) VALUES (?, ?, ?, ?)", pages)
    conn.executemany(
        "INSERT INTO chunks (id, key, chunk_index, chunk_hash, url, heading, text, added_run) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        chunks,
    )
    conn.executemany("INSERT INTO embeddings (embedder, text_hash, vector) VALUES (?, ?, ?)", embeddings)
    drive(build_blocks(emb), lambda op: _execute(conn, op))
    conn.execute("COMMIT")
    conn.close()
    return vectors


def test_vector_search_is_exact_over_blocks_and_tail_with_visibility_and_site(tmp_path: Path) -> None:
    n = 2 * BLOCK + 3000  # two blocks and a tail
    path = tmp_path / "kb.db"
    vectors = synthetic_kb(path, n)
    assert statedb.value(path, "SELECT COUNT(*) FROM vector_blocks") == 2
    visible = np.array([i % 7 != 3 for i in range(n)])
    site_a = np.array([(i // 10) % 2 == 0 for i in range(n)])
    embedder = HashingEmbedder()
    queries = [f"query {w} {w2}" for w in WORDS for w2 in WORDS[:3]]
    with open_kb(f"sqlite:///{path}", min_similarity=0.0) as kb:
        for q in queries:
            qv = embedder.embed([q])[0].astype(np.float64)
            scores = vectors.astype(np.float64) @ qv
            for site, mask in ((None, visible), ("a.example", visible & site_a)):
                ranked = np.flatnonzero(mask & (scores > 0))
                want = ranked[np.argsort(-scores[ranked], kind="stable")][:10]
                got = kb.search(q, k=10, site=site, mode="vector")
                assert [h.chunk.chunk_hash for h in got] == [f"{i:064x}" for i in want], (q, site)
                assert [round(h.score, 5) for h in got] == [round(float(scores[i]), 5) for i in want]


def test_a_warm_search_keeps_columns_within_its_bound_and_stays_exact(tmp_path: Path) -> None:
    """One process, many queries: the columns it keeps (none, a few with evictions, all) give the
    exact ranking; a block written meanwhile by a publishing run drops what was kept, and the
    searches after it are exact over the new block too."""
    from recrawler.exceptions import ConfigurationError
    from recrawler.state.sql.dialect import drive
    from recrawler.state.sql.search import build_blocks
    from recrawler.state.sqlite.versions import _execute

    n = 2 * BLOCK + 700
    path = tmp_path / "kb.db"
    vectors = synthetic_kb(path, n)
    conn = sqlite3.connect(path, isolation_level=None)
    # as a store left by a run that had one block to write: the second block is still tail
    conn.execute("DELETE FROM vector_columns WHERE block = 1")
    conn.execute("DELETE FROM vector_blocks WHERE block = 1")
    visible = np.array([i % 7 != 3 for i in range(n)])
    embedder = HashingEmbedder()
    queries = [f"{w} {w2} guide" for w in WORDS for w2 in WORDS[::4]]
    want = {}
    for q, scores in zip(
        queries, embedder.embed(queries).astype(np.float64) @ vectors.T.astype(np.float64), strict=True
    ):
        ranked = np.flatnonzero(visible & (scores > 0))
        want[q] = [f"{i:064x}" for i in ranked[np.argsort(-scores[ranked], kind="stable")][:10]]

    # a dimension of a block is 16 KB and its scale: 0.1 MiB keeps 6 of the 2 blocks' dimensions
    kbs = [open_kb(f"sqlite:///{path}", cache_mb=mb, min_similarity=0.0) for mb in (0, 0.1, 1000)]
    try:
        for written in (False, True):
            if written:
                conn.execute("BEGIN")
                assert drive(build_blocks(embedder.id), lambda op: _execute(conn, op)) == 1
                conn.execute("COMMIT")
            for q in queries:
                for kb in kbs:
                    got = kb.search(q, k=10, mode="vector")
                    assert [h.chunk.chunk_hash for h in got] == want[q], (q, written)
            kept = [kb._scan._cached for kb in kbs]
            assert kept[0] == 0
            assert 0 < kept[1] <= 0.1 * 2**20
            assert kept[2] > 0.1 * 2**20
    finally:
        for kb in kbs:
            kb.close()
        conn.close()
    with pytest.raises(ConfigurationError, match="RECRAWLER_SEARCH_CACHE_MB"):
        open_kb(f"sqlite:///{path}", cache_mb=-1)


def test_a_cold_search_reads_only_what_it_needs(tmp_path: Path) -> None:
    """A fresh `recrawler search` over 120,000 chunks: the vectors (184 MB as float32) are never
    all in memory (the process stays under 150 MB), and neither Scrapy nor the crawl's side of
    recrawler (change detection, the state store) is loaded."""
    path = tmp_path / "kb.db"
    synthetic_kb(path, 120_000)
    probe = (
        "import sys\n"
        "from recrawler.cli import main\n"
        "argv = ['search', 'deploy upload retry', '-k', '5', '--json', '--db', sys.argv[1]]\n"
        "code = main([*argv, '--min-similarity', '0'])\n"
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1]\n"
        "crawl_side = sorted(m for m in sys.modules if m.startswith(('recrawler.detect', "
        "'recrawler.state.sqlite.database', 'recrawler.state.sqlite.store')))\n"
        "print(','.join(crawl_side) or '-', file=sys.stderr)\n"
        "print('scrapy' in sys.modules, int(hwm) // 1024, file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCRAPY_", "RECRAWLER_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT), env.get("PYTHONPATH")]))
    # VmHWM is the child's own peak (it starts again at exec; ru_maxrss would carry this process's)
    proc = subprocess.run(
        [sys.executable, "-c", probe, f"sqlite:///{path}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 5
    crawl_side, loaded_scrapy, peak_mib = proc.stderr.split()[-3:]
    assert crawl_side == "-"
    assert loaded_scrapy == "False"
    assert int(peak_mib) < 150


def test_float16_blocks_of_an_older_store_are_searched_exact_and_written_again(tmp_path: Path) -> None:
    """Blocks written as float16 columns (before int8 columns) rank exactly as before; the next
    publish writes them again as int8 columns, and the ranking stays the exact one."""
    from recrawler.state.sql.dialect import drive
    from recrawler.state.sql.search import build_blocks
    from recrawler.state.sqlite.versions import _execute

    path = tmp_path / "kb.db"
    n = BLOCK + 500
    vectors = synthetic_kb(path, n)
    conn = sqlite3.connect(path, isolation_level=None)
    # the columns as an older version wrote them: float16, 2 bytes a number, no scale
    conn.execute("BEGIN")
    columns = vectors[:BLOCK].T.astype("<f2")
    conn.executemany(
        "UPDATE vector_columns SET data = ? WHERE block = 0 AND dim = ?",
        [(columns[d].tobytes(), d) for d in range(columns.shape[0])],
    )
    conn.execute("COMMIT")
    visible = np.array([i % 7 != 3 for i in range(n)])
    embedder = HashingEmbedder()

    def check() -> None:
        with open_kb(f"sqlite:///{path}", min_similarity=0.0) as kb:
            for w in WORDS:
                qv = embedder.embed([f"query {w}"])[0].astype(np.float64)
                scores = vectors.astype(np.float64) @ qv
                ranked = np.flatnonzero(visible & (scores > 0))
                want = ranked[np.argsort(-scores[ranked], kind="stable")][:10]
                got = kb.search(f"query {w}", k=10, mode="vector")
                assert [h.chunk.chunk_hash for h in got] == [f"{i:064x}" for i in want], w

    check()
    conn.execute("BEGIN")
    assert drive(build_blocks(embedder.id), lambda op: _execute(conn, op)) == 1
    conn.execute("COMMIT")
    sizes = conn.execute("SELECT DISTINCT length(data) FROM vector_columns").fetchall()
    conn.close()
    assert sizes == [(BLOCK + 4,)]
    check()


def test_writing_a_block_holds_its_int8_columns_not_its_vectors_over_and_over(tmp_path: Path) -> None:
    """A publishing run writes the vector blocks of what it embedded (a block per 16,384 vectors)
    in the crawl's own process, at its end: a block's writing holds its int8 columns and a page
    of rows, never the block's float32 vectors (25 MB at 384 dimensions) copied five times (rows,
    joined, transposed, scaled, rounded: 127 MiB more at the end of a 100,000-page first run).
    The columns written are the ones the whole block gives (the search test above checks the
    ranking)."""
    import tracemalloc

    from recrawler.state.sql.dialect import drive
    from recrawler.state.sql.search import build_blocks, encode_columns
    from recrawler.state.sqlite.versions import _execute

    path = tmp_path / "kb.db"
    vectors = synthetic_kb(path, BLOCK + 200)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("DELETE FROM vector_columns")
    conn.execute("DELETE FROM vector_blocks")
    embedder = HashingEmbedder()
    vectors_bytes = BLOCK * vectors.shape[1] * 4
    conn.execute("BEGIN")
    tracemalloc.start()
    try:
        assert drive(build_blocks(embedder.id), lambda op: _execute(conn, op)) == 1
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    conn.execute("COMMIT")
    assert peak < vectors_bytes / 2, f"{peak / 2**20:.1f} MiB held to write one block"
    written = [bytes(r[0]) for r in conn.execute("SELECT data FROM vector_columns ORDER BY dim")]
    conn.close()
    assert written == encode_columns(vectors[:BLOCK])


def test_a_warm_search_does_not_work_through_every_page(tmp_path: Path) -> None:
    """The SQLite work of one warm search (virtual machine steps) hardly grows with the knowledge
    base: 3,000 or 30,000 chunks, the hits' pages are looked up by key, never all read."""
    steps = {}
    for n in (3_000, 30_000):
        path = tmp_path / f"kb-{n}.db"
        synthetic_kb(path, n)
        with open_kb(f"sqlite:///{path}", min_similarity=0.0) as kb:
            kb.search("deploy upload retry", k=10)  # the tail and the block list, once
            counter = [0]

            def tick(counter: list[int] = counter) -> int:
                counter[0] += 1
                return 0

            kb.reads.conn.set_progress_handler(tick, 100)
            assert len(kb.search("deploy upload retry", k=10, mode="vector")) == 10
            assert len(kb.search("deploy upload retry", k=10, site="b.example")) == 10
            kb.reads.conn.set_progress_handler(None, 100)
            steps[n] = counter[0] * 100
    assert steps[30_000] < 2 * steps[3_000], steps


def test_the_best_positions_are_those_of_a_full_sort() -> None:
    """The vector candidates (a threshold taken from a sample, checked) are the first n of a stable
    sort, ties and filtered-out scores included."""
    from recrawler.kb.sqlite import _best

    rng = np.random.default_rng(3)
    for size, n in ((10, 3), (1000, 40), (200_000, 42), (200_000, 5000)):
        for values in (
            rng.random(size).astype(np.float32),
            np.round(rng.random(size), 2).astype(np.float32),  # many ties
            np.where(rng.random(size) < 0.9, -np.inf, rng.random(size)).astype(np.float32),
            np.zeros(size, dtype=np.float32),
        ):
            want = np.argsort(-values, kind="stable")[:n]
            assert _best(values, n).tolist() == want.tolist(), (size, n)
