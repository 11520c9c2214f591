"""DeltaFetchMiddleware: immutable pages fetched once (scrapy-deltafetch's way), keys in the database."""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any, Self

from scrapy import Request, signals
from scrapy.exceptions import NotConfigured

from recrawler import meta
from recrawler.counters import Counting, state_error_key
from recrawler.exceptions import ConfigurationError, StateStoreError
from recrawler.items import Page
from recrawler.meta import is_page_request, is_sitemap_request, request_key
from recrawler.redact import redact_url
from recrawler.runtime import runtime_of
from recrawler.state import utcnow
from recrawler.urls import KeyMaker

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable

    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from recrawler.state import Schedule, Trust

logger = logging.getLogger(__name__)


class DeltaFetchMiddleware(Counting):
    """scrapy-deltafetch's spider middleware, written for the state database instead of a ``dbm``
    file: its settings, meta keys, spider attribute and stats mean what they mean there, and its
    keys are looked up a batch of requests at a time without blocking the reactor.

    A request whose key was stored by an earlier run is dropped; the key of a response that
    yields an item (a page read: not an error) is stored. Enabled for requests whose URL matches
    ``RECRAWLER_IMMUTABLE_PATTERNS`` (regular expressions, ``re.search``), or for every request
    with ``DELTAFETCH_ENABLED``. Keys live in the ``deltafetch`` table, per spider: they survive a
    kill (each is committed with the page writes) and are shared by every worker on the database.
    Reset with ``DELTAFETCH_RESET`` / the spider attribute ``deltafetch_reset`` (the whole spider)
    or ``recrawler immutable --reset [PATTERN]``. Pages it skips are not checked as unseen.

    Settings: ``RECRAWLER_IMMUTABLE_PATTERNS``, ``DELTAFETCH_ENABLED``, ``DELTAFETCH_RESET``
    (``DELTAFETCH_DIR`` is not used: the keys are in the database), ``RECRAWLER_URL_DROP_PARAMS``,
    ``RECRAWLER_URL_KEEP_PARAMS``.
    Meta: ``deltafetch_key`` (the key to store and look up), ``deltafetch_enabled`` (force on/off).
    Stats: ``deltafetch/skipped``, ``deltafetch/stored`` (scrapy-deltafetch's own),
    ``recrawler/page/skipped``, ``recrawler/page/skipped/deltafetch``.
    """

    def __init__(
        self,
        host_trust: Trust,
        schedule: Schedule,
        *,
        crawler: Crawler,
        patterns: Iterable[str] = (),
        all_requests: bool = False,
        reset: bool = False,
        key_maker: KeyMaker | None = None,
    ) -> None:
        self.host_trust = host_trust
        self.schedule = schedule
        self.reset = reset
        self.crawler = crawler
        self.counters = runtime_of(crawler).counters
        self.all_requests = all_requests
        self.key_maker = key_maker or KeyMaker()
        self.fingerprint = crawler.request_fingerprinter.fingerprint
        self.patterns: list[re.Pattern[str]] = []
        for pattern in patterns:
            try:
                self.patterns.append(re.compile(pattern))
            except re.error as exc:
                msg = f"RECRAWLER_IMMUTABLE_PATTERNS: bad pattern {pattern!r}: {exc}"
                raise ConfigurationError(msg) from exc

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Enabled by ``RECRAWLER_IMMUTABLE_PATTERNS`` or ``DELTAFETCH_ENABLED``."""
        meta.require_opt_in(crawler)
        s = crawler.settings
        patterns = s.getlist("RECRAWLER_IMMUTABLE_PATTERNS")
        if not patterns and not s.getbool("DELTAFETCH_ENABLED"):
            # off unless asked for: without a message, Scrapy drops it quietly
            raise NotConfigured
        mw = cls(
            runtime_of(crawler).store.host_trust,
            runtime_of(crawler).store.schedule,
            crawler=crawler,
            patterns=patterns,
            all_requests=s.getbool("DELTAFETCH_ENABLED"),
            reset=s.getbool("DELTAFETCH_RESET"),
            key_maker=KeyMaker(
                s.getlist("RECRAWLER_URL_DROP_PARAMS"), s.getlist("RECRAWLER_URL_KEEP_PARAMS")
            ),
        )
        crawler.signals.connect(mw.spider_opened, signal=signals.spider_opened)
        return mw

    @property
    def _spider_name(self) -> str:
        return str(getattr(self.crawler.spider, "name", "") or "")

    async def spider_opened(self) -> None:
        """Apply ``DELTAFETCH_RESET`` (or the spider's ``deltafetch_reset``): forget this spider's keys."""
        if await runtime_of(self.crawler).started() is None:
            return
        if self.reset or getattr(self.crawler.spider, "deltafetch_reset", False):
            n = await self.host_trust.immutable_reset(self._spider_name)
            logger.info("deltafetch: reset, %(n)d stored keys forgotten", {"n": n})

    def _is_enabled_for_request(self, request: Request) -> bool:
        enabled = request.meta.get("deltafetch_enabled")
        if enabled is not None:
            return bool(enabled)
        if self.all_requests:
            return True
        return any(p.search(request.url) for p in self.patterns)

    def _get_key(self, request: Request) -> bytes:
        key = request.meta.get("deltafetch_key") or self.fingerprint(request).hex()
        return str(key).encode()

    async def process_spider_output(
        self, response: Response, result: AsyncIterator[Any]
    ) -> AsyncIterator[Any]:
        """Drop requests fetched by an earlier run; store the key of a response yielding an item."""
        batch: list[Request] = []
        async for r in result:
            if isinstance(r, Request):
                if self._is_enabled_for_request(r):
                    batch.append(r)
                    continue
                yield r
                continue
            await self._store(response, r)
            yield r
        if batch:
            # a sitemap's pages skipped here are still listed: counted once per key, as the
            # schedule and the frontier count the others (the outage guard compares listings)
            listing = response.request is not None and is_sitemap_request(response.request)
            async for r in self._filter(batch, listing):
                yield r

    async def _filter(self, batch: list[Request], listing: bool = False) -> AsyncIterator[Request]:
        keys = [self._get_key(r).decode() for r in batch]
        try:
            seen = await self.host_trust.immutable_seen(self._spider_name, sorted(set(keys)))
        except StateStoreError as exc:
            self._inc(state_error_key(exc))
            logger.error("deltafetch lookup failed, requesting the batch: %(exc)s", {"exc": exc})
            seen = set()
        skipped_pages: list[tuple[str, str | None]] = []
        for request, key in zip(batch, keys, strict=True):
            if key not in seen:
                yield request
                continue
            logger.debug("deltafetch: ignoring already visited %(url)s", {"url": request.url})
            self._inc("deltafetch/skipped")
            if is_page_request(request):
                self._inc("recrawler/page/skipped")
                self._inc("recrawler/page/skipped/deltafetch")
                skipped_pages.append((request_key(request, self.key_maker), "deltafetch"))
        if listing and skipped_pages:
            self._inc("recrawler/sitemap/pages", len({key for key, _ in skipped_pages}))
        if skipped_pages:
            try:
                # skipped on purpose: not "unseen", never quarantined for it
                run = runtime_of(self.crawler).run
                if run is not None:
                    await self.schedule.mark_listed(run, skipped_pages)
            except StateStoreError as exc:
                self._inc(state_error_key(exc))
                logger.error("could not mark skipped pages: %(exc)s", {"exc": exc})

    async def _store(self, response: Response, item: Any) -> None:
        request = response.request
        if request is None or not self._is_enabled_for_request(request):
            return
        # a page counts as fetched once it was read: not an error, not an empty page
        if isinstance(item, Page) and (item.error or item.http_status not in (200, 304)):
            return
        page_key = request_key(request, self.key_maker) if is_page_request(request) else None
        try:
            await self.host_trust.immutable_add(
                self._spider_name,
                self._get_key(request).decode(),
                url=request.url,
                page_key=page_key,
                at=utcnow(),
            )
        except StateStoreError as exc:
            self._inc(state_error_key(exc))
            logger.error(
                "deltafetch could not store %(url)s: %(exc)s", {"url": redact_url(request.url), "exc": exc}
            )
            return
        self._inc("deltafetch/stored")


__all__ = ["DeltaFetchMiddleware"]
