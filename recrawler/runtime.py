"""The owner of one crawl's recrawler state: the store, the run and its lease, counters, policies."""

from __future__ import annotations

import asyncio
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, Self, TypeVar

from scrapy import signals
from scrapy.exceptions import CloseSpider

from recrawler import membership, meta
from recrawler import signals as recrawler_signals
from recrawler.auditor import Auditor
from recrawler.counters import RunCounters
from recrawler.cpu import CpuPool
from recrawler.detect.boilerplate import PAGE_BLOCKS
from recrawler.exceptions import (
    ConfigurationError,
    RunRefused,
    SchemaVersionError,
    StateStoreError,
    StateStoreLost,
)
from recrawler.gctuning import GcTuning
from recrawler.intervals import SchedulePolicy, parse_audit_sample
from recrawler.learning import NoiseRegistry
from recrawler.outcome import EXIT_BUSY, EXIT_CONFIG, EXIT_HELD, EXIT_STATE
from recrawler.redact import redact_text, redact_url
from recrawler.state import store_from_uri, utcnow

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy.crawler import Crawler

    from recrawler.intervals import Revisit
    from recrawler.items import Page, PageStatus
    from recrawler.kb.embedders import Embedder
    from recrawler.membership import WorkerActivity
    from recrawler.shared_run import SharedRun
    from recrawler.state import Run, StateStore
    from recrawler.state.records import RevisitUpdate

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
_P = ParamSpec("_P")

#: close reasons of a run refused when the spider opens
CLOSE_BUSY, CLOSE_HELD, CLOSE_STATE = "recrawler_busy", "recrawler_held", "recrawler_state_error"


class Listing(Protocol):
    """The sitemap files not requested yet, as the closing work sees them (ListingMiddleware
    registers itself)."""

    def idle(self) -> bool:
        """On ``spider_idle``: send the next requests; False when none wait."""


class Revisits(Protocol):
    """The schedule's part in a page's write (ScheduleMiddleware registers itself)."""

    def revisit_update(self, page: Page, status: PageStatus) -> RevisitUpdate | None:
        """The page's next revisit state, to write with the page; None: nothing to store."""

    async def checked(self, page: Page, status: PageStatus, before: Revisit | None) -> None:
        """After the write: what the page's previous revisit state tells (the lastmod audit)."""


