"""Database URIs as users write them: ``file:x.db``, ``sqlite:/x.db`` (a slash short), ``?mode=ro``.
Each opens the file it names, or is refused in one line with a non-zero exit: never a traceback and
"run never started" with exit 0."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from tests import docsite, shell, statedb

if TYPE_CHECKING:
    from pathlib import Path

    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0
PAGES = 120


def write_site(site: Site, n: int = PAGES) -> str:
    for i in range(n):
        site.write(f"guide/p{i}.html", docsite.widget_page(i), mtime=T0)
    return site.write_sitemap([f"guide/p{i}.html" for i in range(n)])


def recrawler_in(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``recrawler *argv`` as a process in *cwd*, outside any Scrapy project."""
    env = {k: v for k, v in os.environ.items() if k not in ("SCRAPY_SETTINGS_MODULE", "RECRAWLER_DB_URI")}
    return subprocess.run(
        [sys.executable, "-m", "recrawler.cli", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_file_uri_crawls_into_the_file_it_names(site: Site, tmp_path: Path) -> None:
    sitemap = write_site(site)
    for run in (1, 2):
        done = recrawler_in(
            tmp_path, "crawl", sitemap, "-s", "RECRAWLER_DB_URI=file:x4.db", "-s", "RECRAWLER_SCHEDULE=all"
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert "Traceback" not in done.stderr
        assert "never started" not in done.stderr
        counts = "new: 120 changed: 0 unchanged: 0" if run == 1 else "new: 0 changed: 0 unchanged: 120"
        assert counts in done.stderr
    assert statedb.value(tmp_path / "x4.db", "SELECT COUNT(*) FROM pages") == PAGES
    # the absolute form names the same file
    absolute = recrawler_in(tmp_path, "pages", "--db", f"file://{tmp_path / 'x4.db'}")
    assert absolute.returncode == 0
    assert len(absolute.stdout.splitlines()) == PAGES + 1


@pytest.mark.parametrize(
    ("uri", "hint"),
    [
        ("sqlite:/x2.db", "write sqlite:///x2.db (relative) or sqlite:////x2.db (absolute)"),
        ("sqlite:x2.db", "write sqlite:///x2.db (relative) or sqlite:////x2.db (absolute)"),
        ("postgresql:/docs", "write postgresql://... (two slashes after the scheme)"),
    ],
)
def test_a_scheme_without_its_slashes_is_one_line_with_what_to_write(
    site: Site, tmp_path: Path, uri: str, hint: str
) -> None:
    sitemap = write_site(site, 5)
    line = f"RECRAWLER_DB_URI: {uri!r} is not a database URI: {hint}"
    pages = recrawler_in(tmp_path, "pages", "--db", uri)
    assert (pages.returncode, pages.stderr.splitlines()) == (2, [f"recrawler: error: {line}"])
    crawl = recrawler_in(tmp_path, "crawl", sitemap, "--db", uri)
    assert crawl.returncode == 2
    assert line in crawl.stderr
    assert "Traceback" not in crawl.stderr
    assert list(tmp_path.iterdir()) == []


def test_mode_ro_reads_and_refuses_to_write_in_one_line(site: Site, tmp_path: Path) -> None:
    sitemap = write_site(site)
    assert recrawler_in(tmp_path, "crawl", sitemap, "--db", "sqlite:///docs.db").returncode == 0
    db = tmp_path / "docs.db"
    before = sha(db)
    ro = "sqlite:///docs.db?mode=ro"
    # what only reads answers from the file
    pages = recrawler_in(tmp_path, "pages", "--db", ro)
    assert (pages.returncode, len(pages.stdout.splitlines())) == (0, PAGES + 1)
    search = recrawler_in(tmp_path, "search", "widget retries uploads", "--db", ro)
    assert search.returncode == 0
    assert "guide/p" in search.stdout
    runs = recrawler_in(tmp_path, "runs", "--db", "file:docs.db?mode=ro")
    assert runs.returncode == 0
    # what writes is refused, in one line, before anything is written
    line = (
        f"RECRAWLER_DB_URI: {ro!r} is read-only (?mode=ro) and this writes to it; drop ?mode=ro "
        "(the commands that only read open the database read-only anyway)"
    )
    crawl = recrawler_in(tmp_path, "crawl", sitemap, "--db", ro)
    assert crawl.returncode == 2, crawl.stderr[-3000:]
    assert line in crawl.stderr
    assert "Traceback" not in crawl.stderr
    approve = recrawler_in(tmp_path, "runs", "approve", "1", "--db", ro)
    assert (approve.returncode, approve.stderr.splitlines()) == (2, [f"recrawler: error: {line}"])
    assert sha(db) == before
    # a parameter SQLite would take but recrawler does not honour is refused, not ignored
    other = recrawler_in(tmp_path, "pages", "--db", "sqlite:///docs.db?cache=shared")
    assert other.returncode == 2
    assert "unsupported parameter cache='shared'" in other.stderr


def test_a_database_shell_readers_see_through_a_read_only_uri(site: Site, tmp_path: Path) -> None:
    sitemap = write_site(site, 10)
    db = tmp_path / "docs.db"
    assert recrawler_in(tmp_path, "crawl", sitemap, "--db", f"sqlite:///{db}").returncode == 0
    code, out = shell.cli("chunks", "--db", f"sqlite:///{db}?mode=ro")
    assert code == 0
    # a header, then two chunks a page (its overview, its usage)
    assert len(out.splitlines()) == 1 + 2 * 10
