"""FrontierScheduler: Scrapy's scheduler, with a run's page requests waiting in the database."""

from __future__ import annotations

import asyncio
import logging
import pickle
import weakref
from collections import deque
from typing import TYPE_CHECKING, Any, Self

from scrapy.core.scheduler import Scheduler
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from scrapy.utils.job import job_dir
from scrapy.utils.misc import build_from_crawler, load_object
from scrapy.utils.request import request_from_dict

from recrawler import meta
from recrawler import signals as recrawler_signals
from recrawler.exceptions import ConfigurationError, StateStoreError, StateStoreLost
from recrawler.meta import is_page_request, request_key, spider_opted_in
from recrawler.queues import queue_of, request_dict
from recrawler.runtime import runtime_of
from recrawler.urls import KeyMaker

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.dupefilters import BaseDupeFilter
    from scrapy.spiders import Spider
    from twisted.internet.defer import Deferred

    from recrawler.queues import FrontierQueue
    from recrawler.runtime import Runtime
    from recrawler.state import PageRecord, Run

logger = logging.getLogger(__name__)

#: a smaller batch than RECRAWLER_FRONTIER_BATCH_SIZE is written once no page request came this long
_QUIET_SECS = 0.01
#: a queue other workers push to (RECRAWLER_WORKERS_ENABLED) is read again this long after a read
#: found it empty
_SHARED_POLL_SECS = 1.0


def _switched_on(crawler: Crawler) -> bool:
    return spider_opted_in(crawler.spider or crawler.spidercls) and crawler.settings.getbool(
        "RECRAWLER_FRONTIER_ENABLED"
    )


def frontier_enabled(crawler: Crawler | None) -> bool:
    """Whether *crawler*'s page requests wait in the database: its ``SCHEDULER`` is a
    FrontierScheduler, switched on for a spider that opted in."""
    if crawler is None or not _switched_on(crawler):
        return False
    try:
        cls = load_object(crawler.settings["SCHEDULER"])
    except (ImportError, ValueError, NameError, AttributeError):
        return False
    return isinstance(cls, type) and issubclass(cls, FrontierScheduler)


def wake(crawler: Crawler | None) -> None:
    """Have the engine look for requests (and go idle again) now: a read or a write it waited for
    (the frontier's, the unseen pages') is in. Scrapy offers nothing public for it (a scheduler's
    work is synchronous there); without it the engine would look again at its next heartbeat,
    5 seconds later."""
    engine = crawler.engine if crawler is not None else None
    slot = getattr(engine, "_slot", None)
    nextcall = getattr(slot, "nextcall", None)
    if nextcall is not None:
        nextcall.schedule()


def _a_further_file(request: Request) -> bool:
    """A sitemap file a listing named (not a start request): let out a few at once."""
    return meta.is_sitemap_request(request) and meta.SITEMAP_DEPTH in request.meta


def _takes(request: Request) -> bool:
    """A page request the run names (a sitemap's listing, a feed, a link): the frontier holds its
    key once. Start requests keep Scrapy's order; a ``dont_filter`` request (a retry, a re-fetch, a
    direct check) is never held to once per key; a redirect hop's target was claimed already."""
    return (
        is_page_request(request)
        and not request.dont_filter
        and not request.meta.get("is_start_request")
        and "redirect_urls" not in request.meta
    )


