"""End-to-end recrawls: a real local server whose docs site changes between runs, real SQLite."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.cli import main as cli_main
from tests import docsite, statedb

if TYPE_CHECKING:
    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0  # a fixed mtime, so Last-Modified is stable across writes


def build_site(site: Site) -> str:
    """Write version 1 of the site: every validator style, noise, variants, an index + .xml.gz."""
    site.write("strong.html", docsite.tool_guide("Strong"), mtime=T0, validators="strong")
    site.write("weak.html", docsite.tool_guide("Weak"), mtime=T0, validators="weak")
    site.write("lm.html", docsite.tool_guide("LM"), mtime=T0, validators="lm")
    site.write("none.html", docsite.tool_guide("None"), mtime=T0, validators="none")
    site.write(
        "noisy.html",
        docsite.page("Noisy", [("A", ["Stable words."])], chrome_noise=True),
        mtime=T0,
        noise=True,
        validators="none",
    )
    site.write("guide/index.html", docsite.tool_guide("Guide"), mtime=T0)
    site.write("missing.html", docsite.tool_guide("Missing"), mtime=T0)
    site.write("tomb.html", docsite.tool_guide("Tomb"), mtime=T0)
    site.write("flaky.html", docsite.tool_guide("Flaky"), mtime=T0)
    site.write_sitemap(
        ["strong.html", "weak.html", "lm.html", "guide/", "guide#intro", "guide/?utm_source=news"],
        name="pages1.xml",
    )
    site.write_sitemap(
        ["none.html", "noisy.html", "missing.html", "tomb.html", "flaky.html"], name="pages2.xml.gz"
    )
    site.write("sitemap.xml", docsite.sitemap_index([site.url("pages1.xml"), site.url("pages2.xml.gz")]))
    return site.url("sitemap.xml")


@deferred_f_from_coro_f
async def test_four_runs_exact_actions(site: Site, crawls: Crawls) -> None:
    sitemap = build_site(site)

    r1 = await crawls.crawl(sitemap)
    assert r1.counts | {} == r1.counts
    assert {k: r1.counts[k] for k in ("crawled", "new", "changed", "unchanged", "gone", "errors")} == {
        "crawled": 9,
        "new": 9,
        "changed": 0,
        "unchanged": 0,
        "gone": 0,
        "errors": 0,
    }
    assert set(r1.actions().values()) == {"new"}
    # URL variants of one page are fetched once
    assert len([r for r in site.requests() if r["path"].startswith("guide")]) == 1
    assert r1.report["alert"] is None  # a first run is all new by nature

    # run 2: nothing changed -> 0 new, 0 changed; validator pages answer 304 without a body
    site.clear_requests()
    r2 = await crawls.crawl(sitemap)
    assert r2.stats["recrawler/page/unchanged"] == 9
    assert "recrawler/page/new" not in r2.stats
    assert "recrawler/page/changed" not in r2.stats
    assert r2.stats["recrawler/conditional/sent"] == 7  # none.html and noisy.html have no validators
    assert r2.stats["recrawler/conditional/not_modified"] == 7
    assert r2.stats["recrawler/page/unchanged/hash"] == 2
    assert r2.events == []
    strong = site.requests("strong.html")[0]
    assert strong["status"] == 304
    assert strong["if_none_match"].startswith('"')
    assert site.requests("weak.html")[0]["if_none_match"].startswith('W/"')  # sent back byte for byte
    lm = site.requests("lm.html")[0]
    assert lm["if_none_match"] is None
    assert lm["status"] == 304
    assert lm["if_modified_since"].endswith("GMT")

    # run 3: an edit, a new page, a 404, a 410, a 500
    site.write("strong.html", docsite.tool_guide("Strong", "The NEW text."), mtime=T0 + 100)
    site.write("new.html", docsite.tool_guide("New"), mtime=T0)
    site.remove("missing.html")
    site.remove("tomb.html", gone=True)
    site.options("flaky.html", status=500)
    site.write_sitemap(["strong.html", "weak.html", "lm.html", "guide/", "new.html"], name="pages1.xml")
    r3 = await crawls.crawl(sitemap)
    assert r3.actions() == {
        "strong.html": "changed",
        "new.html": "new",
        "missing.html": "quarantined",
        "tomb.html": "gone",
        "flaky.html": "error",
    }
    assert {
        k: r3.counts[k] for k in ("crawled", "new", "changed", "unchanged", "gone", "quarantined", "errors")
    } == {
        # the quarantined page is not gone (yet): counted apart, not in crawled
        "crawled": 9,
        "new": 1,
        "changed": 1,
        "unchanged": 5,
        "gone": 1,
        "quarantined": 1,
        "errors": 1,
    }
    assert r3.stats["recrawler/page/gone/http_410"] == 1

    # run 4: the second 404 makes the page gone; a 500 page stays live; gone stays a tombstone
    site.options("flaky.html", status=None)
    r4 = await crawls.crawl(sitemap)
    assert r4.actions() == {"missing.html": "gone"}
    assert r4.stats["recrawler/page/gone/http_404"] == 1
    statuses = dict(statedb.rows(crawls.db_path, "SELECT url, status FROM pages"))
    assert statuses[site.url("missing.html")] == "gone"
    assert statuses[site.url("tomb.html")] == "gone"
    assert statuses[site.url("flaky.html")] == "live"
    assert len(statuses) == 10


@deferred_f_from_coro_f
async def test_unlisted_page_is_checked_directly_and_quarantine_lifts(site: Site, crawls: Crawls) -> None:
    site.write("a.html", docsite.tool_guide("A"), mtime=T0)
    site.write("b.html", docsite.tool_guide("B"), mtime=T0)
    sitemap = site.write_sitemap(["a.html", "b.html"])
    await crawls.crawl(sitemap)

    # b drops out of the sitemap but still exists: checked directly, stays live and unchanged
    site.write_sitemap(["a.html"])
    r2 = await crawls.crawl(sitemap)
    assert r2.stats["recrawler/reconcile/verified"] == 1
    assert r2.counts["unchanged"] == 2
    assert r2.events == []

    # b now 404s while unlisted: quarantined, then restored when it comes back
    site.remove("b.html")
    r3 = await crawls.crawl(sitemap)
    assert r3.actions() == {"b.html": "quarantined"}
    site.write("b.html", docsite.tool_guide("B"), mtime=T0)
    site.write_sitemap(["a.html", "b.html"])
    r4 = await crawls.crawl(sitemap)
    assert r4.actions() == {"b.html": "restored"}
    assert r4.counts["restored"] == 1
    assert r4.counts["unchanged"] == 2


@deferred_f_from_coro_f
async def test_500s_never_quarantine_and_error_ratio_holds_the_guard(site: Site, crawls: Crawls) -> None:
    for i in range(5):
        site.write(f"p{i}.html", docsite.tool_guide(f"P{i}"), mtime=T0)
    sitemap = site.write_sitemap([f"p{i}.html" for i in range(5)])
    await crawls.crawl(sitemap)

    # 2 of 5 fail with 500 (40% > 20%) and one 404s: the 404 must not quarantine this run
    site.options("p0.html", status=500)
    site.options("p1.html", status=503)
    site.remove("p2.html")
    r2 = await crawls.crawl(sitemap)
    assert r2.report["reconcile"] == {"applied": False, "skipped": ["error_ratio"]}
    assert r2.counts["errors"] == 2
    assert r2.counts["quarantined"] == 0
    assert r2.counts["gone"] == 0
    assert r2.counts["missing_held"] == 1
    assert r2.stats["recrawler/reconcile/skipped/error_ratio"] == 1
    rows = dict(statedb.rows(crawls.db_path, "SELECT url, status || ':' || misses FROM pages"))
    assert set(rows.values()) == {"live:0"}


@deferred_f_from_coro_f
async def test_outage_guard_when_sitemap_is_503(site: Site, crawls: Crawls) -> None:
    site.write("a.html", docsite.tool_guide("A"), mtime=T0)
    sitemap = site.write_sitemap(["a.html"])
    await crawls.crawl(sitemap)
    site.remove("a.html")
    site.options("sitemap.xml", status=503)
    r2 = await crawls.crawl(sitemap)
    assert r2.report["reconcile"]["skipped"] == ["sitemap_failed"]
    assert r2.stats["recrawler/reconcile/skipped/verify_sitemap_failed"] == 1
    assert r2.events == []
    status = statedb.value(crawls.db_path, "SELECT status FROM pages")
    assert status == "live"


@deferred_f_from_coro_f
async def test_empty_content_is_an_error_and_keeps_state(site: Site, crawls: Crawls) -> None:
    site.write("a.html", docsite.tool_guide("A"), mtime=T0)
    sitemap = site.write_sitemap(["a.html"])
    await crawls.crawl(sitemap)
    before = statedb.row(crawls.db_path, "SELECT content_hash, etag FROM pages")
    site.write("a.html", "<html><body><main>  </main></body></html>", mtime=T0 + 5)
    r2 = await crawls.crawl(sitemap)
    assert r2.actions() == {"a.html": "error"}
    assert r2.events[0]["reason"] == "empty_content"
    assert r2.stats["recrawler/page/error/empty_content"] == 1
    after = statedb.row(crawls.db_path, "SELECT content_hash, etag FROM pages")
    assert after == before


@deferred_f_from_coro_f
async def test_redeploy_that_only_touches_files_is_unchanged(site: Site, crawls: Crawls) -> None:
    # nginx-style: validators change with mtime, so the content hash carries the verdict
    site.write("a.html", docsite.tool_guide("A"), mtime=T0)
    sitemap = site.write_sitemap(["a.html"])
    await crawls.crawl(sitemap)
    query = "SELECT etag, last_modified, content_hash FROM pages"
    etag1, lm1, hash1 = statedb.row(crawls.db_path, query)
    site.write(
        "a.html", docsite.tool_guide("A").replace("<header", "<!-- rebuilt --><header"), mtime=T0 + 3600
    )
    r2 = await crawls.crawl(sitemap)
    assert r2.stats["recrawler/page/unchanged/hash"] == 1
    assert r2.events == []
    # the 200 refreshed the stored validators; the content hash did not move
    etag2, lm2, hash2 = statedb.row(crawls.db_path, query)
    assert (etag2 != etag1, lm2 != lm1, hash2 == hash1) == (True, True, True)
    site.clear_requests()
    await crawls.crawl(sitemap)
    assert site.requests("a.html")[0]["if_none_match"] == etag2


@deferred_f_from_coro_f
async def test_host_never_answering_304_is_reported(site: Site, crawls: Crawls) -> None:
    # A server that sends validators but ignores them: the very validators a request sent come
    # back with the whole page (a 304 was due)
    for i in range(3):
        site.write(
            f"p{i}.html",
            docsite.page(f"P{i}", [("A", ["Words."])]),
            mtime=T0,
            no304=True,
            validators="weak",
        )
    sitemap = site.write_sitemap([f"p{i}.html" for i in range(3)])
    await crawls.crawl(sitemap)
    r2 = await crawls.crawl(sitemap, RECRAWLER_CONDITIONAL_NO_304_AFTER=3)
    assert r2.counts["unchanged"] == 3
    assert r2.counts["not_modified"] == 0
    host = site.url().split("/")[2]
    assert r2.report["hosts_without_304"] == [host]


@deferred_f_from_coro_f
async def test_cli_pages_and_runs(site: Site, crawls: Crawls, capsys) -> None:  # type: ignore[no-untyped-def]
    site.write("a.html", docsite.tool_guide("A"), mtime=T0)
    sitemap = site.write_sitemap(["a.html"])
    await crawls.crawl(sitemap)
    capsys.readouterr()
    assert cli_main(["pages", "--db", crawls.db_uri, "--json"]) == 0
    import json

    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["url"] for x in lines] == [site.url("a.html")]
    assert set(lines[0]) >= {
        "key",
        "url",
        "status",
        "content_hash",
        "etag",
        "last_modified",
        "last_checked",
        "last_changed",
        "misses",
    }
    assert cli_main(["runs", "--db", crawls.db_uri]) == 0
    header, run = capsys.readouterr().out.splitlines()
    assert header.split()[5:8] == ["CRAWLED", "NEW", "CHANGED"]
    assert run.split()[6:8] == ["1", "1"]


@deferred_f_from_coro_f
async def test_robots_txt_as_sitemap_url(site: Site, crawls: Crawls, mockserver) -> None:  # type: ignore[no-untyped-def]
    site.write("a.html", docsite.tool_guide("A"), mtime=T0)
    site.write("b.html", docsite.tool_guide("B"), mtime=T0)
    sitemap = site.write_sitemap([("a.html", "2026-01-02"), ("b.html", "2026-03-04T05:06:07+00:00")])
    robots = mockserver.root / "robots.txt"
    robots.write_text(f"User-agent: *\nAllow: /\nSitemap: {sitemap}\n")
    try:
        r1 = await crawls.crawl(f"{mockserver.url}/robots.txt")
    finally:
        robots.unlink()
    assert r1.counts["new"] == 2
    lastmods = dict(statedb.rows(crawls.db_path, "SELECT url, lastmod FROM pages"))
    assert lastmods == {site.url("a.html"): "2026-01-02", site.url("b.html"): "2026-03-04T05:06:07+00:00"}


@deferred_f_from_coro_f
async def test_bad_sitemap_url_and_unparseable_sitemap(site: Site, crawls: Crawls) -> None:
    site.write("a.html", docsite.tool_guide("A"), mtime=T0)
    sitemap = site.write_sitemap(["a.html"])
    await crawls.crawl(sitemap)
    site.remove("a.html")
    site.write("sitemap.xml", "this is not xml <<<")
    r2 = await crawls.crawl(sitemap)
    assert r2.report["reconcile"]["skipped"] == ["sitemap_failed"]
    status = statedb.value(crawls.db_path, "SELECT status FROM pages")
    assert status == "live"
