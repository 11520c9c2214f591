"""``RecrawlSitemapSpider``: sitemap-driven recrawls, with feeds and followed links as further listings."""

from __future__ import annotations

import contextlib
import io
import logging
import re
import struct
import tempfile
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

import feedparser
from lxml import etree
from scrapy import Request
from scrapy.http import TextResponse, XmlResponse
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import SitemapSpider
from scrapy.utils.sitemap import Sitemap, sitemap_urls_from_robots

from recrawler import meta
from recrawler.exceptions import ConfigurationError
from recrawler.redact import redact_url
from recrawler.runtime import find_runtime
from recrawler.sitemaps import gunzip_into, stopped_early
from recrawler.spiders.mixin import RecrawlerSpiderMixin
from recrawler.urls import KeyMaker, UrlPolicy, key_host, resolve_dots

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable

    from scrapy.http import Response
    from twisted.python.failure import Failure

    from recrawler.items import Page

logger = logging.getLogger(__name__)


#: a gzip file's first bytes
_GZIP_MAGIC = b"\x1f\x8b\x08"


class StreamedSitemap(Sitemap):
    """Scrapy's :class:`~scrapy.utils.sitemap.Sitemap`, parsed from a binary file (a body in
    memory, or moved to disk) with the same parser and options, entry by entry."""

    def __init__(self, file: IO[bytes]) -> None:  # the parser Sitemap(bytes) makes, over a file
        self.xmliter = etree.iterparse(
            file,
            recover=True,
            remove_comments=True,
            resolve_entities=False,
            remove_blank_text=True,
            collect_ids=False,
            remove_pis=True,
            events=("start", "end"),
        )
        _, root = next(self.xmliter)
        self.type = self._get_tag_name(root)


def _flag(value: Any) -> bool:
    return str(value).strip().lower() in {"1", "true", "yes", "on"}


def _http_urls(value: str | None, argument: str) -> tuple[str, ...]:
    urls = tuple(u.strip() for u in (value or "").split(",") if u.strip())
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc or "@" in parts.netloc:
            raise ConfigurationError(f"{argument}: not an http(s) URL: {redact_url(url)!r}")
    return urls


def _has_bytes(file: IO[bytes]) -> bool:
    empty = not file.read(1)
    file.seek(0)
    return not empty


