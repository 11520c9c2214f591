"""The README's offline example runs on a fresh machine and shows what the README says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests import shell

REPO = Path(__file__).resolve().parent.parent


def test_offline_demo(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples" / "demo.py"), "--db", str(tmp_path / "demo.db")],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        cwd=tmp_path,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("run ")]
    assert len(lines) == 4
    assert "crawled: 6 new: 6 changed: 0 unchanged: 0 gone: 0 errors: 0" in lines[0]
    assert "crawled: 6 new: 0 changed: 0 unchanged: 6 gone: 0 errors: 0" in lines[1]
    # six 304s; the audit fetched one of them again in full: each page counts once
    assert "not_modified: 5 unchanged_by_hash: 1" in lines[1]
    assert "audited: 1" in lines[1]
    assert "crawled: 6 new: 1 changed: 1 unchanged: 4 gone: 0 errors: 0 | quarantined: 1" in lines[2]
    assert "crawled: 7 new: 0 changed: 0 unchanged: 6 gone: 1 errors: 0" in lines[3]
    assert "index: published" in lines[2]
    # the renamed setting is what the knowledge base now answers with
    search = shell.recrawler_process(
        "search", "retry_limit", "-k", "1", "--db", str(tmp_path / "demo.db"), check=True
    )
    assert "configuration.html#retries" in search.stdout


def test_quickstart_serves_the_example_site_with_its_own_sitemap(tmp_path: Path) -> None:
    """The README's quickstart: serve the bundled site, crawl it over its sitemap, search it."""
    server = subprocess.Popen(
        [sys.executable, str(REPO / "examples" / "serve.py"), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        base = line.split(" at ", 1)[1].split()[0]
        db = f"sqlite:///{tmp_path / 'quick.db'}"
        first = shell.scrapy_crawl(f"{base}sitemap.xml", f"RECRAWLER_DB_URI={db}", timeout=300)
        assert first.returncode == 0, first.stderr[-2000:]
        assert "crawled: 6 new: 6 changed: 0 unchanged: 0 gone: 0 errors: 0" in first.stderr
        search = shell.recrawler_process(
            "search", "how do I retry failed uploads?", "-k", "1", "--db", db, check=True
        )
        assert "configuration.html#retries" in search.stdout
        # the second crawl asks only what is due: nothing here but the audit sample (one page) and
        # the deploy probes (the home page and three more)
        again = shell.scrapy_crawl(f"{base}sitemap.xml", f"RECRAWLER_DB_URI={db}", timeout=300)
        assert again.returncode == 0, again.stderr[-2000:]
        assert "new: 0 changed: 0" in again.stderr
        assert "skipped_schedule: 1" in again.stderr
    finally:
        server.terminate()
        server.communicate(timeout=10)
