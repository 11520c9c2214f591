"""Soft 404s: pages that answer 200 (or redirect) but are not there are misses, never content."""

from __future__ import annotations

import asyncio
import io
import json
import tarfile
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import pytest
from scrapy import signals
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.cli import main as cli_main
from recrawler.downloadermiddlewares.redirect import SHARED_TARGET_MIN, PageRedirectMiddleware
from tests import docsite, statedb
from tests.conftest_mockserver import REPO_ROOT

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0
LATER = T0 + 3600

NOT_FOUND = docsite.page(
    "Page not found",
    [
        (
            "Sorry",
            ['The page you were looking for does not exist. Try the search, or go <a href="/">home</a>.'],
        )
    ],
)


def body(n: int) -> str:
    return docsite.page(
        f"Widget {n}",
        [
            (
                "Overview",
                [f"Widget {n} uploads files to the store and retries failed uploads after {n} seconds."],
            ),
            (
                "Configuration",
                [f"Set <code>widget_{n}.retries</code> in acme.toml; the default is {n % 7 + 1}."],
            ),
            (
                "Usage",
                [f"Run widget {n} from the command line, or call it from a job."],
                f"acme widget-{n} --retry",
            ),
        ],
    )


#: the site's own not-found page, as its server answers a path that does not exist (nginx's
#: error_page): the evidence a page is compared with
SITE_NOT_FOUND = docsite.page(
    "Page not found | Example Docs",
    [("Page not found", ["Sorry, {path} does not exist. Try the search, or start from the guides."])],
)


def not_found_page(site: Site, status: int = 404, page: str = SITE_NOT_FOUND) -> None:
    """The site answers a path that does not exist with its not-found page (status *status*)."""
    site.write("_errors/404.html", page, mtime=T0)
    site.options("*", not_found="_errors/404.html", not_found_status=status)


def write_docs(site: Site, n: int) -> str:
    for i in range(n):
        site.write(f"docs/page-{i}.html", body(i), mtime=T0)
    site.write(
        "index.html", docsite.page("Example Docs", [("Welcome", ["Start with the guides."])]), mtime=T0
    )
    return site.write_sitemap(["index.html", *(f"docs/page-{i}.html" for i in range(n))])


def statuses(crawls: Crawls) -> Counter[str]:
    return Counter(statedb.statuses(crawls.db_path))


def status(crawls: Crawls, path: str) -> str | None:
    row = statedb.row(crawls.db_path, "SELECT status FROM pages WHERE url LIKE ?", (f"%/{path}",))
    return None if row is None else str(row[0])


async def published_texts(crawls: Crawls) -> list[tuple[str, str]]:
    """(page URL tail, chunk text) of every chunk the bot can see."""
    out = io.StringIO()
    assert await asyncio.to_thread(cli_main, ["chunks", "--db", crawls.db_uri, "--json"], out) == 0
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    return [(r["url"].split("#")[0].rsplit("/", 1)[-1], r["text"]) for r in rows]


# --- the shapes, as pure rules ------------------------------------------------------------------


SITE_URL = "https://docs.example.com/docs/"
PROBE = f"{SITE_URL}recrawler-no-such-page-0123abcd.html"
ANSWER = (
    "# Page not found\n\nSorry, /docs/recrawler-no-such-page-0123abcd.html does not exist. Try the search."
)
LONG_ANSWER = (
    "# Page not found\n\nSorry, /docs/recrawler-no-such-page-0123abcd.html does not exist. Pages you "
    "may be looking for: Installing, Configuring the build, Running the tests, Writing a plugin."
)


