"""FrontierMiddleware: a run's page requests wait in the database and reach Scrapy in bounded batches."""

from __future__ import annotations

import asyncio
import logging
import pickle
from typing import TYPE_CHECKING, Any, Self

from scrapy import Request, signals
from scrapy.exceptions import NotConfigured
from scrapy.utils.request import request_from_dict

from recrawler import meta
from recrawler.exceptions import ConfigurationError, StateStoreError
from recrawler.meta import is_page_request, is_sitemap_request, request_key
from recrawler.redact import redact_url
from recrawler.runtime import runtime_of
from recrawler.urls import KeyMaker

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from recrawler.runtime import Runtime
    from recrawler.state import Run

logger = logging.getLogger(__name__)


def _callback_name(spider: Any, func: Any) -> str | None:
    """The name of *spider*'s method *func* is bound to, when it is bound under its own name
    (then it is the name ``Request.to_dict`` finds); else None."""
    if getattr(func, "__self__", None) is not spider or not hasattr(func, "__func__"):
        return None
    found = getattr(spider, func.__name__, None)
    return func.__name__ if getattr(found, "__func__", None) is func.__func__ else None


def request_dict(request: Request, spider: Any) -> dict[str, Any]:
    """``request.to_dict(spider=spider)``, which for a callback bound to the spider searches
    every member of the spider (``inspect.getmembers``), for every request: a callback (or
    errback) that is the spider's method of its own name is named at once, and the rest of the
    dict is made as ``to_dict`` makes it. Anything else goes to ``to_dict`` itself."""
    names: list[str | None] = []
    for func in (request.callback, request.errback):
        if func is None or isinstance(func, str):
            names.append(func)
            continue
        name = _callback_name(spider, func)
        if name is None:
            return _stored(request.to_dict(spider=spider))
        names.append(name)
    d: dict[str, Any] = {
        "url": request.url,
        "callback": names[0],
        "errback": names[1],
        "headers": dict(request.headers),
    }
    for attr in request.attributes:
        d.setdefault(attr, getattr(request, attr))
    if type(request) is not Request:
        d["_class"] = request.__module__ + "." + request.__class__.__name__
    return _stored(d)


def _stored(d: dict[str, Any]) -> dict[str, Any]:
    """*d* as the frontier stores it: a Referer's credentials (the ``?token=`` of the sitemap that
    listed the page) are masked, never written to the database."""
    headers = d.get("headers") or {}
    for name in (b"Referer", "Referer"):
        values = headers.get(name)
        if values:
            headers[name] = [
                redact_url(v.decode("latin-1")).encode("latin-1") if isinstance(v, bytes) else redact_url(v)
                for v in values
            ]
    return d


