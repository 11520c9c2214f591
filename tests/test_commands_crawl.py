"""A quiet cron run (``scrapy crawl docs --loglevel WARNING``) still says how it ended, in one line."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from scrapy.settings import Settings

from recrawler.commands.crawl import logged_at
from tests import shell
from tests.test_trust_runs import argv, build

if TYPE_CHECKING:
    import subprocess
    from pathlib import Path

    from tests.conftest_mockserver import Site


def crawl(sitemap: str, db: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """``scrapy crawl docs`` as cron runs it, with scrapy's own flags (``--loglevel``, ``--nolog``)."""
    return shell.run_in_checkout([*argv(sitemap, db), *flags])


def summaries(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "crawled: " in line]


@pytest.mark.parametrize(
    ("flags", "level"),
    [
        (["--loglevel", "WARNING"], 30),
        (["--loglevel", "ERROR"], 40),
        (["--nolog"], None),
        (["--loglevel", "INFO"], 20),
    ],
)
def test_an_ok_run_says_how_it_ended_at_any_log_level(
    site: Site, tmp_path: Path, flags: list[str], level: int | None
) -> None:
    result = crawl(build(site), tmp_path / "state.db", *flags)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = summaries(result.stderr)
    assert len(lines) == 1, result.stderr[-2000:]
    if level is None or level > 20:
        # written by the command itself: nothing else of the run's log at these levels
        assert lines[0].startswith("crawled: 5 new: 5 changed: 0 unchanged: 0 gone: 0 errors: 0 | ")
        assert lines[0].endswith(" | exit 0")
    else:
        assert "[recrawler.extensions.reconcile] INFO: crawled: 5 new: 5" in lines[0]


def test_a_run_that_did_not_end_well_is_logged_once_at_warning(site: Site, tmp_path: Path) -> None:
    sitemap = build(site)
    db = tmp_path / "state.db"
    assert crawl(sitemap, db).returncode == 0
    # the sitemap answers 404: the outage guard skips removals (exit 4)
    site.remove("sitemap.xml")
    result = crawl(sitemap, db, "--loglevel", "WARNING")
    assert result.returncode == 4
    lines = summaries(result.stderr)
    assert len(lines) == 1
    # the listing that failed is the run's one error
    head = "crawled: 1 new: 0 changed: 0 unchanged: 0 gone: 0 errors: 1 "
    assert f"[recrawler.extensions.reconcile] WARNING: {head}" in lines[0]
    assert lines[0].endswith("| reconcile skipped: sitemap_failed | exit 4")


@pytest.mark.parametrize(
    ("settings", "level", "shown"),
    [
        ({}, 20, True),  # Scrapy's default LOG_LEVEL is DEBUG
        ({"LOG_LEVEL": "INFO"}, 20, True),
        ({"LOG_LEVEL": "warning"}, 20, False),
        ({"LOG_LEVEL": "WARNING"}, 30, True),
        ({"LOG_LEVEL": 40}, 30, False),
        ({"LOG_ENABLED": False}, 30, False),
    ],
)
def test_logged_at_reads_scrapys_log_settings(settings: dict[str, object], level: int, shown: bool) -> None:
    assert logged_at(Settings(settings), level) is shown