@pytest.mark.parametrize(
    ("answer", "text", "url", "shape"),
    [
        # the site's not-found page, naming the page's own path
        (
            ANSWER,
            "# Page not found\n\nSorry, /docs/old.html does not exist. Try the search.",
            "old.html",
            "x",
        ),
        (
            "No page /docs/recrawler-no-such-page-0123abcd.html here.",
            "No page /docs/p7.html here.",
            "p7.html",
            "x",
        ),
        # the same page, its suggestions differing a little (within a small TLSH distance)
        (
            LONG_ANSWER,
            LONG_ANSWER.replace("recrawler-no-such-page-0123abcd", "guide/old"),
            "guide/old.html",
            "x",
        ),
        # content, whatever it says: it is not the site's not-found page
        (ANSWER, "# Not found errors\n\nA dependency that is not found stops the build.", "nf.html", None),
        (ANSWER, "# 404 Not Found\n\nThe server answers 404 when the file is missing.", "404.html", None),
        (ANSWER, "# 404\n\nHTTP status: the resource is not there.", "glossary.html", None),
        (ANSWER, "# Oops!\n\nOops! is what the CLI prints when a plugin crashes.", "oops.html", None),
        (ANSWER, "# Page not found\n\nSorry, the page does not exist. " * 40, "long.html", None),
        # no evidence (a bare 404 the probe got): content
        (None, "# Page not found\n\nSorry, /docs/old.html does not exist. Try the search.", "old.html", None),
    ],
)
def test_a_soft_404_is_the_sites_own_not_found_page(
    answer: str | None, text: str, url: str, shape: str | None
) -> None:
    from recrawler import notfound

    evidence = notfound.not_found_answer(answer, PROBE) if answer is not None else None
    for stored, named in ((True, notfound.NOT_FOUND_TEXT), (False, notfound.NOT_FOUND_PAGE)):
        got = notfound.not_found(text, SITE_URL + url, evidence, stored=stored)
        assert got == (named if shape else None)


def test_a_probe_asks_for_a_name_like_the_pages_under_its_home() -> None:
    from recrawler import notfound

    homes = ("/", "/docs/")
    assert notfound.probe("https://d.example/docs/a/b.html", homes, "t") == (
        "https://d.example/docs/",
        "https://d.example/docs/recrawler-no-such-page-t.html",
    )
    assert notfound.probe("https://d.example/blog/post/", homes, "t") == (
        "https://d.example/",
        "https://d.example/recrawler-no-such-page-t.html",
    )
    assert notfound.probe("http://d.example:8080/docs/api", homes, "t")[0] == "http://d.example:8080/docs/"


@pytest.mark.parametrize(
    ("source", "target", "soft"),
    [
        ("/docs/old.html", "/", True),
        ("/docs/old.html", "/docs/", True),
        ("/docs/old.html", "/docs/index.html", False),  # a page, not the folder's address
        ("/docs/index.html", "/docs/", False),  # a folder's own page at its folder's address
        ("/docs/", "/docs/", False),
        ("/docs/a.html", "/docs/b.html", False),
    ],
)
def test_a_redirect_home_is_a_soft_404(source: str, target: str, soft: bool) -> None:
    from recrawler import notfound

    assert notfound.home_redirect(source, target, ("/", "/docs/")) is soft


# --- crawls -------------------------------------------------------------------------------------


@deferred_f_from_coro_f
async def test_one_page_answering_200_page_not_found_is_a_miss_not_a_change(
    site: Site, crawls: Crawls
) -> None:
    not_found_page(site, page=NOT_FOUND)
    sitemap = write_docs(site, 100)
    await crawls.crawl(sitemap)
    # the page answers 200 with the site's own not-found page
    site.write("docs/page-7.html", NOT_FOUND, mtime=LATER)
    r2 = await crawls.crawl(sitemap)
    assert r2.counts["changed"] == 0
    assert r2.counts["quarantined"] == 1
    assert r2.exit_code == 0
    assert status(crawls, "docs/page-7.html") == "quarantined"
    assert r2.stats["recrawler/page/soft_404/not_found_text"] == 1
    assert not any("does not exist" in text for _, text in await published_texts(crawls))
    # it comes back: restored with the text it had, nothing re-embedded
    site.write("docs/page-7.html", body(7), mtime=LATER + 60)
    r3 = await crawls.crawl(sitemap)
    assert (r3.counts["restored"], r3.counts["changed"]) == (1, 0)
    assert status(crawls, "docs/page-7.html") == "live"


@pytest.mark.parametrize(("broken", "exit_code"), [(12, 0), (60, 3)])
@deferred_f_from_coro_f
async def test_short_unique_no_page_texts_are_misses(
    site: Site, crawls: Crawls, broken: int, exit_code: int
) -> None:
    # the site answers a path it does not have with 200 and a page naming the path
    not_found_page(site, 200, "<html><body><main><p>No page {path} here.</p></main></body></html>")
    sitemap = write_docs(site, 300)
    await crawls.crawl(sitemap)
    for i in range(broken):
        # each different, each short: no fuzzy fingerprint, no same-content hold
        site.write(
            f"docs/page-{i}.html",
            f"<html><body><main><p>No page /{site.name}/docs/page-{i}.html here.</p></main></body></html>",
            mtime=LATER,
        )
    r2 = await crawls.crawl(sitemap)
    assert r2.counts["changed"] == 0
    assert r2.exit_code == exit_code
    assert r2.stats["recrawler/page/soft_404/not_found_text"] == broken
    if exit_code == 3:
        # 60 of 301 pages would leave the knowledge base at once: held for an operator
        assert r2.report["held"] == ["mass_removal"]
    else:
        assert statuses(crawls)["quarantined"] == broken
    assert not any("No page" in text for _, text in await published_texts(crawls))


