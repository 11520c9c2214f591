"""Path spellings: one page under one key, however its path is spelled (empty segments, dot
segments), and ``recrawler check`` names content stored under several keys."""

from __future__ import annotations

import asyncio
import io
import json
from collections import Counter
from typing import TYPE_CHECKING

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler import urls
from recrawler.cli import main as cli_main
from tests import docsite, statedb

if TYPE_CHECKING:
    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0
PAGES = 120


def live_keys(crawls: Crawls) -> list[str]:
    return [
        k for (k,) in statedb.rows(crawls.db_path, "SELECT key FROM pages WHERE status = 'live' ORDER BY key")
    ]


def chunk_pages(crawls: Crawls) -> Counter[str]:
    """Published chunks per page URL (its path after the site folder)."""
    out = io.StringIO()
    assert cli_main(["chunks", "--db", crawls.db_uri, "--json"], out=out) == 0
    return Counter(json.loads(line)["key"] for line in out.getvalue().splitlines())


def check(crawls: Crawls) -> tuple[int, list[dict[str, str]]]:
    out = io.StringIO()
    code = cli_main(["check", "--db", crawls.db_uri, "--json"], out=out)
    return code, [json.loads(line) for line in out.getvalue().splitlines()]


@pytest.mark.parametrize(
    ("variants", "key"),
    [
        (
            [
                "http://h.example/docs/page-1.html",
                "http://h.example//docs/page-1.html",
                "http://h.example/docs//page-1.html",
                "http://h.example/docs///page-1.html/",
                "http://h.example/docs/./page-1.html",
                "http://h.example/docs/x/../page-1.html",
            ],
            "h.example/docs/page-1.html",
        ),
        (["http://h.example//", "http://h.example/"], "h.example"),
    ],
)
def test_empty_and_dot_segments_are_one_key(variants: list[str], key: str) -> None:
    assert {urls.page_key(url) for url in variants} == {key}


@pytest.mark.parametrize(
    ("path", "resolved"),
    [
        # RFC 3986 §5.4 examples, and the attack's own path
        ("/a/b/c/./../../g", "/a/g"),
        ("mid/content=5/../6", "mid/6"),
        ("/docs/../private/secret.html", "/private/secret.html"),
        ("/docs/./a/", "/docs/a/"),
        ("/../a", "/a"),
        ("/docs/a.html", "/docs/a.html"),
    ],
)
def test_dot_segments_resolve_as_rfc_3986_says(path: str, resolved: str) -> None:
    assert urls.remove_dot_segments(path) == resolved


@deferred_f_from_coro_f
async def test_one_page_spelled_three_ways_is_one_live_key(site: Site, crawls: Crawls) -> None:
    for n in range(PAGES):
        site.write(f"docs/page-{n}.html", docsite.widget_page(n), mtime=T0)
    base = site.url().rstrip("/")
    entries = [site.url(f"docs/page-{n}.html") for n in range(PAGES)]
    # the attack: the first pages listed again as //docs/page-N.html and /docs//page-N.html
    entries += [f"{base}//docs/page-{n}.html" for n in range(10)]
    entries += [f"{base}/docs//page-{n}.html" for n in range(10)]
    site.write("sitemap.xml", docsite.sitemap(entries))
    r = await crawls.crawl(site.url("sitemap.xml"))
    assert r.counts["new"] == PAGES
    assert r.counts["errors"] == 0
    keys = live_keys(crawls)
    assert len(keys) == PAGES
    assert not any("//" in key for key in keys)
    per_page = chunk_pages(crawls)
    assert len(per_page) == PAGES
    # the three spellings were fetched once, as one page
    assert len(site.requests("docs/page-0.html")) == 1
    assert check(crawls) == (0, [])


@deferred_f_from_coro_f
async def test_check_names_one_text_stored_under_several_keys(site: Site, crawls: Crawls) -> None:
    for n in range(PAGES):
        site.write(f"docs/page-{n}.html", docsite.widget_page(n), mtime=T0)
    site.write("docs/guide/index.html", docsite.widget_page(9999), mtime=T0)
    entries = [f"docs/page-{n}.html" for n in range(PAGES)]
    # one page served at two addresses that are two keys: its text twice in search
    entries += ["docs/guide/", "docs/guide/index.html"]
    sitemap = site.write_sitemap(entries)
    r = await crawls.crawl(sitemap)
    assert r.counts["new"] == PAGES + 2
    code, findings = check(crawls)
    assert code == 1
    assert [(f["check"], f["key"].rsplit("/", 2)[-2:]) for f in findings] == [
        ("duplicate_content", ["docs", "guide"]),
    ]
    assert "guide/index.html" in findings[0]["detail"]
    # --repair decides nothing here: which address is the page is the site's call
    out = io.StringIO()
    assert await asyncio.to_thread(cli_main, ["check", "--db", crawls.db_uri, "--repair"], out) == 1
    assert "not repaired (duplicate_content)" in out.getvalue()


@deferred_f_from_coro_f
async def test_dot_segments_never_escape_the_follow_prefix(site: Site, crawls: Crawls) -> None:
    base = site.url().rstrip("/")
    private = "<p>The admin password is hunter2; never publish this page.</p>"
    site.write("private/secret.html", docsite.page("Secret", [("Secret", [private])]), mtime=T0)
    links = "".join(
        f'<a href="{href}">{href}</a>'
        for href in (
            f"{base}/docs/../private/secret.html",
            "../private/secret.html",
            "./sub/../page-1.html",
        )
    )
    site.write("docs/index.html", docsite.page("Index", [("Links", [links])]), mtime=T0)
    for n in range(PAGES):
        site.write(f"docs/page-{n}.html", docsite.widget_page(n), mtime=T0)
    listed = [f"docs/page-{n}.html" for n in range(PAGES)]
    site.write_sitemap([*listed, "docs/index.html"], "docs/sitemap.xml")
    r = await crawls.crawl(site.url("docs/sitemap.xml"), {"follow_links": "1"})
    assert r.counts["new"] == PAGES + 1
    assert site.requests("private/secret.html") == []
    assert not any("secret" in key for key in live_keys(crawls))
    assert r.stats["recrawler/follow/offsite"] >= 2
    # a link that stays inside the prefix once resolved is followed at its resolved address
    assert [e["path"] for e in site.requests() if "sub" in e["path"]] == []