class Runtime:
    """One per crawl, placed by the add-on: owns the state store (opened when the spider opens,
    closed when the engine stops, after every close handler), the run and its lease, the run's
    counters and the policy objects (schedule, noise, audit, embedder). Components find it with
    ``crawler.get_extension(Runtime)``.

    A database that cannot be opened, another live run of the site or a held run awaiting a
    decision closes the spider before its first request (close reasons ``recrawler_state_error``,
    ``recrawler_busy``, ``recrawler_held``), with one ERROR line and the matching exit code.

    Settings: ``RECRAWLER_DB_URI``, ``RECRAWLER_LEASE_SECS``, ``RECRAWLER_AUDIT_SAMPLE``,
    ``RECRAWLER_AUDIT_DISTRUST_AFTER``, ``RECRAWLER_AUDIT_TRUST_AFTER``, ``RECRAWLER_INDEX_ENABLED``,
    ``RECRAWLER_EMBEDDER*``, ``RECRAWLER_MAX_INTERVAL_SECS`` (the audit's share is per bound),
    ``RECRAWLER_PUBLISH``, ``RECRAWLER_DRY_RUN``, ``RECRAWLER_CPU_*``, ``RECRAWLER_GC_THRESHOLD``,
    ``RECRAWLER_WORKERS_ENABLED``, ``RECRAWLER_REPORT_FILE`` (a refused run's report),
    Signals: listens to ``spider_opened`` and ``engine_stopped``; with ``RECRAWLER_WORKERS_ENABLED``
    its ``WorkerActivity`` (``recrawler.membership``) listens to ``spider_idle`` and
    ``request_reached_downloader``.
    """

    def __init__(
        self,
        crawler: Crawler,
        store: StateStore,
        *,
        schedule: SchedulePolicy,
        noise: NoiseRegistry,
        audit_sample: float = 0.0,
        distrust_after: int = 1,
        trust_after: int = 10,
        lease_secs: float = 60.0,
        cpu_threads: int = 0,
        cpu_pool: CpuPool | None = None,
        gc_tuning: GcTuning | None = None,
    ) -> None:
        if lease_secs <= 0:
            raise ConfigurationError(f"RECRAWLER_LEASE_SECS: bad value {lease_secs!r}")
        if cpu_threads < 0:
            raise ConfigurationError(f"RECRAWLER_CPU_THREADS: bad value {cpu_threads!r}")
        #: threads for per-page CPU work (extraction, fingerprints, chunking); 0: on the reactor
        self.cpu_threads = cpu_threads
        self._cpu: ThreadPoolExecutor | None = None
        #: worker processes for per-page CPU work (``RECRAWLER_CPU_PROCESSES``; 0: none)
        self.cpu_pool = cpu_pool or CpuPool(0, selectors=[], noise_selectors=[], chunking=None)
        #: the garbage collector's settings for the run (``RECRAWLER_GC_THRESHOLD``)
        self.gc_tuning = gc_tuning or GcTuning(0)
        self.crawler = crawler
        self.store = store
        self.counters = RunCounters(crawler.stats)
        self.cpu_pool.counters = self.counters
        #: the sitemap files waiting to be requested (set by ListingMiddleware)
        self.listing: Listing | None = None
        #: each checked page's next revisit, written with the page (set by ScheduleMiddleware)
        self.revisits: Revisits | None = None
        #: the keys of this run's redirect targets that many pages were lent (soft 404s: an answer
        #: served from one is never a page's content; kept by PageRedirectMiddleware)
        self.shared_targets: set[str] = set()
        self.schedule = schedule
        self.noise = noise
        self.auditor = Auditor(
            store.host_trust,
            store.schedule,
            self.counters,
            sample=audit_sample,
            distrust_after=distrust_after,
            trust_after=trust_after,
            clock=schedule.now,
            bound_secs=schedule.default_bound,
        )
        self.lease_secs = lease_secs
        self._embedder: Embedder | None = None
        self.run: Run | None = None
        #: why the run could not begin (the spider was closed before its first request)
        self.failure: BaseException | None = None
        self.lease_lost = False
        #: a worker's lost leader, until membership reports it with ``run_failed`` (the Reconciler
        #: decides the exit code: ``Reconciler.exit_code``)
        self.exit_code: int | None = None
        #: the summary line and the level it was logged at; set by the Reconciler
        self.summary: tuple[int, str] | None = None
        self._opened = asyncio.Event()
        self._heartbeat: asyncio.Task[None] | None = None
        self._closed = False
        #: refusal and failure reasons already logged this run (each logged once, then counted)
        self._refusals_logged: set[str] = set()
        #: with RECRAWLER_WORKERS_ENABLED: this process's part in a run shared with other workers
        self.workers: SharedRun | None = None
        #: with RECRAWLER_WORKERS_ENABLED: this worker's idle and busy reports to the others
        self.activity: WorkerActivity | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Build the store (not opened yet) and the policies from the settings."""
        meta.require_opt_in(crawler)
        s = crawler.settings
        uri = s.get("RECRAWLER_DB_URI")
        if not uri:
            raise ConfigurationError(
                "RECRAWLER_DB_URI: empty; set a database URI such as sqlite:///recrawler.db"
            )
        runtime = cls(
            crawler,
            store_from_uri(str(uri), s, blocks=PAGE_BLOCKS),
            schedule=SchedulePolicy.from_settings(s),
            noise=NoiseRegistry.from_settings(s),
            audit_sample=parse_audit_sample(s.get("RECRAWLER_AUDIT_SAMPLE")),
            distrust_after=s.getint("RECRAWLER_AUDIT_DISTRUST_AFTER"),
            trust_after=s.getint("RECRAWLER_AUDIT_TRUST_AFTER"),
            lease_secs=s.getfloat("RECRAWLER_LEASE_SECS"),
            cpu_threads=s.getint("RECRAWLER_CPU_THREADS"),
            cpu_pool=CpuPool.from_settings(s),
            gc_tuning=GcTuning(s.getint("RECRAWLER_GC_THRESHOLD")),
        )
        if s.getbool("RECRAWLER_INDEX_ENABLED"):
            # a bad RECRAWLER_EMBEDDER stops the crawl before it starts
            embedder = runtime.embedder
            if s.getbool("RECRAWLER_CPU_EMBED") and not s.getbool("RECRAWLER_DRY_RUN"):
                runtime.cpu_pool.embed_with(embedder)
        crawler.signals.connect(runtime.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(runtime.engine_stopped, signal=signals.engine_stopped)
        if s.getbool("RECRAWLER_WORKERS_ENABLED"):
            from recrawler.membership import WorkerActivity
            from recrawler.shared_run import SharedRun

            runtime.workers = SharedRun.from_crawler(crawler)
            # held here: the signals keep a weak reference to a handler's object
            runtime.activity = activity = WorkerActivity(runtime, runtime.workers)
            crawler.signals.connect(activity.spider_idle, signal=signals.spider_idle)
            crawler.signals.connect(
                activity.request_reached_downloader, signal=signals.request_reached_downloader
            )
        return runtime

    def first(self, what: str) -> bool:
        """True the first time *what* happens this run: a reason logged once, then only counted."""
        if what in self._refusals_logged:
            return False
        self._refusals_logged.add(what)
        return True

    def refused(self, url: str, reason: str, source: str) -> None:
        """Count a URL the policy refused, from any source; the first of each reason this run is
        logged (credentials never)."""
        self.counters.inc("recrawler/url/refused")
        self.counters.inc(f"recrawler/url/refused/{reason}")
        if reason not in self._refusals_logged:
            self._refusals_logged.add(reason)
            logger.warning(
                "refused %(source)s URL (%(reason)s): %(url)s; further %(reason)s URLs are only counted",
                {"source": source, "reason": reason, "url": redact_url(url)[:300]},
                extra={"spider": self.crawler.spider},
            )

    @property
    def embedder(self) -> Embedder:
        """The run's embedder, built once from ``RECRAWLER_EMBEDDER*``."""
        if self._embedder is None:
            from recrawler.kb.embedders import embedder_from_settings

            self._embedder = embedder_from_settings(self.crawler.settings)
        return self._embedder

    def wake(self) -> None:
        """Have the engine look for work (and go idle again) now: a read or a write it waited
        for (the frontier's, the unseen pages') is in. Scrapy offers nothing public for it;
        without it the engine would look again at its next heartbeat, 5 seconds later."""
        slot = getattr(self.crawler.engine, "_slot", None)
        nextcall = getattr(slot, "nextcall", None)
        if nextcall is not None:
            nextcall.schedule()

    async def offload(self, func: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """Run pure per-page CPU work on the CPU threads (``RECRAWLER_CPU_THREADS``), or inline.

        lxml's parser and hashlib release the GIL while they work, so the reactor keeps
        downloading meanwhile; the functions given must not touch the reactor or the store.
        """
        if not self.cpu_threads:
            return func(*args, **kwargs)
        if self._cpu is None:
            self._cpu = ThreadPoolExecutor(max_workers=self.cpu_threads, thread_name_prefix="recrawler-cpu")
        return await asyncio.wrap_future(self._cpu.submit(func, *args, **kwargs))

    async def spider_opened(self) -> None:
        """Open the store, begin the run (taking the site's lease), load what the policies need."""
        # frozen before the workers fork: they inherit the frozen generation, and their pages of
        # memory stay shared with this process
        self.gc_tuning.start()
        # forked before the store's thread (or any other of the run's) starts
        self.cpu_pool.start()
        try:
            await self.store.open()
            if self.workers is not None and not await asyncio.to_thread(self.workers.elect):
                self.run = await membership.join(self)
            else:
                spider, site, kwargs = self._run_args()
                self.run = await self.store.runs.begin_run(spider, site, utcnow(), **kwargs)
                if self.workers is not None:
                    await asyncio.to_thread(self.workers.publish_run, self.run)
            if self.workers is not None:
                await asyncio.to_thread(self.workers.beat)
            await self.noise.load(self.store.history)
            if self.run.site is not None:
                # the site's noise model before its first page: a CPU worker fingerprints (and
                # chunks) the first pages too, not only those after the first was classified
                await self.noise.ensure(self.run.site, self.store.history)
            # trust and the audit sample, before the first request is decided
            await self.auditor.ready(self.run)
        except (RunRefused, StateStoreError, ConfigurationError) as exc:
            await self._refuse(exc)
            self._report_refusal(exc)
            raise CloseSpider(self._close_reason(exc)) from exc
        finally:
            self._opened.set()
        logger.info(
            "recrawler run %(run)d on %(uri)s (site: %(site)s)",
            {"run": self.run.id, "uri": redact_url(self.store.uri), "site": self.run.site or "-"},
            extra={"spider": self.crawler.spider},
        )
        self._heartbeat = asyncio.ensure_future(self._beat(self.run))

    async def _refuse(self, exc: BaseException) -> None:
        self.failure = exc
        # the Reconciler decides the run's exit code: the refusal is a cause it is told of
        await self.crawler.signals.send_catch_log_async(
            recrawler_signals.run_failed, cause=self._close_reason(exc), exit_code=_exit_code_for(exc)
        )
        if isinstance(exc, StateStoreError):
            self.counters.state_error(exc)
        logger.error(
            "recrawler: %(exc)s", {"exc": redact_text(str(exc))}, extra={"spider": self.crawler.spider}
        )
        # a refused run never reaches engine_stopped: its workers stop here, not at interpreter
        # exit (where Python 3.11's executor shutdown can race and print a traceback)
        self._stop_cpu()
        await self._close_store()

    def _report_refusal(self, exc: BaseException) -> None:
        """A refused run leaves no run row: ``RECRAWLER_REPORT_FILE`` says what happened instead
        (a Scrapyd job shows as finished either way)."""
        path = self.crawler.settings.get("RECRAWLER_REPORT_FILE")
        if not path:
            return
        reason = self._close_reason(exc)
        refusal = {
            "run_id": None,
            "finish_reason": reason,
            "outcome": {"state": "refused", "reasons": [reason], "exit_code": _exit_code_for(exc)},
            "error": redact_text(str(exc)),
        }
        try:
            Path(path).write_text(json.dumps(refusal, indent=2) + "\n", encoding="utf-8")
        except OSError as exc_:
            logger.error("could not write the run report %(path)s: %(exc)s", {"path": path, "exc": exc_})

    @property
    def leads(self) -> bool:
        """True for the process that does the run's listing and closing work (always, alone)."""
        return self.workers is None or self.workers.leader

    @staticmethod
    def _close_reason(exc: BaseException) -> str:
        if isinstance(exc, RunRefused):
            return CLOSE_HELD if exc.held else CLOSE_BUSY
        return CLOSE_STATE

    def _run_args(self) -> tuple[str, str | None, dict[str, Any]]:
        from recrawler.state.sqlite import lease_holder

        spider = self.crawler.spider
        settings = self.crawler.settings
        embedder = None
        if settings.getbool("RECRAWLER_INDEX_ENABLED"):
            base_url = settings.get("RECRAWLER_EMBEDDER_BASE_URL")
            # what search and `runs approve` need to rebuild the same embedder (never a key or password)
            embedder = json.dumps(
                {
                    "id": self.embedder.id,
                    "spec": settings.get("RECRAWLER_EMBEDDER"),
                    "base_url": redact_url(str(base_url)) if base_url else base_url,
                }
            )
        kwargs: dict[str, Any] = {
            "embedder": embedder,
            "publish_each_page": (
                embedder is not None
                and settings.get("RECRAWLER_PUBLISH") == "page"
                and not settings.getbool("RECRAWLER_DRY_RUN")
            ),
            "holder": lease_holder(),
            "lease_secs": self.lease_secs,
        }
        return getattr(spider, "name", "?"), getattr(spider, "recrawler_site", None), kwargs

    async def started(self) -> Run | None:
        """Wait until the spider has opened; the run, or None if it could not begin."""
        await self._opened.wait()
        return self.run

    async def _beat(self, run: Run) -> None:
        """Renew the site's lease every quarter of ``RECRAWLER_LEASE_SECS``; close the spider if a
        later run took it over (this process stalled longer than the lease)."""
        while True:
            await asyncio.sleep(min(self.lease_secs, self._workers_ttl()) / 4)
            if self.workers is not None:
                await asyncio.to_thread(self.workers.beat)
                if not self.workers.leader:
                    # this worker's work so far, counted by the leader should this process die
                    await asyncio.to_thread(self.workers.report, membership.worker_counts(self))
                    continue
            try:
                held = await self.store.runs.heartbeat(run)
            except StateStoreError as exc:
                # a database lost mid-run was said once, by the store, when it noticed
                level = logging.DEBUG if isinstance(exc, StateStoreLost) else logging.ERROR
                logger.log(level, "lease heartbeat failed: %(exc)s", {"exc": exc})
                continue
            if not held:
                self.lease_lost = True
                logger.error(
                    "run %(run)d lost the lease of %(site)s to another run: stopping",
                    {"run": run.id, "site": run.site},
                )
                engine = self.crawler.engine
                if engine is not None:
                    await engine.close_spider_async(reason="recrawler_lease_lost")
                return

    def _workers_ttl(self) -> float:
        return self.workers.ttl_secs if self.workers is not None else self.lease_secs

    def stop_heartbeat(self) -> None:
        """Stop renewing the lease (the closing work releases it with the run)."""
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            self._heartbeat = None

    async def engine_stopped(self) -> None:
        """Close the store: every close handler has run by now."""
        self.stop_heartbeat()
        self._stop_cpu()
        await self._close_store()

    def _stop_cpu(self) -> None:
        # the workers and threads the run started, and the collector tuned for it: on every way
        # out (engine_stopped, and a refused run, which never reaches it)
        if self._cpu is not None:
            self._cpu.shutdown(wait=False)
            self._cpu = None
        self.cpu_pool.shutdown()
        self.gc_tuning.stop()

    async def _close_store(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self.store.close()
        except StateStoreError as exc:
            logger.error("closing the state store failed: %(exc)s", {"exc": exc})


def _exit_code_for(exc: BaseException) -> int:
    if isinstance(exc, ConfigurationError):
        return EXIT_CONFIG
    if isinstance(exc, RunRefused):
        return EXIT_HELD if exc.held else EXIT_BUSY
    if isinstance(exc, SchemaVersionError | StateStoreError):
        return EXIT_STATE
    return EXIT_STATE


def runtime_of(crawler: Crawler) -> Runtime:
    """The crawl's Runtime (its components are built after the extensions, so it exists)."""
    runtime = crawler.get_extension(Runtime)
    if runtime is None:
        msg = "EXTENSIONS: recrawler.runtime.Runtime is not enabled (enable recrawler.addon.RecrawlerAddon)"
        raise ConfigurationError(msg)
    return runtime


def find_runtime(crawler: Crawler | None) -> Runtime | None:
    """The crawl's Runtime, or None (no crawler, extensions not built yet, or not enabled)."""
    if crawler is None or getattr(crawler, "extensions", None) is None:
        return None
    return crawler.get_extension(Runtime)


__all__ = [
    "CLOSE_BUSY",
    "CLOSE_HELD",
    "CLOSE_STATE",
    "Listing",
    "Revisits",
    "Runtime",
    "find_runtime",
    "runtime_of",
]
