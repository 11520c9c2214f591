"""What a run's log says, read as a new user reads it: one line per thing that went wrong, the
summary line last, nothing alarming about components switched off as configured."""

from __future__ import annotations

import logging
import re
import socket
from typing import TYPE_CHECKING

import pytest
from scrapy.exceptions import NotConfigured
from scrapy.utils.defer import deferred_f_from_coro_f
from scrapy.utils.test import get_crawler

from recrawler import default_settings
from recrawler.downloadermiddlewares.audit import AuditMiddleware
from recrawler.pipelines.index import IndexPipeline
from recrawler.spiders.docs import DocsSpider
from tests import docsite, shell
from tests.test_trust_runs import build

if TYPE_CHECKING:
    import subprocess
    from pathlib import Path

    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0


def scrapy_crawl(sitemap: str, db: Path, *settings: str) -> subprocess.CompletedProcess[str]:
    return shell.scrapy_crawl(sitemap, f"RECRAWLER_DB_URI=sqlite:///{db}", "RETRY_TIMES=1", *settings)


def lines_at(stderr: str, *levels: str) -> list[str]:
    pattern = re.compile(rf"\] ({'|'.join(levels)}): ")
    return [line for line in stderr.splitlines() if pattern.search(line)]


def test_a_new_database_says_so_in_one_line_and_the_summary_comes_last(site: Site, tmp_path: Path) -> None:
    result = scrapy_crawl(build(site, 3), tmp_path / "state.db")
    assert result.returncode == 0, result.stderr[-3000:]
    created = [line for line in result.stderr.splitlines() if "state database" in line]
    assert len(created) == 1
    assert re.search(r"INFO: state database \S+state\.db created \(schema \d+\)$", created[0])
    # below Scrapy's 50-line stats dump and its "Spider closed": the last line of the log
    lines = result.stderr.rstrip().splitlines()
    assert "[recrawler.extensions.reconcile] INFO: crawled: 3 new: 3 " in lines[-1]
    assert result.stderr.index("Dumping Scrapy stats") < result.stderr.index("INFO: crawled: 3 new: 3 ")
    # and nothing was switched off with a warning
    assert lines_at(result.stderr, "WARNING", "ERROR", "CRITICAL") == []


def test_an_unreachable_host_is_one_error_line(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # nothing listens on the port: robots.txt and the sitemap are refused, each retried once
    result = scrapy_crawl(f"http://127.0.0.1:{port}/sitemap.xml", tmp_path / "state.db")
    assert result.returncode == 4
    assert "Traceback" not in result.stderr
    errors = lines_at(result.stderr, "ERROR", "CRITICAL")
    assert len(errors) == 1, "\n".join(errors)
    assert f"sitemap http://127.0.0.1:{port}/sitemap.xml failed: " in errors[0]
    # Scrapy's first line about it stays, as a warning; the rest are at DEBUG
    warnings = lines_at(result.stderr, "WARNING")
    assert len([w for w in warnings if "scrapy." in w]) == 1
    assert "further failed downloads are counted" in warnings[0]
    assert "reconcile skipped: sitemap_failed | exit 4" in result.stderr.rstrip().splitlines()[-1]


def test_failed_pages_are_counted_and_logged_once(site: Site, tmp_path: Path) -> None:
    sitemap = build(site, 4)
    for i in range(3):
        site.options(f"p{i}.html", status=500)
    result = scrapy_crawl(sitemap, tmp_path / "state.db", "RECRAWLER_MAX_ERROR_RATIO=0.9")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert lines_at(result.stderr, "ERROR", "CRITICAL") == []
    assert len(lines_at(result.stderr, "WARNING")) == 1
    assert "crawled: 4 new: 1 changed: 0 unchanged: 0 gone: 0 errors: 3 " in result.stderr


@pytest.mark.parametrize(
    ("component", "settings"),
    [
        (AuditMiddleware, {"RECRAWLER_AUDIT_SAMPLE": 0}),
        (IndexPipeline, {"RECRAWLER_INDEX_ENABLED": False}),
    ],
)
def test_a_component_switched_off_as_configured_is_silent(
    tmp_path: Path, component: type, settings: dict[str, object]
) -> None:
    # recrawler's defaults, as the add-on installs them (without building the run's components)
    defaults = {k: getattr(default_settings, k) for k in dir(default_settings) if k.startswith("RECRAWLER_")}
    crawler = get_crawler(
        DocsSpider, {**defaults, "RECRAWLER_DB_URI": f"sqlite:///{tmp_path / 'db'}", **settings}
    )
    # Scrapy logs a NotConfigured that carries a message as a WARNING ("Disabled ...") every run
    with pytest.raises(NotConfigured) as info:
        component.from_crawler(crawler)  # type: ignore[attr-defined]
    assert info.value.args == ()


@deferred_f_from_coro_f
async def test_a_held_run_says_why_in_one_sentence(
    site: Site, crawls: Crawls, caplog: pytest.LogCaptureFixture
) -> None:
    names = [f"p{i}.html" for i in range(12)]
    for i, name in enumerate(names):
        site.write(name, docsite.page(f"P{i}", [("Intro", [f"Page {i} says one thing."])]), mtime=T0)
    sitemap = site.write_sitemap(names)
    await crawls.crawl(sitemap)
    for i, name in enumerate(names):
        site.write(name, docsite.page(f"P{i}", [("Intro", [f"Page {i} says another thing."])]), mtime=T0 + 9)
    with caplog.at_level(logging.ERROR, logger="recrawler.extensions.reconcile"):
        held = await crawls.crawl(sitemap)
    assert held.report["held"] == ["change_spike"]
    (line,) = [r.getMessage() for r in caplog.records if "held" in r.getMessage()]
    run = held.report["run_id"]
    # one sentence: why, then what waits ("noisy hash?." no more)
    assert line.startswith(f"run {run} held (change_spike: 12 of 12 pages ")
    assert (
        "noisy hash?): nothing of it (nor of earlier unpublished runs) is embedded or published until "
        in line
    )
    assert "?." not in line
