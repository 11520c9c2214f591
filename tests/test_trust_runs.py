"""One run at a time per site, and an outcome a script can read: ``scrapy crawl docs`` as cron runs it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from recrawler.cli import main as cli_main
from tests import docsite, shell, statedb
from tests.conftest_mockserver import REPO_ROOT
from tests.waiting import until

if TYPE_CHECKING:
    from pathlib import Path

    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0


def argv(sitemap: str, db: Path, *settings: str) -> list[str]:
    db_uri = f"RECRAWLER_DB_URI=sqlite:///{db}"
    return shell.scrapy_crawl_argv(sitemap, db_uri, "RETRY_TIMES=0", "RECRAWLER_SCHEDULE=all", *settings)


def crawl(sitemap: str, db: Path, *settings: str) -> subprocess.CompletedProcess[str]:
    return shell.run_in_checkout(argv(sitemap, db, *settings))


def runs(db: Path) -> list[dict[str, Any]]:
    return statedb.dicts(db, "SELECT * FROM runs ORDER BY id")


def build(site: Site, n: int = 5) -> str:
    for i in range(n):
        site.write(f"p{i}.html", docsite.feature_page(i), mtime=T0)
    return site.write_sitemap([f"p{i}.html" for i in range(n)])


# --- 6. one run at a time --------------------------------------------------------------------------


def test_a_second_run_of_the_same_site_exits_at_once(site: Site, tmp_path: Path) -> None:
    sitemap = build(site)
    db = tmp_path / "state.db"
    assert crawl(sitemap, db).returncode == 0
    # run 2 stages a miss, then hangs on a page until it is killed
    site.remove("p0.html")
    site.options("p1.html", hang=True)
    first = subprocess.Popen(
        argv(sitemap, db, "DOWNLOAD_TIMEOUT=300"),
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        until(
            lambda: site.requests("p1.html") and site.requests("p0.html"), "the first run to reach its pages"
        )
        until(lambda: any(r["state"] == "running" for r in runs(db)), "the first run's row")
        started = time.monotonic()
        second = crawl(sitemap, db)
        assert time.monotonic() - started < 30
        assert second.returncode == 6
        lines = [line for line in second.stderr.splitlines() if "one run at a time" in line]
        assert len(lines) == 1
        assert "Traceback" not in second.stderr
        # the refused run left no trace: no run row, no misses, no lease taken
        assert len(runs(db)) == 2
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    # the holder is dead: the next run takes the site over at once and marks it aborted
    site.options("p1.html", hang=None)
    third = crawl(sitemap, db)
    assert third.returncode == 0, third.stderr[-2000:]
    states = [r["state"] for r in runs(db)]
    assert states == ["published", "aborted", "published"]
    # the killed run's staged 404 was dropped with it: one 404 is one miss, not two
    assert statedb.value(db, "SELECT COUNT(*) FROM run_misses") == 0
    assert statedb.row(db, "SELECT status, misses FROM pages WHERE url LIKE '%/p0.html'") == (
        "quarantined",
        1,
    )


def test_a_lapsed_lease_is_taken_over(site: Site, tmp_path: Path) -> None:
    sitemap = build(site)
    db = tmp_path / "state.db"
    assert crawl(sitemap, db).returncode == 0
    # a holder on another machine that stopped beating long ago
    with statedb.editing(db) as conn:
        site_key = conn.execute("SELECT site FROM runs").fetchone()[0]
        conn.execute(
            "INSERT INTO runs (spider, site, started_at, state) VALUES ('docs', ?, ?, 'running')",
            (site_key, "2026-01-01T00:00:00+00:00"),
        )
        run_id = conn.execute("SELECT MAX(id) FROM runs").fetchone()[0]
        conn.execute(
            "INSERT INTO leases VALUES (?, ?, 'other-host pid 1', '2026-01-01T00:00:00+00:00', "
            "'2026-01-01T00:00:00+00:00')",
            (site_key, run_id),
        )
    result = crawl(sitemap, db)
    assert result.returncode == 0
    assert "marked aborted" in result.stderr
    assert [r["state"] for r in runs(db)] == ["published", "aborted", "published"]


def test_check_flags_a_killed_run_left_running_and_a_lapsed_lease(
    site: Site, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sitemap = build(site)
    db = tmp_path / "state.db"
    assert crawl(sitemap, db).returncode == 0
    site.options("p1.html", hang=True)
    killed = subprocess.Popen(
        argv(sitemap, db, "DOWNLOAD_TIMEOUT=300"),
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        until(lambda: site.requests("p1.html"), "the run to reach its hanging page")
        until(lambda: any(r["state"] == "running" for r in runs(db)), "the run's row")
        capsys.readouterr()
        # a run in progress, whose process lives and beats: nothing is wrong
        assert cli_main(["check", "--db", f"sqlite:///{db}"]) == 0
        assert capsys.readouterr().out == "ok: every invariant holds\n"
    finally:
        killed.send_signal(signal.SIGKILL)
        killed.wait()
    site.options("p1.html", hang=None)
    # SIGKILLed: its lease row stays, its process is gone
    assert [r["state"] for r in runs(db)] == ["published", "running"]
    assert cli_main(["check", "--db", f"sqlite:///{db}"]) == 1
    out = capsys.readouterr().out
    assert "stale_run          2  run of " in out
    assert f"its process ({socket.gethostname()} pid {killed.pid}) is gone" in out

    # a holder on another machine: alive while it beats, stale once its lease lapsed
    with statedb.editing(db) as conn:
        beat = datetime.now(UTC) - timedelta(seconds=10)
        conn.execute("UPDATE leases SET holder = 'other-host pid 1', heartbeat_at = ?", (beat.isoformat(),))
    assert cli_main(["check", "--db", f"sqlite:///{db}"]) == 0
    capsys.readouterr()
    with statedb.editing(db) as conn:
        beat = datetime.now(UTC) - timedelta(seconds=70)
        conn.execute("UPDATE leases SET heartbeat_at = ?", (beat.isoformat(),))
    assert cli_main(["check", "--db", f"sqlite:///{db}"]) == 1
    assert "last heartbeat 70 s ago (RECRAWLER_LEASE_SECS=60)" in capsys.readouterr().out
    # --repair runs an event loop of its own: on a thread of its own here
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(cli_main, ["check", "--repair", "--db", f"sqlite:///{db}"]).result() == 0
    assert [r["state"] for r in runs(db)] == ["published", "aborted"]
    assert statedb.value(db, "SELECT COUNT(*) FROM leases") == 0
    # the next run starts at once, with nothing to take over
    result = crawl(sitemap, db)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "marked aborted" not in result.stderr


# --- 13. an outcome you can script ---------------------------------------------------------------


def test_exit_codes_and_recorded_outcomes(
    site: Site, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sitemap = build(site, 12)
    db = tmp_path / "state.db"
    assert crawl(sitemap, db).returncode == 0

    # the sitemap fails: the outage guard skips removals (4), the run says why
    site.options("sitemap.xml", status=503)
    failed = crawl(sitemap, db)
    assert failed.returncode == 4
    assert "reconcile skipped: sitemap_failed" in failed.stderr
    site.options("sitemap.xml", status=None)

    # most listed pages vanish: the removals wait for an operator (3); the next run goes on,
    # carries them and says so with 3 too
    for i in range(2, 12):
        site.remove(f"p{i}.html")
    held = crawl(sitemap, db)
    assert held.returncode == 3
    carried = crawl(sitemap, db)
    assert carried.returncode == 3
    assert "runs approve 4" in carried.stderr
    assert "Traceback" not in carried.stderr

    capsys.readouterr()
    assert cli_main(["runs", "--json", "--db", f"sqlite:///{db}"]) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    by_id = {r["id"]: r for r in listed}
    assert by_id[2]["reasons"] == ["sitemap_failed"]
    assert by_id[2]["exit_code"] == 4
    # the run itself was published: only its removals wait
    assert by_id[3]["state"] == "published"
    assert by_id[3]["reasons"] == ["mass_removal"]
    assert by_id[3]["exit_code"] == 3
    assert (by_id[4]["reasons"], by_id[4]["exit_code"]) == (["mass_removal"], 3)
    assert cli_main(["runs", "--db", f"sqlite:///{db}"]) == 0
    assert "mass_removal" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("setting", "name"),
    [
        ("RECRAWLER_MAX_REMOVE_RATIO=2", "RECRAWLER_MAX_REMOVE_RATIO"),
        ("RECRAWLER_PUBLISH=sometimes", "RECRAWLER_PUBLISH"),
        ("RECRAWLER_CHUNK_SIZE=5", "RECRAWLER_CHUNK_SIZE"),
        # malformed JSON objects: one line naming the setting, not a silent exit 1
        ("RECRAWLER_INTERVAL_OVERRIDES={bad json", "RECRAWLER_INTERVAL_OVERRIDES"),
        ("RECRAWLER_FUZZY_THRESHOLDS={bad", "RECRAWLER_FUZZY_THRESHOLDS"),
        ("RECRAWLER_VOLATILE_PATTERNS=[1", "RECRAWLER_VOLATILE_PATTERNS"),
        ('RECRAWLER_FUZZY_THRESHOLDS={"docs.example.com": "close"}', "RECRAWLER_FUZZY_THRESHOLDS"),
        # no path: SQLite would open a throwaway database and every run would be a first run
        ("RECRAWLER_DB_URI=sqlite://", "RECRAWLER_DB_URI"),
        ("RECRAWLER_DB_URI=sqlite:///", "RECRAWLER_DB_URI"),
    ],
)
def test_a_configuration_error_is_one_line_and_exit_2(
    site: Site, tmp_path: Path, setting: str, name: str
) -> None:
    sitemap = build(site, 1)
    result = crawl(sitemap, tmp_path / "state.db", setting)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if name in line]
    assert len(errors) == 1
    assert site.requests() == []


def test_a_database_from_a_newer_recrawler_is_one_line_and_exit_5(site: Site, tmp_path: Path) -> None:
    sitemap = build(site, 1)
    db = tmp_path / "state.db"
    assert crawl(sitemap, db).returncode == 0
    with statedb.editing(db) as conn:
        conn.execute("INSERT INTO schema_version VALUES (999)")
    before = db.read_bytes()
    site.clear_requests()
    result = crawl(sitemap, db)
    assert result.returncode == 5
    assert "Traceback" not in result.stderr
    assert len([line for line in result.stderr.splitlines() if "newer" in line]) == 1
    assert site.requests() == []
    assert db.read_bytes() == before


def test_recrawler_crawl_returns_the_same_codes(site: Site, tmp_path: Path) -> None:
    sitemap = build(site, 1)
    site.options("sitemap.xml", status=503)
    db = tmp_path / "state.db"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "recrawler.cli",
            "crawl",
            "--db",
            f"sqlite:///{db}",
            sitemap,
            "-s",
            "RETRY_TIMES=0",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert result.returncode == 4, result.stderr[-2000:]
