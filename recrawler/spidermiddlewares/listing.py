"""ListingMiddleware: what a sitemap yields is tagged (a page or another sitemap) and bounded."""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections import deque
from typing import TYPE_CHECKING, Any, Self

from scrapy import Request

from recrawler import meta
from recrawler.exceptions import ConfigurationError, StateStoreError
from recrawler.misses import state_error
from recrawler.redact import redact_url
from recrawler.runtime import runtime_of
from recrawler.state import ListedEntry, SitemapFile, utcnow

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from recrawler.counters import RunCounters
    from recrawler.runtime import Runtime
    from recrawler.state import Run

logger = logging.getLogger(__name__)

#: added to a further sitemap file's request priority (page requests carry 0 or 1)
_SITEMAP_PRIORITY = 100


class ListingMiddleware:
    """Reads a site's listing defensively.

    Requests yielded while reading a sitemap are tagged as pages or as further sitemaps (through
    the spider's ``recrawler_role_of``). A sitemap index tree is bounded in depth
    (``RECRAWLER_SITEMAP_MAX_DEPTH``) and in files (``RECRAWLER_SITEMAP_MAX_FILES``), and a run
    lists at most ``RECRAWLER_LISTING_MAX_URLS`` pages: what lies beyond is not fetched, and the
    listing counts as incomplete, so the outage guard removes nothing this run.

    What each sitemap file lists is stored as it is read, in batches, with the file's validators
    once it is read to the end; a file that answers 304 (see ConditionalRequestMiddleware) is not
    parsed again: its stored entries are listed instead, in batches, through the same bounds. A
    file read again is compared with what it listed last time: entries added, removed, or whose
    lastmod moved are counted (``recrawler/sitemap/moved/...``: a deploy sign ScheduleMiddleware
    reads once the file's output is through).

    Further sitemap files wait here, not in Scrapy's scheduler: at most
    ``RECRAWLER_SITEMAP_CONCURRENCY`` of them are requested and not yet read to their end at
    once (the next goes out as one is read, or fails), and at most that many are read at once, so
    memory does not grow with the number or the size of the files. They go out through the
    engine, past the spider middlewares below this one (page requests do not).

    Settings: ``RECRAWLER_SITEMAP_CONCURRENCY``, ``RECRAWLER_SITEMAP_MAX_DEPTH``,
    ``RECRAWLER_SITEMAP_MAX_FILES``, ``RECRAWLER_LISTING_MAX_URLS``, ``RECRAWLER_FRONTIER_BATCH_SIZE``.
    Stats: ``recrawler/sitemap/refused``, ``recrawler/sitemap/refused/{depth,files,urls}``,
    ``recrawler/sitemap/parsed`` (for an unchanged file), ``recrawler/sitemap/moved``,
    ``recrawler/sitemap/moved/{added,removed,lastmod}``, ``recrawler/state/error/<Exception>``.
    Meta: sets ``recrawler_role`` on what a sitemap yields, and ``_recrawler_listed`` on its pages
    (the frontier counts them in ``recrawler/sitemap/pages``, each key once).
    """

    def __init__(
        self,
        crawler: Crawler,
        *,
        max_depth: int,
        max_files: int,
        max_urls: int,
        batch_size: int = 500,
        concurrency: int = 2,
    ) -> None:
        for name, value in (
            ("RECRAWLER_SITEMAP_CONCURRENCY", concurrency),
            ("RECRAWLER_SITEMAP_MAX_DEPTH", max_depth),
            ("RECRAWLER_SITEMAP_MAX_FILES", max_files),
            ("RECRAWLER_LISTING_MAX_URLS", max_urls),
        ):
            if value < 1:
                raise ConfigurationError(f"{name}: must be at least 1, got {value!r}")
        self.crawler = crawler
        self.concurrency = concurrency
        self.max_depth = max_depth
        self.max_files = max_files
        self.max_urls = max_urls
        self.batch_size = max(1, batch_size)
        self.files = 0
        self.urls = 0
        self._logged: set[str] = set()
        #: sitemap files being read (a waiting file is not parsed yet: only its body is held)
        self._reading = asyncio.Semaphore(concurrency)
        #: further sitemap files not requested yet (at most RECRAWLER_SITEMAP_MAX_FILES)
        self._waiting: deque[Request] = deque()
        #: requested and not read to their end; one that failed leaves once Scrapy lets go of it
        self._open: weakref.WeakSet[Request] = weakref.WeakSet()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Read the bounds; only for spiders that opt in."""
        meta.require_opt_in(crawler)
        s = crawler.settings
        mw = cls(
            crawler,
            max_depth=s.getint("RECRAWLER_SITEMAP_MAX_DEPTH"),
            max_files=s.getint("RECRAWLER_SITEMAP_MAX_FILES"),
            max_urls=s.getint("RECRAWLER_LISTING_MAX_URLS"),
            batch_size=s.getint("RECRAWLER_FRONTIER_BATCH_SIZE"),
            concurrency=s.getint("RECRAWLER_SITEMAP_CONCURRENCY"),
        )
        runtime_of(crawler).listing = mw
        return mw

    def idle(self) -> bool:
        """On ``spider_idle`` (the Reconciler asks first): request the next waiting sitemap files;
        False when none wait."""
        if not self._waiting:
            return False
        # nothing is in flight when the spider is idle: what is still open failed unread
        self._open = weakref.WeakSet()
        self._release()
        return True

    def _release(self) -> None:
        engine = self.crawler.engine
        while self._waiting and engine is not None and len(self._open) < self.concurrency:
            request = self._waiting.popleft()
            self._open.add(request)
            engine.crawl(request)

    async def process_spider_output(
        self, response: Response, result: AsyncIterator[Any]
    ) -> AsyncIterator[Any]:
        """Tag and bound what a sitemap yields; everything else passes through."""
        request = response.request
        spider = self.crawler.spider
        role_of = getattr(spider, "recrawler_role_of", None)
        if self._waiting:
            # a failed sitemap request leaves the open set unseen: look again with each response
            self._release()
        if request is None or role_of is None or not meta.is_sitemap_request(request):
            listing = request is not None and meta.is_sitemap_request(request)
            async for r in result:
                if listing and isinstance(r, Request) and meta.is_page_request(r):
                    r.meta[meta.LISTED] = True
                yield r
            return
        try:
            async with self._reading:
                async for r in self._read(response, request, result, role_of):
                    yield r
        finally:
            self._open.discard(request)
            self._release()

    async def _read(
        self,
        response: Response,
        request: Request,
        result: AsyncIterator[Any],
        role_of: Callable[[Request], str],
    ) -> AsyncIterator[Any]:
        """Tag and bound one sitemap file's output (stored or parsed), storing what it lists."""
        spider = self.crawler.spider
        depth = int(request.meta.get(meta.SITEMAP_DEPTH) or 0) + 1
        listed = _Listing.of(self.crawler, response, self.batch_size)
        if listed is not None and response.status == 304:
            # unchanged since it was last read: its entries, as reading it again would yield them
            self._counters.inc("recrawler/sitemap/parsed")
            result = listed.stored()
        parse_listing = getattr(spider, "recrawler_parse_listing", None)
        async for r in result:
            if not isinstance(r, Request):
                yield r
                continue
            role = role_of(r)
            r.meta[meta.ROLE] = role
            if role == meta.ROLE_SITEMAP:
                if parse_listing is not None:
                    # the next file is asked conditionally too
                    r.callback = parse_listing
                # the listing is read before the pages it names: fed page requests never starve it
                r.priority = max(r.priority, request.priority) + _SITEMAP_PRIORITY
                if listed is not None:
                    await listed.add(r.url, role, None)
                r.meta[meta.SITEMAP_DEPTH] = depth
                if depth > self.max_depth:
                    self._refuse("depth", r.url, f"more than {self.max_depth} sitemap files deep")
                    continue
                self.files += 1
                if self.files > self.max_files:
                    self._refuse("files", r.url, f"more than {self.max_files} sitemap files")
                    continue
                self._waiting.append(r)
                self._release()
                continue
            else:
                if listed is not None:
                    await listed.add(r.url, role, r.meta.get(meta.LASTMOD))
                self.urls += 1
                if self.urls > self.max_urls:
                    self._refuse("urls", r.url, f"more than {self.max_urls} listed pages")
                    continue
                # the frontier counts the pages a sitemap named, each key once
                r.meta[meta.LISTED] = True
            yield r
        if listed is not None:
            await listed.done()

    @property
    def _counters(self) -> RunCounters:
        return runtime_of(self.crawler).counters

    def _refuse(self, why: str, url: str, what: str) -> None:
        counters = self._counters
        counters.inc("recrawler/sitemap/refused")
        counters.inc(f"recrawler/sitemap/refused/{why}")
        if why not in self._logged:
            self._logged.add(why)
            logger.error(
                "listing is incomplete: %(what)s (first refused: %(url)s); nothing is removed this run",
                {"what": what, "url": redact_url(url)[:300]},
                extra={"spider": self.crawler.spider},
            )