class RecrawlSitemapSpider(RecrawlerSpiderMixin, SitemapSpider):
    """A SitemapSpider that yields a Page per listed URL and keeps each URL's ``lastmod``.

    Arguments (``-a``): ``sitemap_url`` (a sitemap, sitemap index, ``.xml.gz`` or robots.txt; may be
    given several times comma-separated), ``allowed_hosts`` (comma-separated extra hosts, or
    ``*`` for any), ``site`` (the host whose stored pages this run reconciles), ``feed_url`` (RSS
    or Atom feeds, comma-separated: their entries are listed pages too, and an entry updated
    after a page's last check makes it due at once), ``follow_links`` (``1``: also follow links
    found on fetched pages, same host, under ``follow_prefix``, by default the first sitemap's
    folder, at most ``RECRAWLER_FOLLOW_DEPTH_LIMIT`` links away from a listed page, across runs,
    and at most ``RECRAWLER_FOLLOW_MAX_LINKS`` pages found through links per run).

    Only ``http``/``https`` URLs on the sitemap's host (or ``allowed_hosts``) without credentials
    are ever requested or stored: any other entry, feed item or link is refused and counted by
    reason (``recrawler/url/refused/<reason>``); one bad entry costs that entry only.
    Stats: ``recrawler/sitemap/{parsed,urls}``, ``recrawler/feed/{fetched,entries,error}``,
    ``recrawler/follow/{links,offsite,depth_limit,max_links}``, ``recrawler/url/refused/<reason>``.
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
        _http_urls(",".join(self.sitemap_urls), "sitemap_url")
        km = KeyMaker()
        first_host = key_host(km(self.sitemap_urls[0]))
        self.recrawler_site: str | None = site or first_host
        extra = [h for h in (allowed_hosts or "").split(",") if h.strip() and h.strip() != "*"]
        self._recrawler_policy = UrlPolicy.for_urls(
            self.sitemap_urls, extra, any_host=(allowed_hosts or "").strip() == "*"
        )
        self.feed_urls = _http_urls(feed_url, "feed_url")
        self.follow_links = _flag(follow_links) if follow_links is not None else False
        if follow_prefix:
            self.follow_prefixes = tuple(p.strip() for p in follow_prefix.split(",") if p.strip())
        else:
            # by default, the folder of the first sitemap: /docs/sitemap.xml -> /docs/
            self.follow_prefixes = (urlsplit(self.sitemap_urls[0]).path.rsplit("/", 1)[0] + "/",)
        self._link_extractor: LinkExtractor | None = None
        self._rules: list[tuple[re.Pattern[str], Any]] | None = None
        self._follow_patterns: list[re.Pattern[str]] | None = None

    async def start(self) -> AsyncIterator[Any]:
        """Start from the sitemaps (SitemapSpider's own start), then the feeds."""
        async for request in super().start():
            if isinstance(request, Request):
                request.meta[meta.ROLE] = meta.ROLE_SITEMAP
                request.meta[meta.SITEMAP_DEPTH] = 0
                request.callback = self.recrawler_parse_listing
            yield request
        for url in self.feed_urls:
            # not a page: no validators, no page state, no error accounting
            yield Request(
                url,
                callback=self._parse_feed,
                errback=self._feed_failed,
                dont_filter=True,
                meta={meta.ROLE: meta.ROLE_FEED},
            )

    @property
    def recrawler_home_paths(self) -> tuple[str, ...]:
        """The site's root and the folder of each sitemap (``/docs/sitemap.xml``: ``/docs/``)."""
        return ("/", *(urlsplit(u).path.rsplit("/", 1)[0] + "/" for u in self.sitemap_urls))

    def recrawler_role_of(self, request: Request) -> str:
        """What a request yielded while reading a sitemap fetches: a listed page or another sitemap."""
        page = any(request.callback == callback for _, callback in self._page_rules())
        return meta.ROLE_PAGE if page else meta.ROLE_SITEMAP

    def recrawler_parse_listing(self, response: Response, **kwargs: Any) -> Iterable[Request]:
        """Read a sitemap file, robots.txt or sitemap index entry by entry, as the requests are
        taken (SitemapSpider's own parsing holds a whole file's URLs at once), from disk when
        ListingBodyMiddleware moved a large file's body there; an unchanged one (304) yields
        nothing here: ListingMiddleware lists it from the database.

        Follows ``sitemap_rules``, ``sitemap_follow``, ``sitemap_alternate_links`` and
        ``sitemap_filter`` as SitemapSpider does; a page request carries its entry's lastmod.
        """
        if response.status == 304:
            return
        if response.url.endswith("/robots.txt"):
            for url in sitemap_urls_from_robots(response.body, base_url=response.url):
                yield Request(url, callback=self.recrawler_parse_listing)
            return
        with contextlib.ExitStack() as files:
            sitemap = self._open_sitemap(response, files)
            if sitemap is None:
                return
            yield from self._listed(sitemap)
            self._check_parsed(response, sitemap)

    def _listed(self, sitemap: Sitemap) -> Iterable[Request]:
        index = sitemap.type == "sitemapindex"
        for entry in self.sitemap_filter(sitemap):
            locs = [entry["loc"]]
            if self.sitemap_alternate_links:
                locs += entry.get("alternate") or []
            if index:
                for loc in locs:
                    if any(rule.search(loc) for rule in self._follow_rules()):
                        yield Request(loc, callback=self.recrawler_parse_listing)
                continue
            # the entry's lastmod is its own URL's, not its alternates'
            lastmod: str | None = str(entry.get("lastmod") or "").strip() or None
            for loc in locs:
                request = self._page_request(loc, lastmod)
                if request is not None:
                    yield request
                lastmod = None

    def _check_parsed(self, response: Response, sitemap: Sitemap) -> None:
        """A sitemap the parser stopped reading early is a failed listing: counted, logged."""
        stopped = stopped_early(sitemap)
        if stopped is not None:
            self._inc("recrawler/sitemap/error")
            logger.error(
                "sitemap %(url)s stopped parsing at line %(line)d (%(why)s): the listing is "
                "incomplete; nothing is removed this run",
                {"url": redact_url(response.url), "line": stopped[0], "why": stopped[1]},
            )

    def _open_sitemap(self, response: Response, files: contextlib.ExitStack) -> Sitemap | None:
        """The sitemap in *response* (gzip or not; its body in memory or, for a large file, on
        disk: see ListingBodyMiddleware), or None, counted and logged, when it is none. The files
        it reads from close with *files*."""
        spilled: IO[bytes] | None = response.meta.pop(meta.LISTING_BODY, None)
        raw: IO[bytes] = files.enter_context(spilled) if spilled is not None else io.BytesIO(response.body)
        gzipped = raw.read(len(_GZIP_MAGIC)) == _GZIP_MAGIC
        raw.seek(0)
        xml: IO[bytes] | None = None
        why = "not XML"
        if isinstance(response, XmlResponse):
            xml = raw
        elif gzipped:
            default = getattr(self, "download_maxsize", self.settings.getint("DOWNLOAD_MAXSIZE"))
            limit = response.meta.get("download_maxsize", default)
            # decompressed where the body is: a large file's on disk too
            out = io.BytesIO() if spilled is None else files.enter_context(tempfile.TemporaryFile())  # noqa: SIM115 (closed with files)
            try:
                xml = gunzip_into(raw, out, max_size=limit)
            except (ValueError, OSError, EOFError, struct.error) as exc:
                why = f"could not be decompressed ({exc})"
        elif response.url.endswith((".xml", ".xml.gz")):
            xml = raw
        sitemap = None
        if xml is not None and _has_bytes(xml):
            try:
                sitemap = StreamedSitemap(xml)
            except (StopIteration, etree.XMLSyntaxError):
                sitemap = None
            else:
                why = f"neither a urlset nor a sitemap index ({sitemap.type!r})"
        if sitemap is not None and sitemap.type in ("urlset", "sitemapindex"):
            return sitemap
        self._inc("recrawler/sitemap/error")
        logger.error(
            "sitemap %(url)s is not a sitemap: %(why)s; nothing is removed this run",
            {"url": redact_url(response.url), "why": why},
        )
        return None

    def _follow_rules(self) -> list[re.Pattern[str]]:
        if self._follow_patterns is None:
            self._follow_patterns = [re.compile(r) if isinstance(r, str) else r for r in self.sitemap_follow]
        return self._follow_patterns

    def _page_rules(self) -> list[tuple[re.Pattern[str], Any]]:
        """``sitemap_rules`` compiled once: (URL pattern, page callback)."""
        if self._rules is None:
            self._rules = [
                (re.compile(r) if isinstance(r, str) else r, getattr(self, c) if isinstance(c, str) else c)
                for r, c in self.sitemap_rules
            ]
        return self._rules

    def _page_request(self, url: str, lastmod: str | None) -> Request | None:
        """The request for a listed page URL (its ``sitemap_rules`` callback), or None."""
        for rule, callback in self._page_rules():
            if rule.search(url):
                request = Request(url, callback=callback)
                if lastmod:
                    request.meta[meta.LASTMOD] = lastmod
                return request
        return None

    def recrawler_listed_request(self, url: str, kind: str, lastmod: str | None) -> Request | None:
        """The request reading a stored sitemap entry makes, as if the file had been parsed again:
        another sitemap file, or a page (through ``sitemap_rules``, the URL policy and its lastmod)."""
        if kind == meta.ROLE_SITEMAP:
            return Request(url, callback=self.recrawler_parse_listing)
        if not self._allowed(url, "sitemap"):
            return None
        request = self._page_request(url, lastmod)
        if request is not None:
            self._inc("recrawler/sitemap/urls")
        return request

    def recrawler_refused(self, url: str, reason: str, source: str) -> None:
        """Count a URL the policy refused (the run's Runtime logs the first of each reason)."""
        runtime = find_runtime(getattr(self, "crawler", None))
        if runtime is not None:
            runtime.refused(url, reason, source)

    def _allowed(self, url: str, source: str) -> bool:
        reason = self.recrawler_url_policy.refusal(url)
        if reason is None:
            return True
        self.recrawler_refused(url, reason, source)
        return False

    def _parse_feed(self, response: Response) -> Iterable[Request]:
        """Yield a page request per feed entry; an entry's date says when its page changed."""
        parsed = feedparser.parse(response.body, response_headers={"content-location": response.url})
        if not parsed.entries and parsed.get("bozo"):
            self._inc("recrawler/feed/error")
            logger.warning(
                "feed %(url)s could not be parsed: %(exc)s",
                {"url": redact_url(response.url), "exc": parsed.get("bozo_exception")},
            )
            return
        self._inc("recrawler/feed/fetched")
        runtime = find_runtime(self.crawler)
        now = runtime.schedule.now if runtime is not None else datetime.now(UTC)
        for entry in parsed.entries:
            link = entry.get("link")
            if not link:
                continue
            try:
                url = urljoin(response.url, str(link))
            except ValueError:
                url = str(link)
            if not self._allowed(url, "feed"):
                continue
            self._inc("recrawler/feed/entries")
            request_meta: dict[str, Any] = {meta.FOUND_VIA: "feed", meta.FOUND_FROM: response.url}
            # plain dict reads: feedparser's own get() maps one key to the other with a warning
            stamp = dict.get(entry, "updated_parsed") or dict.get(entry, "published_parsed")
            if stamp is not None:
                year, month, day, hour, minute, second = stamp[:6]
                updated = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
                # a date in the future means "unknown", as in sitemaps
                if updated <= now:
                    request_meta[meta.FEED_UPDATED] = updated.isoformat()
            yield Request(url, callback=self.parse, meta=request_meta)

    def _feed_failed(self, failure: Failure) -> None:
        self._inc("recrawler/feed/error")
        request = getattr(failure, "request", None)
        logger.warning(
            "feed %(url)s failed: %(exc)s",
            {"url": redact_url(getattr(request, "url", "?")), "exc": failure.value},
        )

    def _links(self, response: TextResponse) -> Iterable[Request]:
        """Requests for the links of a fetched page: same host, under the prefix, within depth.

        The depth counts across runs: a stored link-found page checked again keeps its depth, so a
        link trap (a calendar, a session id) never grows past the limit.
        """
        depth = int(response.meta.get(meta.DEPTH) or 0) + 1
        if self._link_extractor is None:
            self._link_extractor = LinkExtractor(unique=True)
        limit = self.settings.getint("RECRAWLER_FOLLOW_DEPTH_LIMIT")
        for link in self._link_extractor.extract_links(response):
            # the page a server answers for /docs/../private/x is /private/x: the prefix test
            # (and the request) take the path with its dot segments resolved
            url = resolve_dots(link.url)
            if not self._allowed(url, "link"):
                continue
            if not urlsplit(url).path.startswith(self.follow_prefixes):
                self._inc("recrawler/follow/offsite")
                continue
            if depth > limit:
                self._inc("recrawler/follow/depth_limit")
                continue
            # the per-run budget counts pages found, not links: ScheduleMiddleware, which knows
            # which pages are stored, spends it
            yield Request(
                url,
                callback=self.parse,
                meta={meta.FOUND_VIA: "link", meta.FOUND_FROM: response.url, meta.DEPTH: depth},
            )

    def _inc(self, name: str, count: int = 1) -> None:
        runtime = find_runtime(getattr(self, "crawler", None))
        if runtime is not None:
            runtime.counters.inc(name, count)

    def sitemap_filter(self, entries: Iterable[dict[str, Any]]) -> Iterable[dict[str, Any]]:
        """Keep the entries the URL policy allows.

        A malformed, foreign-scheme, credentialed or off-site ``<loc>`` costs that entry only:
        it is refused and counted, and the rest of the listing goes on.
        """
        kind = getattr(entries, "type", None)
        self._inc("recrawler/sitemap/parsed")
        for entry in entries:
            loc = str(entry.get("loc") or "").strip()
            if not loc:
                continue
            if not self._allowed(loc, "sitemap"):
                continue
            if kind == "urlset":
                self._inc("recrawler/sitemap/urls")
            checked = {**entry, "loc": loc}
            if entry.get("alternate"):
                checked["alternate"] = [u for u in entry["alternate"] if self._allowed(str(u), "sitemap")]
            yield checked

    def parse(
        self, response: Response, **kwargs: Any
    ) -> Iterable[Page | Request] | AsyncIterator[Page | Request]:
        """Yield the Page of a listed (or verified) URL, then its links when following them.

        A page to extract is extracted off the reactor (see :meth:`recrawler_page_async`); a 304
        or an empty body has nothing to extract: handing it over would cost more.
        """
        runtime = find_runtime(getattr(self, "crawler", None))
        if (
            runtime is not None
            and (runtime.cpu_pool.active or runtime.cpu_threads)
            and response.status != 304
            and response.body
            and meta.FIRST_BODY not in response.meta
        ):
            return self._parse_offloaded(response)
        return self._parse_page(response, self.recrawler_page(response))

    async def _parse_offloaded(self, response: Response) -> AsyncIterator[Page | Request]:
        page = await self.recrawler_page_async(response)
        for out in self._parse_page(response, page):
            yield out

    def _parse_page(self, response: Response, page: Page) -> Iterable[Page | Request]:
        page.lastmod = response.meta.get(meta.LASTMOD)
        # a direct check of an unlisted stored page says nothing about how it was found
        page.found_via = page.found_via or (None if response.meta.get(meta.VERIFY) else "sitemap")
        yield page
        if self.follow_links and isinstance(response, TextResponse) and response.status == 200 and page.text:
            yield from self._links(response)
