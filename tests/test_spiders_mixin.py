"""A user's own spider with ``RecrawlerSpiderMixin`` (as docs/deploy.md shows it): the URL policy holds
for it as for the ``docs`` spider, whatever yields its requests; only the site's own pages are stored."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest
import scrapy
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.extensions.reconcile import decided_exit_code
from recrawler.kb.reader import open_kb
from recrawler.runtime import Runtime
from recrawler.spiders import RecrawlerSpiderMixin
from recrawler.urls import UrlPolicy, key_host, page_key
from tests import docsite, shell, statedb
from tests.conftest import make_crawler

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from scrapy.http import Response

    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0
ADDON = {"recrawler.addon.RecrawlerAddon": 0}
N_PAGES = 300
# pages of the site that link out to another host, and the other hosts' pages they name
N_LINKING = 36
N_ELSEWHERE = 12


class MySpider(RecrawlerSpiderMixin, scrapy.Spider):
    """docs/deploy.md's spider, following the links of each page as a crawling spider does."""

    name = "mysite"

    def __init__(self, start: str = "", site: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = [start]
        if site is not None:
            self.recrawler_site = site

    def parse(self, response: Response) -> Iterator[Any]:
        yield self.recrawler_page(response)
        yield from response.follow_all(css="main a")


class StartOnly(MySpider):
    """A spider that names no host at all (no site, domains or start_urls): it starts from requests
    it makes itself."""

    name = "startonly"

    def __init__(self, start: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = []
        self.entry = start

    async def start(self) -> Any:
        yield scrapy.Request(self.entry)


def elsewhere_page(where: str, i: int) -> str:
    return docsite.page(f"Vendor note {i}", [("Note", [f"The vendor {where} explains widget {i} here."])])


def build_site(site: Site, others: dict[str, Site]) -> list[str]:
    """N_PAGES pages in a chain of links (each also links a few pages ahead); N_LINKING of them
    link out to the pages of other hosts. Returns the other hosts' URLs."""
    outside: list[str] = []
    for where, other in others.items():
        for i in range(N_ELSEWHERE):
            other.write(f"vendor/{i}.html", elsewhere_page(where, i), mtime=T0)
            outside.append(other.url(f"vendor/{i}.html"))
    for i in range(N_PAGES):
        links = [f"<a href='{j}.html'>Page {j}</a>" for j in (i + 1, i + 7, i + 31) if j < N_PAGES]
        if i % (N_PAGES // N_LINKING) == 0 and i // (N_PAGES // N_LINKING) < N_LINKING:
            links.append(f"<a href='{outside[(i // (N_PAGES // N_LINKING)) % len(outside)]}'>see also</a>")
        extra = "<p>" + " ".join(links) + "</p>"
        page = docsite.page(f"Guide {i}", [("Steps", [f"Guide {i} sets up part {i} of the gadget."])])
        site.write(f"guide/{i}.html", page.replace("</main>", extra + "</main>"), mtime=T0)
    return outside


def other_sites(site: Site, other_host: Site, other_port: Site) -> dict[str, Site]:
    """Several other hosts: 127.0.0.2, the same host on another port, and localhost (the site's
    own server, under another name)."""
    port = urlsplit(site.url()).port
    renamed = type(site).__new__(type(site))
    renamed.__dict__.update(site.__dict__)
    renamed.base_url = site.base_url.replace("127.0.0.1", "localhost")
    assert port is not None
    return {"127.0.0.2": other_host, "another port": other_port, "localhost": renamed}


async def crawl(spidercls: type[scrapy.Spider], db: Path, **kwargs: Any) -> Runtime:
    settings = {
        "ADDONS": ADDON,
        "RECRAWLER_DB_URI": f"sqlite:///{db}",
        "LOG_LEVEL": "INFO",
        "RECRAWLER_SCHEDULE": "all",
        "RECRAWLER_AUDIT_SAMPLE": 0,
        "RETRY_TIMES": 0,
    }
    crawler = make_crawler(spidercls, settings)
    await crawler.crawl_async(**kwargs)
    runtime = crawler.get_extension(Runtime)
    assert runtime is not None
    return runtime


def hosts_of(urls: list[str]) -> set[str]:
    return {key_host(page_key(u)) for u in urls}


@pytest.mark.parametrize("named", [True, False], ids=["recrawler_site", "start_urls"])
@deferred_f_from_coro_f
async def test_a_users_spider_stores_only_its_sites_pages_whatever_it_follows(
    site: Site, other_host: Site, other_port: Site, tmp_path: Path, named: bool
) -> None:
    others = other_sites(site, other_host, other_port)
    outside = build_site(site, others)
    db = tmp_path / "state.db"
    home = site.url("guide/0.html")
    own = key_host(page_key(home))

    # the site as docs/deploy.md names it, or (by default) the host of its start URLs
    runtime = await crawl(MySpider, db, start=home, **({"site": own} if named else {}))
    assert statedb.rows(db, "SELECT site FROM runs") == [(own,)]
    counts = runtime.counters
    assert decided_exit_code(runtime.crawler) == 0
    assert counts["recrawler/page/new"] == N_PAGES
    # every link out was refused before any request: the other hosts saw none
    assert counts["recrawler/url/refused/offsite"] >= N_LINKING
    assert other_host.requests() == other_port.requests() == []
    assert site.requests()
    assert all(r["path"].startswith("guide/") for r in site.requests())
    stored = [url for (url,) in statedb.rows(db, "SELECT url FROM pages")]
    assert len(stored) == N_PAGES
    assert hosts_of(stored) == {own}
    # nothing of theirs in the knowledge base, in the listing, or in search
    with open_kb(f"sqlite:///{db}") as kb:
        assert hosts_of([c.url for c in kb.chunks()]) == {own}
        assert all(not h.url.startswith(tuple(outside)) for h in kb.search("vendor explains widget", k=10))
    listed = await shell.acli_out("pages", "--db", f"sqlite:///{db}", "--json")
    assert len(listed.splitlines()) == N_PAGES
    assert hosts_of([json.loads(line)["url"] for line in listed.splitlines()]) == {own}
    assert (await shell.acli("check", "--db", f"sqlite:///{db}")) == (0, "ok: every invariant holds\n")


@deferred_f_from_coro_f
async def test_a_spider_naming_no_host_keeps_to_the_hosts_it_starts_from(
    site: Site, other_host: Site, other_port: Site, tmp_path: Path
) -> None:
    outside = build_site(site, other_sites(site, other_host, other_port))
    db = tmp_path / "state.db"
    runtime = await crawl(StartOnly, db, start=site.url("guide/0.html"))
    assert decided_exit_code(runtime.crawler) == 0
    assert runtime.counters["recrawler/page/new"] == N_PAGES
    assert other_host.requests() == other_port.requests() == []
    stored = [url for (url,) in statedb.rows(db, "SELECT url FROM pages")]
    assert hosts_of(stored) == hosts_of([site.url()])
    assert not set(stored) & set(outside)


class Unfenced(MySpider):
    """A spider whose policy lets any host through, as the mixin's once did for a spider without
    ``allowed_domains``: what an earlier version left in a database."""

    name = "unfenced"

    @property
    def recrawler_url_policy(self) -> UrlPolicy:
        return UrlPolicy(any_host=True)


@deferred_f_from_coro_f
async def test_check_finds_pages_stored_off_the_site_and_repair_takes_them_out(
    site: Site, other_host: Site, other_port: Site, tmp_path: Path
) -> None:
    outside = build_site(site, other_sites(site, other_host, other_port))
    db = tmp_path / "state.db"
    uri = f"sqlite:///{db}"
    own = key_host(page_key(site.url()))
    runtime = await crawl(Unfenced, db, start=site.url("guide/0.html"), site=own)
    assert runtime.counters["recrawler/page/new"] == N_PAGES + N_LINKING
    with open_kb(uri) as kb:
        assert any(h.url.startswith(tuple(outside)) for h in kb.search("vendor explains widget", k=5))

    code, out = await shell.acli("check", "--db", uri, "--json")
    assert code == 1
    found = [json.loads(line) for line in out.splitlines()]
    assert {f["check"] for f in found} == {"offsite_page"}
    assert sorted(f["key"] for f in found) == sorted(page_key(u) for u in outside)
    assert all(f"stored by run 1 of {own}" in f["detail"] for f in found)

    code, out = await shell.acli("check", "--db", uri, "--repair")
    assert code == 0
    assert "offsite_page: 36" in out
    assert await shell.acli("check", "--db", uri) == (0, "ok: every invariant holds\n")
    with open_kb(uri) as kb:
        assert hosts_of([c.url for c in kb.chunks()]) == {own}
    assert statedb.value(db, "SELECT COUNT(*) FROM pages WHERE status = 'live'") == N_PAGES


class OptedInByAttribute(scrapy.Spider):
    """A spider opted in by its class attribute alone (no mixin, no policy of its own)."""

    name = "attribute"
    recrawler_enabled = True

    def __init__(self, start: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = [start]

    def parse(self, response: Response) -> Iterator[Any]:
        yield from response.follow_all(css="main a")


@deferred_f_from_coro_f
async def test_a_spider_opted_in_by_attribute_keeps_to_its_start_hosts_too(
    site: Site, other_host: Site, other_port: Site, tmp_path: Path
) -> None:
    build_site(site, other_sites(site, other_host, other_port))
    runtime = await crawl(OptedInByAttribute, tmp_path / "state.db", start=site.url("guide/0.html"))
    assert runtime.counters["recrawler/url/refused/offsite"] >= N_LINKING
    assert other_host.requests() == other_port.requests() == []
    assert len({r["path"] for r in site.requests()}) == N_PAGES
    assert all(r["path"].startswith("guide/") for r in site.requests())
