"""recrawler's components in a user's own Scrapy project: the add-on, plain settings, the mixin."""

from __future__ import annotations

import re
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import pytest
import scrapy
from scrapy.downloadermiddlewares.redirect import RedirectMiddleware
from scrapy.extensions.httpcache import DummyPolicy, RFC2616Policy
from scrapy.utils.defer import deferred_f_from_coro_f
from scrapy.utils.test import get_crawler

from recrawler import default_settings, meta
from recrawler.addon import FAST_PROFILE, POLITE_PROFILE
from recrawler.downloadermiddlewares.conditional import ConditionalRequestMiddleware
from recrawler.downloadermiddlewares.redirect import PageRedirectMiddleware
from recrawler.downloadermiddlewares.urlpolicy import UrlPolicyMiddleware
from recrawler.exceptions import ConfigurationError
from recrawler.extensions.reconcile import Reconciler
from recrawler.items import Page
from recrawler.pipelines.classify import ClassifyPipeline
from recrawler.pipelines.index import IndexPipeline
from recrawler.requests import PageKeyRequestFingerprinter
from recrawler.runtime import Runtime
from recrawler.spiders import RecrawlerSpiderMixin
from recrawler.spiders.docs import DocsSpider
from tests import docsite

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0
ADDON = {"recrawler.addon.RecrawlerAddon": 0}
COMPONENTS = {
    "DOWNLOADER_MIDDLEWARES": {
        "recrawler.downloadermiddlewares.urlpolicy.UrlPolicyMiddleware": 40,
        "recrawler.downloadermiddlewares.conditional.ConditionalRequestMiddleware": 540,
        "scrapy.downloadermiddlewares.redirect.RedirectMiddleware": None,
        "recrawler.downloadermiddlewares.redirect.PageRedirectMiddleware": 541,
    },
    "ITEM_PIPELINES": {"recrawler.pipelines.classify.ClassifyPipeline": 800},
    "EXTENSIONS": {
        "recrawler.runtime.Runtime": 0,
        "recrawler.intervals.SchedulePolicy": 0,
        "recrawler.learning.NoiseRegistry": 0,
        "recrawler.auditor.Auditor": 0,
        "recrawler.kb.embedders.RunEmbedder": 0,
        "recrawler.extensions.reconcile.Reconciler": 0,
    },
}
RECRAWLER_DEFAULTS = {
    name: getattr(default_settings, name) for name in dir(default_settings) if name.startswith("RECRAWLER_")
}


