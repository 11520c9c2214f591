"""Never behind the site for long: edits and removals are caught within the staleness bound (at once
when the listing says so), links find new pages on a real-sized site, and a block newly added to
many pages reaches the knowledge base (real crawls on the local server over simulated days)."""

from __future__ import annotations

import asyncio
import math
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler import default_settings
from recrawler.kb.reader import open_kb
from tests import docsite, shell, statedb

if TYPE_CHECKING:
    from tests.conftest import CrawlResult, Crawls
    from tests.conftest_mockserver import Site

REPO = Path(__file__).resolve().parent.parent
START = datetime(2026, 6, 1, 6, 0, tzinfo=UTC)
T0 = 1_760_000_000
ADAPTIVE = {"RECRAWLER_SCHEDULE": "adaptive"}


def page(name: str, words: str, *, extra: str = "") -> str:
    return docsite.page(
        name.title(),
        [
            ("Overview", [f"The {name} page explains {words} in plain words."]),
            ("Usage", [f"Configure {words} before the first run."], f"tool --{name}"),
        ],
        extra_main=extra,
    )


def found(crawls: Crawls, text: str) -> set[str]:
    """The pages whose published chunks the bot can read *text* in."""
    with open_kb(crawls.db_uri, embedder="hashing") as kb:
        return {c.url.split("#")[0] for c in kb.chunks() if text in c.text}


def oldest_check(crawls: Crawls) -> datetime:
    return datetime.fromisoformat(
        statedb.value(crawls.db_path, "SELECT MIN(last_check_at) FROM pages WHERE status = 'live'")
    )


async def crawl_at(crawls: Crawls, sitemap: str, when: datetime, **settings: Any) -> CrawlResult:
    return await crawls.crawl(sitemap, RECRAWLER_NOW=when.isoformat(), **ADAPTIVE, **settings)


def test_the_default_bound_is_a_day() -> None:
    assert default_settings.RECRAWLER_MAX_INTERVAL_SECS == 86400


@deferred_f_from_coro_f
async def test_no_live_page_goes_unverified_longer_than_the_bound(site: Site, crawls: Crawls) -> None:
    names = [f"p{i}.html" for i in range(60)]
    for i, name in enumerate(names):
        site.write(name, page(f"p{i}", f"topic{i}"), mtime=T0)
    sitemap = site.write_sitemap(names)
    # three weeks of daily runs on a site where nothing changes: the schedule grows every
    # interval (up to 30 days before), yet no page goes unverified longer than a day
    for day in range(21):
        r = await crawl_at(crawls, sitemap, START + timedelta(days=day))
        assert START + timedelta(days=day) - oldest_check(crawls) <= timedelta(days=1)
        # the run report says so: every live page verified within the bound, none delisted
        fresh = r.report["freshness"]
        assert (fresh["live"], fresh["verified"], fresh["delisted"]) == (60, 60, 0)
        assert fresh["current"] is True
        assert fresh["bound_secs"] == 86400
    # then an answer flips: the next daily run catches it
    site.write("p7.html", page("p7", "topic7", extra="<p>Is it free? No.</p>"), mtime=T0 + 99)
    r = await crawl_at(crawls, sitemap, START + timedelta(days=21))
    assert r.counts["changed"] == 1
    assert found(crawls, "Is it free? No.") == {site.url("p7.html")}


@deferred_f_from_coro_f
async def test_a_page_the_listing_drops_is_checked_in_the_run_that_notices(
    site: Site, crawls: Crawls
) -> None:
    names = [f"p{i}.html" for i in range(40)]
    for i, name in enumerate(names):
        site.write(name, page(f"p{i}", f"topic{i}"), mtime=T0)
    sitemap = site.write_sitemap(names)
    for day in range(3):
        await crawl_at(crawls, sitemap, START + timedelta(days=day))
    # an hour later nothing is due; p3 leaves the sitemap and answers 404
    site.remove("p3.html")
    site.write_sitemap([n for n in names if n != "p3.html"])
    site.clear_requests()
    r = await crawl_at(crawls, sitemap, START + timedelta(days=2, hours=1))
    assert r.counts["quarantined"] == 1
    # the run report's freshness: the delisted page waits for proof, it is no longer counted live
    assert r.report["freshness"]["live"] == 39
    assert found(crawls, "topic3 ") == set()
    # a page left the listing: a deploy, so every listed page was asked too, conditionally (304s)
    asked = sorted(q["path"] for q in site.requests() if q["path"].endswith(".html"))
    assert asked == sorted(names)
    assert r.report["deploy"]["reason"] == "listing moved: 1 removed"
    assert r.counts["not_modified"] >= 39 - 4


