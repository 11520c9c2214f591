"""Per-page CPU work in worker processes: extraction, fingerprints and chunks, off the crawl's GIL.

Scrapy's downloads, recrawler's middlewares and pipelines and the database writes share one
interpreter lock, so per-page CPU work done in the crawl's process (parsing, rendering, token
normalising, hashing, chunking) waits its turn behind them however many cores the machine has,
threads or not. With ``RECRAWLER_CPU_PROCESSES`` worker processes, a page is handed over once:
its body goes out, its content, fingerprints and (when the page needs them) chunks come back.
The pages of one turn of the event loop go as one task: one wake-up of the pool's threads and one
pickle for all of them. At most two tasks per worker are out at once; pages that come meanwhile
wait and go together (up to ``_BATCH``) as soon as one comes back, so under load a hand-over's
cost is shared by many pages (each hand-over waits for the crawl's interpreter lock several
times), and an idle worker still gets a lone page at once.
When the run publishes, the workers also embed batches of its new chunk texts (hashing embedder).
The work itself is :func:`process_page`, pure and the same in every mode: without workers (or
once they are gone) the crawl's process runs it, on a CPU thread or on the reactor, and the Page
carries the same result either way.

The workers are forked when the spider opens, before the run's own threads start: a fork never
runs the user's script again, as a spawned worker would without an ``if __name__ ==
"__main__"`` guard. Signals are left to the crawl's process, which shuts the workers down when
the engine stops. A worker that dies (killed, out of memory) is one ERROR line; the run goes
on with the work done in its own process.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
import warnings
from collections import OrderedDict
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from recrawler.detect.hashing import content_hash
from recrawler.detect.noise import Fingerprint, SiteNoise, fingerprint, regions_selector
from recrawler.documents import HTML, Documents
from recrawler.exceptions import ConfigurationError
from recrawler.extract import Content, ContentExtractor, ExtractionError
from recrawler.kb.chunking import Chunk, Chunker
from recrawler.state.records import packed_text, samples_json

if TYPE_CHECKING:
    from collections.abc import Callable

    from lxml.cssselect import CSSSelector
    from scrapy.http import TextResponse
    from scrapy.settings import BaseSettings

    from recrawler.counters import RunCounters
    from recrawler.kb.embedders import HashingEmbedder
    from recrawler.pdf import PdfLimits

_T = TypeVar("_T")

#: most pages handed to the workers as one task
_BATCH = 64
#: tasks in the workers at once, per worker: one being worked, one waiting for it
_IN_FLIGHT = 2
#: workers ``RECRAWLER_CPU_PROCESSES = "auto"`` starts at most: one crawl process feeds only so many
_AUTO_MAX = 4
#: the lowest priority ``nice`` gives
_MAX_NICE = 19
#: chunk hashes a worker remembers having embedded (a bounded set: memory stays flat)
_EMBEDDED = 16384
#: a worker embeds its pages' chunk texts while it waits for tasks at least this share of the
#: time (recent tasks weigh most: each task moves the share by ``_SPARE_WEIGHT`` of the way)
_SPARE = 0.05
_SPARE_WEIGHT = 0.3

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class EncodingOf:
    """How a response's encoding is read, for the worker to read it as Scrapy would: the
    response's class, its Content-Type header and the encoding it was built with (if any)."""

    response_class: type[TextResponse]
    content_type: bytes | None = None
    declared: str | None = None

    @classmethod
    def of(cls, response: TextResponse) -> EncodingOf:
        """What reading *response*'s encoding takes besides its body."""
        # TextResponse's own rules read the encoding it was built with, the body and Content-Type
        return cls(
            response_class=type(response),
            content_type=response.headers.get(b"Content-Type"),
            declared=response._encoding,
        )

    def read(self, url: str, body: bytes) -> str:
        """The encoding Scrapy gives the response (BOM, header, ``<meta>``, then detection)."""
        headers = {b"Content-Type": self.content_type} if self.content_type is not None else None
        return self.response_class(url=url, body=body, headers=headers, encoding=self.declared).encoding


