"""Spiders: RecrawlSitemapSpider (sitemap-driven recrawls) and the glue for users' own spiders."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import urlsplit

from scrapy.http import TextResponse
from scrapy.spiders import SitemapSpider

from recrawler.downloadermiddlewares.conditional import META_KEY, META_SAME_VALIDATOR
from recrawler.exceptions import ConfigurationError
from recrawler.extract import ContentExtractor
from recrawler.fingerprint import content_hash
from recrawler.items import Page
from recrawler.learning import noise_for
from recrawler.regions import volatile_regions
from recrawler.urls import KeyMaker, key_host, url_host

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable

    from scrapy.http import Response
    from scrapy.settings import BaseSettings

    from recrawler.learning import NoiseRegistry, SiteNoise

logger = logging.getLogger(__name__)

#: request meta: the body of a first fetch, on the immediate re-fetch that learns volatile regions
META_FIRST_BODY = "_recrawler_first_body"

_HTML_TYPES = (b"text/html", b"application/xhtml+xml")


def _header(response: Response, name: bytes) -> str | None:
    value = response.headers.get(name)
    return value.decode("latin-1") if value else None


class PageBuilder:
    """Turns responses into Page items: a 304 without parsing, a 200 extracted and hashed."""

    def __init__(
        self, extractor: ContentExtractor, key_maker: KeyMaker, noise: NoiseRegistry | None = None
    ) -> None:
        self.extractor = extractor
        self.key_maker = key_maker
        self.noise = noise

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> Self:
        """Build from ``RECRAWLER_CONTENT_*`` and ``RECRAWLER_URL_*`` settings."""
        return cls(
            ContentExtractor(
                settings.getlist("RECRAWLER_CONTENT_SELECTORS"),
                settings.getlist("RECRAWLER_CONTENT_NOISE_SELECTORS"),
            ),
            KeyMaker(
                settings.getlist("RECRAWLER_URL_DROP_PARAMS"),
                settings.getlist("RECRAWLER_URL_KEEP_PARAMS"),
            ),
        )

    def page(self, response: Response, lastmod: str | None = None) -> Page:
        """Return the Page for *response* (call it from any spider callback)."""
        key = response.meta.get(META_KEY) or self.key_maker(
            (response.meta.get("redirect_urls") or [response.url])[0]
        )
        page = Page(
            url=response.url,
            key=key,
            http_status=response.status,
            etag=_header(response, b"ETag"),
            last_modified=_header(response, b"Last-Modified"),
            lastmod=lastmod,
        )
        if response.status == 304:
            return page
        ctype = (response.headers.get(b"Content-Type") or b"").split(b";")[0].strip().lower()
        if not isinstance(response, TextResponse) or (ctype and ctype not in _HTML_TYPES):
            page.error = "not_html"
            return page
        regions = None
        if self.noise is not None:
            site = self.noise.site(key_host(key))
            first = response.meta.get(META_FIRST_BODY)
            if first is not None:
                # a second fetch moments after the first: what differs between them is volatile
                page.rechecked = True
                learned = self._learn(first, response, site)
                if learned:
                    page.learned_regions = tuple(learned)
                    self.noise.learned(site.site, learned)
                    site = self.noise.site(site.site)
            regions = site.regions_css
        content = self.extractor.extract(response.body, response.encoding, regions=regions)
        page.title = content.title
        if not content.text.strip():
            # Empty content is never "unchanged": it is an error and stored state stays as it was.
            page.error = "empty_content"
            return page
        page.text = content.text
        if response.meta.get(META_SAME_VALIDATOR):
            page.raw_body = response.body
        page.headings = content.headings
        page.code = content.code
        page.links = content.links
        page.content_hash = content_hash(content.text)
        return page

    def _learn(self, first: bytes, response: TextResponse, site: SiteNoise) -> list[str]:
        _, a = self.extractor.main(first, response.encoding)
        _, b = self.extractor.main(response.body, response.encoding)
        if a is None or b is None:
            return []
        if site.regions_css is not None:
            for main in (a, b):
                for el in site.regions_css(main):
                    parent = el.getparent()
                    if parent is not None:
                        parent.remove(el)
        return volatile_regions(a, b, site.normalizer.normalize)


class RecrawlerSpiderMixin:
    """Gives a user's spider ``recrawler_page(response)``: yield its result from any callback."""

    _recrawler_builder: PageBuilder | None = None

    def recrawler_page(self, response: Response, lastmod: str | None = None) -> Page:
        """Return the Page item for *response* (304s are not parsed)."""
        if self._recrawler_builder is None:
            crawler = getattr(self, "crawler", None)
            if crawler is None:
                raise ConfigurationError("recrawler_page() needs a spider created by a crawler")
            self._recrawler_builder = PageBuilder.from_settings(crawler.settings)
            self._recrawler_builder.noise = noise_for(crawler)
        return self._recrawler_builder.page(response, lastmod)


