"""Writes that failed are not counted: a full disk costs a run, the next run completes the knowledge
base by itself, and ``recrawler check`` verifies (and ``--repair`` mends) any database."""

from __future__ import annotations

import re
import resource
import signal
import subprocess
from typing import TYPE_CHECKING

from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.cli import main as cli_main
from tests import docsite, shell, statedb
from tests.conftest_mockserver import REPO_ROOT

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0
# every file the crawl writes stays under this size: the database fills up part way through
DISK = 800_000


def body(i: int) -> str:
    return docsite.page(
        f"Page {i}",
        [("Intro", [f"Page {i} text about feature {i}. " * 20]), ("More", [f"Another section {i}. " * 30])],
    )


def crawl(sitemap: str, db: Path, *, disk: int | None = None) -> subprocess.CompletedProcess[str]:
    def full_disk() -> None:
        # the OS's own answer to a full disk: writes past the limit fail (EFBIG)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (disk, disk))

    # groups of 20 page writes per commit: several commit before the disk is full, the rest are lost
    argv = shell.scrapy_crawl_argv(
        sitemap, f"RECRAWLER_DB_URI=sqlite:///{db}", "RETRY_TIMES=0", "RECRAWLER_DB_BATCH_SIZE=20"
    )
    return subprocess.run(
        argv,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        preexec_fn=full_disk if disk else None,
    )


def summary(result: subprocess.CompletedProcess[str]) -> dict[str, int]:
    line = next(x for x in result.stderr.splitlines() if "crawled:" in x)
    return {k: int(v) for k, v in re.findall(r"(\w+): (\d+)", line.split("|")[0])}


def one(db: Path, sql: str) -> int:
    return int(statedb.value(db, sql))


def check(db: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    capsys.readouterr()
    code = cli_main(["check", "--db", f"sqlite:///{db}", *extra])
    return code, capsys.readouterr().out


def test_a_full_disk_is_not_counted_and_the_next_run_completes_the_kb(
    site: Site, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    names = [f"p{i}.html" for i in range(300)]
    for i, name in enumerate(names):
        site.write(name, body(i), mtime=T0)
    sitemap = site.write_sitemap(names)
    db = tmp_path / "state.db"

    first = crawl(sitemap, db, disk=DISK)
    stored = one(db, "SELECT COUNT(*) FROM pages")
    assert 0 < stored < 300, first.stderr[-3000:]
    counts = summary(first)
    # the summary claims exactly what is stored; the rest are errors, and the run says so
    assert counts["new"] == stored
    assert counts["errors"] == 300 - stored
    assert first.returncode == 5
    state, reasons = statedb.row(db, "SELECT state, reasons FROM runs")
    # the run's own closing write may not fit on the full disk either (which write meets the limit
    # first is a matter of timing): then the run stays as it was, never published, with its lease
    # row, and the next run takes the dead holder's lease over and ends it as aborted
    closing_write_failed = state == "running"
    assert state in ("finished", "running")
    assert reasons in ('["state_error"]', None)
    # every page that is stored is whole: its chunks came with it; a run left running by a process
    # that is gone is the one thing check names then
    code, out = check(db, capsys)
    if closing_write_failed:
        *found, last = out.splitlines()
        assert code == 1
        assert [line.split()[0] for line in found] == ["stale_run"]
        assert last == "1 problem(s); `recrawler check --repair` mends them"
    else:
        assert (code, out) == (0, "ok: every invariant holds\n")

    # space is back: the next run stores the rest, is not held for it, and publishes everything
    second = crawl(sitemap, db)
    assert second.returncode == 0, second.stderr[-2000:]
    states = [row[0] for row in statedb.rows(db, "SELECT state FROM runs ORDER BY id")]
    assert states == ["aborted" if closing_write_failed else "finished", "published"]
    assert summary(second)["new"] == 300 - stored
    assert one(db, "SELECT COUNT(*) FROM pages WHERE status = 'live' AND chunks > 0") == 300
    capsys.readouterr()
    assert cli_main(["chunks", "--db", f"sqlite:///{db}", "--json"]) == 0
    urls = {
        line.split('"url": "')[1].split("#")[0].split('"')[0] for line in capsys.readouterr().out.splitlines()
    }
    assert len(urls) == 300
    assert check(db, capsys) == (0, "ok: every invariant holds\n")


@deferred_f_from_coro_f
async def test_check_finds_drift_and_repair_lets_the_next_run_mend_it(
    site: Site, crawls: Crawls, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio

    names = [f"p{i}.html" for i in range(6)]
    for i, name in enumerate(names):
        site.write(name, body(i), mtime=T0)
    sitemap = site.write_sitemap(names)
    await crawls.crawl(sitemap)
    db = crawls.db_path
    assert check(db, capsys)[0] == 0
    key0, key1 = (site.url(n).split("://")[1] for n in names[:2])
    with statedb.editing(db) as conn:
        # a page lost its chunks, another shows two versions, a local file got in, a run never ended
        conn.execute("DELETE FROM chunks WHERE key = ?", (key0,))
        conn.execute(
            "INSERT INTO chunks (key, chunk_index, chunk_hash, url, heading, text, added_run) "
            "SELECT key, chunk_index, chunk_hash || 'x', url, heading, 'An old version.', added_run - 1 "
            "FROM chunks WHERE key = ?",
            (key1,),
        )
        conn.execute(
            "INSERT INTO pages (key, site, url, status, first_seen) "
            "VALUES ('local/etc/passwd', 'local', 'file:///etc/passwd', 'live', '2026-01-01')"
        )
        conn.execute(
            "INSERT INTO runs (spider, site, started_at, state) VALUES ('docs', 'x', '2026', 'running')"
        )
    code, out = check(db, capsys)
    assert code == 1
    for problem in ("chunk_count", "missing_chunks", "visible_duplicates", "refused_url", "stale_run"):
        assert problem in out
    code, out = await asyncio.to_thread(check, db, capsys, "--repair")
    assert code == 0
    assert "repaired" in out
    # the bot no longer sees the old version nor the local file; the next run re-indexes the page
    capsys.readouterr()
    await crawls.crawl(sitemap)
    assert check(db, capsys) == (0, "ok: every invariant holds\n")
    assert one(db, f"SELECT chunks FROM pages WHERE key = '{key0}'") > 0
    assert one(db, "SELECT COUNT(*) FROM chunks WHERE text = 'An old version.' AND retired_run IS NULL") == 0
    assert one(db, "SELECT COUNT(*) FROM pages WHERE key = 'local/etc/passwd' AND status = 'live'") == 0
