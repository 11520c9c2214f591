"""Publishing a run: embed the chunk texts the cache lacks, then make the run visible in one statement."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

from recrawler.exceptions import ConfigurationError, StateStoreError
from recrawler.kb.embedders import EmbedderError, HashingEmbedder, vector_to_blob
from recrawler.state import RUN_FINISHED, RUN_HELD, RUN_PUBLISHED, utcnow
from recrawler.terminal import Progress

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from scrapy.settings import BaseSettings

    from recrawler.counters import RunCounters
    from recrawler.kb.embedders import Embedder
    from recrawler.state import Decisions, KnowledgeBase, ReconcileResult, Run, SearchIndex

logger = logging.getLogger(__name__)


async def embed_missing(
    kb: KnowledgeBase,
    embedder: Embedder,
    *,
    include_run: int | None = None,
    progress: Callable[[int], object] | None = None,
    pool: EmbedPool | None = None,
) -> tuple[int, int]:
    """Embed every current chunk text the cache lacks, batch by batch; return (texts, calls).

    Committed batch by batch, in order: a failure half way loses nothing already paid for.
    *progress* is called with the number of texts of each batch once it is stored. With the
    run's CPU worker *pool* and an embedder that only computes (the hashing embedder), the
    workers embed the batches (this process joins them only for a remainder longer than two
    rounds of their lanes), and the next batches are read and embedded while one is stored.
    """
    texts = 0
    calls = embedder.calls
    limit = max(64, getattr(embedder, "batch_size", 64)) * 4
    # an embedder that only computes may run in the workers too (as a copy)
    hashing = embedder if isinstance(embedder, HashingEmbedder) else None
    workers = pool.processes if pool is not None and pool.active and hashing is not None else 0
    in_process = asyncio.Lock()  # an embedder is not thread-safe: one batch at a time here
    # batches in the workers, at most two each: a worker has the next one while its last is taken
    in_workers = 0
    here = 0  # batches embedded (or waiting to be) in this process
    # beside workers, this process embeds too only once the texts outlast two rounds of their
    # lanes: a run's usual remainder is theirs, and this process never loads its embedder for it
    read = 0

    async def embed_here(batch: list[str]) -> list[bytes]:
        async with in_process:
            return await asyncio.to_thread(lambda: [vector_to_blob(v) for v in embedder.embed(batch)])

    async def embed_in_worker(batch: list[str]) -> list[bytes]:
        nonlocal in_workers
        assert pool is not None
        assert hashing is not None
        try:
            vectors = await pool.embed(hashing, batch)
        finally:
            in_workers -= 1
        return vectors if vectors is not None else await embed_here(batch)

    async def embed(batch: list[str]) -> list[bytes]:
        nonlocal here
        try:
            return await embed_here(batch)
        finally:
            here -= 1

    async def store_batch(rows: list[tuple[str, str]], blobs: list[bytes]) -> None:
        nonlocal texts
        await kb.store_embeddings([(embedder.id, h, b) for (h, _), b in zip(rows, blobs, strict=True)])
        texts += len(rows)
        if progress is not None:
            progress(len(rows))

    def lane_free() -> bool:
        if in_workers < 2 * workers:
            return True
        return here < 1 and (not workers or read >= 4 * workers)

    pending: deque[tuple[list[tuple[str, str]], asyncio.Task[list[bytes]]]] = deque()
    # one batch is stored while the next ones are read and embedded (stored in order, one at a time)
    storing: asyncio.Task[None] | None = None
    after: str | None = ""
    try:
        while True:
            # keep every lane busy: the workers and this process each embed while a batch is stored
            while after is not None and lane_free():
                rows = await kb.missing_embeddings(embedder.id, limit, include_run=include_run, after=after)
                after = rows[-1][0] if rows else None
                if rows:
                    read += 1
                    batch = [text for _, text in rows]
                    if in_workers < 2 * workers:
                        in_workers += 1
                        pending.append((rows, asyncio.create_task(embed_in_worker(batch))))
                    else:
                        here += 1
                        pending.append((rows, asyncio.create_task(embed(batch))))
            if not pending:
                break
            rows, job = pending.popleft()
            blobs = await job
            if storing is not None:
                await storing
            storing = asyncio.create_task(store_batch(rows, blobs))
        if storing is not None:
            await storing
            storing = None
    finally:
        jobs: list[asyncio.Task[Any]] = [job for _, job in pending]
        if storing is not None:
            jobs.append(storing)
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
    return texts, embedder.calls - calls


class EmbedPool(Protocol):
    """Worker processes that embed with the hashing embedder off the crawl's GIL (the CPU pool)."""

    processes: int

    @property
    def active(self) -> bool: ...

    async def embed(self, embedder: HashingEmbedder, texts: list[str]) -> list[bytes] | None: ...


PUBLISH_MODES = ("run", "page")


def publish_mode(settings: BaseSettings) -> str:
    """``RECRAWLER_PUBLISH``, checked."""
    mode = str(settings.get("RECRAWLER_PUBLISH"))
    if mode not in PUBLISH_MODES:
        raise ConfigurationError(f"RECRAWLER_PUBLISH: {mode!r} is not one of {', '.join(PUBLISH_MODES)}")
    return mode


