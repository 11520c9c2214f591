"""FrontierScheduler: the run's frontier as Scrapy's SCHEDULER, placed by the add-on for spiders that
opted in; what it cannot write waits in memory, what it cannot read never hangs the run."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self

import pytest
from scrapy import signals
from scrapy.core.scheduler import Scheduler
from scrapy.exceptions import NotConfigured
from scrapy.settings import Settings
from scrapy.utils.defer import deferred_f_from_coro_f
from scrapy.utils.misc import load_object

from recrawler.addon import RecrawlerAddon
from recrawler.exceptions import StateStoreError
from recrawler.scheduler import FrontierScheduler, request_dict
from recrawler.spiders.docs import DocsSpider
from recrawler.state.sqlite import SQLiteStateStore
from tests import docsite, statedb
from tests.conftest import make_crawler
from tests.test_trust_other_spiders import ADDON, OptedIn, PlainSpider, write_pages

if TYPE_CHECKING:
    import scrapy
    from scrapy.crawler import Crawler

    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0
SCRAPY_SCHEDULER = "scrapy.core.scheduler.Scheduler"


def write_site(site: Site, pages: int, *, per_file: int = 10) -> str:
    """Pages p0..pN listed by sitemap files of *per_file* pages under one sitemap index."""
    names = [f"p{i}.html" for i in range(pages)]
    for name in names:
        site.write(name, docsite.page(name, [("Overview", [f"What {name} does."])]), mtime=T0)
    files = [
        site.write_sitemap(names[start : start + per_file], name=f"pages{n}.xml")
        for n, start in enumerate(range(0, pages, per_file))
    ]
    site.write("sitemap.xml", docsite.sitemap_index(files), mtime=T0)
    return site.url("sitemap.xml")


# --- placed by the add-on, per crawler ----------------------------------------------------------


def placed(spidercls: type[scrapy.Spider], **project: Any) -> str:
    """The SCHEDULER the add-on leaves in a project's settings for a crawl of *spidercls*."""
    settings = Settings({"RECRAWLER_DB_URI": "sqlite:///unused.db", **project}, priority="project")
    # the add-on manager drops an add-on that raises NotConfigured: the project's settings stand
    with suppress(NotConfigured):
        RecrawlerAddon(make_crawler(spidercls, {})).update_settings(settings)
    return str(settings["SCHEDULER"])


@pytest.mark.parametrize(
    ("spidercls", "project", "scheduler"),
    [
        (DocsSpider, {}, "recrawler.scheduler.FrontierScheduler"),
        (OptedIn, {}, "recrawler.scheduler.FrontierScheduler"),
        # the frontier switched off as configured: the scheduler still queues the sitemap files
        # and the unseen pages' checks (Scrapy's queues hold the page requests)
        (DocsSpider, {"RECRAWLER_FRONTIER_ENABLED": False}, "recrawler.scheduler.FrontierScheduler"),
        # several workers share the same scheduler, their frontier's queue in Redis
        (DocsSpider, {"RECRAWLER_WORKERS_ENABLED": True}, "recrawler.scheduler.FrontierScheduler"),
        # a project's own scheduler wins
        (DocsSpider, {"SCHEDULER": "tests.test_scheduler.OwnScheduler"}, "tests.test_scheduler.OwnScheduler"),
        # a spider that did not opt in runs as if recrawler were absent
        (PlainSpider, {}, SCRAPY_SCHEDULER),
    ],
)
def test_the_addon_places_the_frontier_for_spiders_that_opted_in(
    spidercls: type[scrapy.Spider], project: dict[str, Any], scheduler: str
) -> None:
    assert placed(spidercls, **project) == scheduler


