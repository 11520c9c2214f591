"""A hostile or broken listing never gets into the knowledge base: only the site's own http(s) pages,
one bad entry costs one entry, bounded sitemap trees and link discovery, lastmod kept for links."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.cli import main as cli_main
from tests import docsite, statedb

if TYPE_CHECKING:
    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0
START = datetime(2026, 1, 5, 6, 0, tzinfo=UTC)
SECRET = "TOPSECRETMARKER"


def everything_stored(db: Path) -> str:
    """Every text value of every table, as one string (to look for what must never be stored)."""
    return "\n".join(value for _, _, value in statedb.text_values(db))


def local_secret(tmp_path: Path) -> Path:
    secret = tmp_path / "secret.html"
    secret.write_text(f"<html><body><main><h1>{SECRET}</h1><p>{SECRET} password</p></main></body></html>")
    return secret


def search(crawls: Crawls, query: str, capsys: Any) -> str:
    capsys.readouterr()
    assert cli_main(["search", query, "--db", crawls.db_uri, "-k", "20", "--json"]) == 0
    return str(capsys.readouterr().out)


# --- 1. only the site's own web pages get in -----------------------------------------------------


@deferred_f_from_coro_f
async def test_a_file_url_in_the_sitemap_is_never_read_or_stored(
    site: Site, crawls: Crawls, tmp_path: Path, capsys: Any
) -> None:
    secret = local_secret(tmp_path)
    host = urlsplit(site.url()).netloc
    site.write("a.html", docsite.guide("A"), mtime=T0)
    listed = [site.url("a.html"), f"file://{host}{secret}", f"file://{secret}"]
    site.write("sitemap.xml", docsite.sitemap(listed))
    r = await crawls.crawl(site.url("sitemap.xml"))
    assert r.counts["new"] == 1
    assert r.stats["recrawler/url/refused/scheme"] == 2
    assert [u for (u,) in statedb.rows(crawls.db_path, "SELECT url FROM pages")] == [site.url("a.html")]
    assert SECRET not in everything_stored(crawls.db_path)
    assert SECRET not in search(crawls, SECRET.lower(), capsys)
    assert r.report["reconcile"]["applied"]  # the rest of the listing is trusted as usual


@deferred_f_from_coro_f
async def test_a_file_url_behind_a_link_is_never_followed(
    site: Site, crawls: Crawls, tmp_path: Path, capsys: Any
) -> None:
    secret = local_secret(tmp_path)
    host = urlsplit(site.url()).netloc
    links = f'<a href="file://{host}{secret}">notes</a> <a href="b.html">b</a>'
    site.write("a.html", docsite.guide("A", extra=f" {links}"), mtime=T0)
    site.write("b.html", docsite.guide("B"), mtime=T0)
    sitemap = site.write_sitemap(["a.html"])
    r = await crawls.crawl(sitemap, spider_args={"follow_links": "1", "follow_prefix": "/"})
    assert r.counts["new"] == 2
    assert r.stats["recrawler/url/refused/scheme"] == 1
    assert SECRET not in everything_stored(crawls.db_path)
    assert SECRET not in search(crawls, SECRET.lower(), capsys)


@deferred_f_from_coro_f
async def test_other_schemes_and_credentials_are_refused_by_reason(
    site: Site, crawls: Crawls, caplog: pytest.LogCaptureFixture
) -> None:
    host = urlsplit(site.url()).netloc
    site.write("a.html", docsite.guide("A"), mtime=T0)
    site.write("private.html", docsite.guide("Private"), mtime=T0)
    listed = [
        site.url("a.html"),
        "data:text/html,<main>hi</main>",
        f"ftp://{host}/{site.name}/a.html",
        "javascript:alert(1)",
        f"http://alice:hunter2pass@{host}/{site.name}/private.html",
    ]
    site.write("sitemap.xml", docsite.sitemap(listed))
    r = await crawls.crawl(site.url("sitemap.xml"))
    assert r.counts["new"] == 1
    assert r.stats["recrawler/url/refused/scheme"] == 3
    assert r.stats["recrawler/url/refused/credentials"] == 1
    assert site.requests("private.html") == []
    # a password in a URL never reaches a log line, the report or the database
    assert "hunter2pass" not in caplog.text
    assert "hunter2pass" not in json.dumps(r.report)
    assert "hunter2pass" not in everything_stored(crawls.db_path)


# --- 2. one bad entry costs one entry -----------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "reason", "spider_args"),
    [
        ("http://[127.0.0.1:{port}/{name}/x.html", "malformed", {}),
        ("http://127.0.0.1:70000/{name}/x.html", "malformed", {}),
        ("javascript:void(0)", "scheme", {"allowed_hosts": "*"}),
        ("http://exa mple.com/x.html", "malformed", {"allowed_hosts": "*"}),
    ],
)
@deferred_f_from_coro_f
async def test_a_malformed_entry_costs_only_itself(
    site: Site, crawls: Crawls, bad: str, reason: str, spider_args: dict[str, str]
) -> None:
    port = urlsplit(site.url()).port
    for name in ("a", "b", "c"):
        site.write(f"{name}.html", docsite.guide(name), mtime=T0)
    listed = [
        site.url("a.html"),
        bad.format(port=port, name=site.name),
        site.url("b.html"),
        site.url("c.html"),
    ]
    site.write("sitemap.xml", docsite.sitemap(listed))
    r = await crawls.crawl(site.url("sitemap.xml"), spider_args=spider_args)
    assert r.counts["new"] == 3
    assert r.stats[f"recrawler/url/refused/{reason}"] == 1
    assert r.stats["recrawler/sitemap/urls"] == 3
    assert r.counts["errors"] == 0


@deferred_f_from_coro_f
async def test_a_listing_that_lost_most_entries_is_a_failed_listing_not_proof(
    site: Site, crawls: Crawls
) -> None:
    pages = [f"p{i}.html" for i in range(30)]
    for p in pages:
        site.write(p, docsite.guide(p), mtime=T0)
    sitemap = site.write_sitemap(pages)
    await crawls.crawl(sitemap)
    # a broken deploy: the sitemap names one page, and the pages it dropped answer 404
    site.write_sitemap(pages[:1])
    for p in pages[1:]:
        site.remove(p)
    r = await crawls.crawl(sitemap, RECRAWLER_MAX_REMOVE_RATIO=1.0)
    assert "listing_shrunk" in r.report["reconcile"]["skipped"]
    assert r.counts["quarantined"] == r.counts["gone"] == 0
    statuses = {s for (s,) in statedb.rows(crawls.db_path, "SELECT status FROM pages")}
    assert statuses == {"live"}


# --- 7. bounds: sitemap trees and link discovery --------------------------------------------------


@deferred_f_from_coro_f
async def test_a_sitemap_index_chain_is_bounded(site: Site, crawls: Crawls) -> None:
    site.write("a.html", docsite.guide("A"), mtime=T0)
    site.write_sitemap(["a.html"], name="leaf.xml")
    # index0 -> index1 -> ... -> index49: a chain no real site has
    for i in range(50):
        site.write(
            f"index{i}.xml", docsite.sitemap_index([site.url(f"index{i + 1}.xml"), site.url("leaf.xml")])
        )
    r = await crawls.crawl(site.url("index0.xml"), RECRAWLER_SITEMAP_MAX_DEPTH=3)
    fetched = [q["path"] for q in site.requests() if q["path"].startswith("index")]
    assert len(fetched) == 4  # the start URL and three levels below it
    assert r.stats["recrawler/sitemap/refused/depth"] >= 1
    assert "sitemap_incomplete" in r.report["reconcile"]["skipped"]
    assert r.counts["new"] == 1


@deferred_f_from_coro_f
async def test_sitemap_files_per_run_are_bounded(site: Site, crawls: Crawls) -> None:
    for i in range(30):
        site.write(f"p{i}.html", docsite.guide(f"P{i}"), mtime=T0)
        site.write_sitemap([f"p{i}.html"], name=f"part{i}.xml")
    site.write("sitemap.xml", docsite.sitemap_index([site.url(f"part{i}.xml") for i in range(30)]))
    r = await crawls.crawl(site.url("sitemap.xml"), RECRAWLER_SITEMAP_MAX_FILES=10)
    assert len([q for q in site.requests() if q["path"].startswith("part")]) == 10
    assert r.stats["recrawler/sitemap/refused/files"] == 20
    assert r.counts["new"] == 10
    assert "sitemap_incomplete" in r.report["reconcile"]["skipped"]


@deferred_f_from_coro_f
async def test_link_discovery_is_bounded_across_runs(site: Site, crawls: Crawls) -> None:
    site.write("index.html", docsite.guide("Index", extra=' <a href="cal/1.html">calendar</a>'), mtime=T0)
    site.options("cal/", trap=True)
    sitemap = site.write_sitemap(["index.html"])
    args = {"follow_links": "1"}
    stored = []
    for _ in range(4):
        await crawls.crawl(sitemap, spider_args=args, RECRAWLER_FOLLOW_DEPTH_LIMIT=3)
        stored.append(statedb.rows(crawls.db_path, "SELECT COUNT(*) FROM pages")[0][0])
    # the listed page and three months, then never more
    assert stored == [4, 4, 4, 4]
    assert (
        max(
            int(Path(u).stem)
            for (u,) in statedb.rows(crawls.db_path, "SELECT url FROM pages")
            if "/cal/" in u
        )
        == 3
    )


@deferred_f_from_coro_f
async def test_link_requests_per_run_are_bounded(site: Site, crawls: Crawls) -> None:
    links = " ".join(f'<a href="w{i}.html">{i}</a>' for i in range(40))
    site.write("index.html", docsite.guide("Index", extra=f" {links}"), mtime=T0)
    for i in range(40):
        site.write(f"w{i}.html", docsite.guide(f"W{i}"), mtime=T0)
    sitemap = site.write_sitemap(["index.html"])
    r = await crawls.crawl(sitemap, spider_args={"follow_links": "1"}, RECRAWLER_FOLLOW_MAX_LINKS=15)
    assert r.stats["recrawler/follow/links"] == 15
    assert r.stats["recrawler/follow/max_links"] >= 25
    assert len([q for q in site.requests() if q["path"].startswith("w")]) <= 15


# --- 11. signals stay honest together -----------------------------------------------------------


@deferred_f_from_coro_f
async def test_a_link_to_a_listed_page_gets_the_listings_lastmod_decision(site: Site, crawls: Crawls) -> None:
    names = [f"p{i}" for i in range(12)]
    nav = " ".join(f'<a href="{n}.html">{n}</a>' for n in names)
    for n in names:
        site.write(f"{n}.html", docsite.guide(n, extra=f" {nav}"), mtime=T0)
    lastmod = (START - timedelta(days=3)).date().isoformat()
    sitemap = site.write_sitemap([(f"{n}.html", lastmod) for n in names])
    settings: dict[str, Any] = {
        "RECRAWLER_SCHEDULE": "adaptive",
        "RECRAWLER_LASTMOD_MODE": "skip",
        # a week-long staleness bound: lastmod alone decides the next day
        "RECRAWLER_MAX_INTERVAL_SECS": 7 * 86400,
        # no deploy probe: the run asks what the listing decides, nothing more
        "RECRAWLER_DEPLOY_PROBES": 0,
    }
    await crawls.crawl(sitemap, RECRAWLER_NOW=START.isoformat(), **settings)
    site.clear_requests()
    # a day later only p0 says it changed; its links to the other listed pages must not make
    # them due: the listing's lastmod already decided them
    later = START + timedelta(days=1)
    site.write("p0.html", docsite.guide("p0", "Edited.", extra=f" {nav}"), mtime=T0 + 10)
    entries = [(f"{n}.html", lastmod) for n in names[1:]]
    site.write_sitemap([("p0.html", later.isoformat()), *entries])
    r = await crawls.crawl(
        sitemap, spider_args={"follow_links": "1"}, RECRAWLER_NOW=later.isoformat(), **settings
    )
    assert [q["path"] for q in site.requests() if q["path"].endswith(".html")] == ["p0.html"]
    assert r.counts["skipped_lastmod"] == 11
    assert r.counts["changed"] == 1
