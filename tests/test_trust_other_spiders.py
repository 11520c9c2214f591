"""Adding recrawler to a project never changes its other spiders; the environment's database is honoured."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

import scrapy
from scrapy import signals
from scrapy.downloadermiddlewares.redirect import RedirectMiddleware
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.downloadermiddlewares.redirect import PageRedirectMiddleware
from recrawler.spiders import RecrawlerSpiderMixin
from tests import docsite, statedb
from tests.conftest import make_crawler

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    import pytest
    from scrapy.http import Response

    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0
ADDON = {"recrawler.addon.RecrawlerAddon": 0}


class PlainSpider(scrapy.Spider):
    """A project's own spider that knows nothing of recrawler."""

    name = "plain"

    def __init__(self, urls: list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.urls = urls or []

    async def start(self) -> AsyncIterator[Any]:
        for url in self.urls:
            yield scrapy.Request(url)

    def parse(self, response: Response) -> Any:
        yield {"url": response.url, "status": response.status, "bytes": len(response.body)}


class OptedIn(RecrawlerSpiderMixin, scrapy.Spider):
    """A project's spider that asked for recrawler."""

    name = "opted"

    def __init__(self, urls: list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.urls = urls or []

    async def start(self) -> AsyncIterator[Any]:
        for url in self.urls:
            yield scrapy.Request(url)

    def parse(self, response: Response) -> Any:
        yield self.recrawler_page(response)


async def crawl(
    spidercls: type[scrapy.Spider], settings: dict[str, Any], **kwargs: Any
) -> list[dict[str, Any]]:
    crawler = make_crawler(spidercls, settings)
    items: list[dict[str, Any]] = []

    def scraped(item: Any) -> None:
        items.append(dict(item) if isinstance(item, dict) else {"page": item})

    crawler.signals.connect(scraped, signal=signals.item_scraped)
    await crawler.crawl_async(**kwargs)
    return items


def write_pages(site: Site) -> list[str]:
    for name in ("a", "b"):
        site.write(f"{name}.html", docsite.page(name, [("Intro", [f"About {name}."])]), mtime=T0)
    return [site.url("a.html"), site.url("b.html"), site.url("b.html?utm_source=news")]


@deferred_f_from_coro_f
async def test_a_plain_spider_in_the_project_runs_as_if_recrawler_were_absent(
    site: Site, tmp_path: Path
) -> None:
    urls = write_pages(site)
    db = tmp_path / "state.db"
    settings = {"ADDONS": ADDON, "RECRAWLER_DB_URI": f"sqlite:///{db}", "LOG_LEVEL": "INFO"}
    first = await crawl(PlainSpider, settings, urls=urls)
    site.clear_requests()
    second = await crawl(PlainSpider, settings, urls=urls)
    # every run gets full 200 answers in its callbacks: no validators were ever sent
    assert sorted(i["status"] for i in first) == sorted(i["status"] for i in second) == [200, 200, 200]
    assert all(i["bytes"] > 0 for i in second)
    assert all(q["if_none_match"] is None and q["if_modified_since"] is None for q in site.requests())
    # URL variants are this spider's business: both are fetched
    assert len(site.requests("b.html")) == 1
    assert len(site.requests("b.html?utm_source=news")) == 1
    # and recrawler recorded nothing: no database, no run
    assert not db.exists()


@deferred_f_from_coro_f
async def test_an_opted_in_spider_of_the_same_project_is_recrawled(site: Site, tmp_path: Path) -> None:
    urls = write_pages(site)
    db = tmp_path / "state.db"
    settings = {"ADDONS": ADDON, "RECRAWLER_DB_URI": f"sqlite:///{db}", "LOG_LEVEL": "INFO"}
    await crawl(OptedIn, settings, urls=urls)
    site.clear_requests()
    await crawl(OptedIn, settings, urls=urls)
    assert sorted(q["status"] for q in site.requests()) == [304, 304]  # the utm variant is the same page
    assert statedb.value(db, "SELECT COUNT(*) FROM runs") == 2


class RedirectsSeen(OptedIn):
    """An opted-in spider that keeps what Scrapy's redirect machinery put on each response."""

    name = "opted_redirects"
    seen: ClassVar[list[tuple[str, list[str], list[Any]]]] = []

    def parse(self, response: Response) -> Any:
        meta = response.meta
        self.seen.append((response.url, meta.get("redirect_urls", []), meta.get("redirect_reasons", [])))
        yield self.recrawler_page(response)


def redirect_middlewares(crawler: Any) -> list[type]:
    return [
        type(mw)
        for mw in crawler.engine.downloader.middleware.middlewares
        if isinstance(mw, RedirectMiddleware)
    ]


@deferred_f_from_coro_f
async def test_redirects_of_a_plain_spider_are_scrapys_own(site: Site, tmp_path: Path) -> None:
    port = urlsplit(site.url()).port
    site.write("there.html", docsite.page("There", [("Intro", ["Somewhere else."])]), mtime=T0)
    # another host, as recrawler sees it (it would refuse to follow): Scrapy follows it
    site.options("a.html", location=f"http://localhost:{port}/{site.name}/there.html")
    db = tmp_path / "state.db"
    settings = {"ADDONS": ADDON, "RECRAWLER_DB_URI": f"sqlite:///{db}", "LOG_LEVEL": "INFO"}
    crawler = make_crawler(PlainSpider, settings)
    kinds: list[list[type]] = []

    def opened() -> None:
        kinds.append(redirect_middlewares(crawler))

    crawler.signals.connect(opened, signal=signals.spider_opened)
    await crawler.crawl_async(urls=[site.url("a.html")])
    assert kinds == [[RedirectMiddleware]]
    assert [r["status"] for r in site.requests("there.html")] == [200]
    assert not db.exists()


@deferred_f_from_coro_f
async def test_page_redirects_of_an_opted_in_spider_go_through_scrapys_machinery(
    site: Site, tmp_path: Path
) -> None:
    site.write("new.html", docsite.page("New", [("Intro", ["The page, moved."])]), mtime=T0)
    site.options("a.html", redirect="hop.html", redirect_status=302)
    site.options("hop.html", redirect="new.html", redirect_status=301)
    db = tmp_path / "state.db"
    settings = {"ADDONS": ADDON, "RECRAWLER_DB_URI": f"sqlite:///{db}", "LOG_LEVEL": "INFO"}
    crawler = make_crawler(RedirectsSeen, settings)
    kinds: list[list[type]] = []

    def opened() -> None:
        kinds.append(redirect_middlewares(crawler))

    crawler.signals.connect(opened, signal=signals.spider_opened)
    RedirectsSeen.seen = []
    await crawler.crawl_async(urls=[site.url("a.html")])
    assert kinds == [[PageRedirectMiddleware]]
    assert RedirectsSeen.seen == [
        (site.url("new.html"), [site.url("a.html"), site.url("hop.html")], [302, 301])
    ]
    # a temporary hop first: the page keeps its address, and the content is the target's
    assert statedb.rows(db, "SELECT url, status FROM pages") == [(site.url("a.html"), "live")]


@deferred_f_from_coro_f
async def test_the_database_and_events_from_the_environment_are_honoured(
    site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    urls = write_pages(site)
    monkeypatch.chdir(tmp_path)
    env_db = tmp_path / "from-env.db"
    events = tmp_path / "events.jsonl"
    monkeypatch.setenv("RECRAWLER_DB_URI", f"sqlite:///{env_db}")
    monkeypatch.setenv("RECRAWLER_EVENTS_URI", f"file://{events}")
    # a user's project: only the add-on, no recrawler settings module
    await crawl(OptedIn, {"ADDONS": ADDON, "LOG_LEVEL": "INFO"}, urls=urls)
    assert statedb.value(env_db, "SELECT COUNT(*) FROM pages") == 2
    assert len(events.read_text().splitlines()) == 2
    assert not (tmp_path / "recrawler.db").exists()
    # -s on the command line still wins over the environment
    cli_db = tmp_path / "cli.db"
    crawler_settings = {"ADDONS": ADDON, "LOG_LEVEL": "INFO"}
    crawler = make_crawler(OptedIn, crawler_settings)
    crawler.settings.set("RECRAWLER_DB_URI", f"sqlite:///{cli_db}", priority="cmdline")
    await crawler.crawl_async(urls=urls)
    assert cli_db.exists()