def test_a_crawl_that_is_not_shared_loads_no_redis_client() -> None:
    """scrapy-redis (and the redis client under it: 70 ms of every start) load only for a run
    several workers share: every component the add-on places for a plain crawl loads without."""
    code = """
import sys
from contextlib import suppress
from scrapy.exceptions import NotConfigured
from scrapy.settings import Settings
from scrapy.utils.misc import load_object
from recrawler.addon import RecrawlerAddon
from recrawler.spiders.docs import DocsSpider
from tests.conftest import make_crawler
settings = Settings({"RECRAWLER_DB_URI": "sqlite:///unused.db"}, priority="project")
with suppress(NotConfigured):
    RecrawlerAddon(make_crawler(DocsSpider, {})).update_settings(settings)
paths = [settings["SCHEDULER"], settings["DUPEFILTER_CLASS"]]
for name in ("DOWNLOADER_MIDDLEWARES", "SPIDER_MIDDLEWARES", "ITEM_PIPELINES", "EXTENSIONS"):
    paths += [p for p, order in settings.getwithbase(name).items() if order is not None]
for path in paths:
    if isinstance(path, str):
        load_object(path)
print(len(paths), sorted(m for m in sys.modules if m.split(".")[0] in ("redis", "scrapy_redis")))
"""
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parents[1],
    ).stdout.split(" ", 1)
    assert int(out[0]) > 20  # the add-on's components and Scrapy's
    assert out[1].strip() == "[]"


@pytest.mark.parametrize(
    ("project", "queue"),
    [
        ({}, "recrawler.queues.DatabaseQueue"),
        # several workers swap the queue, not the scheduler: theirs is in Redis
        ({"RECRAWLER_WORKERS_ENABLED": True}, "recrawler.queues.RedisQueue"),
        # a project's own queue class still wins (the run's PostgreSQL database is shared too)
        (
            {"RECRAWLER_WORKERS_ENABLED": True, "RECRAWLER_QUEUE_CLASS": "recrawler.queues.DatabaseQueue"},
            "recrawler.queues.DatabaseQueue",
        ),
    ],
)
def test_workers_share_the_frontier_s_queue_not_another_scheduler(
    project: dict[str, Any], queue: str
) -> None:
    settings = Settings({"RECRAWLER_DB_URI": "sqlite:///unused.db", **project}, priority="project")
    RecrawlerAddon(make_crawler(DocsSpider, {})).update_settings(settings)
    assert settings["SCHEDULER"] == "recrawler.scheduler.FrontierScheduler"
    assert settings["RECRAWLER_QUEUE_CLASS"] == queue
    # and no scrapy-redis scheduler, duplicate filter or persistence is left behind
    assert "SCHEDULER_PERSIST" not in settings.attributes or not settings.getbool("SCHEDULER_PERSIST")
    assert "scrapy_redis" not in str(settings["DUPEFILTER_CLASS"])


class OwnScheduler(Scheduler):
    """A project's own scheduler."""


@deferred_f_from_coro_f
async def test_each_crawler_of_a_project_gets_its_own_scheduler(site: Site, tmp_path: Path) -> None:
    urls = write_pages(site)
    settings = {"ADDONS": ADDON, "RECRAWLER_DB_URI": f"sqlite:///{tmp_path / 'db'}", "LOG_LEVEL": "INFO"}
    opted = make_crawler(OptedIn, settings)
    await opted.crawl_async(urls=urls)
    plain = make_crawler(PlainSpider, settings)
    await plain.crawl_async(urls=urls)
    assert load_object(opted.settings["SCHEDULER"]) is FrontierScheduler
    assert load_object(plain.settings["SCHEDULER"]) is Scheduler
    # the plain spider's three requests (URL variants are its own business) all went through it
    assert plain.stats is not None
    assert plain.stats.get_value("scheduler/enqueued/memory") == 3


# --- the frontier under failure -----------------------------------------------------------------


class UnwritableFrontierStore(SQLiteStateStore):
    """Its frontier cannot be written (a full disk)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # each role is an object of its own: its method is replaced on it
        self.frontier.frontier_add = self._fail  # type: ignore[method-assign]
        self.frontier.frontier_add_listed = self._fail  # type: ignore[method-assign]

    async def _fail(self, *args: Any, **kwargs: Any) -> Any:
        raise StateStoreError("injected: the frontier cannot be written")


class UnreadableFrontierStore(SQLiteStateStore):
    """Its frontier is written and cannot be read back."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.frontier.frontier_next = self._fail  # type: ignore[method-assign]

    async def _fail(self, *args: Any, **kwargs: Any) -> Any:
        raise StateStoreError("injected: the frontier cannot be read")


