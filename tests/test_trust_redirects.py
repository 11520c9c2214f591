"""Redirects: a permanent one moves a page (one key live, never two), a temporary one lends it an
address, one to another host is never followed, a loop changes nothing."""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.cli import main as cli_main
from tests import docsite, statedb

if TYPE_CHECKING:
    from pathlib import Path

    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0


def pages(db: Path) -> dict[str, tuple[str, str | None]]:
    """url tail -> (status, moved_to tail)"""
    out = {}
    for row in statedb.dicts(db, "SELECT * FROM pages"):
        moved_to = row.get("moved_to")
        out[row["url"].rsplit("/", 1)[-1]] = (
            row["status"],
            moved_to.rsplit("/", 1)[-1] if moved_to else None,
        )
    return out


def chunk_urls(crawls: Crawls, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The page URL of every chunk the bot can see."""
    capsys.readouterr()
    assert cli_main(["chunks", "--db", crawls.db_uri, "--json"]) == 0
    return sorted(
        json.loads(x)["url"].split("#")[0].rsplit("/", 1)[-1] for x in capsys.readouterr().out.splitlines()
    )


@deferred_f_from_coro_f
async def test_a_permanent_redirect_moves_the_page(
    site: Site, crawls: Crawls, capsys: pytest.CaptureFixture[str]
) -> None:
    site.write("a.html", docsite.tool_guide("A", "Retry failed uploads with --retry."), mtime=T0)
    site.write("b.html", docsite.tool_guide("B", "Something else."), mtime=T0)
    sitemap = site.write_sitemap(["a.html", "b.html"])
    await crawls.crawl(sitemap)
    before = Counter(chunk_urls(crawls, capsys))
    assert before["a.html"] > 0

    site.write("guide/uploads.html", docsite.tool_guide("A", "Retry failed uploads with --retry."), mtime=T0)
    site.options("a.html", redirect="guide/uploads.html")
    r = await crawls.crawl(sitemap)
    assert pages(crawls.db_path) == {
        "a.html": ("moved", "uploads.html"),
        "uploads.html": ("live", None),
        "b.html": ("live", None),
    }
    assert r.counts["moved"] == 1
    assert r.actions()["a.html"] == "moved"
    moved = next(e for e in r.events if e["action"] == "moved")
    assert moved["moved_to"] == site.url("guide/uploads.html")
    # the old address left the knowledge base with the publication; the text lives on, once
    assert Counter(chunk_urls(crawls, capsys)) == {
        "uploads.html": before["a.html"],
        "b.html": before["b.html"],
    }
    # a move is not a change spike, and nothing was embedded twice
    assert r.report["held"] == []
    capsys.readouterr()
    assert cli_main(["pages", "--db", crawls.db_uri]) == 0
    listing = capsys.readouterr().out
    assert "moved" in listing
    assert site.url("guide/uploads.html") in listing


@deferred_f_from_coro_f
async def test_old_and_new_address_both_listed_leave_one_key_live(
    site: Site, crawls: Crawls, capsys: pytest.CaptureFixture[str]
) -> None:
    site.write("old.html", docsite.tool_guide("Old", "How to configure the cache."), mtime=T0)
    sitemap = site.write_sitemap(["old.html"])
    await crawls.crawl(sitemap)
    site.write("new.html", docsite.tool_guide("Old", "How to configure the cache."), mtime=T0)
    site.options("old.html", redirect="new.html", redirect_status=308)
    site.write_sitemap(["old.html", "new.html"])
    await crawls.crawl(sitemap)
    assert pages(crawls.db_path) == {"old.html": ("moved", "new.html"), "new.html": ("live", None)}
    assert set(chunk_urls(crawls, capsys)) == {"new.html"}
    # fetched once, whether reached by the listing or by the redirect
    assert len(site.requests("new.html")) == 1


@pytest.mark.parametrize("status", [302, 307])
@deferred_f_from_coro_f
async def test_a_temporary_redirect_keeps_the_address_and_indexes_the_target(
    site: Site, crawls: Crawls, capsys: pytest.CaptureFixture[str], status: int
) -> None:
    site.write("latest.html", docsite.tool_guide("Latest", "Version 1 notes."), mtime=T0)
    site.write(
        "v2.html", docsite.tool_guide("Latest", "Version 2 notes: retries are on by default."), mtime=T0
    )
    sitemap = site.write_sitemap(["latest.html"])
    await crawls.crawl(sitemap)
    site.options("latest.html", redirect="v2.html", redirect_status=status)
    r = await crawls.crawl(sitemap)
    assert pages(crawls.db_path) == {"latest.html": ("live", None)}
    assert r.counts["changed"] == 1
    assert set(chunk_urls(crawls, capsys)) == {"latest.html"}
    capsys.readouterr()
    assert cli_main(["search", "retries on by default", "--db", crawls.db_uri, "--json", "-k", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["url"].startswith(site.url("latest.html"))


@deferred_f_from_coro_f
async def test_a_redirect_to_another_host_is_never_followed_and_counts_as_a_miss(
    site: Site, crawls: Crawls
) -> None:
    port = urlsplit(site.url()).port
    site.write("a.html", docsite.tool_guide("A", "Our own words."), mtime=T0)
    site.write("b.html", docsite.tool_guide("B", "More words."), mtime=T0)
    site.write("elsewhere.html", docsite.tool_guide("Elsewhere", "Somebody else's words."), mtime=T0)
    sitemap = site.write_sitemap(["a.html", "b.html"])
    await crawls.crawl(sitemap)
    site.options("a.html", location=f"http://localhost:{port}/{site.name}/elsewhere.html")
    site.clear_requests()
    r2 = await crawls.crawl(sitemap)
    assert site.requests("elsewhere.html") == []
    assert r2.counts["quarantined"] == 1
    assert r2.stats["recrawler/url/refused/offsite"] == 1
    r3 = await crawls.crawl(sitemap)
    assert r3.counts["gone"] == 1
    assert pages(crawls.db_path) == {"a.html": ("gone", None), "b.html": ("live", None)}


@deferred_f_from_coro_f
async def test_the_direct_check_of_an_unlisted_page_never_follows_it_off_site(
    site: Site, crawls: Crawls
) -> None:
    port = urlsplit(site.url()).port
    site.write("a.html", docsite.tool_guide("A", "Our own words."), mtime=T0)
    site.write("b.html", docsite.tool_guide("B", "More words."), mtime=T0)
    site.write("foreign.html", docsite.tool_guide("Foreign", "Somebody else's words."), mtime=T0)
    sitemap = site.write_sitemap(["a.html", "b.html"])
    await crawls.crawl(sitemap)
    # a.html drops out of the listing and now points at another host
    site.write_sitemap(["b.html"])
    site.options("a.html", location=f"http://localhost:{port}/{site.name}/foreign.html")
    site.clear_requests()
    r = await crawls.crawl(sitemap)
    assert r.counts["verified"] == 1
    assert site.requests("foreign.html") == []  # neither fetched nor sent a.html's ETag
    assert pages(crawls.db_path)["a.html"] == ("quarantined", None)
    texts = " ".join(t for (t,) in statedb.rows(crawls.db_path, "SELECT text FROM chunks"))
    assert "Somebody else" not in texts


@deferred_f_from_coro_f
async def test_a_redirect_loop_is_an_error_that_changes_nothing(
    site: Site, crawls: Crawls, capsys: pytest.CaptureFixture[str]
) -> None:
    site.write("a.html", docsite.tool_guide("A", "Stable words."), mtime=T0)
    site.write("b.html", docsite.tool_guide("B", "More words."), mtime=T0)
    sitemap = site.write_sitemap(["a.html", "b.html"])
    await crawls.crawl(sitemap)
    before = chunk_urls(crawls, capsys)
    site.options("a.html", redirect="hop.html")
    site.options("hop.html", redirect="a.html", redirect_status=302)
    r = await crawls.crawl(sitemap)
    assert r.stats["recrawler/page/error/redirect_loop"] == 1
    assert pages(crawls.db_path) == {"a.html": ("live", None), "b.html": ("live", None)}
    assert chunk_urls(crawls, capsys) == before
    assert r.counts["quarantined"] == r.counts["gone"] == r.counts["moved"] == 0


@deferred_f_from_coro_f
async def test_a_redirected_sitemap_is_followed(site: Site, crawls: Crawls) -> None:
    site.write("a.html", docsite.tool_guide("A", "Words."), mtime=T0)
    site.write_sitemap(["a.html"], name="sitemap-v2.xml")
    site.options("sitemap.xml", redirect="sitemap-v2.xml")
    r = await crawls.crawl(site.url("sitemap.xml"))
    assert r.counts["new"] == 1
    assert r.report["reconcile"]["applied"]


@deferred_f_from_coro_f
async def test_a_chain_longer_than_redirect_max_times_is_an_error_that_changes_nothing(
    site: Site, crawls: Crawls
) -> None:
    site.write("a.html", docsite.tool_guide("A", "Stable words."), mtime=T0)
    site.write("b.html", docsite.tool_guide("B", "More words."), mtime=T0)
    site.write("end.html", docsite.tool_guide("End", "Words at the end."), mtime=T0)
    sitemap = site.write_sitemap(["a.html", "b.html"])
    await crawls.crawl(sitemap)
    site.options("a.html", redirect="h1.html", redirect_status=302)
    site.options("h1.html", redirect="h2.html", redirect_status=302)
    site.options("h2.html", redirect="end.html", redirect_status=302)
    r = await crawls.crawl(sitemap, REDIRECT_MAX_TIMES=2)
    assert r.stats["recrawler/page/error/redirect_limit"] == 1
    assert r.stats["recrawler/redirect/temporary"] == 2
    assert [len(site.requests(p)) for p in ("h1.html", "h2.html", "end.html")] == [1, 1, 0]
    assert pages(crawls.db_path) == {"a.html": ("live", None), "b.html": ("live", None)}
    assert r.counts["quarantined"] == r.counts["gone"] == r.counts["moved"] == r.counts["changed"] == 0
    # within the limit, the same chain lends a.html the end's content
    r = await crawls.crawl(sitemap, REDIRECT_MAX_TIMES=3)
    assert "recrawler/page/error/redirect_limit" not in r.stats
    assert r.counts["changed"] == 1


@deferred_f_from_coro_f
async def test_a_page_s_meta_refresh_is_content_not_a_hop(site: Site, crawls: Crawls) -> None:
    refresh = '<meta http-equiv="refresh" content="0; url=other.html">'
    site.write("a.html", docsite.tool_guide("A", "Words.").replace("<head>", f"<head>{refresh}"), mtime=T0)
    site.write("other.html", docsite.tool_guide("Other", "Other words."), mtime=T0)
    assert refresh in (site.root / "a.html").read_text()
    r = await crawls.crawl(site.write_sitemap(["a.html"]))
    assert r.counts["new"] == 1
    assert site.requests("other.html") == []


@deferred_f_from_coro_f
async def test_a_sitemap_redirected_to_another_host_is_never_fetched(site: Site, crawls: Crawls) -> None:
    port = urlsplit(site.url()).port
    site.write("a.html", docsite.tool_guide("A", "Words."), mtime=T0)
    site.write_sitemap(["a.html"], name="sitemap-v2.xml")
    # Scrapy follows a sitemap's redirect; the hop is checked like any other URL
    site.options("sitemap.xml", location=f"http://localhost:{port}/{site.name}/sitemap-v2.xml")
    r = await crawls.crawl(site.url("sitemap.xml"))
    assert site.requests("sitemap-v2.xml") == []
    assert r.stats["recrawler/url/refused/offsite"] == 1
    assert r.counts["new"] == 0


@deferred_f_from_coro_f
async def test_pages_consolidated_into_a_new_unlisted_page_move_there(
    site: Site, crawls: Crawls, capsys: pytest.CaptureFixture[str]
) -> None:
    names = [f"docs/p{i}.html" for i in range(300)]
    for i, name in enumerate(names):
        site.write(name, docsite.tool_guide(f"P{i}", f"Page {i} explains option number {i}."), mtime=T0)
    sitemap = site.write_sitemap(names)
    await crawls.crawl(sitemap)
    # four listed pages become one new page, which the sitemap does not list yet
    merged = " ".join(f"Page {i} explains option number {i}." for i in range(4))
    site.write("docs/options.html", docsite.tool_guide("Options", merged), mtime=T0 + 60)
    for name in names[:4]:
        site.options(name, redirect="docs/options.html", redirect_status=301)
    r = await crawls.crawl(sitemap)
    assert (r.exit_code, r.counts["moved"], r.counts["quarantined"]) == (0, 4, 0)
    assert len(site.requests("docs/options.html")) == 1
    stored = pages(crawls.db_path)
    assert stored["options.html"] == ("live", None)
    assert [stored[f"p{i}.html"] for i in range(4)] == [("moved", "options.html")] * 4
    # the new page holds the content once; the four old addresses hold none
    urls = Counter(chunk_urls(crawls, capsys))
    assert urls["options.html"] > 0
    assert not any(urls[f"p{i}.html"] for i in range(4))
    r2 = await crawls.crawl(sitemap)
    assert (r2.exit_code, r2.counts["moved"], r2.counts["new"]) == (0, 0, 0)
