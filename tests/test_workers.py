"""Several workers, one run: scrapy-redis's frontier on a real redis-server, worker processes of
`scrapy crawl docs` against the local site; the result equals a single worker's."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
from collections import Counter
from contextlib import closing
from typing import TYPE_CHECKING, Any

import pytest

from recrawler.kb.reader import open_kb
from tests import docsite, shell, statedb
from tests.conftest_mockserver import REPO_ROOT
from tests.waiting import until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.conftest_mockserver import Site

pytest.importorskip("scrapy_redis", reason="scrapy-redis is not installed (the test extra brings it)")
REDIS = shutil.which("redis-server")
pytestmark = pytest.mark.skipif(REDIS is None, reason="redis-server is not installed (.ci/run installs it)")

T0 = 1_760_000_000.0
PAGES = 60


def free_port() -> int:
    with closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A throwaway redis-server on loopback, stopped after the test."""
    assert REDIS is not None
    port = free_port()
    data = tmp_path / "redis"
    data.mkdir()
    proc = subprocess.Popen(
        [
            REDIS,
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--dir",
            str(data),
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # redis-server says when it listens: wait for that line on its output (EOF: it exited)
        assert proc.stdout is not None
        for line in proc.stdout:
            if "Ready to accept connections" in line:
                break
        else:
            raise AssertionError(f"redis-server exited ({proc.wait()}) before accepting connections")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


def argv(sitemap: str, db: Path, *settings: str) -> list[str]:
    return shell.scrapy_crawl_argv(
        sitemap,
        f"RECRAWLER_DB_URI=sqlite:///{db}", "RETRY_TIMES=0", "RECRAWLER_SCHEDULE=all",
        "RECRAWLER_AUDIT_SAMPLE=0", "LOG_LEVEL=INFO", "RECRAWLER_DB_BATCH_SIZE=10",
        "CONCURRENT_REQUESTS=4", "DOWNLOAD_DELAY=0.01",
        f"RECRAWLER_EVENTS_URI=file://{db.with_suffix('.jsonl')}", *settings,
    )  # fmt: skip


def single(sitemap: str, db: Path) -> subprocess.CompletedProcess[str]:
    return shell.run_in_checkout(argv(sitemap, db), timeout=300)


def workers(sitemap: str, db: Path, redis_url: str, n: int = 2) -> list[tuple[int, str]]:
    """*n* worker processes started alike; returns each one's exit code and log."""
    # one request at a time per worker, 0.2 s apart: the leader cannot finish before the others join
    extra = (
        "RECRAWLER_WORKERS_ENABLED=1", f"REDIS_URL={redis_url}", "RECRAWLER_WORKERS_TTL_SECS=5",
        "CONCURRENT_REQUESTS_PER_DOMAIN=1", "DOWNLOAD_DELAY=0.2",
    )  # fmt: skip
    procs = [
        subprocess.Popen(
            argv(sitemap, db, *extra),
            cwd=REPO_ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    out = []
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        out.append((proc.returncode, err))
    return out


def state(db: Path) -> dict[str, Any]:
    """What a run leaves that a bot or the next run reads: pages, the published chunks, run states."""
    pages = sorted(statedb.rows(db, "SELECT key, status, content_hash, chunks FROM pages"))
    runs = [r[0] for r in statedb.rows(db, "SELECT state FROM runs ORDER BY id")]
    with open_kb(f"sqlite:///{db}", embedder="hashing") as kb:
        chunks = sorted((c.key, c.chunk_index, c.chunk_hash) for c in kb.chunks())
    return {"pages": pages, "chunks": chunks, "runs": runs}


def actions(db: Path, run: int) -> Counter[str]:
    lines = db.with_suffix(".jsonl").read_text().splitlines()
    return Counter(e["action"] for e in map(json.loads, lines) if e["run_id"] == run)


def summary_of(logs: list[tuple[int, str]]) -> str:
    lines = [line for _, err in logs for line in err.splitlines() if "crawled:" in line]
    assert len(lines) == 1, "exactly one process reports the run"
    return lines[0]


def test_two_workers_share_one_run_and_leave_what_one_worker_would(
    site: Site, tmp_path: Path, redis_url: str
) -> None:
    names = [f"p{i}.html" for i in range(PAGES)]
    for i, name in enumerate(names):
        site.write(name, docsite.page(f"P{i}", [("Intro", [f"Text of page {i}."])]), mtime=T0)
    sitemap = site.write_sitemap(names)
    one, many = tmp_path / "one.db", tmp_path / "many.db"

    assert single(sitemap, one).returncode == 0
    first = workers(sitemap, many, redis_url)
    assert [code for code, _ in first] == [0, 0], first[0][1][-2000:] + first[1][1][-2000:]
    logs = first[0][1] + first[1][1]
    assert "joined run 1 as a worker" in logs
    # the joining worker fetched and classified pages of the run too
    assert "worker done" in logs
    joined = next(err for _, err in first if "joined run" in err)
    assert "'recrawler/page/new':" in joined
    assert "crawled: 60 new: 60 changed: 0 unchanged: 0 gone: 0 errors: 0" in summary_of(first)
    assert state(many) == state(one)
    # a normal run prints no deprecation warning (scrapy-redis's own calls are filtered where
    # recrawler places it)
    assert [line for line in logs.splitlines() if "Warning" in line] == []

    # the next week: three edits, one page gone; the seen-set of the last run must not skip anything
    for i in (1, 2, 3):
        site.write(names[i], docsite.page(f"P{i}", [("Intro", [f"New text of page {i}."])]), mtime=T0 + 50)
    site.remove(names[4], gone=True)
    assert single(sitemap, one).returncode == 0
    second = workers(sitemap, many, redis_url)
    assert [code for code, _ in second] == [0, 0], second[0][1][-2000:] + second[1][1][-2000:]
    assert "crawled: 60 new: 0 changed: 3 unchanged: 56 gone: 1 errors: 0" in summary_of(second)
    assert state(many) == state(one)
    # each page classified once: one event per change, none twice
    assert actions(many, 2) == actions(one, 2) == Counter({"changed": 3, "gone": 1})


def start_worker(sitemap: str, db: Path, redis_url: str, log: Path) -> subprocess.Popen[bytes]:
    """One worker process (as :func:`workers` starts them), its log in *log*."""
    extra = (
        "RECRAWLER_WORKERS_ENABLED=1", f"REDIS_URL={redis_url}", "RECRAWLER_WORKERS_TTL_SECS=2",
        "CONCURRENT_REQUESTS_PER_DOMAIN=1", "DOWNLOAD_DELAY=0.1",
    )  # fmt: skip
    with log.open("wb") as out:
        return subprocess.Popen(
            argv(sitemap, db, *extra), cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=out
        )


def killed_mid_run(site: Site, tmp_path: Path, redis_url: str, *, kill: str) -> dict[str, Any]:
    """Two workers on a first run of a 150-page site; *kill* (``leader`` or ``worker``) is
    SIGKILLed once the other joined and 40 pages were fetched. The survivor's exit code and log."""
    names = [f"p{i}.html" for i in range(150)]
    for i, name in enumerate(names):
        site.write(name, docsite.page(f"P{i}", [("Intro", [f"Text of page {i}."])]), mtime=T0)
    sitemap = site.write_sitemap(names)
    db = tmp_path / "many.db"
    logs = {role: tmp_path / f"{role}.log" for role in ("leader", "worker")}
    procs = {"leader": start_worker(sitemap, db, redis_url, logs["leader"])}
    until(lambda: "recrawler run 1" in logs["leader"].read_text(), "the leader's run")
    procs["worker"] = start_worker(sitemap, db, redis_url, logs["worker"])
    try:
        until(lambda: "joined run 1 as a worker" in logs["worker"].read_text(), "the worker joining")
        until(lambda: sum(1 for r in site.requests() if r["path"].startswith("p")) >= 40, "40 pages fetched")
        procs[kill].kill()
        procs[kill].wait(timeout=10)
        survivor = "worker" if kill == "leader" else "leader"
        code = procs[survivor].wait(timeout=120)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return {"code": code, "log": logs[survivor].read_text(), "db": db, "sitemap": sitemap}


def test_a_worker_killed_mid_run_is_noticed_and_the_run_ends_unfinished(
    site: Site, tmp_path: Path, redis_url: str
) -> None:
    got = killed_mid_run(site, tmp_path, redis_url, kill="worker")
    log = got["log"]
    assert got["code"] == 7, log[-3000:]
    assert "stopped without leaving it" in log
    summary = next(line for line in log.splitlines() if "crawled:" in line)
    assert "reconcile skipped: worker_lost" in summary
    assert summary.endswith("| exit 7")
    # the pages it had taken, and those never fetched, are checked by the next run: none is lost
    assert statedb.rows(got["db"], "SELECT state, exit_code FROM runs")[0][1] == 7
    nxt = single(got["sitemap"], got["db"])
    assert nxt.returncode == 0, nxt.stderr[-2000:]
    assert statedb.value(got["db"], "SELECT COUNT(*) FROM pages WHERE status = 'live'") == 150


def test_a_worker_whose_leader_was_killed_says_the_run_is_unfinished(
    site: Site, tmp_path: Path, redis_url: str
) -> None:
    got = killed_mid_run(site, tmp_path, redis_url, kill="leader")
    assert got["code"] == 7, got["log"][-3000:]
    assert "the leader of run 1 is gone: the run is unfinished" in got["log"]
    assert "the leader closes run" not in got["log"]