class FrontierScheduler(Scheduler):
    """Scrapy's scheduler (memory and disk queues, the duplicate filter, priorities) with the
    run's frontier in the database. The page requests a spider names (a sitemap's listing, feed
    entries, links), once the schedule let them through, are written to the ``frontier`` table in
    batches, once per page key and run, instead of waiting in memory. They come back
    ``RECRAWLER_FRONTIER_BATCH_SIZE`` at a time, highest priority first, into Scrapy's own queues
    whenever fewer than half a batch of them wait there: memory stays flat however long the
    listing is. Start requests, sitemaps, feeds, retries, redirect hops and direct checks take
    Scrapy's own path, as do every request of a spider that did not opt in and all of them with
    ``RECRAWLER_FRONTIER_ENABLED`` off. The workers of a shared run (``RECRAWLER_WORKERS_ENABLED``)
    share the queue (Redis): each reads what it has in flight at a time (``CONCURRENT_REQUESTS``),
    and a read that found the queue empty is tried again a second later, since another worker may
    have queued requests meanwhile.

    ``enqueue_request`` and ``next_request`` never touch the database: page requests are written
    a batch at a time (or what a callback yielded, once it stops coming) and read back by tasks on
    the store's own connection, off the reactor; the engine is woken when one is done.
    ``has_pending_requests`` stays true while the database may hold requests or a read or a write
    is under way, so the spider does not go idle before the frontier is drained. A batch that
    cannot be written waits in memory instead: no page is lost.

    The further sitemap files a listing names wait here too, ahead of every other request, and
    at most ``RECRAWLER_SITEMAP_CONCURRENCY`` of them are out and not yet read to their end
    (``_recrawler_listing_read``, set by ListingMiddleware, or Scrapy letting go of a failed one):
    each file read holds its body and its requests in flight, so memory stays flat however many
    files an index names.

    The frontier is a queue class (``RECRAWLER_QUEUE_CLASS``, ``recrawler.queues``): the run's
    database by default, or Redis.

    Settings: ``RECRAWLER_FRONTIER_ENABLED``, ``RECRAWLER_FRONTIER_BATCH_SIZE``,
    ``RECRAWLER_QUEUE_CLASS``, ``RECRAWLER_SITEMAP_CONCURRENCY``, ``RECRAWLER_WORKERS_ENABLED``,
    ``RECRAWLER_URL_DROP_PARAMS``, ``RECRAWLER_URL_KEEP_PARAMS``,
    and Scrapy's ``SCHEDULER_*``, ``DUPEFILTER_CLASS`` and ``JOBDIR``.
    Stats: ``recrawler/frontier/{queued,fed}``, ``recrawler/frontier/waiting_max``,
    ``recrawler/sitemap/pages`` (the due pages a sitemap named, once per key),
    ``recrawler/state/error/<Exception>``; Scrapy's ``scheduler/*`` for what reaches its queues.
    The checks of stored pages the run did not reach (``recrawler.signals.pages_to_check``, from
    the Reconciler once the spider is idle) are queued here too, in Scrapy's queues.

    Meta: reads ``_recrawler_listed`` and ``_recrawler_listing_read`` (set by ListingMiddleware),
    sets ``_recrawler_fed``.
    """

    def __init__(
        self,
        dupefilter: BaseDupeFilter,
        *args: Any,
        runtime: Runtime | None = None,
        queue: FrontierQueue | None = None,
        batch_size: int = 500,
        key_maker: KeyMaker | None = None,
        sitemap_concurrency: int = 2,
        shared: bool = False,
        concurrency: int = 16,
        **kwargs: Any,
    ) -> None:
        if batch_size < 1:
            raise ConfigurationError(f"RECRAWLER_FRONTIER_BATCH_SIZE: bad value {batch_size!r}")
        if sitemap_concurrency < 1:
            raise ConfigurationError(
                f"RECRAWLER_SITEMAP_CONCURRENCY: must be at least 1, got {sitemap_concurrency!r}"
            )
        super().__init__(dupefilter, *args, **kwargs)
        #: the run's owner; None: Scrapy's scheduler, nothing more
        self.runtime = runtime
        #: where the run's page requests wait (``RECRAWLER_QUEUE_CLASS``); None with the runtime
        self.queue = queue
        self.batch_size = batch_size
        #: fed requests taken a read at a time: a batch, or, from a queue other workers share,
        #: what this worker has in flight (``CONCURRENT_REQUESTS``), so the rest stays theirs too
        self.read_size = max(1, min(batch_size, concurrency)) if shared else batch_size
        self.key_maker = key_maker or KeyMaker()
        #: fed requests still in Scrapy's queues
        self.waiting = 0
        #: rows queued and not fed yet, as far as this process knows (0 once a read found none);
        #: unknown before the first read (a resumed run's rows): read once
        self._queued = 1
        #: writes that added rows so far (a read that found none is news only if none came in since)
        self._added = 0
        #: other workers push to the queue too (RECRAWLER_WORKERS_ENABLED): an empty read is
        #: only news until the next poll
        self.shared = shared
        self._poll: asyncio.TimerHandle | None = None
        #: page requests not written yet: those a sitemap named (True) and the rest (False),
        #: written apart so that what a sitemap adds is counted once per key
        self._unwritten: dict[bool, list[Request]] = {True: [], False: []}
        #: page requests taken so far, and the write of a smaller batch once they stop coming
        self._arrived = 0
        self._quiet: asyncio.Handle | None = None
        self._writes: set[asyncio.Task[None]] = set()
        self._reading: asyncio.Task[None] | None = None
        self._closed = False
        self.sitemap_concurrency = sitemap_concurrency
        #: further sitemap files not let out yet (at most RECRAWLER_SITEMAP_MAX_FILES)
        self._files: deque[Request] = deque()
        #: let out and not read to their end; a failed one leaves once Scrapy lets go of it
        self._open: weakref.WeakSet[Request] = weakref.WeakSet()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Scrapy's scheduler as ``Scheduler.from_crawler`` builds it, and the frontier's settings."""
        s = crawler.settings
        scheduler = cls(
            dupefilter=build_from_crawler(load_object(s["DUPEFILTER_CLASS"]), crawler),
            jobdir=job_dir(s),
            dqclass=load_object(s["SCHEDULER_DISK_QUEUE"]),
            mqclass=load_object(s["SCHEDULER_MEMORY_QUEUE"]),
            logunser=s.getbool("SCHEDULER_DEBUG"),
            stats=crawler.stats,
            pqclass=load_object(s["SCHEDULER_PRIORITY_QUEUE"]),
            crawler=crawler,
            runtime=runtime_of(crawler) if _switched_on(crawler) else None,
            queue=queue_of(crawler) if _switched_on(crawler) else None,
            batch_size=s.getint("RECRAWLER_FRONTIER_BATCH_SIZE"),
            sitemap_concurrency=s.getint("RECRAWLER_SITEMAP_CONCURRENCY"),
            shared=s.getbool("RECRAWLER_WORKERS_ENABLED"),
            concurrency=s.getint("CONCURRENT_REQUESTS"),
            key_maker=KeyMaker(
                s.getlist("RECRAWLER_URL_DROP_PARAMS"), s.getlist("RECRAWLER_URL_KEEP_PARAMS")
            ),
        )
        crawler.signals.connect(scheduler.pages_to_check, signal=recrawler_signals.pages_to_check)
        return scheduler

    def pages_to_check(self, requests: list[Request]) -> None:
        """Queue the checks of stored pages the run did not reach (an empty batch: none left);
        the engine looks again now."""
        if not self._closed:
            self._to_memory(requests)
        wake(self.crawler)

    def open(self, spider: Spider) -> Deferred[None] | None:
        """Scrapy's queues and duplicate filter; the frontier's rows are read once the run began."""
        self._closed = False
        return super().open(spider)

    def close(self, reason: str) -> Deferred[None] | None:
        """Let the writes and the read under way end (on the store, still open), then close as
        Scrapy's scheduler does. Requests not written yet are dropped with Scrapy's queues."""
        self._closed = True
        for timer in (self._quiet, self._poll):
            if timer is not None:
                timer.cancel()
        self._quiet = self._poll = None
        self._unwritten = {True: [], False: []}
        self._files.clear()
        tasks = [t for t in (*self._writes, self._reading) if t is not None and not t.done()]
        if not tasks:
            return super().close(reason)
        return deferred_from_coro(self._close(reason, tasks))

    async def _close(self, reason: str, tasks: list[asyncio.Task[None]]) -> None:
        await asyncio.gather(*tasks, return_exceptions=True)
        closed = super().close(reason)
        if closed is not None:
            await maybe_deferred_to_future(closed)

    def has_pending_requests(self) -> bool:
        """True while Scrapy's queues hold requests, and while the database may hold some or a
        read or write is under way."""
        if super().has_pending_requests():
            return True
        if self._files:
            if self._open:
                # asked when nothing is in flight: a file still open failed unread (its place is
                # free); the engine looks again now, not at its next heartbeat
                self._open = weakref.WeakSet()
                wake(self.crawler)
            return True
        rt = self.runtime
        if rt is None or rt.run is None or self._closed:
            return False
        return bool(
            self._unwritten[True]
            or self._unwritten[False]
            or self._writes
            or (self._reading is not None and not self._reading.done())
            or (self._queued and not rt.lease_lost)
        )

    def enqueue_request(self, request: Request) -> bool:
        """A page request the run names waits to be written to the frontier; every other request
        goes to Scrapy's queues (through its duplicate filter); a further sitemap file waits for
        its turn."""
        if _a_further_file(request) and not self._closed:
            if not request.dont_filter and self.df.request_seen(request):
                self.df.log(request, self.spider)
                return False
            self._files.append(request)
            return True
        rt = self.runtime
        if rt is None or rt.run is None or self._closed or not _takes(request):
            return super().enqueue_request(request)
        listed = bool(request.meta.pop(meta.LISTED, False))
        unwritten = self._unwritten[listed]
        unwritten.append(request)
        self._arrived += 1
        if len(unwritten) >= self.batch_size:
            self._write(rt.run, listed)
        elif self._quiet is None:
            self._quiet = asyncio.get_running_loop().call_later(
                _QUIET_SECS, self._write_when_quiet, self._arrived
            )
        return True

    def next_request(self) -> Request | None:
        """The next request of Scrapy's queues; below half a batch of fed requests there, the
        frontier's next batch is read (off the reactor). A waiting sitemap file comes first, if
        fewer than ``RECRAWLER_SITEMAP_CONCURRENCY`` are out and not read."""
        request = self._next_file() or super().next_request()
        if self.runtime is not None:
            if request is not None and request.meta.pop(meta.FED, False):
                self.waiting -= 1
            self._top_up()
        return request

    def _next_file(self) -> Request | None:
        if not self._files:
            return None
        for done in [r for r in self._open if r.meta.get(meta.LISTING_READ)]:
            self._open.discard(done)
        if len(self._open) >= self.sitemap_concurrency:
            return None
        request = self._files.popleft()
        self._open.add(request)
        return request

    # -- writing ---------------------------------------------------------------------------------

    def _write_when_quiet(self, arrived: int) -> None:
        """Write what waits once no page request came for ``_QUIET_SECS``: what a callback yields
        comes in over many turns of the event loop, and goes in one write (as a batch would)."""
        self._quiet = None
        if self._closed:
            return
        if self._arrived != arrived:
            self._quiet = asyncio.get_running_loop().call_later(
                _QUIET_SECS, self._write_when_quiet, self._arrived
            )
            return
        rt = self.runtime
        run = rt.run if rt is not None else None
        if run is not None:
            for listed in (True, False):
                if self._unwritten[listed]:
                    self._write(run, listed)

    def _write(self, run: Run, listed: bool) -> None:
        batch, self._unwritten[listed] = self._unwritten[listed], []
        rows: list[tuple[str, int, bytes]] = []
        written: list[Request] = []
        for r in batch:
            try:
                blob = pickle.dumps(request_dict(r, self.spider), protocol=pickle.HIGHEST_PROTOCOL)
            except (ValueError, TypeError, AttributeError, pickle.PicklingError):
                # a callback that is not a spider method, meta that does not serialise
                self._to_memory([r])
                continue
            rows.append((r.meta.get(meta.KEY) or request_key(r, self.key_maker), r.priority, blob))
            written.append(r)
        if rows:
            task = asyncio.ensure_future(self._add(run, rows, written, listed))
            self._writes.add(task)
            task.add_done_callback(self._writes.discard)

    async def _add(
        self, run: Run, rows: list[tuple[str, int, bytes]], batch: list[Request], listed: bool
    ) -> None:
        rt, queue = self.runtime, self.queue
        assert rt is not None
        assert queue is not None
        named = 0
        try:
            added, named = await queue.push(run, rows, listed=listed)
        except StateStoreError as exc:
            # never lose a page: the batch waits in Scrapy's queues instead
            self._state_error(exc, "could not queue requests in the frontier: %(exc)s")
            if not self._closed:
                self._to_memory(batch)
            added = 0
        else:
            self._queued += added
            self._added += bool(added)
            rt.counters.inc("recrawler/frontier/queued", added)
            if named:
                rt.counters.inc("recrawler/sitemap/pages", named)
        finally:
            task = asyncio.current_task()
            if task is not None:
                self._writes.discard(task)
        self._top_up()
        # nothing may be left to do: the engine looks again now, not at its next heartbeat
        wake(self.crawler)

    def _to_memory(self, requests: list[Request]) -> None:
        for request in requests:
            super().enqueue_request(request)

    # -- reading ---------------------------------------------------------------------------------

    def _top_up(self) -> None:
        """Below half a batch of fed requests in Scrapy's queues, read the next batch (unless a
        read is under way, or the database is known to hold none)."""
        rt = self.runtime
        run = rt.run if rt is not None else None
        if run is None or self._closed or self.waiting * 2 >= self.read_size:
            return
        if self._queued and (self._reading is None or self._reading.done()):
            # never on the reactor: a blocking read on a connection of its own waited for row
            # locks held by the store's open group transaction, which only the reactor can commit
            self._reading = asyncio.ensure_future(self._feed(run))

    async def _feed(self, run: Run) -> None:
        rt, queue = self.runtime, self.queue
        assert rt is not None
        assert queue is not None
        added = self._added
        try:
            # each request comes with its page's stored record (if the queue reads it), for its
            # meta: the conditional middleware and the pipelines need not read each page on its own
            taken = await queue.pop(run, self.read_size)
        except StateStoreError as exc:
            self._state_error(exc, "could not read the frontier: %(exc)s")
            # the rest of the run goes on without it (the next write reads again)
            self._queued = 0
            wake(self.crawler)
            return
        if self._closed:
            return
        if not taken:
            if added == self._added:
                # nothing queued now: wait for the next write (shared: or another worker's)
                self._queued = 0
                if self.shared and self._poll is None:
                    self._poll = asyncio.get_running_loop().call_later(_SHARED_POLL_SECS, self._poll_again)
            # an engine that waited for this read looks again now (and may go idle, or read
            # what a write added meanwhile)
            wake(self.crawler)
            return
        self._queued = max(self._queued - len(taken), 0) or 1
        requests = self._decode([blob for blob, _ in taken])
        for request, (_, record) in zip(requests, taken, strict=True):
            if queue.records and request.meta.get(meta.KEY):
                # (the frontier's key of a request is its meta's key)
                self._attach_record(request, record)
            request.meta[meta.FED] = True
            # the frontier holds a page key once per run: Scrapy's duplicate filter need not remember it
            request.dont_filter = True
            self.waiting += 1
            super().enqueue_request(request)
        rt.counters.inc("recrawler/frontier/fed", len(requests))
        rt.counters.max("recrawler/frontier/waiting_max", self.waiting)
        wake(self.crawler)

    def _poll_again(self) -> None:
        """Shared: read the queue again, another worker may have queued requests since."""
        self._poll = None
        if not self._closed and not self._queued:
            self._queued = 1
            self._top_up()

    def _attach_record(self, request: Request, record: PageRecord | None) -> None:
        """The page's stored record (None: none) rides on the fed request's meta."""
        request.meta[meta.RECORD] = record

    def _decode(self, blobs: list[bytes]) -> list[Request]:
        # our own rows, written by _write from Request.to_dict (as Scrapy's disk queues do)
        return [request_from_dict(pickle.loads(blob), spider=self.spider) for blob in blobs]  # noqa: S301

    def _state_error(self, exc: StateStoreError, message: str) -> None:
        rt = self.runtime
        assert rt is not None
        name = type(exc).__name__
        rt.counters.inc(f"recrawler/state/error/{name}")
        # a database lost mid-run was said once, by the store, when it noticed
        if not isinstance(exc, StateStoreLost) and rt.counters.first(f"frontier:{message}"):
            logger.error(message, {"exc": exc}, extra={"spider": self.spider})


__all__ = ["FrontierScheduler", "frontier_enabled", "request_dict", "wake"]
