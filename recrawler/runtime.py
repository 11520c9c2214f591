"""The owner of one crawl's recrawler state: the store, the run and its lease, counters, policies."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, Self, TypeVar

from scrapy import signals
from scrapy.exceptions import CloseSpider

from recrawler import membership, meta
from recrawler import signals as recrawler_signals
from recrawler.auditor import Auditor
from recrawler.counters import RunCounters
from recrawler.cpu.work import CpuWork
from recrawler.detect.boilerplate import PAGE_BLOCKS
from recrawler.exceptions import (
    ConfigurationError,
    RunRefused,
    SchemaVersionError,
    StateStoreError,
)
from recrawler.intervals import SchedulePolicy
from recrawler.kb.embedders import RunEmbedder
from recrawler.learning import NoiseRegistry
from recrawler.lease import Lease
from recrawler.outcome import EXIT_BUSY, EXIT_CONFIG, EXIT_HELD, EXIT_STATE
from recrawler.redact import redact_text, redact_url
from recrawler.state import store_from_uri, utcnow

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy.crawler import Crawler

    from recrawler.cpu import CpuPool
    from recrawler.shared_run import SharedRun
    from recrawler.state import Run, StateStore

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
_C = TypeVar("_C")
_P = ParamSpec("_P")

#: close reasons of a run refused when the spider opens
CLOSE_BUSY, CLOSE_HELD, CLOSE_STATE = "recrawler_busy", "recrawler_held", "recrawler_state_error"


class Runtime:
    """One per crawl, placed by the add-on: owns the state store (opened when the spider opens,
    closed when the engine stops, after every close handler), the run and its lease, the run's
    counters and where per-page CPU work runs. Components find it with
    ``crawler.get_extension(Runtime)`` (:func:`runtime_of`). The run's shared collaborators are
    extensions of their own, found by class (:func:`component_of`): the schedule policy, the noise
    registry and the auditor, which the Runtime makes ready when the run begins, and the embedder.

    A database that cannot be opened, another live run of the site or a held run awaiting a
    decision closes the spider before its first request (close reasons ``recrawler_state_error``,
    ``recrawler_busy``, ``recrawler_held``), with one ERROR line and the matching exit code.

    Settings: ``RECRAWLER_DB_URI``, ``RECRAWLER_LEASE_SECS``, ``RECRAWLER_INDEX_ENABLED``,
    ``RECRAWLER_EMBEDDER*`` (the run row names its embedder), ``RECRAWLER_PUBLISH``,
    ``RECRAWLER_DRY_RUN``, ``RECRAWLER_CPU_*``, ``RECRAWLER_GC_THRESHOLD``,
    ``RECRAWLER_WORKERS_ENABLED``, ``RECRAWLER_REPORT_FILE`` (a refused run's report).
    Signals: listens to ``spider_opened`` and ``engine_stopped``; with ``RECRAWLER_WORKERS_ENABLED``
    a ``WorkerActivity`` (``recrawler.membership``, held by the signals) listens to ``spider_idle``
    and ``request_reached_downloader``.
    """

    def __init__(
        self, crawler: Crawler, store: StateStore, *, lease_secs: float = 60.0, cpu: CpuWork | None = None
    ) -> None:
        #: the run's hold on its site (``RECRAWLER_LEASE_SECS``)
        self.lease = Lease(lease_secs)
        #: where per-page CPU work runs (``RECRAWLER_CPU_*``, ``RECRAWLER_GC_THRESHOLD``)
        self.cpu = cpu or CpuWork()
        self.crawler = crawler
        self.store = store
        self.counters = RunCounters(crawler.stats)
        self.cpu.pool.counters = self.counters
        self.run: Run | None = None
        self._opened = asyncio.Event()
        #: with RECRAWLER_WORKERS_ENABLED: this process's part in a run shared with other workers
        self.workers: SharedRun | None = None

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
            lease_secs=s.getfloat("RECRAWLER_LEASE_SECS"),
            cpu=CpuWork.from_settings(s),
        )
        crawler.signals.connect(runtime.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(runtime.engine_stopped, signal=signals.engine_stopped)
        if s.getbool("RECRAWLER_WORKERS_ENABLED"):
            from recrawler.membership import WorkerActivity
            from recrawler.shared_run import SharedRun

            runtime.workers = shared = SharedRun.from_crawler(crawler)
            activity = WorkerActivity(crawler, shared, runtime.store, runtime.counters)
            # held by the signals themselves (weak=False): nothing else keeps the reports alive
            crawler.signals.connect(activity.spider_idle, signal=signals.spider_idle, weak=False)
            crawler.signals.connect(
                activity.request_reached_downloader, signal=signals.request_reached_downloader, weak=False
            )
        return runtime

    async def offload(self, func: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """Run pure per-page CPU work on the CPU threads (``RECRAWLER_CPU_THREADS``), or inline."""
        return await self.cpu.offload(func, *args, **kwargs)

    @property
    def cpu_pool(self) -> CpuPool:
        """The run's worker processes for per-page CPU work (``RECRAWLER_CPU_PROCESSES``)."""
        return self.cpu.pool

    @property
    def cpu_threads(self) -> int:
        """The run's threads for per-page CPU work (0: on the reactor)."""
        return self.cpu.threads

    @property
    def lease_lost(self) -> bool:
        """A later run took the site's lease over."""
        return self.lease.lost

    async def spider_opened(self) -> None:
        """Open the store, begin the run (taking the site's lease), load what the policies need."""
        crawler = self.crawler
        embedding = crawler.get_extension(RunEmbedder)
        if embedding is not None and embedding.in_workers:
            self.cpu.pool.embed_with(embedding.embedder)
        # forked before the store's thread (or any other of the run's) starts, with the
        # collector's generation frozen first
        self.cpu.start()
        try:
            noise, auditor = component_of(crawler, NoiseRegistry), component_of(crawler, Auditor)
            policy = component_of(crawler, SchedulePolicy)
            auditor.bind(self.store.host_trust, self.store.schedule, self.counters, policy)
            await self.store.open()
            if self.workers is not None and not await asyncio.to_thread(self.workers.elect):
                self.run = await membership.join(self.workers, auditor, crawler)
            else:
                spider, site, kwargs = self._run_args()
                self.run = await self.store.runs.begin_run(spider, site, utcnow(), **kwargs)
                if self.workers is not None:
                    await asyncio.to_thread(self.workers.publish_run, self.run)
            if self.workers is not None:
                await asyncio.to_thread(self.workers.beat)
            if self.workers is not None:
                self.workers.joined = True
            await noise.load(self.store.history)
            if self.run.site is not None:
                # the site's noise model before its first page: a CPU worker fingerprints (and
                # chunks) the first pages too, not only those after the first was classified
                await noise.ensure(self.run.site, self.store.history)
            # trust and the audit sample, before the first request is decided
            await auditor.ready(self.run)
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
        self.lease.start(
            self.crawler,
            self.store.runs,
            self.run,
            counters=self.counters,
            workers=self.workers,
            lifecycle=self.store,
        )

    async def _refuse(self, exc: BaseException) -> None:
        # the Reconciler decides the run's exit code: the refusal is a cause it is told of
        await self.crawler.signals.send_catch_log_async(
            recrawler_signals.run_failed,
            cause=self._close_reason(exc),
            exit_code=_exit_code_for(exc),
            error=exc,
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
        embedding = self.crawler.get_extension(RunEmbedder)
        if embedding is not None:
            base_url = settings.get("RECRAWLER_EMBEDDER_BASE_URL")
            # what search and `runs approve` need to rebuild the same embedder (never a key or password)
            embedder = json.dumps(
                {
                    "id": embedding.embedder.id,
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
            "lease_secs": self.lease.secs,
        }
        return getattr(spider, "name", "?"), getattr(spider, "recrawler_site", None), kwargs

    async def started(self) -> Run | None:
        """Wait until the spider has opened; the run, or None if it could not begin."""
        await self._opened.wait()
        return self.run

    def stop_heartbeat(self) -> None:
        """Stop renewing the lease (the closing work releases it with the run)."""
        self.lease.stop()

    async def engine_stopped(self) -> None:
        """Close the store: every close handler has run by now."""
        self.stop_heartbeat()
        self._stop_cpu()
        await self._close_store()

    def _stop_cpu(self) -> None:
        # the workers and threads the run started, and the collector tuned for it: on every way
        # out (engine_stopped, and a refused run, which never reaches it)
        self.cpu.stop()

    async def _close_store(self) -> None:
        # a refused run's store was closed already: closing is idempotent
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


def component_of(crawler: Crawler, cls: type[_C]) -> _C:
    """The crawl's one *cls*: the Runtime and the run's shared collaborators (SchedulePolicy,
    NoiseRegistry, Auditor, RunEmbedder) are extensions the add-on places, found by their class
    (a component's ``from_crawler`` runs after the extensions are built, so they exist)."""
    found = crawler.get_extension(cls)
    if found is None:
        name = f"{cls.__module__}.{cls.__qualname__}"
        msg = f"EXTENSIONS: {name} is not enabled (enable recrawler.addon.RecrawlerAddon)"
        raise ConfigurationError(msg)
    return found


def runtime_of(crawler: Crawler) -> Runtime:
    """The crawl's Runtime (its components are built after the extensions, so it exists)."""
    return component_of(crawler, Runtime)


def find_component(crawler: Crawler | None, cls: type[_C]) -> _C | None:
    """The crawl's one *cls*, or None (no crawler, extensions not built yet, or not enabled)."""
    if crawler is None or getattr(crawler, "extensions", None) is None:
        return None
    return crawler.get_extension(cls)


def find_runtime(crawler: Crawler | None) -> Runtime | None:
    """The crawl's Runtime, or None (no crawler, extensions not built yet, or not enabled)."""
    return find_component(crawler, Runtime)


__all__ = [
    "CLOSE_BUSY",
    "CLOSE_HELD",
    "CLOSE_STATE",
    "Runtime",
    "component_of",
    "find_component",
    "find_runtime",
    "runtime_of",
]