@dataclass(frozen=True, slots=True, kw_only=True)
class PageJob:
    """One page's CPU work, as sent to a worker."""

    key: str
    url: str
    body: bytes
    #: the body's encoding, or how the worker reads it (the crawl's process never scans the body)
    encoding: str | EncodingOf
    #: the body's document type (see :mod:`recrawler.documents`), and how much of a PDF is read
    kind: str = HTML
    pdf: PdfLimits | None = None
    #: the site's learned volatile regions (CSS selectors), dropped before rendering
    regions: tuple[str, ...] = ()
    #: the digest of the site's pickled noise model, to fingerprint under (None: not loaded yet)
    noise_id: bytes | None = None
    #: the pickled model itself, sent until the workers have it (see :meth:`CpuPool.noise`)
    noise: bytes | None = None
    #: the stored page's normalised hash when it has chunks: a page still hashing to it is not
    #: chunked (None: new, or no chunks stored)
    indexed_hash: str | None = None
    #: the run's hashing embedder's dimension: the page's chunk texts are embedded with its
    #: chunks (0: not, the run's end embeds them)
    embed_dim: int = 0
    #: a page the database does not hold yet: its field record's stored forms are made too
    new: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class PageWork:
    """What :func:`process_page` made of a page: its content (or why there is none), fingerprint
    and chunks."""

    content: Content | None = None
    error: str | None = None
    content_hash: str | None = None
    fingerprint: Fingerprint | None = None
    chunks: list[Chunk] | None = None
    #: (chunk hash, float32 vector bytes) of the chunk texts this worker had not embedded yet
    vectors: list[tuple[str, bytes]] | None = None
    #: the job named a noise model this worker does not hold: no fingerprint, send it again
    model_missing: bool = False
    #: the stored forms of the page's field record (:class:`~recrawler.state.records.FieldsRow`),
    #: made when its record will be written: a new page, or one whose hash moved
    packed_text: bytes | None = None
    samples_json: str | None = None


@dataclass(slots=True, kw_only=True)
class _Packed:
    model: SiteNoise
    data: bytes
    digest: bytes
    #: jobs that still carry the pickled model
    sends: int


@dataclass(slots=True, kw_only=True)
class Worked:
    """A page's fingerprint and chunks made by :func:`process_page` (in a worker process or in
    the crawl's), handed from the spider to the pipelines on the Page; valid only under the very
    noise model they were made with."""

    noise: SiteNoise | None
    fingerprint: Fingerprint | None
    chunks: list[Chunk] | None
    #: (chunk hash, vector bytes) the worker embedded with the chunks (hashing embedder)
    vectors: list[tuple[str, bytes]] | None = None
    #: the field record's stored forms (see :class:`PageWork`)
    packed_text: bytes | None = None
    samples_json: str | None = None


def process_page(
    job: PageJob,
    extractor: ContentExtractor,
    *,
    regions: CSSSelector | None = None,
    noise: SiteNoise | None = None,
    chunker: Chunker | None = None,
) -> PageWork:
    """A page's CPU work, the same wherever it runs (a worker process, a CPU thread, the reactor):
    its content (*regions*: the site's learned volatile regions, dropped first), the text's hash,
    the fingerprint under *noise* (None: none made), the chunks unless the page still hashes to
    what is indexed (*chunker* None: none), and the stored forms of the field record it will be
    written with. Pure: it keeps nothing."""
    try:
        encoding = job.encoding if isinstance(job.encoding, str) else job.encoding.read(job.url, job.body)
        content = Documents(extractor, job.pdf).read(job.kind, job.body, encoding, regions=regions)
    except ExtractionError as exc:
        return PageWork(error=exc.reason)
    if not content.text.strip():
        return PageWork(content=content)
    fp = fingerprint(content.text, noise) if noise is not None else None
    chunks = None
    if chunker is not None and fp is not None and fp.content_hash != job.indexed_hash:
        chunks = chunker.chunk(content.text, key=job.key, url=job.url, headings=content.headings)
    # the page's field record will be written (new, or its hash moved): its stored forms here,
    # with the rest of its CPU work; the samples only for a new page (every block is added)
    moved = job.indexed_hash is not None and fp is not None and fp.content_hash != job.indexed_hash
    return PageWork(
        content=content,
        content_hash=content_hash(content.text),
        fingerprint=fp,
        chunks=chunks,
        packed_text=packed_text(content.text) if fp is not None and (job.new or moved) else None,
        samples_json=samples_json(fp.samples) if fp is not None and job.new else None,
    )


