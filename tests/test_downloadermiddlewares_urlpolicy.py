"""UrlPolicyMiddleware: only the spider's own http(s) URLs are downloaded, whoever asked for them;
each refusal counted by its reason, the site's own pages crawled as ever."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.utils.defer import deferred_f_from_coro_f

from tests import docsite

if TYPE_CHECKING:
    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0


@deferred_f_from_coro_f
async def test_a_listing_naming_other_hosts_schemes_and_credentials_downloads_only_the_site(
    site: Site, crawls: Crawls
) -> None:
    paths = [f"page-{i}.html" for i in range(100)]
    for i, path in enumerate(paths):
        site.write(path, docsite.widget_page(i), mtime=T0)
    own = [site.url(p) for p in paths]
    port = own[0].split("://", 1)[1].split("/", 1)[0].split(":")[1]
    base = site.url("")
    strangers = [
        # the same server under another name: another host, never the site's
        base.replace("127.0.0.1", "localhost") + "page-0.html",
        f"http://127.0.0.2:{port}/elsewhere.html",
        base.replace("http://", "ftp://") + "page-1.html",
        base.replace("http://", "http://user:secret@") + "page-2.html",
    ]
    site.write("sitemap.xml", docsite.sitemap([*own, *strangers]))
    r = await crawls.crawl(site.url("sitemap.xml"))
    assert r.counts["new"] == 100
    assert r.stats["recrawler/url/refused/offsite"] == 2
    assert r.stats["recrawler/url/refused/scheme"] == 1
    assert r.stats["recrawler/url/refused/credentials"] == 1
    assert r.stats["recrawler/url/refused"] == 4
    # nothing refused reached the server (each of the site's pages was asked for once)
    assert sorted(e["path"] for e in site.requests() if e["path"].startswith("page-")) == sorted(paths)