class MySpider(RecrawlerSpiderMixin, scrapy.Spider):
    """A user's plain spider: its own start requests, one Page per response."""

    name = "mine"

    def __init__(self, urls: list[str] | None = None, meta: dict[str, Any] | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.urls = urls or []
        self.request_meta = meta or {}

    async def start(self) -> AsyncIterator[Any]:
        for url in self.urls:
            yield scrapy.Request(url, meta=dict(self.request_meta.get(url, {})))

    def parse(self, response: Response) -> Any:
        yield self.recrawler_page(response)


def base_settings(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {
        "RECRAWLER_DB_URI": f"sqlite:///{tmp_path / 'state.db'}",
        "LOG_LEVEL": "INFO",
        "RETRY_TIMES": 0,
        "DOWNLOAD_TIMEOUT": 10,
        **extra,
    }


def write_pages(site: Site, n: int) -> list[str]:
    for i in range(n):
        site.write(f"p{i}.html", docsite.page(f"P{i}", [("Intro", [f"Text {i}."])]), mtime=T0)
    return [site.url(f"p{i}.html") for i in range(n)]


async def crawl(settings: dict[str, Any], **spider_args: Any) -> dict[str, Any]:
    crawler = get_crawler(MySpider, settings)
    await crawler.crawl_async(**spider_args)
    assert crawler.stats is not None
    return {k: v for k, v in crawler.stats.get_stats().items() if k.startswith("recrawler/")}


@asynccontextmanager
async def built(spidercls: type[scrapy.Spider], settings: dict[str, Any]) -> AsyncIterator[Crawler]:
    """A configured crawler that never crawls (its store opens only when a spider opens)."""
    yield get_crawler(spidercls, settings)


# --- crawling with the add-on ------------------------------------------------------------------


@deferred_f_from_coro_f
async def test_own_spider_with_the_addon_recrawls_with_304s(site: Site, tmp_path: Path) -> None:
    urls = write_pages(site, 4)
    settings = base_settings(tmp_path, ADDONS=ADDON)

    first = await crawl(settings, urls=urls)
    assert first["recrawler/page/new"] == 4
    assert "recrawler/conditional/sent" not in first

    site.clear_requests()
    second = await crawl(settings, urls=urls)
    assert second["recrawler/conditional/sent"] == 4
    assert second["recrawler/conditional/not_modified"] == 4
    assert second["recrawler/page/unchanged"] == 4
    assert second["recrawler/page/unchanged/not_modified"] == 4
    assert "recrawler/page/new" not in second
    assert "recrawler/page/changed" not in second
    assert sorted(r["status"] for r in site.requests()) == [304] * 4

    # an edited page is a 200 and "changed"; the others stay 304s
    site.write("p0.html", docsite.page("P0", [("Intro", ["New text."])]), mtime=T0 + 60)
    third = await crawl(settings, urls=urls)
    assert third["recrawler/page/changed"] == 1
    assert third["recrawler/conditional/not_modified"] == 3


@deferred_f_from_coro_f
async def test_components_without_the_addon(site: Site, tmp_path: Path) -> None:
    """Without the add-on, a project lists the components and loads every ``RECRAWLER_*``
    default itself (``RECRAWLER_DEFAULTS`` here: each name of ``recrawler.default_settings``).

    The components have no inline defaults, so a partial copy either fails at startup with a
    ConfigurationError (see the next test) or silently switches features off (a missing
    ``RECRAWLER_CONDITIONAL_ENABLED`` reads as False). ``RECRAWLER_PROFILE`` does nothing
    without the add-on (set ``ROBOTSTXT_OBEY``, concurrency and timeouts yourself), and the page-key
    request fingerprinter is optional: without it URL variants of one page are fetched separately.
    """
    urls = write_pages(site, 3)
    settings = base_settings(tmp_path, **RECRAWLER_DEFAULTS, **COMPONENTS)
    settings["RECRAWLER_DB_URI"] = f"sqlite:///{tmp_path / 'state.db'}"
    first = await crawl(settings, urls=urls)
    assert first["recrawler/page/new"] == 3
    second = await crawl(settings, urls=urls)
    assert second["recrawler/conditional/not_modified"] == 3
    assert second["recrawler/page/unchanged"] == 3


class ProjectIndexPipeline(IndexPipeline):
    """A project's own IndexPipeline."""


@pytest.mark.parametrize(
    ("extra", "indexes"),
    [
        ({"ADDONS": ADDON}, True),
        ({"ADDONS": ADDON, "RECRAWLER_INDEX_ENABLED": False}, False),
        ({"ADDONS": ADDON, "ITEM_PIPELINES": {IndexPipeline: None}}, False),
        ({**RECRAWLER_DEFAULTS, **COMPONENTS}, False),
        (
            {
                **RECRAWLER_DEFAULTS,
                **COMPONENTS,
                "ITEM_PIPELINES": {ClassifyPipeline: 700, f"{__name__}.ProjectIndexPipeline": 800},
            },
            True,
        ),
    ],
)
def test_pages_are_written_with_their_chunks_only_where_an_index_pipeline_runs(
    tmp_path: Path, extra: dict[str, Any], indexes: bool
) -> None:
    """ClassifyPipeline leaves the write to IndexPipeline (or a subclass) only when one is listed
    and enabled; else it writes each page itself (and ConditionalRequestMiddleware never fetches a
    page whole for chunks no one would write)."""
    settings = {**extra, "RECRAWLER_DB_URI": f"sqlite:///{tmp_path / 'state.db'}"}
    crawler = get_crawler(MySpider, settings)
    assert meta.indexes_pages(crawler.settings) is indexes


@pytest.mark.parametrize(
    "collaborator",
    ["recrawler.intervals.SchedulePolicy", "recrawler.learning.NoiseRegistry", "recrawler.auditor.Auditor"],
)
@deferred_f_from_coro_f
async def test_a_collaborator_left_out_stops_the_crawl_naming_it(tmp_path: Path, collaborator: str) -> None:
    """The run's shared collaborators are extensions, found by class: a project that wires the
    components itself and leaves one out is told which, before the first request."""
    components = {**COMPONENTS, "EXTENSIONS": {**COMPONENTS["EXTENSIONS"], collaborator: None}}
    settings = base_settings(tmp_path, **RECRAWLER_DEFAULTS, **components)
    settings["RECRAWLER_DB_URI"] = f"sqlite:///{tmp_path / 'state.db'}"
    with pytest.raises(ConfigurationError, match=rf"EXTENSIONS: {re.escape(collaborator)} is not enabled"):
        await crawl(settings, urls=["http://127.0.0.1:9/a.html"])
    assert not (tmp_path / "state.db").exists()


@pytest.mark.parametrize(
    ("missing", "setting"),
    [
        ("RECRAWLER_STATE_BACKENDS", "RECRAWLER_DB_URI"),  # no backend for the sqlite scheme
        ("RECRAWLER_GONE_AFTER_MISSES", "RECRAWLER_GONE_AFTER_MISSES"),
    ],
)
def test_components_without_their_defaults_fail_at_startup(
    tmp_path: Path, missing: str, setting: str
) -> None:
    defaults = {k: v for k, v in RECRAWLER_DEFAULTS.items() if k != missing}
    settings = base_settings(tmp_path, **defaults, **COMPONENTS)
    settings["RECRAWLER_DB_URI"] = f"sqlite:///{tmp_path / 'state.db'}"
    with pytest.raises(ConfigurationError, match=setting):
        get_crawler(MySpider, settings)


@deferred_f_from_coro_f
async def test_recrawler_enabled_false_sends_no_validators(site: Site, tmp_path: Path) -> None:
    urls = write_pages(site, 2)
    skipped = urls[0]
    meta = {skipped: {"recrawler_enabled": False}}
    settings = base_settings(tmp_path, ADDONS=ADDON)
    await crawl(settings, urls=urls, meta=meta)
    site.clear_requests()
    stats = await crawl(settings, urls=urls, meta=meta)
    sent = {r["path"]: (r["if_none_match"], r["if_modified_since"], r["status"]) for r in site.requests()}
    assert sent["p0.html"] == (None, None, 200)
    assert sent["p1.html"][0] is not None
    assert sent["p1.html"][2] == 304
    assert stats["recrawler/conditional/sent"] == 1
    # the skipped request's page is still classified from its 200 body
    assert stats["recrawler/page/unchanged"] == 2
    assert stats["recrawler/page/unchanged/hash"] == 1


# --- the add-on's settings ---------------------------------------------------------------------


@deferred_f_from_coro_f
async def test_addon_places_components_and_defaults(tmp_path: Path) -> None:
    settings = {"ADDONS": ADDON, "RECRAWLER_DB_URI": f"sqlite:///{tmp_path / 'state.db'}"}
    async with built(MySpider, settings) as crawler:
        s = crawler.settings
        assert s.getdict("DOWNLOADER_MIDDLEWARES")[ConditionalRequestMiddleware] == 540
        assert s.getdict("DOWNLOADER_MIDDLEWARES")[UrlPolicyMiddleware] == 40
        # Scrapy's redirects, subclassed, below CredentialsMiddleware (545)
        base = s.getdict("DOWNLOADER_MIDDLEWARES_BASE")
        assert base[PageRedirectMiddleware] == 541
        assert RedirectMiddleware not in base
        assert "scrapy.downloadermiddlewares.redirect.RedirectMiddleware" not in base
        assert s.getdict("ITEM_PIPELINES")[ClassifyPipeline] == 700
        assert s.getdict("ITEM_PIPELINES")[IndexPipeline] == 800
        assert s.getdict("EXTENSIONS")[Reconciler] == 0
        assert s.getdict("EXTENSIONS")[Runtime] == 0
        assert isinstance(crawler.request_fingerprinter, PageKeyRequestFingerprinter)
        for name, value in RECRAWLER_DEFAULTS.items():
            if name != "RECRAWLER_DB_URI":
                assert s[name] == value, name
        for name, value in FAST_PROFILE.items():
            assert s[name] == value, name


@deferred_f_from_coro_f
async def test_addon_keeps_the_projects_own_settings(tmp_path: Path) -> None:
    own_fingerprinter = "scrapy.utils.request.RequestFingerprinter"
    settings = base_settings(
        tmp_path,
        ADDONS=ADDON,
        CONCURRENT_REQUESTS=7,
        ROBOTSTXT_OBEY=False,
        RECRAWLER_GONE_AFTER_MISSES=5,
        REQUEST_FINGERPRINTER_CLASS=own_fingerprinter,
        ITEM_PIPELINES={"recrawler.pipelines.classify.ClassifyPipeline": 300},
    )
    async with built(MySpider, settings) as crawler:
        s = crawler.settings
        assert s.getint("CONCURRENT_REQUESTS") == 7
        assert s.getpriority("CONCURRENT_REQUESTS") == 20  # "project"
        assert s.getbool("ROBOTSTXT_OBEY") is False
        assert s.getint("RECRAWLER_GONE_AFTER_MISSES") == 5
        # the profile still fills what the project did not set
        assert s.getint("CONCURRENT_REQUESTS_PER_DOMAIN") == FAST_PROFILE["CONCURRENT_REQUESTS_PER_DOMAIN"]
        assert type(crawler.request_fingerprinter).__name__ == "RequestFingerprinter"
        pipelines = s.getdict("ITEM_PIPELINES")
        assert pipelines == {"recrawler.pipelines.classify.ClassifyPipeline": 300, IndexPipeline: 800}


@deferred_f_from_coro_f
async def test_addon_leaves_a_redirect_middleware_the_project_placed(tmp_path: Path) -> None:
    own = {"scrapy.downloadermiddlewares.redirect.RedirectMiddleware": 610}
    settings = base_settings(tmp_path, ADDONS=ADDON, DOWNLOADER_MIDDLEWARES=own)
    async with built(MySpider, settings) as crawler:
        placed = crawler.settings.getwithbase("DOWNLOADER_MIDDLEWARES")
        assert placed["scrapy.downloadermiddlewares.redirect.RedirectMiddleware"] == 610
        assert PageRedirectMiddleware not in placed


@deferred_f_from_coro_f
async def test_polite_profile(tmp_path: Path) -> None:
    settings = base_settings(tmp_path, ADDONS=ADDON, RECRAWLER_PROFILE="polite")
    async with built(MySpider, settings) as crawler:
        s = crawler.settings
        assert s.getbool("AUTOTHROTTLE_ENABLED") is True
        assert s.getfloat("DOWNLOAD_DELAY") == 1.0
        assert s.getint("CONCURRENT_REQUESTS_PER_DOMAIN") == POLITE_PROFILE["CONCURRENT_REQUESTS_PER_DOMAIN"]
        assert s.getfloat("AUTOTHROTTLE_TARGET_CONCURRENCY") == 1.0


@deferred_f_from_coro_f
async def test_profile_loses_to_a_project_download_delay(tmp_path: Path) -> None:
    settings = base_settings(tmp_path, ADDONS=ADDON, RECRAWLER_PROFILE="polite", DOWNLOAD_DELAY=0.25)
    async with built(MySpider, settings) as crawler:
        assert crawler.settings.getfloat("DOWNLOAD_DELAY") == 0.25
        assert crawler.settings.getbool("AUTOTHROTTLE_ENABLED") is True


def test_unknown_profile(tmp_path: Path) -> None:
    settings = base_settings(tmp_path, ADDONS=ADDON, RECRAWLER_PROFILE="turbo")
    with pytest.raises(ConfigurationError, match=r"RECRAWLER_PROFILE.*'turbo'"):
        get_crawler(MySpider, settings)
    assert not (tmp_path / "state.db").exists()  # it failed before anything was opened


@deferred_f_from_coro_f
async def test_httpcache_rfc2616_policy_conflicts(tmp_path: Path) -> None:
    settings = base_settings(
        tmp_path,
        ADDONS=ADDON,
        HTTPCACHE_ENABLED=True,
        HTTPCACHE_POLICY="scrapy.extensions.httpcache.RFC2616Policy",
    )
    async with built(MySpider, settings) as crawler:
        with pytest.raises(ConfigurationError, match="HTTPCACHE_POLICY"):
            ConditionalRequestMiddleware.from_crawler(crawler)


@deferred_f_from_coro_f
async def test_httpcache_with_dummy_policy_or_disabled_is_fine(tmp_path: Path) -> None:
    for extra in (
        {"HTTPCACHE_ENABLED": True, "HTTPCACHE_POLICY": "scrapy.extensions.httpcache.DummyPolicy"},
        {"HTTPCACHE_ENABLED": True, "HTTPCACHE_POLICY": DummyPolicy},
        {"HTTPCACHE_ENABLED": False, "HTTPCACHE_POLICY": "scrapy.extensions.httpcache.RFC2616Policy"},
    ):
        async with built(MySpider, base_settings(tmp_path, ADDONS=ADDON, **extra)) as crawler:
            assert isinstance(
                ConditionalRequestMiddleware.from_crawler(crawler), ConditionalRequestMiddleware
            )


@pytest.mark.parametrize("policy", [RFC2616Policy, type("MyPolicy", (RFC2616Policy,), {})])
@deferred_f_from_coro_f
async def test_httpcache_rfc2616_policy_as_class_conflicts(tmp_path: Path, policy: type) -> None:
    settings = base_settings(tmp_path, ADDONS=ADDON, HTTPCACHE_ENABLED=True, HTTPCACHE_POLICY=policy)
    async with built(MySpider, settings) as crawler:
        with pytest.raises(ConfigurationError, match="HTTPCACHE_POLICY"):
            ConditionalRequestMiddleware.from_crawler(crawler)


@deferred_f_from_coro_f
async def test_docs_spider_needs_a_sitemap(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="sitemap_url"):
        DocsSpider()
    async with built(DocsSpider, base_settings(tmp_path, ADDONS=ADDON)) as crawler:
        with pytest.raises(ConfigurationError, match="needs a sitemap"):
            await crawler.crawl_async()


@pytest.mark.parametrize("url", ["ftp://example.com/sitemap.xml", "/sitemap.xml", "example.com/sitemap.xml"])
def test_docs_spider_needs_an_http_sitemap(url: str) -> None:
    with pytest.raises(ConfigurationError, match="not an http"):
        DocsSpider(sitemap_url=url)


def test_recrawler_page_needs_a_crawler() -> None:
    spider = MySpider()
    response = scrapy.http.HtmlResponse(
        "https://example.com/", body=b"<main>x</main>", request=scrapy.Request("https://example.com/")
    )
    with pytest.raises(ConfigurationError, match="crawler"):
        spider.recrawler_page(response)


@deferred_f_from_coro_f
async def test_recrawler_page_uses_the_crawler_settings(tmp_path: Path) -> None:
    settings = base_settings(tmp_path, ADDONS=ADDON, RECRAWLER_CONTENT_NOISE_SELECTORS=[".ad"])
    async with built(MySpider, settings) as crawler:
        spider = MySpider.from_crawler(crawler)
        url = "https://www.example.com/a/?utm_source=x"
        response = scrapy.http.HtmlResponse(
            url, body=b'<main><p>Text.</p><p class="ad">Buy</p></main>', request=scrapy.Request(url)
        )
        page = spider.recrawler_page(response, lastmod="2026-01-01")
    assert isinstance(page, Page)
    assert (page.key, page.text, page.lastmod) == ("example.com/a", "Text.", "2026-01-01")


# --- where the database lives when RECRAWLER_DB_URI is set nowhere ------------------------------


@pytest.fixture
def no_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory outside any Scrapy project, with no database set in the environment."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    for name in ("RECRAWLER_DB_URI", "SCRAPY_SETTINGS_MODULE"):
        monkeypatch.delenv(name, raising=False)
    return cwd.resolve()


def test_database_defaults_to_the_project_data_directory(no_project: Path) -> None:
    (no_project / "scrapy.cfg").write_text("[settings]\ndefault = recrawler.settings\n")
    crawler = get_crawler(MySpider, {"ADDONS": ADDON})
    assert crawler.settings["RECRAWLER_DB_URI"] == f"sqlite:///{no_project / '.scrapy' / 'recrawler.db'}"
    assert (no_project / ".scrapy").is_dir()


def test_database_of_a_settings_module_without_scrapy_cfg(
    no_project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Scrapyd job: the egg names the settings module, no scrapy.cfg is near the working directory."""
    monkeypatch.setenv("SCRAPY_SETTINGS_MODULE", "recrawler.settings")
    crawler = get_crawler(MySpider, {"ADDONS": ADDON})
    assert crawler.settings["RECRAWLER_DB_URI"] == f"sqlite:///{no_project / '.scrapy' / 'recrawler.db'}"
    assert (no_project / ".scrapy").is_dir()


def test_database_set_anywhere_wins_over_the_data_directory(
    no_project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    crawler = get_crawler(MySpider, {"ADDONS": ADDON, "RECRAWLER_DB_URI": "sqlite:///mine.db"})
    assert crawler.settings["RECRAWLER_DB_URI"] == "sqlite:///mine.db"
    monkeypatch.setenv("RECRAWLER_DB_URI", "sqlite:///from-env.db")
    crawler = get_crawler(MySpider, {"ADDONS": ADDON})
    assert crawler.settings["RECRAWLER_DB_URI"] == "sqlite:///from-env.db"
    assert not (no_project / ".scrapy").exists()


def test_the_cli_reads_the_default_database_without_creating_its_directory(no_project: Path) -> None:
    from recrawler.cli import build_settings

    settings = build_settings()
    assert settings["RECRAWLER_DB_URI"] == f"sqlite:///{no_project / '.scrapy' / 'recrawler.db'}"
    assert not (no_project / ".scrapy").exists()
