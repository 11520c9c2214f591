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
from recrawler.counters import Counting
from recrawler.exceptions import ConfigurationError
from recrawler.intervals import SchedulePolicy
from recrawler.markdown import is_llms_txt, llms_links, twin_page
from recrawler.redact import redact_url
from recrawler.runtime import find_component, find_runtime
from recrawler.sitemaps import gunzip_into, stopped_early
from recrawler.spiders.discovery import (
    FOUND,
    MISSING,
    folder,
    index_variants,
    probe_answer,
    probe_request,
    probe_urls,
)
from recrawler.spiders.mixin import RecrawlerSpiderMixin
from recrawler.urls import KeyMaker, UrlPolicy, key_host, resolve_dots

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable

    from scrapy.http import Response
    from twisted.python.failure import Failure

    from recrawler.counters import RunCounters
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


#: the meta of a page whose links are the listing: listed, and read every run (an immutable page
#: too, conditionally: skipped, it would hide the pages below it)
_LISTING_PAGE = {meta.LISTED: True, meta.LINKS: True, "deltafetch_enabled": False}


def _strict_flag(value: Any, argument: str) -> bool:
    """A yes/no spider argument: ``1``, ``true``, ``yes``, ``on`` or ``0``, ``false``, ``no``, ``off``."""
    text = str(value).strip().lower()
    if text in {"1", "true", "yes", "on"}:
        return True
    if text in {"0", "false", "no", "off", ""}:
        return False
    raise ConfigurationError(f"{argument}: not a yes or no (1, true, yes, on / 0, false, no, off): {value!r}")


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


