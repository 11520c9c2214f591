"""What runs in a CPU worker process: its tools (extractor, chunker, model caches), the batches it
works and the chunk texts it embeds while it has time to spare."""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import signal
import threading
import time
from collections import OrderedDict
from dataclasses import replace
from typing import TYPE_CHECKING

from recrawler.cpu.jobs import PageJob, PageWork, process_page
from recrawler.detect.noise import SiteNoise, regions_selector
from recrawler.extract import ContentExtractor
from recrawler.kb.chunking import Chunker

if TYPE_CHECKING:
    from lxml.cssselect import CSSSelector

    from recrawler.kb.embedders import HashingEmbedder

#: chunk hashes a worker remembers having embedded (a bounded set: memory stays flat)
_EMBEDDED = 16384
#: a worker embeds its pages' chunk texts while it waits for tasks at least this share of the
#: time (recent tasks weigh most: each task moves the share by ``_SPARE_WEIGHT`` of the way)
_SPARE = 0.05
_SPARE_WEIGHT = 0.3

logger = logging.getLogger(__name__)


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


def _embed(embedder: HashingEmbedder, texts: list[str]) -> list[bytes]:
    # stored form (float32 bytes): the crawl's process stores them without loading numpy
    from recrawler.kb.embedders import vector_to_blob

    return [vector_to_blob(v) for v in embedder.embed(texts)]