class _Listing:
    """One sitemap file's listing, written to the database in batches as it is read (or read
    back from it when the file is unchanged)."""

    def __init__(
        self,
        crawler: Crawler,
        runtime: Runtime,
        run: Run,
        url: str,
        batch: int,
        *,
        validators: tuple[str | None, str | None] | None,
    ) -> None:
        self.crawler = crawler
        #: the 200's ETag and Last-Modified; None: the file was unchanged (304), nothing to store
        self.validators = validators
        self.runtime = runtime
        self.run = run
        self.url = url
        self.batch = batch
        self.entries: list[ListedEntry] = []
        self.urls = 0
        self.pos = 0
        self.failed = False

    @classmethod
    def of(cls, crawler: Crawler, response: Response, batch: int) -> _Listing | None:
        """The listing of a sitemap response, when the spider can list stored entries again."""
        runtime = runtime_of(crawler)
        spider = crawler.spider
        if (
            runtime.run is None
            or not hasattr(spider, "recrawler_listed_request")
            or response.url.endswith("/robots.txt")
            or response.status not in (200, 304)
            # a credential in its URL (?token=, ?api_key=) is never stored: the file is read again
            # each run instead of being asked conditionally
            or redact_url(response.url) != response.url
        ):
            return None
        validators = None
        if response.status == 200:
            etag, modified = response.headers.get(b"ETag"), response.headers.get(b"Last-Modified")
            validators = (
                etag.decode("latin-1") if etag else None,
                modified.decode("latin-1") if modified else None,
            )
        return cls(crawler, runtime, runtime.run, response.url, batch, validators=validators)

    async def add(self, url: str, kind: str, lastmod: str | None) -> None:
        if self.validators is None:
            return
        if redact_url(url) != url:
            # an entry carrying a credential: neither it nor the file's validators are stored, so
            # the file is read again next run (never listed from a copy without the entry)
            self.validators = None
            self.entries = []
            return
        if kind == meta.ROLE_PAGE:
            self.urls += 1
        self.pos += 1
        self.entries.append(ListedEntry(url=url, kind=kind, lastmod=lastmod, pos=self.pos))
        if len(self.entries) >= self.batch:
            await self._flush()

    async def _flush(self) -> None:
        entries, self.entries = self.entries, []
        if self.failed or not entries:
            return
        try:
            added, lastmod = await self.runtime.store.frontier.add_listing(self.run, self.url, entries)
        except StateStoreError as exc:
            self._failed(exc)
            return
        self._moved("added", added)
        self._moved("lastmod", lastmod)

    def _moved(self, how: str, n: int) -> None:
        if n:
            self.runtime.counters.inc("recrawler/sitemap/moved", n)
            self.runtime.counters.inc(f"recrawler/sitemap/moved/{how}", n)

    def _failed(self, exc: StateStoreError) -> None:
        # the file is read again next run (its validators are not stored): nothing is lost
        self.failed = True
        state_error(self.runtime, exc, "storing the listing", redact_url(self.url))

    async def done(self) -> None:
        """The file was read to its end: store the rest and its validators."""
        await self._flush()
        if self.failed or self.validators is None:
            return
        etag, last_modified = self.validators
        try:
            removed = await self.runtime.store.frontier.listing_read(
                self.run,
                SitemapFile(url=self.url, etag=etag, last_modified=last_modified, urls=self.urls),
                utcnow(),
            )
        except StateStoreError as exc:
            self._failed(exc)
            return
        self._moved("removed", removed)

    async def stored(self) -> AsyncIterator[Request]:
        """The requests the file's stored entries make (an unchanged file's listing)."""
        spider = self.crawler.spider
        after = 0
        while True:
            try:
                entries = await self.runtime.store.frontier.listing(self.url, after=after, limit=self.batch)
            except StateStoreError as exc:
                self._failed(exc)
                self.runtime.counters.inc("recrawler/sitemap/error")
                return
            if not entries:
                return
            for entry in entries:
                request = spider.recrawler_listed_request(entry.url, entry.kind, entry.lastmod)  # type: ignore[union-attr]
                if request is not None:
                    yield request
            after = entries[-1].pos