@deferred_f_from_coro_f
async def test_links_find_every_page_only_links_reach_on_a_real_sized_site(
    site: Site, crawls: Crawls
) -> None:
    # 200 listed pages, each with the site's navigation (links to 40 listed pages) and links to
    # its neighbours; 8 pages are reached only through links
    listed = [f"docs/p{i}.html" for i in range(200)]
    hidden = [f"docs/h{i}.html" for i in range(8)]
    nav = " ".join(f'<a href="p{i}.html">p{i}</a>' for i in range(40))
    for i, name in enumerate(listed):
        extra = f"<p>{nav} <a href='p{(i + 1) % 200}.html'>next</a>"
        if i % 25 == 0:
            extra += f" <a href='h{i // 25}.html'>more</a>"
        site.write(name, page(f"p{i}", f"topic{i}", extra=extra + "</p>"), mtime=T0)
    for i, name in enumerate(hidden):
        site.write(name, page(f"h{i}", f"hidden{i}"), mtime=T0)
    sitemap = site.write_sitemap(listed, name="docs/sitemap.xml")
    r = await crawls.crawl(sitemap, spider_args={"follow_links": "1"})
    assert r.counts["new"] == 208
    assert r.stats["recrawler/follow/links"] == 8
    assert "recrawler/follow/max_links" not in r.stats
    for i in range(8):
        assert found(crawls, f"hidden{i} ") == {site.url(hidden[i])}


@deferred_f_from_coro_f
async def test_a_block_newly_added_to_many_pages_reaches_the_knowledge_base(
    site: Site, crawls: Crawls
) -> None:
    names = [f"p{i}.html" for i in range(300)]
    for i, name in enumerate(names):
        site.write(name, page(f"p{i}", f"topic{i}"), mtime=T0)
    sitemap = site.write_sitemap(names)
    await crawls.crawl(sitemap)
    notice = "Deprecated: this API is removed in version 4; use the v2 client instead."
    for i, name in enumerate(names[:200]):
        site.write(name, page(f"p{i}", f"topic{i}", extra=f"<p>{notice}</p>"), mtime=T0 + 60)
    r = await crawls.crawl(sitemap)
    # a site-wide edit: held for the spike (200 of 300), its text kept; approved, it is searchable
    assert r.counts["changed"] == 200
    assert "recrawler/page/unchanged/boilerplate" not in r.stats
    from recrawler.cli import main as cli_main

    if r.report["held"]:
        argv = ["runs", "approve", str(r.report["run_id"]), "--db", crawls.db_uri]
        assert await asyncio.to_thread(cli_main, argv) == 0
    assert len(found(crawls, notice)) == 200


def new_second(*paths: Path, after: float) -> float:
    """Stamp *paths* edited in a second of their own (a sitemap's lastmod has seconds): the next
    whole second, and later than *after*, with no wait."""
    stamp = float(max(math.floor(time.time()), math.floor(after)) + 1)
    for path in paths:
        os.utime(path, (stamp, stamp))
    return stamp


def test_the_quickstart_rerun_catches_an_edit_a_removal_and_a_new_page(tmp_path: Path) -> None:
    """The README's quickstart on an editable copy of the example site: each plain rerun (seconds
    after the last) catches what changed, through the sitemap's lastmod and listing."""
    docs = tmp_path / "docs"
    shutil.copytree(REPO / "examples" / "docsite" / "v1", docs)
    server = subprocess.Popen(
        [sys.executable, str(REPO / "examples" / "serve.py"), "--port", "0", "--dir", str(docs)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        base = server.stdout.readline().split(" at ", 1)[1].split()[0]
        db = f"sqlite:///{tmp_path / 'quick.db'}"

        def run() -> str:
            done = shell.scrapy_crawl(f"{base}sitemap.xml", f"RECRAWLER_DB_URI={db}", timeout=300)
            assert done.returncode == 0, done.stderr[-2000:]
            return done.stderr

        assert "new: 6 changed: 0" in run()
        faq = docs / "faq.html"
        faq.write_text(faq.read_text().replace("Yes. Changes are queued", "No. Changes are queued"))
        (docs / "legacy-api.html").unlink()
        (docs / "changelog.html").write_text(
            "<html><head><title>Changelog</title></head><body><main><h1>Changelog</h1>"
            "<p>Version 2 renames max_retries to retry_limit.</p></main></body></html>"
        )
        edited = new_second(faq, docs / "changelog.html", after=0.0)
        second = run()
        assert "new: 1 changed: 1" in second
        assert "quarantined: 1" in second
        faq.write_text(faq.read_text().replace("No. Changes are queued", "Yes. Changes are queued"))
        new_second(faq, after=edited)
        (docs / "install.html").unlink()
        third = run()
        assert "new: 0 changed: 1" in third
        assert "quarantined: 1" in third
    finally:
        server.terminate()
        server.communicate(timeout=10)