@deferred_f_from_coro_f
async def test_a_batch_that_cannot_be_written_waits_in_memory(
    site: Site, crawls: Crawls, caplog: pytest.LogCaptureFixture
) -> None:
    sitemap = write_site(site, 40)
    backends = {"sqlite": "tests.test_scheduler.UnwritableFrontierStore"}
    with caplog.at_level(logging.ERROR, logger="recrawler.scheduler"):
        r = await crawls.crawl(sitemap, RECRAWLER_STATE_BACKENDS=backends, RECRAWLER_FRONTIER_BATCH_SIZE=10)
    # never lose a page: each is fetched once, from Scrapy's own queues
    assert r.stats["recrawler/page/new"] == 40
    assert all(len(site.requests(f"p{i}.html")) == 1 for i in range(40))
    assert "recrawler/frontier/queued" not in r.stats
    assert "recrawler/frontier/fed" not in r.stats
    assert statedb.value(crawls.db_path, "SELECT COUNT(*) FROM frontier") == 0
    # each failed write counted (one or more per sitemap file's output), the first logged
    assert r.stats["recrawler/state/error/StateStoreError"] >= 1
    assert [m for m in caplog.messages if "could not queue" in m] == [
        "could not queue requests in the frontier: injected: the frontier cannot be written"
    ]
    # a run with state errors removes nothing and says so
    assert r.exit_code == 5


@deferred_f_from_coro_f
async def test_a_frontier_that_cannot_be_read_never_hangs_the_run(
    site: Site, crawls: Crawls, caplog: pytest.LogCaptureFixture
) -> None:
    sitemap = write_site(site, 30)
    backends = {"sqlite": "tests.test_scheduler.UnreadableFrontierStore"}
    with caplog.at_level(logging.ERROR, logger="recrawler.scheduler"):
        r = await crawls.crawl(sitemap, RECRAWLER_STATE_BACKENDS=backends, RECRAWLER_FRONTIER_BATCH_SIZE=10)
    assert r.finish_reason == "finished"
    assert r.stats["recrawler/frontier/queued"] == 30
    assert "recrawler/frontier/fed" not in r.stats
    assert r.stats["recrawler/state/error/StateStoreError"] >= 1
    assert len([m for m in caplog.messages if "could not read the frontier" in m]) == 1
    # pages it could not feed are not unseen: nothing is removed on a state error
    assert r.report["reconcile"]["skipped"] == ["state_error"]
    assert r.exit_code == 5


# --- each fed request carries its stored record ---------------------------------------------------