@deferred_f_from_coro_f
async def test_removed_pages_sent_home_by_a_302_are_misses(site: Site, crawls: Crawls) -> None:
    sitemap = write_docs(site, 100)
    await crawls.crawl(sitemap)
    for i in range(5):
        site.remove(f"docs/page-{i}.html")
        site.options(f"docs/page-{i}.html", redirect="", redirect_status=302)
    r2 = await crawls.crawl(sitemap)
    assert r2.counts["changed"] == 0
    assert r2.counts["quarantined"] == 5
    assert r2.stats["recrawler/page/soft_404/redirect_home"] == 5
    texts = await published_texts(crawls)
    # the home page's text is under one key: its own
    assert {page for page, text in texts if "Start with the guides" in text} == {"index.html"}


@deferred_f_from_coro_f
async def test_pages_moved_to_a_200_not_found_page_are_misses(site: Site, crawls: Crawls) -> None:
    sitemap = write_docs(site, 100)
    await crawls.crawl(sitemap)
    # the site's not-found page, which its server answers a path it does not have with
    site.write("404.html", NOT_FOUND, mtime=LATER)
    site.options("*", not_found="404.html")
    for i in range(5):
        site.remove(f"docs/page-{i}.html")
        site.options(f"docs/page-{i}.html", redirect="404.html", redirect_status=301)
    r2 = await crawls.crawl(sitemap)
    assert (r2.counts["moved"], r2.counts["new"]) == (0, 0)
    assert r2.counts["quarantined"] == 5
    assert [status(crawls, f"docs/page-{i}.html") for i in range(5)] == ["quarantined"] * 5
    assert status(crawls, "404.html") is None
    assert not any("does not exist" in text for _, text in await published_texts(crawls))


async def lend_one_target(
    site: Site, crawls: Crawls, *, slow_from: int | None = None, **settings: Any
) -> None:
    """Five stored pages of a 100-page site redirect (302) to one search page; from page
    *slow_from* on, their redirects answer a second late. The recrawl quarantines all five."""
    sitemap = write_docs(site, 100)
    await crawls.crawl(sitemap)
    search = docsite.page(
        "Search", [("Search the docs", ["Type a word to search every guide and reference."])]
    )
    site.write("docs/search.html", search, mtime=LATER)
    for i in range(5):
        site.remove(f"docs/page-{i}.html")
        site.options(f"docs/page-{i}.html", redirect="docs/search.html", redirect_status=302)
        if slow_from is not None and i >= slow_from:
            site.options(f"docs/page-{i}.html", delay=1.0)
    r2 = await crawls.crawl(sitemap, **settings)
    assert r2.counts["quarantined"] == 5
    assert r2.stats["recrawler/page/soft_404/redirect_shared"] == 5
    assert not any("search every guide" in text for _, text in await published_texts(crawls))


@deferred_f_from_coro_f
async def test_pages_lent_one_target_are_misses(site: Site, crawls: Crawls) -> None:
    await lend_one_target(site, crawls)


#: sent by ``SaidRedirects`` once it dealt with a redirect answer: ``url`` (the redirected page)
redirect_dealt_with = object()


class SaidRedirects(PageRedirectMiddleware):
    """recrawler's redirect middleware, saying when it has dealt with a page's redirect answer
    (followed it, lent the address, or found the address shared and the page a miss)."""

    async def process_response(self, request: Any, response: Any) -> Any:  # type: ignore[override]
        try:
            return await super().process_response(request, response)
        finally:
            if 300 <= response.status < 400:
                self.crawler.signals.send_catch_log(redirect_dealt_with, url=request.url)


class SlowLentAnswers:
    """An item pipeline ahead of recrawler's: a page a temporary redirect lent another address is
    held until the redirect middleware dealt with all five redirects (the slower ones too), so
    that its write comes after later redirects found that address shared."""

    def __init__(self, crawler: Any) -> None:
        self.redirected: set[str] = set()
        self.all_dealt_with = asyncio.Event()
        crawler.signals.connect(self.dealt_with, signal=redirect_dealt_with)

    @classmethod
    def from_crawler(cls, crawler: Any) -> Self:
        return cls(crawler)

    def dealt_with(self, url: str) -> None:
        self.redirected.add(url)
        if len(self.redirected) == 5:
            self.all_dealt_with.set()

    async def process_item(self, item: Any) -> Any:
        if getattr(item, "served_from", None):
            await asyncio.wait_for(self.all_dealt_with.wait(), timeout=60)
        return item


