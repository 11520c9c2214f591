"""The run's CPU worker processes, seen from the crawl's process: how many, batching pages to them,
the noise model sent once, and the run going on in-process when they die."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import multiprocessing
import os
import pickle
import sys
import warnings
from collections import OrderedDict
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from recrawler.cpu.jobs import PageJob, PageWork, chunk_settings
from recrawler.cpu.worker_process import _embed, _ready, _start_worker, _work_batch
from recrawler.exceptions import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy.settings import BaseSettings

    from recrawler.counters import RunCounters
    from recrawler.detect.noise import SiteNoise
    from recrawler.kb.embedders import HashingEmbedder

_T = TypeVar("_T")

#: most pages handed to the workers as one task
_BATCH = 64
#: tasks in the workers at once, per worker: one being worked, one waiting for it
_IN_FLIGHT = 2
#: workers ``RECRAWLER_CPU_PROCESSES = "auto"`` starts at most: one crawl process feeds only so many
_AUTO_MAX = 4
#: the lowest priority ``nice`` gives
_MAX_NICE = 19

logger = logging.getLogger(__name__)


@dataclass(slots=True, kw_only=True)
class _Packed:
    model: SiteNoise
    data: bytes
    digest: bytes
    #: jobs that still carry the pickled model
    sends: int


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the platform has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def worker_processes(value: object) -> int:
    """``RECRAWLER_CPU_PROCESSES`` as a number: ``"auto"`` (or unset) is one worker per usable
    core, at most ``_AUTO_MAX``; a bad value raises :class:`ConfigurationError` naming it."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        return min(usable_cores(), _AUTO_MAX)
    n = -1
    if isinstance(value, (int, str)) and not isinstance(value, bool):
        with contextlib.suppress(ValueError):
            n = int(value)
    if n < 0:
        msg = f"RECRAWLER_CPU_PROCESSES: expected 'auto' or a number of processes >= 0, got {value!r}"
        raise ConfigurationError(msg)
    return n


def _model_once(batch: list[tuple[PageJob, Any]]) -> list[PageJob]:
    """The batch's jobs, each pickled model carried by the first job that names it only (the
    worker keeps it for the jobs after)."""
    jobs = []
    carried: set[bytes] = set()
    for job, _ in batch:
        model = job.noise_id
        if job.noise is not None and model is not None:
            if model in carried:
                job = replace(job, noise=None)
            carried.add(model)
        jobs.append(job)
    return jobs


