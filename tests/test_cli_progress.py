"""Long work shows progress on a terminal (stderr) and stays quiet anywhere else: calibrate,
``runs approve`` and a first run's embedding."""

from __future__ import annotations

import asyncio
import io
import logging
import sys
import time
from typing import TYPE_CHECKING

from scrapy.utils.defer import deferred_f_from_coro_f

from tests import docsite, shell
from tests.test_cli_settings import make_db

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0


class Tty(io.StringIO):
    """stderr as a terminal would be."""

    def isatty(self) -> bool:
        return True


def terminal(monkeypatch: pytest.MonkeyPatch) -> Tty:
    """Make stderr a terminal (in the test itself: pytest swaps stderr again after the setup)."""
    stream = Tty()
    monkeypatch.setattr(sys, "stderr", stream)
    return stream


def test_calibrate_fetches_each_page_again_after_one_shared_wait(
    site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(3):
        site.write(f"p{i}.html", docsite.feature_page(i), mtime=T0)
    urls = [site.url(f"p{i}.html") for i in range(3)]
    db = make_db(tmp_path / "state.db")
    tty = terminal(monkeypatch)
    started = time.monotonic()
    code, out = shell.cli("calibrate", *urls, "--delay", "1", "--db", db)
    elapsed = time.monotonic() - started
    assert code == 0, out
    # every page once, then every page again: the whole takes about one delay, not one per page
    assert [r["path"] for r in site.requests()] == ["p0.html", "p1.html", "p2.html"] * 2
    assert 1.0 <= elapsed < 2.5
    assert out.endswith("3 pages fetched twice 1 s apart: 0 differed; 0 new volatile regions learned\n")
    shown = tty.getvalue()
    assert f"\rcalibrate: 1/6 fetches (16%), fetching {urls[1]}" in shown
    assert "waiting 1s to fetch" in shown
    assert "left" in shown
    assert shown.endswith("\r\x1b[K")


def test_calibrate_is_quiet_when_stderr_is_not_a_terminal(
    site: Site, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    site.write("p0.html", docsite.feature_page(0), mtime=T0)
    code, _ = shell.cli(
        "calibrate", site.url("p0.html"), "--delay", "0", "--db", make_db(tmp_path / "state.db")
    )
    assert code == 0
    assert capsys.readouterr().err == ""


async def _held_run(site: Site, crawls: Crawls) -> int:
    """A run held for a change spike: 12 pages rewritten by a template change."""
    pages = [f"p{i}.html" for i in range(12)]
    for i, p in enumerate(pages):
        site.write(p, docsite.feature_page(i), mtime=T0)
    sitemap = site.write_sitemap(pages)
    await crawls.crawl(sitemap)
    for i, p in enumerate(pages):
        site.write(p, docsite.feature_page(i, "Rendered by the new template."), mtime=T0 + 5)
    r2 = await crawls.crawl(sitemap)
    assert r2.report["index"]["state"] == "held"
    return int(r2.report["run_id"])


@deferred_f_from_coro_f
async def test_runs_approve_shows_its_embedding_on_a_terminal(
    site: Site, crawls: Crawls, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = await _held_run(site, crawls)
    tty = terminal(monkeypatch)
    code, out = await asyncio.to_thread(shell.cli, "runs", "approve", str(held), "--db", crawls.db_uri)
    assert code == 0
    assert "12 texts embedded" in out
    assert f"\rrun {held}: embedding: 12 texts" in tty.getvalue()


@deferred_f_from_coro_f
async def test_runs_approve_is_quiet_when_stderr_is_not_a_terminal(
    site: Site, crawls: Crawls, capsys: pytest.CaptureFixture[str]
) -> None:
    held = await _held_run(site, crawls)
    capsys.readouterr()
    code, _ = await asyncio.to_thread(shell.cli, "runs", "approve", str(held), "--db", crawls.db_uri)
    assert code == 0
    assert capsys.readouterr().err == ""


@deferred_f_from_coro_f
async def test_a_first_runs_embedding_shows_progress_on_a_terminal(
    site: Site, crawls: Crawls, monkeypatch: pytest.MonkeyPatch
) -> None:
    tty = terminal(monkeypatch)
    for i in range(3):
        site.write(f"p{i}.html", docsite.feature_page(i), mtime=T0)
    # the run's end embeds them all (the CPU workers embed none of them as they go)
    r1 = await crawls.crawl(site.write_sitemap([f"p{i}.html" for i in range(3)]), RECRAWLER_CPU_EMBED=False)
    assert r1.report["index"]["texts_embedded"] == 3
    assert f"\rrun {r1.report['run_id']}: embedding: 3/3 texts (100%)" in tty.getvalue()


@deferred_f_from_coro_f
async def test_a_crawl_logs_its_embedding_once_when_stderr_is_not_a_terminal(
    site: Site, crawls: Crawls, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    for i in range(3):
        site.write(f"p{i}.html", docsite.feature_page(i), mtime=T0)
    with caplog.at_level(logging.INFO, logger="recrawler.kb.publish"):
        # the run's end embeds them all (the CPU workers embed none of them as they go)
        r1 = await crawls.crawl(
            site.write_sitemap([f"p{i}.html" for i in range(3)]), RECRAWLER_CPU_EMBED=False
        )
    assert "\r" not in capsys.readouterr().err
    lines = [r.getMessage() for r in caplog.records if r.name == "recrawler.kb.publish"]
    assert len(lines) == 1
    # the run's total (the summary line's texts_embedded), then how it was reached
    assert r1.report["index"]["texts_embedded"] == 3
    assert lines[0].startswith(
        f"run {r1.report['run_id']}: 3 chunk texts embedded (3 at the run's end in 1 call, "
    )
    assert "; 0 by the workers as pages came; hashing" in lines[0]
    # one text is one text
    caplog.clear()
    site.write("p0.html", docsite.feature_page(7), mtime=T0 + 60)
    with caplog.at_level(logging.INFO, logger="recrawler.kb.publish"):
        r2 = await crawls.crawl(site.url("sitemap.xml"), RECRAWLER_CPU_EMBED=False)
    (line,) = [r.getMessage() for r in caplog.records if r.name == "recrawler.kb.publish"]
    assert r2.report["index"]["texts_embedded"] == 1
    assert line.startswith(
        f"run {r2.report['run_id']}: 1 chunk text embedded (1 at the run's end in 1 call, "
    )