@deferred_f_from_coro_f
async def test_a_lent_answer_written_after_its_target_is_shared_is_a_miss(site: Site, crawls: Crawls) -> None:
    """Pages 0 and 1 are sent to the search page and its answer passes the redirects before page
    2's redirect (slower) makes the search page everybody's: their answers are still misses."""
    await lend_one_target(
        site,
        crawls,
        slow_from=2,
        ITEM_PIPELINES={f"{__name__}.SlowLentAnswers": 100},
        # (the project's own redirect middleware stands: the add-on leaves it in place)
        DOWNLOADER_MIDDLEWARES={
            "scrapy.downloadermiddlewares.redirect.RedirectMiddleware": None,
            f"{__name__}.SaidRedirects": 541,
        },
    )


class LoanProbe:
    """At the end of the crawl: the most pages the redirect middleware remembers for one target."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def spider_closed(self) -> None:
        engine = self.crawler.engine
        assert engine is not None
        (mw,) = [m for m in engine.downloader.middleware.middlewares if isinstance(m, PageRedirectMiddleware)]
        most = max((len(keys) for keys in mw._loans.values()), default=0)
        Path(self.crawler.settings["PROBE_FILE"]).write_text(json.dumps(most))


@deferred_f_from_coro_f
async def test_a_target_everybody_is_lent_holds_no_page_per_page(
    site: Site, crawls: Crawls, tmp_path: Path
) -> None:
    """300 of a 400-page listing redirect (302) to the search page: every one is a miss, and the
    redirect middleware remembers the first pages sent there only until the target is plain to be
    everybody's, never the 300 keys for the rest of the run."""
    sitemap = write_docs(site, 400)
    search = docsite.page(
        "Search", [("Search the docs", ["Type a word to search every guide and reference."])]
    )
    site.write("docs/search.html", search, mtime=T0)
    for i in range(100, 400):
        site.remove(f"docs/page-{i}.html")
        site.options(f"docs/page-{i}.html", redirect="docs/search.html", redirect_status=302)
    probe = tmp_path / "loans.json"
    r1 = await crawls.crawl(sitemap, EXTENSIONS={LoanProbe: 0}, PROBE_FILE=str(probe))
    assert r1.stats["recrawler/page/soft_404/redirect_shared"] == 300
    assert json.loads(probe.read_text()) <= SHARED_TARGET_MIN


@deferred_f_from_coro_f
async def test_pages_merged_into_a_live_page_are_moves_however_many(site: Site, crawls: Crawls) -> None:
    sitemap = write_docs(site, 100)
    await crawls.crawl(sitemap)
    for i in range(1, 5):
        site.remove(f"docs/page-{i}.html")
        site.options(f"docs/page-{i}.html", redirect="docs/page-0.html", redirect_status=301)
    r2 = await crawls.crawl(sitemap, RECRAWLER_MAX_REMOVE_RATIO=0.5)
    assert (r2.counts["moved"], r2.counts["quarantined"]) == (4, 0)
    assert r2.stats.get("recrawler/page/soft_404", 0) == 0


@deferred_f_from_coro_f
async def test_a_real_short_page_about_not_found_errors_is_content(site: Site, crawls: Crawls) -> None:
    sitemap = write_docs(site, 100)
    await crawls.crawl(sitemap)
    faq = docsite.page(
        "Troubleshooting", [("Not found", ["If a dependency is not found, install it first."])]
    )
    site.write("docs/page-9.html", faq, mtime=LATER)
    r2 = await crawls.crawl(sitemap)
    assert (r2.counts["changed"], r2.counts["quarantined"]) == (1, 0)
    assert r2.stats.get("recrawler/page/soft_404", 0) == 0


CORPUS = REPO_ROOT.parent / "shared" / "corpus" / "mesonbuild"


#: what the real site (GitHub Pages) answers for a path it does not have
GITHUB_PAGES_404 = (
    "# 404\n\nFile not found\n\nThe site configured at this address does not contain the requested "
    "file. If this is your site, make sure that the filename case matches the URL as well as any "
    "file permissions. For root URLs (like http://example.com/) you must provide an index.html file."
)


