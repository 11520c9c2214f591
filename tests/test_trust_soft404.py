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


@pytest.mark.parametrize(
    ("title", "heading", "text", "stored", "shape"),
    [
        (
            "Page not found | Docs",
            "Page not found",
            "Sorry, the page does not exist.",
            900,
            "not_found_text",
        ),
        (None, None, "No page /docs/page-7.html here.", 900, "not_found_text"),
        ("404 - Acme", None, "Nothing here.", None, "not_found_page"),
        ("Oops! | Docs", "Oops!", "We could not find that page.", None, "not_found_page"),
        # content, whatever it says
        ("Errors", "Errors", "If a dependency is not found, meson stops. " * 3, 900, None),
        ("Errors", "Errors", "If a dependency is not found, meson stops.", None, None),
        ("Dependencies", None, "A dependency that is not found fails the build. " * 60, 9000, None),
        ("Page not found | Docs", None, "Sorry, the page does not exist.", 40, None),  # not shorter
    ],
)
def test_soft_404_shapes(
    title: str | None, heading: str | None, text: str, stored: int | None, shape: str | None
) -> None:
    from recrawler import notfound

    headings = ((1, heading, None),) if heading else ()
    assert notfound.not_found(title, headings, text, stored) == shape


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
    sitemap = write_docs(site, 100)
    await crawls.crawl(sitemap)
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
    sitemap = write_docs(site, 300)
    await crawls.crawl(sitemap)
    for i in range(broken):
        # each different, each short: no fuzzy fingerprint, no same-content hold
        site.write(
            f"docs/page-{i}.html",
            f"<html><body><main><p>No page /docs/page-{i}.html here.</p></main></body></html>",
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
    site.write("404.html", NOT_FOUND, mtime=LATER)
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


class SlowLentAnswers:
    """An item pipeline ahead of recrawler's: a page a temporary redirect lent another address is
    held a while, so that its write comes after later redirects found that address shared."""

    async def process_item(self, item: Any) -> Any:
        if getattr(item, "served_from", None):
            await asyncio.sleep(2.0)
        return item


@deferred_f_from_coro_f
async def test_a_lent_answer_written_after_its_target_is_shared_is_a_miss(site: Site, crawls: Crawls) -> None:
    """Pages 0 and 1 are sent to the search page and its answer passes the redirects before page
    2's redirect (slower) makes the search page everybody's: their answers are still misses."""
    await lend_one_target(site, crawls, slow_from=2, ITEM_PIPELINES={f"{__name__}.SlowLentAnswers": 100})


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


@pytest.mark.skipif(not (CORPUS / "v1.tar.gz").exists(), reason="the labelled docs corpus is not here")
def test_no_real_docs_page_is_a_soft_404() -> None:
    """Every page of the four versions of a real docs site, as a page never stored, as the next
    version of the page stored before it, and after a page as long as any: content."""
    from recrawler import notfound
    from recrawler.extract import ContentExtractor

    extractor = ContentExtractor()
    before: dict[str, int] = {}
    found, pages = [], 0
    for version in (1, 2, 3, 4):
        with tarfile.open(CORPUS / f"v{version}.tar.gz") as tar:
            for member in tar.getmembers():
                name = member.name.removeprefix("./")
                if not member.isfile() or not name.endswith(".html") or "/" in name:
                    continue
                file = tar.extractfile(member)
                assert file is not None
                content = extractor.extract(file.read(), "utf-8")
                pages += 1
                found.extend(
                    (version, name, stored)
                    for stored in (None, before.get(name), 10**9)
                    if notfound.not_found(content.title, content.headings, content.text, stored)
                )
                before[name] = len(content.text)
    assert pages > 790
    assert found == []
