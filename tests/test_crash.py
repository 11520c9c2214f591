"""A run killed with SIGKILL half way, then rerun, ends in the state of an uninterrupted run."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from scrapy.utils.defer import deferred_f_from_coro_f

from tests import docsite, shell, statedb
from tests.noise_furniture import counted_from_scratch, counters
from tests.waiting import until

if TYPE_CHECKING:
    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

REPO = Path(__file__).resolve().parent.parent
T0 = 1_760_000_000.0
N = 40
COLUMNS = "key, url, status, content_hash, etag, last_modified, misses"


def _state(db: Path) -> list[tuple[object, ...]]:
    return statedb.rows(db, f"SELECT {COLUMNS} FROM pages ORDER BY key")


def _children(pid: int) -> list[int]:
    """The live child processes of *pid* (Linux /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    """Running or sleeping: a zombie waiting for its new parent to reap it is over."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@deferred_f_from_coro_f
async def test_sigkill_midway_then_rerun_matches_uninterrupted(
    site: Site, crawls: Crawls, tmp_path: Path
) -> None:
    for i in range(N):
        site.write(f"p{i:02d}.html", docsite.page(f"Page {i}", [("S", [f"Text {i}."])]), mtime=T0)
    sitemap = site.write_sitemap([f"p{i:02d}.html" for i in range(N)])

    # the reference: one uninterrupted run into its own database
    await crawls.crawl(sitemap)
    reference = _state(crawls.db_path)
    reference_counters = counters(crawls.db_path)
    assert reference_counters[0]  # the reference counted its blocks
    assert len(reference) == N

    # the victim: a real `scrapy crawl docs` process, killed while one page hangs mid-crawl
    site.options("p20.html", hang=True)
    db = tmp_path / "killed.db"
    proc = subprocess.Popen(
        shell.scrapy_crawl_argv(
            sitemap,
            f"RECRAWLER_DB_URI=sqlite:///{db}",
            "RECRAWLER_DB_BATCH_SIZE=4",
            "CONCURRENT_REQUESTS=1",
            "DOWNLOAD_TIMEOUT=120",
            "LOG_LEVEL=WARNING",
        ),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ},
    )
    try:
        until(lambda: any(r["path"] == "p20.html" for r in site.requests()), "p20.html requested", timeout=30)

        def committed() -> int:
            if not db.exists():
                return 0
            try:
                return int(statedb.value(db, "SELECT COUNT(*) FROM pages"))
            except sqlite3.OperationalError:
                return 0

        until(lambda: committed() >= 4, "4 pages committed", timeout=30)
        workers = _children(proc.pid)
        assert workers  # its CPU worker processes
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    # no worker outlives its crawl process
    until(lambda: not any(_alive(pid) for pid in workers), "the CPU workers gone", timeout=10)
    partial = _state(db)
    assert 0 < len(partial) < N  # killed half way: some pages committed, not all
    assert statedb.value(db, "PRAGMA integrity_check") == "ok"
    assert statedb.rows(db, "SELECT finish_reason FROM runs") == [(None,)]
    # the committed pages' block statistics wait, as deltas, for a reconciliation
    assert statedb.value(db, "SELECT COUNT(*) FROM block_deltas") == len(partial)

    # rerun on the killed database: it completes the work
    site.options("p20.html", hang=None)
    crawls.db_path, crawls.db_uri = db, f"sqlite:///{db}"
    rerun = await crawls.crawl(sitemap)
    assert _state(db) == reference
    # the rerun folded the killed run's deltas with its own: the counters match the stored pages
    assert counters(db) == counted_from_scratch(db) == reference_counters
    assert rerun.counts["new"] == N - len(partial)
    assert rerun.counts["unchanged"] == len(partial)