class CpuPool:
    """The run's worker processes (``RECRAWLER_CPU_PROCESSES``), owned by its Runtime."""

    def __init__(
        self,
        processes: int,
        *,
        selectors: list[str],
        noise_selectors: list[str],
        chunking: tuple[int, int, int] | None,
        nice: int = 0,
    ) -> None:
        if processes < 0:
            raise ConfigurationError(f"RECRAWLER_CPU_PROCESSES: bad value {processes!r}")
        if not 0 <= nice <= _MAX_NICE:
            raise ConfigurationError(f"RECRAWLER_CPU_NICE: expected 0 to {_MAX_NICE}, got {nice!r}")
        self.processes = processes
        #: how much lower the workers' scheduling priority is than the crawl's process
        self.nice = nice
        #: the dimension of the run's hashing embedder, which the workers run with the chunks
        #: (0: another embedder, or no index; see :meth:`embed_with`)
        self.embed_dim = 0
        self._args = (selectors, noise_selectors, chunking)
        self._pool: ProcessPoolExecutor | None = None
        #: pickled noise models by id (each kept with its model, so an id is never reused)
        self._packed: OrderedDict[int, _Packed] = OrderedDict()
        #: the workers died: the rest of the run works in its own process
        self.lost = False
        #: shut down with the run: no worker is started again
        self.closed = False
        #: the run's counters (set by its Runtime): pages worked, workers lost
        self.counters: RunCounters | None = None
        #: jobs waiting for the end of this turn of the event loop, and batches in the workers
        self._batch: list[tuple[PageJob, asyncio.Future[PageWork | None]]] = []
        self._sent: set[asyncio.Future[list[PageWork | BaseException] | None]] = set()

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> CpuPool:
        """Build from ``RECRAWLER_CPU_PROCESSES`` and ``RECRAWLER_CPU_NICE``, the content and
        the chunk settings."""
        chunking = chunk_settings(settings)
        try:
            nice = settings.getint("RECRAWLER_CPU_NICE")
        except ValueError:
            raise ConfigurationError(
                f"RECRAWLER_CPU_NICE: expected 0 to {_MAX_NICE}, got {settings.get('RECRAWLER_CPU_NICE')!r}"
            ) from None
        return cls(
            worker_processes(settings.get("RECRAWLER_CPU_PROCESSES")),
            selectors=settings.getlist("RECRAWLER_CONTENT_SELECTORS"),
            noise_selectors=settings.getlist("RECRAWLER_CONTENT_NOISE_SELECTORS"),
            chunking=chunking,
            nice=nice,
        )

    def embed_with(self, embedder: object) -> None:
        """Have the workers embed each page's new chunk texts as they chunk them when the run's
        *embedder* is the hashing embedder: it only computes (no model, no service, nothing paid),
        so a page's vectors cost a worker a fraction of its extraction and the run's end has
        nothing left to embed. Any other embedder embeds at the run's end, once it is decided."""
        from recrawler.kb.embedders import HashingEmbedder

        self.embed_dim = embedder.dim if isinstance(embedder, HashingEmbedder) else 0

    @property
    def active(self) -> bool:
        """Whether pages go to the workers."""
        return self.processes > 0 and not self.lost and not self.closed

    def start(self) -> None:
        """Fork the workers now (call it before the run starts threads of its own)."""
        if not self.active or self._pool is not None:
            return
        # fork where the platform forks safely; elsewhere spawn (the script then needs its guard)
        method = "fork" if sys.platform.startswith("linux") else "spawn"
        self._pool = ProcessPoolExecutor(
            max_workers=self.processes,
            mp_context=multiprocessing.get_context(method),
            initializer=_start_worker,
            initargs=(*self._args, os.getpid(), self.nice),
        )
        # the first task starts every worker (with fork, all at once, before any thread of ours).
        # Python 3.12+ warns about forking a process that runs threads (the host's, a test
        # server's): a worker only computes, taking no lock another thread could hold
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", r".*use of fork\(\) may lead to deadlocks", DeprecationWarning)
            self._pool.submit(_ready)

    def noise(self, model: SiteNoise) -> tuple[bytes, bytes | None]:
        """*model* for a job: the digest of its pickle, and the pickle itself while the workers
        may not hold it yet (the first jobs after it changes, and after a worker said so)."""
        packed = self._packed.get(id(model))
        if packed is None:
            data = pickle.dumps(model, protocol=pickle.HIGHEST_PROTOCOL)
            packed = self._packed[id(model)] = _Packed(
                model=model, data=data, digest=hashlib.blake2b(data, digest_size=16).digest(), sends=0
            )
            self._resend(packed)
            if len(self._packed) > 16:
                self._packed.popitem(last=False)
        if packed.sends <= 0:
            return packed.digest, None
        packed.sends -= 1
        return packed.digest, packed.data

    def _resend(self, packed: _Packed) -> None:
        # a task goes to whichever worker is free: the next two tasks' worth each, so every
        # worker gets one (a worker that still lacks it says so, and it is sent again)
        packed.sends = _IN_FLIGHT * _BATCH * max(self.processes, 1)

    async def work(self, job: PageJob) -> PageWork | None:
        """The page's work done by a worker; None when the workers are gone (work in-process).

        The jobs of one turn of the event loop (the responses of one read) go as one task, and
        while every worker has two tasks, jobs wait to go together when one comes back (up to
        ``_BATCH`` a task): one hand-over, one wake-up of the pool's threads."""
        if not self.active:
            return None
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[PageWork | None] = loop.create_future()
        self._batch.append((job, waiter))
        if len(self._batch) >= _BATCH:
            self._send_batch()
        elif len(self._batch) == 1:
            loop.call_soon(self._send_batch)
        result = await waiter
        if result is None:
            return None
        if result.model_missing:
            for packed in self._packed.values():
                if packed.digest == job.noise_id:
                    self._resend(packed)
        if self.counters is not None:
            self.counters.inc("recrawler/cpu/worker_pages")
            if result.fingerprint is not None:
                self.counters.inc("recrawler/cpu/worker_fingerprints")
        return result

    def _send_batch(self) -> None:
        if not self._batch or len(self._sent) >= _IN_FLIGHT * max(self.processes, 1):
            return  # the next task that comes back sends what waits
        batch, self._batch = self._batch[:_BATCH], self._batch[_BATCH:]
        sent = asyncio.get_running_loop().create_task(self._submit(_work_batch, _model_once(batch)))
        self._sent.add(sent)
        if self.counters is not None:
            self.counters.inc("recrawler/cpu/worker_batches")

        def answer(done: asyncio.Future[list[PageWork | BaseException] | None]) -> None:
            self._sent.discard(done)
            results: list[PageWork | BaseException] | None = None
            if not done.cancelled():
                exc = done.exception()
                results = [exc] * len(batch) if exc is not None else done.result()
            for i, (_, waiter) in enumerate(batch):
                if waiter.done():
                    continue  # its page was cancelled meanwhile
                got = None if results is None else results[i]
                if isinstance(got, BaseException):
                    waiter.set_exception(got)
                else:
                    waiter.set_result(got)
            self._send_batch()

        sent.add_done_callback(answer)

    async def embed(self, embedder: HashingEmbedder, texts: list[str]) -> list[bytes] | None:
        """*texts* embedded by a worker (with a copy of *embedder*, whose ``calls`` and ``texts``
        are counted here), as stored vectors (:func:`~recrawler.kb.embedders.vector_to_blob`); None
        when the workers are gone (embed in-process)."""
        vectors = await self._submit(_embed, embedder, texts)
        if vectors is not None:
            embedder.calls += 1
            embedder.texts += len(texts)
            if self.counters is not None:
                self.counters.inc("recrawler/cpu/worker_texts", len(texts))
        return vectors

    async def _submit(self, fn: Callable[..., _T], *args: Any) -> _T | None:
        if not self.active:
            return None
        if self._pool is None:
            self.start()
        assert self._pool is not None
        try:
            return await asyncio.wrap_future(self._pool.submit(fn, *args))
        except BrokenProcessPool as exc:
            if not self.lost:
                self.lost = True
                if self.counters is not None:
                    self.counters.inc("recrawler/cpu/worker_lost")
                logger.error(
                    "a CPU worker process died (%(exc)s); the rest of the run works in the crawl's process",
                    {"exc": exc},
                )
            return None

    def shutdown(self) -> None:
        """Stop the workers (queued work is dropped: the run is over); any work asked for
        afterwards is done in this process, never by workers started again."""
        self.closed = True
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


__all__ = ["CpuPool", "usable_cores", "worker_processes"]