def _flag(value: Any) -> bool:
    return str(value).strip().lower() in {"1", "true", "yes", "on"}


class RecrawlSitemapSpider(RecrawlerSpiderMixin, SitemapSpider):
    """A SitemapSpider that yields a Page per listed URL and keeps each URL's ``lastmod``.

    Arguments (``-a``): ``sitemap_url`` (a sitemap, sitemap index, ``.xml.gz`` or robots.txt; may be
    given several times comma-separated), ``allowed_hosts`` (comma-separated extra hosts, or
    ``*`` for any), ``site`` (the host whose stored pages this run reconciles).
    Stats: ``recrawler/sitemap/{parsed,urls,offsite}``.
    """

    sitemap_urls: tuple[str, ...] = ()

    def __init__(
        self,
        *args: Any,
        sitemap_url: str | None = None,
        allowed_hosts: str | None = None,
        site: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        if sitemap_url:
            self.sitemap_urls = tuple(u.strip() for u in sitemap_url.split(",") if u.strip())
        if not self.sitemap_urls:
            raise ConfigurationError(
                f"spider {self.name!r} needs a sitemap: -a sitemap_url=https://docs.example.com/sitemap.xml"
            )
        for url in self.sitemap_urls:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ConfigurationError(f"sitemap_url: not an http(s) URL: {url!r}")
        km = KeyMaker()
        first_host = key_host(km(self.sitemap_urls[0]))
        self.recrawler_site: str | None = site or first_host
        self._any_host = (allowed_hosts or "").strip() == "*"
        self._hosts = {key_host(km(u)) for u in self.sitemap_urls}
        for host in (allowed_hosts or "").split(","):
            if host.strip() and host.strip() != "*":
                self._hosts.add(key_host(km("http://" + host.strip())))
        self._lastmods: dict[str, str] = {}
        self._key_maker = km

    async def start(self) -> AsyncIterator[Any]:
        """Start from the sitemaps (SitemapSpider's own start)."""
        async for request in super().start():
            yield request

    def _inc(self, name: str, count: int = 1) -> None:
        crawler = getattr(self, "crawler", None)
        if crawler is not None and crawler.stats is not None:
            crawler.stats.inc_value(name, count)

    def _on_site(self, url: str) -> bool:
        return self._any_host or url_host(url) in self._hosts

    def sitemap_filter(self, entries: Iterable[dict[str, Any]]) -> Iterable[dict[str, Any]]:
        """Keep entries on the sitemap's host and remember each page URL's ``lastmod``."""
        kind = getattr(entries, "type", None)
        self._inc("recrawler/sitemap/parsed")
        for entry in entries:
            loc = entry.get("loc") or ""
            if not self._on_site(loc):
                self._inc("recrawler/sitemap/offsite")
                continue
            if kind == "urlset":
                self._inc("recrawler/sitemap/urls")
                if entry.get("lastmod"):
                    # keyed by page key: Scrapy percent-encodes the URL it actually requests
                    self._lastmods[self._key_maker(loc)] = str(entry["lastmod"]).strip()
            yield entry

    def parse(self, response: Response, **kwargs: Any) -> Iterable[Page]:
        """Yield the Page of a listed (or verified) URL."""
        page = self.recrawler_page(response)
        page.lastmod = self._lastmods.pop(page.key, None)
        yield page