class RecrawlSitemapSpider(Counting, RecrawlerSpiderMixin, SitemapSpider):
    """A SitemapSpider that yields a Page per listed URL and keeps each URL's ``lastmod``.

    Arguments (``-a``): ``sitemap_url`` (a sitemap, sitemap index, ``.xml.gz``, robots.txt or
    llms.txt; may be given several times comma-separated), ``start_url`` (pages to crawl from,
    comma-separated: with no sitemap, the links they lead to are the listing), ``discover``
    (``0``: with a ``start_url`` and no ``sitemap_url``, do not look for a listing first),
    ``allowed_hosts`` (comma-separated extra hosts, or ``*`` for any), ``site`` (the host whose
    stored pages this run reconciles), ``feed_url`` (RSS or Atom feeds, comma-separated: their
    entries are listed pages too, and an entry updated after a page's last check makes it due at
    once), ``follow_links`` (``1``: also
    follow links found on fetched pages, same host, under ``follow_prefix``, by default the first
    start URL's or sitemap's folder, at most ``RECRAWLER_FOLLOW_DEPTH_LIMIT`` links away from a
    listed page, across runs, and at most ``RECRAWLER_FOLLOW_MAX_LINKS`` pages no run stored
    before found through links per run; on by default with a ``start_url``), ``deployed`` (``1``:
    the docs were just deployed; the run checks every listed page of the site, as it does when it
    detects a deploy itself).

    Crawled from start URLs with no sitemap, the site's links are its listing: every page the link
    crawl reaches is listed (``recrawler/sitemap/pages`` counts them, for the outage guard) and
    read every run, conditionally (a 304 lists the links the page had when last read: see
    LinkListingMiddleware); a page the links no longer reach is checked directly and leaves only
    on proof, as a page a sitemap stopped listing. Before that, unless ``discover=0``, the spider
    looks for a listing of the site: the sitemaps robots.txt names, then ``sitemap.xml`` and
    ``llms.txt`` in the start URL's folder and at the root; one found is the listing (its pages
    outside the folder left out), and with an llms.txt no links are followed.

    An llms.txt lists the pages its list items link to; an entry that is a page's markdown twin
    (``x.html.md``, ``dir/index.html.md``, ``x.md``: see ``recrawler.markdown.twin_page``) is
    fetched as the twin (cleaner text than the HTML) and stored, keyed and cited as the page.

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
        start_url: str | None = None,
        discover: str | bool | None = None,
        allowed_hosts: str | None = None,
        site: str | None = None,
        feed_url: str | None = None,
        follow_links: str | bool | None = None,
        follow_prefix: str | None = None,
        deployed: str | bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        if sitemap_url:
            self.sitemap_urls = tuple(u.strip() for u in sitemap_url.split(",") if u.strip())
        #: pages to crawl from (``-a start_url=``): with no sitemap, their links are the listing
        self.recrawler_start_urls = _http_urls(start_url, "start_url")
        if not self.sitemap_urls and not self.recrawler_start_urls:
            raise ConfigurationError(
                f"spider {self.name!r} needs a sitemap or a start URL: "
                "-a sitemap_url=https://docs.example.com/sitemap.xml or -a start_url=https://docs.example.com/"
            )
        _http_urls(",".join(self.sitemap_urls), "sitemap_url")
        seeds = (*self.sitemap_urls, *self.recrawler_start_urls)
        km = KeyMaker()
        first_host = key_host(km(seeds[0]))
        self.recrawler_site: str | None = site or first_host
        extra = [h for h in (allowed_hosts or "").split(",") if h.strip() and h.strip() != "*"]
        self._recrawler_policy = UrlPolicy.for_urls(
            seeds, extra, any_host=(allowed_hosts or "").strip() == "*"
        )
        self.feed_urls = _http_urls(feed_url, "feed_url")
        default_follow = bool(self.recrawler_start_urls)
        self.follow_links = _flag(follow_links) if follow_links is not None else default_follow
        self.recrawler_deployed = _strict_flag(deployed, "deployed") if deployed is not None else False
        if follow_prefix:
            self.follow_prefixes = tuple(p.strip() for p in follow_prefix.split(",") if p.strip())
        else:
            # by default the folder of each start URL (/docs/index.html -> /docs/), else of the
            # first sitemap (/docs/sitemap.xml -> /docs/)
            self.follow_prefixes = tuple(
                dict.fromkeys(folder(u) for u in self.recrawler_start_urls or self.sitemap_urls[:1])
            )
        #: what this run's listing is: ``sitemap`` (sitemaps, robots.txt) or ``links`` (the pages
        #: a crawl from the start URLs reaches, for a site with no sitemap)
        self.recrawler_listing = "sitemap" if self.sitemap_urls else "links"
        #: look for a sitemap or an llms.txt before crawling from the start URLs
        self.recrawler_discover = not self.sitemap_urls and (
            _flag(discover) if discover is not None else True
        )
        #: the listing was found by looking (its pages outside the folder are left out)
        self._discovered = False
        #: an llms.txt is among the listings: a ``.md`` entry is a page's markdown twin
        self._llms = any(is_llms_txt(u) for u in self.sitemap_urls)
        self._start_keys: frozenset[str] = frozenset()
        self._keys: KeyMaker | None = None
        self._link_extractor: LinkExtractor | None = None
        self._rules: list[tuple[re.Pattern[str], Any]] | None = None
        self._follow_patterns: list[re.Pattern[str]] | None = None

    async def start(self) -> AsyncIterator[Any]:
        """Start from the sitemaps (SitemapSpider's own start), then the feeds, then the start URLs."""
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
        if self.recrawler_discover:
            prefix = self.follow_prefixes[0] if self.follow_prefixes else "/"
            yield probe_request(
                probe_urls(self.recrawler_start_urls[0], prefix), self._probed, self._probe_failed
            )
            return
        for request in self._start_pages():
            yield request

    def _probed(self, response: Response) -> Iterable[Request]:
        """A listing found ends the look (its requests, then the start pages'), a missing one asks
        the next place; any other answer leaves the listing unknown (a failed listing this run)."""
        answer, found = probe_answer(response, self.recrawler_url_policy)
        rest = list(response.meta.get(meta.PROBES) or [])
        if answer == FOUND:
            yield from self._found(found)
        elif answer == MISSING and rest:
            yield probe_request(rest, self._probed, self._probe_failed)
        elif answer == MISSING:
            logger.info(
                "no sitemap or llms.txt found: the links from %(start)s are the listing",
                {"start": redact_url(self.recrawler_start_urls[0])},
            )
            yield from self._start_pages()
        else:
            yield from self._probe_error(response.url, f"HTTP {response.status}")

    def _probe_failed(self, failure: Failure) -> Iterable[Request]:
        request = getattr(failure, "request", None)
        yield from self._probe_error(getattr(request, "url", "?"), repr(failure.value))

    def _probe_error(self, url: str, why: str) -> Iterable[Request]:
        # whether the site has a sitemap is unknown: this run's listing is no evidence of absence
        self._inc("recrawler/sitemap/error")
        logger.error(
            "could not tell whether %(url)s exists (%(why)s): the links are this run's listing, and "
            "nothing is removed this run",
            {"url": redact_url(url), "why": why},
        )
        yield from self._start_pages()

    def _found(self, urls: list[str]) -> Iterable[Request]:
        """A listing was found: it is the run's listing (an llms.txt's alone, no links followed)."""
        self.sitemap_urls = tuple(urls)
        self.recrawler_listing = "sitemap"
        self._discovered = True
        self._llms = any(is_llms_txt(u) for u in urls)
        if self._llms:
            self.follow_links = False
        logger.info(
            "listing found: %(urls)s%(links)s",
            {
                "urls": ", ".join(redact_url(u) for u in urls),
                "links": "" if self._llms else " (links followed too)",
            },
        )
        for url in urls:
            yield Request(
                url,
                callback=self.recrawler_parse_listing,
                meta={meta.ROLE: meta.ROLE_SITEMAP, meta.SITEMAP_DEPTH: 0},
            )
        if not self._llms:
            yield from self._start_pages()

    def _start_pages(self) -> Iterable[Request]:
        """The start URLs' page requests: read every run; with no sitemap, the listing's roots."""
        links = self.recrawler_listing == "links"
        km = self._key_maker()
        # a link back to a start page is not followed: the start request reads it every run (and
        # /docs/ and /docs/index.html are one start page: a logo's link "." is the home page)
        self._start_keys = frozenset(km(v) for u in self.recrawler_start_urls for v in index_variants(u))
        for url in self.recrawler_start_urls:
            request_meta: dict[str, Any] = {meta.FOUND_VIA: "start", meta.DEPTH: 0}
            if links:
                request_meta.update(_LISTING_PAGE)
            yield Request(url, callback=self.parse, meta=request_meta)

    def _key_maker(self) -> KeyMaker:
        """The crawl's page keys (``RECRAWLER_URL_*_PARAMS``)."""
        if self._keys is None:
            settings = getattr(self, "settings", None)
            if settings is None:
                return KeyMaker()
            self._keys = KeyMaker(
                settings.getlist("RECRAWLER_URL_DROP_PARAMS"), settings.getlist("RECRAWLER_URL_KEEP_PARAMS")
            )
        return self._keys

    @property
    def recrawler_home_paths(self) -> tuple[str, ...]:
        """The site's root, the folder of each sitemap (``/docs/sitemap.xml``: ``/docs/``) and of
        each start URL."""
        return ("/", *(folder(u) for u in (*self.sitemap_urls, *self.recrawler_start_urls)))

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
        if is_llms_txt(response.url):
            yield from self._parse_llms(response)
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

    def _parse_llms(self, response: Response) -> Iterable[Request]:
        """The pages an llms.txt lists (a page's markdown twin is fetched for it)."""
        self._llms = True
        self._inc("recrawler/sitemap/parsed")
        for url in llms_links(response.body, response.url):
            if not self._allowed(url, "sitemap") or not self._in_folder(url):
                continue
            request = self._page_request(url, None)
            if request is not None:
                self._inc("recrawler/sitemap/urls")
                yield request

    def _in_folder(self, url: str) -> bool:
        """A page of a listing found by looking must be under the start URLs' folders."""
        if not self._discovered or urlsplit(twin_page(url) or url).path.startswith(self.follow_prefixes):
            return True
        self._inc("recrawler/follow/offsite")
        return False

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
                page = twin_page(url) if self._llms else None
                if page is not None:
                    # the twin's text, the page's key and URL
                    request.meta[meta.PAGE_URL] = page
                    request.meta[meta.KEY] = self._key_maker()(page)
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

    def recrawler_page_request(self, url: str, lastmod: str | None = None) -> Request | None:
        """The request of a stored page the run asks again without its listing naming it now (a
        deploy probe, a page a deploy takes back from the skipped): its ``sitemap_rules`` callback
        and its lastmod; None when no rule takes its URL."""
        if not self.recrawler_url_policy.allows(url):
            return None
        return self._page_request(url, lastmod)

    def recrawler_refused(self, url: str, reason: str, source: str) -> None:
        """Count a URL the policy refused (the run's counters log the first of each reason)."""
        runtime = find_runtime(getattr(self, "crawler", None))
        if runtime is not None:
            runtime.counters.refused(url, reason, source, self)

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
        policy = find_component(getattr(self, "crawler", None), SchedulePolicy)
        now = policy.now if policy is not None else datetime.now(UTC)
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
        if self._link_extractor is None:
            # a frame is a page of the site too (hotdoc's navigation tree is one)
            self._link_extractor = LinkExtractor(
                tags=("a", "area", "frame", "iframe"), attrs=("href", "src"), unique=True
            )
        for link in self._link_extractor.extract_links(response):
            request = self.recrawler_link_request(link.url, response)
            if request is not None:
                yield request

    def recrawler_link_request(self, url: str, response: Response) -> Request | None:
        """The request for a link *url* on the page of *response* (found on it now, or stored
        from its last read), or None: on the site, under the prefix, within the depth limit.

        When the links are the listing (``recrawler_listing`` is ``links``), the request is listed
        and read every run, and shallower pages go first: a page is reached by its shortest path.
        """
        # the page a server answers for /docs/../private/x is /private/x: the prefix test (and
        # the request) take the path with its dot segments resolved
        url = resolve_dots(url)
        if not self._allowed(url, "link"):
            return None
        if not urlsplit(url).path.startswith(self.follow_prefixes):
            self._inc("recrawler/follow/offsite")
            return None
        depth = int(response.meta.get(meta.DEPTH) or 0) + 1
        if depth > self.settings.getint("RECRAWLER_FOLLOW_DEPTH_LIMIT"):
            self._inc("recrawler/follow/depth_limit")
            return None
        request_meta: dict[str, Any] = {
            meta.FOUND_VIA: "link",
            meta.FOUND_FROM: response.url,
            meta.DEPTH: depth,
        }
        priority = 0
        if response.meta.get(meta.LINKS):
            if self._key_maker()(url) in self._start_keys:
                return None
            request_meta.update({meta.FOUND_VIA: "crawl", **_LISTING_PAGE})
            priority = -depth
        # the per-run budget counts pages found, not links: ScheduleMiddleware, which knows
        # which pages are stored, spends it
        return Request(url, callback=self.parse, meta=request_meta, priority=priority)

    @property
    def counters(self) -> RunCounters | None:  # type: ignore[override]
        """The run's counters once the crawl has a run (None before, and without a crawler)."""
        runtime = find_runtime(getattr(self, "crawler", None))
        return runtime.counters if runtime is not None else None

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
            if kind == "urlset" and not self._in_folder(loc):
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
        # with the links as the listing, a page they no longer reach (checked directly) lists nothing
        outside = self.recrawler_listing == "links" and not response.meta.get(meta.LINKS)
        if (
            self.follow_links
            and not outside
            and isinstance(response, TextResponse)
            and response.status == 200
            and page.text
        ):
            yield from self._links(response)