class CountingStore(SQLiteStateStore):
    """Counts the page keys read one by one (``get``): what the frontier's batch read spares."""

    reads: ClassVar[list[str]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # each role is an object of its own: its method is replaced on it
        self._get = self.pages.get
        self.pages.get = self._counted  # type: ignore[method-assign]

    async def _counted(self, key: str) -> Any:
        CountingStore.reads.append(key)
        return await self._get(key)


@deferred_f_from_coro_f
async def test_a_fed_request_carries_its_stored_record(site: Site, crawls: Crawls) -> None:
    sitemap = write_site(site, 30)
    backends = {"sqlite": "tests.test_scheduler.CountingStore"}
    await crawls.crawl(sitemap, RECRAWLER_STATE_BACKENDS=backends, RECRAWLER_FRONTIER_BATCH_SIZE=10)
    CountingStore.reads.clear()
    site.clear_requests()
    r = await crawls.crawl(sitemap, RECRAWLER_STATE_BACKENDS=backends, RECRAWLER_FRONTIER_BATCH_SIZE=10)
    # read with its batch, the record gave each page its validators: 304, unchanged, no read of its own
    assert r.stats["recrawler/frontier/fed"] == 30
    assert r.stats["recrawler/page/unchanged"] == 30
    assert {x["status"] for x in site.requests() if x["path"].endswith(".html")} == {304}
    assert [k for k in CountingStore.reads if ".html" in k] == []
    # without the frontier each page is read on its own, once
    CountingStore.reads.clear()
    r = await crawls.crawl(sitemap, RECRAWLER_STATE_BACKENDS=backends, RECRAWLER_FRONTIER_ENABLED=False)
    assert r.stats["recrawler/page/unchanged"] == 30
    assert len([k for k in CountingStore.reads if ".html" in k]) == 30


# --- once per key, Scrapy's own path for the rest -----------------------------------------------


@deferred_f_from_coro_f
async def test_a_page_two_sitemaps_name_is_queued_and_counted_once(site: Site, crawls: Crawls) -> None:
    names = [f"p{i}.html" for i in range(30)]
    for name in names:
        site.write(name, docsite.page(name, [("Overview", [f"What {name} does."])]), mtime=T0)
    # p10..p19 in both files; the index names the second file twice
    first = site.write_sitemap(names[:20], name="a.xml")
    second = site.write_sitemap(names[10:], name="b.xml")
    site.write("sitemap.xml", docsite.sitemap_index([first, second, second]), mtime=T0)
    r = await crawls.crawl(site.url("sitemap.xml"), RECRAWLER_FRONTIER_BATCH_SIZE=7)
    assert r.stats["recrawler/page/new"] == 30
    assert r.stats["recrawler/frontier/queued"] == r.stats["recrawler/frontier/fed"] == 30
    assert r.stats["recrawler/sitemap/pages"] == 30
    assert all(len(site.requests(name)) == 1 for name in names)
    # a sitemap file is no page: Scrapy's duplicate filter, through the same scheduler, drops the repeat
    assert len(site.requests("b.xml")) == 1


class HeldProbe:
    """At the end of the crawl: what Scrapy's scheduler still holds (its duplicate filter's
    fingerprints, its queues) and the frontier's requests not written."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def spider_closed(self) -> None:
        engine = self.crawler.engine
        assert engine is not None
        scheduler = engine._slot.scheduler  # type: ignore[union-attr]
        held = {
            "fingerprints": len(scheduler.df._fingerprints),
            "queued": len(scheduler),
            "unwritten": sum(len(v) for v in scheduler._unwritten.values()),
        }
        Path(self.crawler.settings["PROBE_FILE"]).write_text(json.dumps(held))


@deferred_f_from_coro_f
async def test_no_page_is_remembered_in_memory_for_the_run(
    site: Site, crawls: Crawls, tmp_path: Path
) -> None:
    """400 listed pages, each linking to its neighbours (links followed): the frontier holds each
    page key once, in the database; Scrapy's duplicate filter, which keeps the fingerprint of each
    request it sees for the whole run, sees the sitemap files only."""
    pages = 400
    names = [f"p{i}.html" for i in range(pages)]
    for i, name in enumerate(names):
        links = "".join(
            f'<a href="{names[j % pages]}">{names[j % pages]}</a> ' for j in (i - 1, i + 1, i + 7)
        )
        site.write(
            name, docsite.page(name, [("Overview", [f"What {name} does."])], extra_main=links), mtime=T0
        )
    files = [
        site.write_sitemap(names[start : start + 100], name=f"pages{n}.xml")
        for n, start in enumerate(range(0, pages, 100))
    ]
    site.write("sitemap.xml", docsite.sitemap_index(files), mtime=T0)
    probe = tmp_path / "held.json"
    r = await crawls.crawl(
        site.url("sitemap.xml"),
        {"follow_links": "1"},
        RECRAWLER_FRONTIER_BATCH_SIZE=50,
        EXTENSIONS={HeldProbe: 0},
        PROBE_FILE=str(probe),
    )
    assert r.stats["recrawler/page/new"] == pages
    assert all(len(site.requests(name)) == 1 for name in names)
    held = json.loads(probe.read_text())
    # the index and its four files
    assert held == {"fingerprints": 5, "queued": 0, "unwritten": 0}


# --- a queued request, stored ---------------------------------------------------------------------


class _Spider:
    """A spider's methods as callbacks."""

    name = "requests"

    def parse_page(self, response: Any) -> None:
        pass

    def failed(self, failure: Any) -> None:
        pass


class _Aliased(_Spider):
    """A callback under a second name too (to_dict names it by whichever sorts first)."""

    alias = _Spider.parse_page


def _other(response: Any) -> None:
    pass


def test_a_queued_request_is_stored_as_to_dict_stores_it_without_searching_the_spider() -> None:
    """Request.to_dict(spider=...) looks through every member of the spider (inspect.getmembers)
    to name each request's callback: 26 microseconds a listed page for the docs spider, 26 s of
    a million-URL listing. The frontier names a spider method bound under its own name at once;
    the dict is what to_dict gives, and what request_from_dict turns back into the same request."""
    from scrapy import FormRequest, Request
    from scrapy.utils.request import request_from_dict

    spider = _Spider()
    requests = [
        Request("https://docs.example.com/a", callback=spider.parse_page, errback=spider.failed),
        Request("https://docs.example.com/b", callback=spider.parse_page, priority=3, dont_filter=True),
        Request("https://docs.example.com/c", meta={"recrawler_key": "docs.example.com/c", "depth": 2}),
        Request("https://docs.example.com/d", callback=spider.parse_page, cb_kwargs={"n": 1}, flags=["x"]),
        FormRequest("https://docs.example.com/e", formdata={"q": "x"}, callback=spider.parse_page),
        Request("https://docs.example.com/f", headers={"If-None-Match": '"v1"'}, cookies={"s": "1"}),
    ]
    for request in requests:
        d = request_dict(request, spider)
        assert d == request.to_dict(spider=spider)
        back = request_from_dict(d, spider=spider)
        assert back.to_dict(spider=spider) == request.to_dict(spider=spider)
        assert type(back) is type(request)
    # under an alias the name may differ from to_dict's, the method called is the same
    aliased = _Aliased()
    for callback in (aliased.alias, aliased.parse_page):
        request = Request("https://docs.example.com/g", callback=callback)
        back = request_from_dict(request_dict(request, aliased), spider=aliased)
        assert back.callback.__func__ is _Spider.parse_page  # type: ignore[union-attr]
    # a callback that is no method of the spider cannot be stored, as with to_dict
    with pytest.raises(ValueError, match="not an instance method"):
        request_dict(Request("https://docs.example.com/h", callback=_other), spider)


# --- the unseen pages' checks ---------------------------------------------------------------------


class CheckProbe(FrontierScheduler):
    """Counts the checks of unseen pages handed to the scheduler (class attribute: one crawl per test)."""

    checks: ClassVar[list[str]] = []

    def pages_to_check(self, requests: list[Any]) -> None:
        type(self).checks.extend(r.url for r in requests)
        super().pages_to_check(requests)


@deferred_f_from_coro_f
async def test_the_checks_of_pages_a_run_did_not_reach_wait_in_the_scheduler(
    site: Site, crawls: Crawls
) -> None:
    """The Reconciler sent them through ``engine.crawl`` from ``spider_idle``: they are handed to
    the scheduler now, which queues them with the rest of the run's requests."""
    CheckProbe.checks = []
    sitemap = write_site(site, 30)
    await crawls.crawl(sitemap, SCHEDULER="tests.test_scheduler.CheckProbe")
    assert CheckProbe.checks == []
    # the index names two of its three files now: ten stored pages are not reached by the listing
    site.write("sitemap.xml", docsite.sitemap_index([site.url("pages0.xml"), site.url("pages1.xml")]))
    r = await crawls.crawl(sitemap, SCHEDULER="tests.test_scheduler.CheckProbe")
    assert sorted(CheckProbe.checks) == sorted(site.url(f"p{i}.html") for i in range(20, 30))
    assert r.stats["recrawler/reconcile/verified"] == 10
    assert r.stats["recrawler/page/unchanged"] == 30


@deferred_f_from_coro_f
async def test_a_scheduler_that_does_not_queue_the_checks_is_said_once(
    site: Site, crawls: Crawls, caplog: pytest.LogCaptureFixture
) -> None:
    sitemap = write_site(site, 20)
    await crawls.crawl(sitemap)
    site.write("sitemap.xml", docsite.sitemap_index([site.url("pages0.xml")]))
    with caplog.at_level(logging.WARNING):
        r = await crawls.crawl(sitemap, SCHEDULER="tests.test_scheduler.OwnScheduler")
    said = [m for m in caplog.messages if "recrawler.signals.pages_to_check" in m]
    assert said == [
        "SCHEDULER tests.test_scheduler.OwnScheduler does not queue recrawler.signals.pages_to_check: "
        "stored pages this run did not reach are not checked (use recrawler.scheduler.FrontierScheduler)"
    ]
    assert r.stats["recrawler/reconcile/skipped/verify_scheduler"] == 1
    assert "recrawler/reconcile/verified" not in r.stats
