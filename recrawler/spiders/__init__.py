"""Spiders: RecrawlSitemapSpider (sitemap-driven recrawls) and the glue for users' own spiders."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import urljoin, urlsplit

import feedparser
from scrapy import Request
from scrapy.http import TextResponse
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import SitemapSpider

from recrawler.downloadermiddlewares.conditional import META_KEY, META_SAME_VALIDATOR
from recrawler.exceptions import ConfigurationError
from recrawler.extract import ContentExtractor, ExtractionError, looks_binary
from recrawler.fingerprint import content_hash
from recrawler.items import Page
from recrawler.learning import noise_for
from recrawler.regions import volatile_regions
from recrawler.schedule import policy_for
from recrawler.urls import KeyMaker, key_host, url_host

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable

    from scrapy.http import Response
    from scrapy.settings import BaseSettings
    from twisted.python.failure import Failure

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
            found_via=response.meta.get("recrawler_found_via"),
            found_from=response.meta.get("recrawler_found_from"),
        )
        if response.status == 304:
            return page
        ctype = (response.headers.get(b"Content-Type") or b"").split(b";")[0].strip().lower()
        if (
            not isinstance(response, TextResponse)
            or (ctype and ctype not in _HTML_TYPES)
            # binary content served as text/html (an executable, an archive): never text
            or looks_binary(response.body, response.encoding)
        ):
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
        try:
            content = self.extractor.extract(response.body, response.encoding, regions=regions)
        except ExtractionError as exc:
            # a page the parser would truncate (too_deep): stored state stays as it was
            page.error = exc.reason
            return page
        page.title = content.title
        page.region_hits = content.region_hits
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
    ``*`` for any), ``site`` (the host whose stored pages this run reconciles), ``feed_url`` (RSS
    or Atom feeds, comma-separated: their entries are listed pages too, and an entry updated
    after a page's last check makes it due at once), ``follow_links`` (``1``: also follow links
    found on fetched pages, same host, under ``follow_prefix``, by default the first sitemap's
    folder, at most ``RECRAWLER_FOLLOW_DEPTH_LIMIT`` links away from a listed page).
    Stats: ``recrawler/sitemap/{parsed,urls,offsite}``, ``recrawler/feed/{fetched,entries,offsite,error}``,
    ``recrawler/follow/{links,offsite,depth_limit}``.
    """

    sitemap_urls: tuple[str, ...] = ()

    def __init__(
        self,
        *args: Any,
        sitemap_url: str | None = None,
        allowed_hosts: str | None = None,
        site: str | None = None,
        feed_url: str | None = None,
        follow_links: str | bool | None = None,
        follow_prefix: str | None = None,
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
        self.feed_urls = tuple(u.strip() for u in (feed_url or "").split(",") if u.strip())
        for url in self.feed_urls:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ConfigurationError(f"feed_url: not an http(s) URL: {url!r}")
        self.follow_links = _flag(follow_links) if follow_links is not None else False
        if follow_prefix:
            self.follow_prefixes = tuple(p.strip() for p in follow_prefix.split(",") if p.strip())
        else:
            # by default, the folder of the first sitemap: /docs/sitemap.xml -> /docs/
            self.follow_prefixes = (urlsplit(self.sitemap_urls[0]).path.rsplit("/", 1)[0] + "/",)
        self._link_extractor: LinkExtractor | None = None

    async def start(self) -> AsyncIterator[Any]:
        """Start from the sitemaps (SitemapSpider's own start), then the feeds."""
        async for request in super().start():
            yield request
        for url in self.feed_urls:
            # not a page: no validators, no page state, no error accounting
            yield Request(
                url,
                callback=self._parse_feed,
                errback=self._feed_failed,
                dont_filter=True,
                meta={"recrawler_enabled": False},
            )

    def recrawler_take_lastmod(self, key: str) -> str | None:
        """Hand over (and forget) the listed lastmod of page *key* (ScheduleMiddleware asks)."""
        return self._lastmods.pop(key, None)

    def _parse_feed(self, response: Response) -> Iterable[Request]:
        """Yield a page request per feed entry; an entry's date says when its page changed."""
        parsed = feedparser.parse(response.body, response_headers={"content-location": response.url})
        if not parsed.entries and parsed.get("bozo"):
            self._inc("recrawler/feed/error")
            logger.warning(
                "feed %(url)s could not be parsed: %(exc)s",
                {"url": response.url, "exc": parsed.get("bozo_exception")},
            )
            return
        self._inc("recrawler/feed/fetched")
        now = policy_for(self.crawler).now
        for entry in parsed.entries:
            link = entry.get("link")
            if not link:
                continue
            url = urljoin(response.url, str(link))
            if not self._on_site(url):
                self._inc("recrawler/feed/offsite")
                continue
            self._inc("recrawler/feed/entries")
            meta: dict[str, Any] = {"recrawler_found_via": "feed", "recrawler_found_from": response.url}
            # plain dict reads: feedparser's own get() maps one key to the other with a warning
            stamp = dict.get(entry, "updated_parsed") or dict.get(entry, "published_parsed")
            if stamp is not None:
                year, month, day, hour, minute, second = stamp[:6]
                updated = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
                # a date in the future means "unknown", as in sitemaps
                if updated <= now:
                    meta["recrawler_feed_updated"] = updated.isoformat()
            yield Request(url, callback=self.parse, meta=meta)

    def _feed_failed(self, failure: Failure) -> None:
        self._inc("recrawler/feed/error")
        request = getattr(failure, "request", None)
        logger.warning(
            "feed %(url)s failed: %(exc)s", {"url": getattr(request, "url", "?"), "exc": failure.value}
        )

    def _links(self, response: TextResponse) -> Iterable[Request]:
        """Requests for the links of a fetched page: same host, under the prefix, within depth."""
        depth = int(response.meta.get("recrawler_depth", 0)) + 1
        if self._link_extractor is None:
            self._link_extractor = LinkExtractor(unique=True)
        limit = self.settings.getint("RECRAWLER_FOLLOW_DEPTH_LIMIT")
        for link in self._link_extractor.extract_links(response):
            parts = urlsplit(link.url)
            if url_host(link.url) not in self._hosts or not parts.path.startswith(self.follow_prefixes):
                self._inc("recrawler/follow/offsite")
                continue
            if depth > limit:
                self._inc("recrawler/follow/depth_limit")
                continue
            self._inc("recrawler/follow/links")
            yield Request(
                link.url,
                callback=self.parse,
                meta={
                    "recrawler_found_via": "link",
                    "recrawler_found_from": response.url,
                    "recrawler_depth": depth,
                },
            )

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

    def parse(self, response: Response, **kwargs: Any) -> Iterable[Page | Request]:
        """Yield the Page of a listed (or verified) URL, then its links when following them."""
        page = self.recrawler_page(response)
        taken = self._lastmods.pop(page.key, None)
        page.lastmod = response.meta.get("recrawler_lastmod") or taken
        # a direct check of an unlisted stored page says nothing about how it was found
        page.found_via = page.found_via or (None if response.meta.get("recrawler_verify") else "sitemap")
        yield page
        if self.follow_links and isinstance(response, TextResponse) and response.status == 200 and page.text:
            yield from self._links(response)
