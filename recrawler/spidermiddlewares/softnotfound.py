"""SoftNotFoundMiddleware: a page that answers 200 with the site's own not-found page is a miss."""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import urlsplit

from scrapy import Request
from scrapy.exceptions import NotConfigured
from scrapy.http import TextResponse

from recrawler import meta, notfound
from recrawler.encoding import response_encoding
from recrawler.exceptions import StateStoreError
from recrawler.extract import ContentExtractor, ExtractionError
from recrawler.items import Page, Unread
from recrawler.misses import miss_moves, stage_soft_miss, state_error
from recrawler.redact import redact_url
from recrawler.runtime import runtime_of

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from twisted.python.failure import Failure

    from recrawler.notfound import NotFoundAnswer
    from recrawler.runtime import Runtime

logger = logging.getLogger(__name__)

#: statuses a probe's answer is read at: a not-found page (others say nothing about it)
_PROBE_STATUSES = [404, 410]


class SoftNotFoundMiddleware:
    """Turns soft 404s into misses before any pipeline sees them, on the site's own evidence.

    What the site answers for a path it does not have is learned once per run for each scope (an
    origin and the listing's folder holding the page: see :func:`recrawler.notfound.probe`) by a
    probe: a request for a name no site has, sent through the scheduler ahead of the start
    request of its scope, or with a scope's first page (the scope's pages wait for its answer).
    A Page whose main text is that not-found page (its path masked: the same text, or nearly) is a
    soft 404: dropped, and a miss staged for its key and for the stored pages a permanent
    redirect moved to it, as a 404 would stage them (quarantine, then gone after
    ``RECRAWLER_GONE_AFTER_MISSES``); a page never stored is an error (``soft_404``). Links found
    on it are not followed. Words alone never decide (a page about "404 Not Found" is content),
    and without an answer to compare with (a bare 404, a probe that failed, a worker of a shared
    run: its queue is every worker's) a page is content.
    Redirects that are soft 404s are PageRedirectMiddleware's to find.

    Settings: ``RECRAWLER_SOFT404_ENABLED``, ``RECRAWLER_CONTENT_SELECTORS``,
    ``RECRAWLER_CONTENT_NOISE_SELECTORS``, ``DOWNLOAD_TIMEOUT`` (how long a page waits for its
    scope's probe, at most).
    Stats: ``recrawler/page/soft_404``, ``recrawler/page/soft_404/{not_found_text,not_found_page}``,
    ``recrawler/page/missing/soft_404``, ``recrawler/page/error/soft_404``,
    ``recrawler/soft404/probes``, ``recrawler/soft404/probes/{answered,failed}``.
    """

    def __init__(
        self, crawler: Crawler, runtime: Runtime, extractor: ContentExtractor, wait_secs: float = 180.0
    ) -> None:
        self.crawler = crawler
        self.runtime = runtime
        self.extractor = extractor
        self.wait_secs = wait_secs
        self._logged: set[str] = set()
        #: each scope's not-found answer (None: nothing to compare with), once its probe answered
        self._answers: dict[str, asyncio.Future[NotFoundAnswer | None]] = {}
        self._token = secrets.token_hex(8)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Only for spiders that opt in, while ``RECRAWLER_SOFT404_ENABLED`` is on."""
        meta.require_opt_in(crawler)
        s = crawler.settings
        if not s.getbool("RECRAWLER_SOFT404_ENABLED"):
            raise NotConfigured("RECRAWLER_SOFT404_ENABLED is off")
        extractor = ContentExtractor(
            s.getlist("RECRAWLER_CONTENT_SELECTORS"), s.getlist("RECRAWLER_CONTENT_NOISE_SELECTORS")
        )
        return cls(crawler, runtime_of(crawler), extractor, s.getfloat("DOWNLOAD_TIMEOUT") or 180.0)

    async def process_start(self, start: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """Send the probe of each start request's scope ahead of it: answered before the pages
        come (nothing they wait on hangs behind them)."""
        async for out in start:
            if isinstance(out, Request) and urlsplit(out.url).scheme in ("http", "https"):
                _, probe = self._answer(out.url)
                if probe is not None:
                    yield probe
            yield out

    async def process_spider_output(
        self, response: Response, result: AsyncIterator[Any]
    ) -> AsyncIterator[Any]:
        """Drop a soft 404's Page (its miss staged) and the links found on it; send a scope's
        probe with its first page."""
        soft = False
        async for out in result:
            if isinstance(out, Page) and out.text and not out.error:
                answer, probe = self._answer(out.url)
                if probe is not None:
                    yield probe
                if await self._soft(out, await self._wait(answer)):
                    soft = True
                    continue
            if soft and isinstance(out, Request) and meta.is_page_request(out):
                continue
            yield out

    # -- the site's evidence ------------------------------------------------------------------------

    def _answer(self, url: str) -> tuple[asyncio.Future[NotFoundAnswer | None], Request | None]:
        """The future answer of *url*'s scope, and its probe when it is the scope's first page."""
        homes = getattr(self.crawler.spider, "recrawler_home_paths", ("/",))
        scope, probe_url = notfound.probe(url, homes, self._token)
        future = self._answers.get(scope)
        if future is not None:
            return future, None
        future = self._answers[scope] = asyncio.get_running_loop().create_future()
        if self.runtime.workers is not None:
            # a shared run's queue holds only what any worker can answer (a probe's answer is
            # this process's): nothing to compare with, pages are content
            future.set_result(None)
            return future, None
        self.runtime.counters.inc("recrawler/soft404/probes")
        probe = Request(
            probe_url,
            callback=self._probed,
            errback=self._probe_failed,
            cb_kwargs={"scope": scope},
            # before the pages: they wait for it
            priority=1000,
            dont_filter=True,
            meta={
                meta.ROLE: meta.ROLE_PROBE,
                meta.ENABLED: False,
                "handle_httpstatus_list": _PROBE_STATUSES,
                "dont_retry": True,
                meta.PROBE_SCOPE: scope,
            },
        )
        return future, probe

    def _settle(self, scope: str, answer: NotFoundAnswer | None) -> None:
        future = self._answers.get(scope)
        if future is not None and not future.done():
            future.set_result(answer)

    def _probed(self, response: Response, scope: str) -> None:
        """The probe's answer: the main text of the not-found page the site serves there."""
        self.runtime.counters.inc("recrawler/soft404/probes/answered")
        homes = getattr(self.crawler.spider, "recrawler_home_paths", ("/",))
        if not isinstance(response, TextResponse) or (
            response.request is not None
            and response.request.meta.get("redirect_urls")
            and notfound.home_redirect(
                _path(response.request.meta["redirect_urls"][0]), _path(response.url), homes
            )
        ):
            # no text, or the site sends what it does not have home: PageRedirectMiddleware's
            self._settle(scope, None)
            return
        try:
            content = self.extractor.extract(response.body, response_encoding(response))
        except ExtractionError:
            self._settle(scope, None)
            return
        # (after a redirect, the page the site sends there is its not-found page: judged as one)
        asked = response.request.meta.get("redirect_urls", [])[:1] if response.request is not None else []
        self._settle(scope, notfound.not_found_answer(content.text, response.url, *asked))

    def _probe_failed(self, failure: Failure) -> None:
        """A probe that failed (a 5xx, a timeout, robots.txt): nothing to compare pages with."""
        self.runtime.counters.inc("recrawler/soft404/probes/failed")
        request = getattr(failure, "request", None)
        scope = request.meta.get(meta.PROBE_SCOPE) if request is not None else None
        if scope is not None:
            self._settle(scope, None)

    async def _wait(self, future: asyncio.Future[NotFoundAnswer | None]) -> NotFoundAnswer | None:
        """The scope's answer, once its probe answered (None after ``DOWNLOAD_TIMEOUT``)."""
        if future.done():
            return future.result()
        try:
            return await asyncio.wait_for(asyncio.shield(future), self.wait_secs)
        except TimeoutError:
            return None

    # -- judging a page -----------------------------------------------------------------------------

    async def _soft(self, page: Page, answer: NotFoundAnswer | None) -> bool:
        if answer is None or notfound.not_found(page.text or "", page.url, answer, stored=True) is None:
            return False
        stored = await self._stored(page)
        shape = notfound.NOT_FOUND_TEXT if stored else notfound.NOT_FOUND_PAGE
        if shape not in self._logged:
            self._logged.add(shape)
            logger.warning(
                "soft 404 (%(shape)s): %(url)s answers 200 with the site's not-found page (%(title)r): "
                "counted as a miss, never as content; further soft 404s are only counted",
                {"shape": shape, "url": redact_url(page.url), "title": (page.title or "")[:80]},
                extra={"spider": self.crawler.spider},
            )
        staged = await stage_soft_miss(
            self.runtime, page.key, page.url, shape, error_if_unknown=not page.moved_from
        )
        for source in page.moved_from:
            # the pages a permanent redirect sent to a not-found page are the ones missing
            await stage_soft_miss(self.runtime, source, page.url, shape, error_if_unknown=staged != "staged")
        # and so are the others this run found moving there (their hops were not fetched again)
        await miss_moves(self.runtime, page.key, 404, soft=shape)
        return True

    async def _stored(self, page: Page) -> bool:
        """Whether *page* is stored (a read failure: judged as stored, its miss staged if it is)."""
        try:
            if page.record is Unread.UNREAD:
                # read here, kept on the item: ClassifyPipeline need not read it again
                page.record = await self.runtime.store.pages.get(page.key)
        except StateStoreError as exc:
            state_error(self.runtime, exc, "state read", page.url)
            return True
        return page.record is not None


def _path(url: str) -> str:
    return urlsplit(url).path or "/"


__all__ = ["SoftNotFoundMiddleware"]