class _Tools:
    """One worker's extractor, chunker and model caches (built once per process)."""

    def __init__(
        self, selectors: list[str], noise_selectors: list[str], chunking: tuple[int, int, int] | None
    ) -> None:
        self.extractor = ContentExtractor(selectors, noise_selectors)
        self.chunker = Chunker(*chunking) if chunking is not None else None
        self._regions: OrderedDict[tuple[str, ...], CSSSelector | None] = OrderedDict()
        #: noise models by the digest of their pickle
        self._models: OrderedDict[bytes, SiteNoise] = OrderedDict()
        self._embedders: dict[int, HashingEmbedder] = {}
        #: when the last task ended, and the share of time this worker waited for tasks lately
        self._ended: float | None = None
        self._waited = 0.0
        self._spare = 1.0
        #: chunk hashes this worker embedded during the run (the most recent ``_EMBEDDED``)
        self._embedded: OrderedDict[str, None] = OrderedDict()

    def regions(self, selectors: tuple[str, ...]) -> CSSSelector | None:
        if selectors not in self._regions:
            self._regions[selectors] = regions_selector(selectors)
            if len(self._regions) > 64:
                self._regions.popitem(last=False)
        return self._regions[selectors]

    def model(self, digest: bytes, packed: bytes | None) -> SiteNoise | None:
        model = self._models.get(digest)
        if model is None and packed is not None:
            model = self._models[digest] = pickle.loads(packed)  # noqa: S301  # our own pickle
            if len(self._models) > 16:
                self._models.popitem(last=False)
        return model

    def work(self, job: PageJob) -> PageWork:
        """:func:`process_page` in a worker: the model and the regions from this worker's caches."""
        # the model first: the job that carries it may be a page with no text, and the jobs
        # after it in the task name it only
        noise = self.model(job.noise_id, job.noise) if job.noise_id is not None else None
        work = process_page(
            job, self.extractor, regions=self.regions(job.regions), noise=noise, chunker=self.chunker
        )
        if job.noise_id is not None and noise is None and work.content_hash is not None:
            return replace(work, model_missing=True)
        return work

    def started(self) -> float:
        """A task starts: the time this worker waited for it counts as spare."""
        now = time.monotonic()
        self._waited = now - self._ended if self._ended is not None else 0.0
        return now

    def finished(self, started: float) -> None:
        """A task ended: fold its wait and its work into the recent share of spare time."""
        self._ended = time.monotonic()
        total = self._waited + (self._ended - started)
        if total > 0:
            self._spare += _SPARE_WEIGHT * (self._waited / total - self._spare)

    def spare(self) -> float:
        """The share of recent time this worker spent waiting for tasks (1.0 before the first).

        A worker that waits has CPU to spare: it embeds its pages' chunk texts. One that never
        waits holds back the crawl already, and leaves them to the run's end."""
        return self._spare

    def embed(self, jobs: list[PageJob], works: list[PageWork | BaseException]) -> None:
        """Add to each page's work the vectors of its chunk texts that this worker has not
        embedded yet this run, in one embedder call for the whole task (per dimension).

        A text met again (a page's copy, a shared paragraph) is not embedded twice by one worker:
        its vector went with the first page it came with; if that page's write failed, the run's
        end embeds the text with whatever else lacks a vector.
        """
        from recrawler.kb.embedders import HashingEmbedder, vector_to_blob

        # dimension -> (hash -> text to embed, [(page's index, its hashes)])
        wanted: dict[int, tuple[dict[str, str], list[tuple[int, list[str]]]]] = {}
        for i, (job, work) in enumerate(zip(jobs, works, strict=True)):
            if not job.embed_dim or not isinstance(work, PageWork) or not work.chunks:
                continue
            texts, owners = wanted.setdefault(job.embed_dim, ({}, []))
            mine = []
            for chunk in work.chunks:
                h = chunk.chunk_hash
                if h not in self._embedded and h not in texts:
                    texts[h] = chunk.text
                    mine.append(h)
            owners.append((i, mine))
        for dim, (texts, owners) in wanted.items():
            embedder = self._embedders.get(dim)
            if embedder is None:
                embedder = self._embedders[dim] = HashingEmbedder(dim)
            vectors = embedder.embed(list(texts.values()))
            blobs = {h: vector_to_blob(v) for h, v in zip(texts, vectors, strict=True)}
            for h in texts:
                self._embedded[h] = None
            while len(self._embedded) > _EMBEDDED:
                self._embedded.popitem(last=False)
            for i, mine in owners:
                work = works[i]
                assert isinstance(work, PageWork)
                works[i] = replace(work, vectors=[(h, blobs[h]) for h in mine])