class FrontierMiddleware:
    """Keeps the run's frontier on disk: page requests that callbacks yield (a sitemap's listing,
    feed entries, links), once the schedule let them through, go to the database in batches
    instead of Scrapy's in-memory scheduler, once per page key and run. They come back
    ``RECRAWLER_FRONTIER_BATCH_SIZE`` at a time, highest priority first: whenever fewer than half
    a batch of them wait in the scheduler, and when the spider goes idle (the Reconciler asks
    first, then checks unseen pages). Memory stays flat however long the listing is. Every read
    runs on the store's own connection, off the reactor: an idle spider stays open while one is
    under way, and the engine is woken when it is in.

    Settings: ``RECRAWLER_FRONTIER_ENABLED``, ``RECRAWLER_FRONTIER_BATCH_SIZE``,
    ``RECRAWLER_WORKERS_ENABLED`` (on: switched off, scrapy-redis holds the frontier),
    ``RECRAWLER_URL_DROP_PARAMS``, ``RECRAWLER_URL_KEEP_PARAMS``.
    Stats: ``recrawler/frontier/{queued,fed}``, ``recrawler/frontier/waiting_max``,
    ``recrawler/sitemap/pages`` (the due pages a sitemap named, once per key),
    ``recrawler/state/error/<Exception>``.
    Signals: listens to ``request_reached_downloader`` and ``request_dropped``.
    """

    def __init__(
        self, crawler: Crawler, runtime: Runtime, *, batch_size: int, key_maker: KeyMaker | None = None
    ) -> None:
        if batch_size < 1:
            raise ConfigurationError(f"RECRAWLER_FRONTIER_BATCH_SIZE: bad value {batch_size!r}")
        self.crawler = crawler
        self.runtime = runtime
        self.batch_size = batch_size
        self.key_maker = key_maker or KeyMaker()
        #: fed requests not yet in the downloader (waiting in Scrapy's scheduler)
        self.waiting = 0
        self._reading: asyncio.Future[None] | None = None
        #: rows queued and not fed yet, as far as this process knows (0 once a read found none);
        #: unknown before the first read (a resumed run's rows): read once
        self._queued = 1

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Enabled by ``RECRAWLER_FRONTIER_ENABLED``; registers itself as the run's frontier."""
        meta.require_opt_in(crawler)
        s = crawler.settings
        # switched off as configured, silently (Scrapy logs a NotConfigured with a message as a
        # WARNING, on every run): several workers share scrapy-redis's frontier instead
        if not s.getbool("RECRAWLER_FRONTIER_ENABLED") or s.getbool("RECRAWLER_WORKERS_ENABLED"):
            raise NotConfigured
        runtime = runtime_of(crawler)
        mw = cls(
            crawler,
            runtime,
            batch_size=s.getint("RECRAWLER_FRONTIER_BATCH_SIZE"),
            key_maker=KeyMaker(
                s.getlist("RECRAWLER_URL_DROP_PARAMS"), s.getlist("RECRAWLER_URL_KEEP_PARAMS")
            ),
        )
        runtime.frontier = mw
        crawler.signals.connect(mw.request_left_scheduler, signal=signals.request_reached_downloader)
        crawler.signals.connect(mw.request_left_scheduler, signal=signals.request_dropped)
        return mw

    async def process_spider_output(
        self, response: Response, result: AsyncIterator[Any]
    ) -> AsyncIterator[Any]:
        """Page requests go to the database; items and other requests pass through."""
        batch: list[Request] = []
        # a sitemap's pages: the frontier holds each key once, so what it adds is counted once
        listing = response.request is not None and is_sitemap_request(response.request)
        async for r in result:
            if isinstance(r, Request) and is_page_request(r) and not r.meta.get(meta.FED):
                batch.append(r)
                if len(batch) >= self.batch_size:
                    for kept in await self._queue(batch, listing):
                        yield kept
                    batch = []
                continue
            yield r
        if batch:
            for kept in await self._queue(batch, listing):
                yield kept

    async def _queue(self, batch: list[Request], listing: bool = False) -> list[Request]:
        """Write *batch* to the frontier; what cannot be written is returned to go out at once."""
        run = self.runtime.run
        if run is None:
            return batch
        rows: list[tuple[str, int, bytes]] = []
        kept: list[Request] = []
        spider = self.crawler.spider
        for r in batch:
            try:
                blob = pickle.dumps(request_dict(r, spider), protocol=pickle.HIGHEST_PROTOCOL)
            except (ValueError, TypeError, AttributeError, pickle.PicklingError):
                # a callback that is not a spider method, meta that does not serialise
                kept.append(r)
                continue
            rows.append((r.meta.get(meta.KEY) or request_key(r, self.key_maker), r.priority, blob))
        try:
            added = await self.runtime.store.frontier_add(run, rows)
        except StateStoreError as exc:
            # never lose a page: the batch goes to Scrapy's scheduler as it would have
            self.runtime.counters.inc(f"recrawler/state/error/{type(exc).__name__}")
            logger.error("could not queue requests in the frontier: %(exc)s", {"exc": exc})
            return batch
        self._queued += added
        self.runtime.counters.inc("recrawler/frontier/queued", added)
        if listing:
            self.runtime.counters.inc("recrawler/sitemap/pages", added)
        self._top_up()
        return kept

    def request_left_scheduler(self, request: Request) -> None:
        """A fed request reached the downloader (or was dropped): top up below half a batch."""
        if request.meta.pop(meta.FED, False):
            self.waiting -= 1
            self._top_up()

    def _top_up(self) -> None:
        if (
            self.waiting * 2 < self.batch_size
            and self._queued
            and (self._reading is None or self._reading.done())
        ):
            run = self.runtime.run
            if run is not None:
                self._reading = asyncio.ensure_future(self._feed(run))

    async def _feed(self, run: Run) -> None:
        store = self.runtime.store
        try:
            requests = self._decode(await store.frontier_next(run, self.batch_size))
            keys = [str(r.meta[meta.KEY]) for r in requests if r.meta.get(meta.KEY)]
            # the batch's stored records in one round trip, each on its request's meta:
            # ConditionalRequestMiddleware and the pipelines need not read each page on its own
            records = await store.records(keys) if keys else {}
        except StateStoreError as exc:
            self.runtime.counters.inc(f"recrawler/state/error/{type(exc).__name__}")
            logger.error("could not read the frontier: %(exc)s", {"exc": exc})
            # the rest of the run goes on without it (the next write reads again)
            self._queued = 0
            self.runtime.wake()
            return
        for request in requests:
            if request.meta.get(meta.KEY):
                request.meta[meta.RECORD] = records.get(str(request.meta[meta.KEY]))
        self._crawl(requests)

    def _decode(self, blobs: list[bytes]) -> list[Request]:
        spider = self.crawler.spider
        # our own rows, written by _queue from Request.to_dict (as Scrapy's disk queues do)
        return [request_from_dict(pickle.loads(blob), spider=spider) for blob in blobs]  # noqa: S301

    def _crawl(self, requests: list[Request]) -> None:
        engine = self.crawler.engine
        if not requests:
            # nothing queued now: wait for the next write; an idle spider that waited for this
            # read looks again now, not at the engine's next heartbeat
            self._queued = 0
            self.runtime.wake()
            return
        if engine is None:
            return
        self._queued = max(self._queued - len(requests), 0) or 1
        for request in requests:
            request.meta[meta.FED] = True
            # the frontier holds a page key once per run: Scrapy's duplicate filter need not remember it
            request.dont_filter = True
            self.waiting += 1
            engine.crawl(request)
        self.runtime.counters.inc("recrawler/frontier/fed", len(requests))
        self.runtime.counters.max("recrawler/frontier/waiting_max", self.waiting)

    def idle(self) -> bool:
        """On ``spider_idle``: True while the frontier may still hold requests (a read is started,
        or one is under way); False once a read found it empty and nothing was queued since.

        The read never runs on the reactor: a blocking read on a connection of its own waited for
        row locks held by the store's open group transaction, which only the reactor can commit.
        """
        run = self.runtime.run
        if run is None:
            return False
        if self._reading is not None and not self._reading.done():
            return True
        if not self._queued:
            return False
        self._reading = asyncio.ensure_future(self._feed(run))
        return True


__all__ = ["FrontierMiddleware"]