@pytest.mark.skipif(not (CORPUS / "v1.tar.gz").exists(), reason="the labelled docs corpus is not here")
def test_no_real_docs_page_is_a_soft_404() -> None:
    """Every page of the four versions of a real docs site, against the site's own not-found
    answer and against every other page of its version as if that were the answer: content."""
    from recrawler import notfound
    from recrawler.extract import ContentExtractor

    extractor = ContentExtractor()
    base = "https://mesonbuild.com/"
    site_answer = notfound.not_found_answer(GITHUB_PAGES_404, f"{base}recrawler-no-such-page-x.html")
    found, pages = [], 0
    for version in (1, 2, 3, 4):
        texts: dict[str, str] = {}
        with tarfile.open(CORPUS / f"v{version}.tar.gz") as tar:
            for member in tar.getmembers():
                name = member.name.removeprefix("./")
                if not member.isfile() or not name.endswith(".html") or "/" in name:
                    continue
                file = tar.extractfile(member)
                assert file is not None
                texts[name] = extractor.extract(file.read(), "utf-8").text
        pages += len(texts)
        for name, text in texts.items():
            if notfound.not_found(text, base + name, site_answer, stored=False):
                found.append((version, name, "404"))
            for other, other_text in texts.items():
                answer = notfound.not_found_answer(other_text, base + other)
                if other != name and notfound.not_found(text, base + name, answer, stored=True):
                    found.append((version, name, other))
    assert pages > 790
    assert found == []


#: six real short pages that talk about "not found" (a troubleshooting entry, a reference page on
#: the status code, a glossary entry, an error's own page...): content, every one
REAL_SHORT_PAGES = {
    "docs/errors/not-found.html": docsite.page(
        "Not found errors", [("Not found errors", ["A dependency that is not found stops the build."])]
    ),
    "docs/reference/http-404.html": docsite.page(
        "404 Not Found", [("404 Not Found", ["The server answers 404 when the file is missing."])]
    ),
    "docs/glossary/404.html": docsite.page("404", [("404", ["HTTP status: the resource is not there."])]),
    "docs/errors/oops.html": docsite.page(
        "Oops! | Example Docs", [("Oops!", ["Oops! is what the CLI prints when a plugin crashes."])]
    ),
    "docs/faq/missing.html": docsite.page(
        "Page not found after deploy",
        [("Page not found after deploy", ["Rebuild the index, then clear the CDN cache."])],
    ),
    "docs/errors/no-such-page.html": docsite.page(
        "No such page", [("No such page", ["The wiki macro prints this when its target is gone."])]
    ),
}


@deferred_f_from_coro_f
async def test_real_short_pages_about_not_found_are_content(site: Site, crawls: Crawls) -> None:
    """The site's own not-found answer is the evidence: pages that only talk about "not found"
    differ from it, and are content (never soft_404 errors)."""
    not_found_page(site)
    for path, page in REAL_SHORT_PAGES.items():
        site.write(path, page, mtime=T0)
    for i in range(100):
        site.write(f"docs/page-{i}.html", body(i), mtime=T0)
    http = docsite.page(
        "HTTP 404",
        [
            ("HTTP 404", ["A 404 answer means the server has no resource at that address. " * 8]),
            ("Custom pages", ["Configure a custom not-found page with error_page 404 /404.html."]),
        ],
    )
    site.write("docs/http-404.html", http, mtime=T0)
    sitemap = site.write_sitemap(
        [*REAL_SHORT_PAGES, "docs/http-404.html", *(f"docs/page-{i}.html" for i in range(100))]
    )
    r1 = await crawls.crawl(sitemap)
    assert (r1.counts["new"], r1.counts["errors"]) == (107, 0)
    assert r1.stats.get("recrawler/page/soft_404", 0) == 0
    texts = {page for page, _ in await published_texts(crawls)}
    assert {path.rsplit("/", 1)[-1] for path in REAL_SHORT_PAGES} <= texts
    # the page about HTTP 404 is rewritten much shorter: an edit, never a miss
    short = docsite.page("HTTP 404", [("HTTP 404", ["404: not found. See the server guide."])])
    site.write("docs/http-404.html", short, mtime=LATER)
    for _ in range(2):
        r = await crawls.crawl(sitemap)
        assert (r.counts["quarantined"], r.counts["gone"], r.exit_code) == (0, 0, 0)
    assert status(crawls, "docs/http-404.html") == "live"
    assert any("See the server guide" in text for _, text in await published_texts(crawls))