class Publisher:
    """Decides a finished run's index state: dry run, held, unpublished (with why) or published.

    Embedding shows its progress on stderr when that is a terminal; the crawl logs one INFO line
    once the texts are embedded.
    """

    def __init__(
        self,
        decisions: Decisions,
        kb: KnowledgeBase,
        search: SearchIndex,
        embedder: Embedder,
        counters: RunCounters,
        *,
        dry_run: bool,
        each_page: bool,
        pool: EmbedPool | None = None,
        gone_after: int = 2,
        gone_statuses: Sequence[int] = (410,),
    ) -> None:
        self.gone_after = gone_after
        self.gone_statuses = tuple(gone_statuses)
        self.decisions = decisions
        self.kb = kb
        self.search = search
        self.pool = pool
        self.embedder = embedder
        self.counters = counters
        self.dry_run = dry_run
        self.each_page = each_page

    async def publish(
        self, run: Run, reason: str, *, held: bool, state_errors: bool
    ) -> tuple[dict[str, Any], ReconcileResult | None]:
        """Hold, or embed what is new and publish the run (its staged misses applied in the same
        transaction); the report's ``index`` and what the misses did (None: not published)."""
        c = self.counters
        counts = await self.kb.run_index_counts(run.id, self.embedder.id)
        info: dict[str, Any] = {
            "embedder": self.embedder.id,
            "chunks_added": counts["chunks_added"],
            "chunks_retired": counts["chunks_retired"],
            "texts_embedded": c["recrawler/embed/texts"],
            "embed_calls": c["recrawler/embed/calls"],
            "embed_cache_hits": counts["texts_cached"],
        }
        if self.dry_run:
            info.update(
                state="dry_run",
                would_embed=await self.kb.count_missing(self.embedder.id),
                would_publish=counts["chunks_added"],
                would_delete=counts["chunks_retired"],
            )
            # a dry run's store writes nothing: this only counts what the misses would do
            result, _ = await self._publish_run(run)
            return info, result
        if held:
            await self.decisions.hold_run(run)
            info["state"] = RUN_HELD
            return info, None
        if state_errors:
            # a write failed: what did commit is published by the next run, with what it adds
            await self.kb.set_run_state(run.id, RUN_FINISHED)
            info.update(state="unpublished", reason="state_error: the next run completes and publishes it")
            return info, None
        if reason != "finished" and not self.each_page:
            await self.kb.set_run_state(run.id, RUN_FINISHED)
            info.update(
                state="unpublished", reason=f"run ended with {reason}: the next run publishes its work"
            )
            return info, None
        started = time.monotonic()
        # held runs before it are this run's to publish now: their chunk texts are embedded with its own
        await self.decisions.supersede(run)
        try:
            with Progress(f"run {run.id}: embedding", unit="texts") as progress:
                if progress.active:
                    progress.total = await self.kb.count_missing(self.embedder.id)
                embedded, calls = await embed_missing(
                    self.kb, self.embedder, progress=progress.advance, pool=self.pool
                )
        except (EmbedderError, StateStoreError) as exc:
            c.inc("recrawler/index/error")
            logger.error("run %(run)d not published, embedding failed: %(exc)s", {"run": run.id, "exc": exc})
            await self.kb.set_run_state(run.id, RUN_FINISHED)
            info.update(state="unpublished", reason=str(exc))
            return info, None
        if embedded:
            # the run's total, as the summary line's texts_embedded: the workers' too
            total = info["texts_embedded"] + embedded
            logger.info(
                "run %(run)d: %(total)d chunk %(texts)s embedded (%(now)d at the run's end in %(calls)d "
                "%(call)s, %(secs).1f s; %(early)d by the workers as pages came; %(embedder)s)",
                {
                    "run": run.id,
                    "total": total,
                    "texts": "text" if total == 1 else "texts",
                    "now": embedded,
                    "calls": calls,
                    "call": "call" if calls == 1 else "calls",
                    "secs": time.monotonic() - started,
                    "early": info["texts_embedded"],
                    "embedder": self.embedder.id,
                },
            )
        c.inc("recrawler/embed/texts", embedded)
        c.inc("recrawler/embed/calls", calls)
        result, gc = await self._publish_run(run)
        c.set("recrawler/index/deleted", gc["chunks_deleted"])
        # the blocks search reads, for the vectors this run added (a block per 16,384 of them)
        blocks = await self.search.index_vectors(self.embedder.id)
        if blocks:
            logger.info("run %(run)d: %(n)d vector blocks written for search", {"run": run.id, "n": blocks})
        info.update(
            state=RUN_PUBLISHED,
            texts_embedded=info["texts_embedded"] + embedded,
            embed_calls=info["embed_calls"] + calls,
            chunks_deleted=gc["chunks_deleted"],
        )
        return info, result

    async def _publish_run(self, run: Run) -> tuple[ReconcileResult, dict[str, int]]:
        return await self.decisions.publish_run(
            run, at=utcnow(), gone_after=self.gone_after, gone_statuses=self.gone_statuses
        )


__all__ = ["PUBLISH_MODES", "Publisher", "embed_missing", "publish_mode"]