_TOOLS: _Tools | None = None


def _start_worker(
    selectors: list[str],
    noise_selectors: list[str],
    chunking: tuple[int, int, int] | None,
    parent: int,
    nice: int,
) -> None:
    """Worker initializer: the crawl's process handles Ctrl-C and SIGTERM, and stops the workers;
    a worker whose crawl process died (killed, no shutdown) exits on its own. A worker yields the
    CPU to the crawl's process (``nice``): that process feeds every worker, and a page waiting in
    its event loop for a core keeps all of them waiting."""
    global _TOOLS  # one set of tools per worker process
    if nice and hasattr(os, "nice"):
        with contextlib.suppress(OSError):
            os.nice(nice)
    threading.Thread(target=_watch, args=(parent,), name="recrawler-cpu-watch", daemon=True).start()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with contextlib.suppress(ValueError):
        # the inherited event loop's wake-up pipe belongs to the crawl's process
        signal.set_wakeup_fd(-1)
    _TOOLS = _Tools(selectors, noise_selectors, chunking)


def _watch(parent: int) -> None:
    # a sibling worker holds the task pipe open too: a dead parent is never an end of file here
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)


def _work_batch(jobs: list[PageJob]) -> list[PageWork | BaseException]:
    assert _TOOLS is not None
    started = _TOOLS.started()
    # each page on its own: one page's failure is that page's, not its batch's
    out: list[PageWork | BaseException] = []
    for job in jobs:
        try:
            out.append(_work(job))
        except Exception as exc:  # handed back to the page's own caller
            out.append(exc)
    if _TOOLS.spare() >= _SPARE:
        try:
            # the task's new chunk texts in one call
            _TOOLS.embed(jobs, out)
        except Exception as exc:  # the pages stand without vectors: the run's end embeds them
            logger.warning("a CPU worker could not embed its pages' chunk texts: %(exc)r", {"exc": exc})
    _TOOLS.finished(started)
    return out


def _work(job: PageJob) -> PageWork:
    assert _TOOLS is not None
    return _TOOLS.work(job)


def _ready() -> int:
    return 0


def chunk_settings(settings: BaseSettings) -> tuple[int, int, int] | None:
    """How pages are chunked (``RECRAWLER_CHUNK_SIZE``, ``_OVERLAP``, ``_MAX_PER_PAGE``) when the
    knowledge base is kept (``RECRAWLER_INDEX_ENABLED``), else None."""
    if not settings.getbool("RECRAWLER_INDEX_ENABLED"):
        return None
    return (
        settings.getint("RECRAWLER_CHUNK_SIZE"),
        settings.getint("RECRAWLER_CHUNK_OVERLAP"),
        settings.getint("RECRAWLER_CHUNK_MAX_PER_PAGE"),
    )


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


def _embed(embedder: HashingEmbedder, texts: list[str]) -> list[bytes]:
    # stored form (float32 bytes): the crawl's process stores them without loading numpy
    from recrawler.kb.embedders import vector_to_blob

    return [vector_to_blob(v) for v in embedder.embed(texts)]


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


__all__ = ["CpuPool", "EncodingOf", "PageJob", "PageWork", "Worked", "chunk_settings", "process_page"]
