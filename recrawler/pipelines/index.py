"""IndexPipeline: keeps the knowledge base in sync, page by page, in the page's own transaction."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import TYPE_CHECKING, Any, Self

from scrapy.exceptions import DropItem, NotConfigured

from recrawler import meta
from recrawler.auditor import Auditor
from recrawler.exceptions import StateStoreError
from recrawler.intervals import SchedulePolicy
from recrawler.items import Page, PageStatus
from recrawler.kb.chunking import Chunker
from recrawler.kb.embedders import EmbedderError, RunEmbedder, vector_to_blob
from recrawler.kb.publish import publish_mode
from recrawler.outcome import Verdicts, is_spike, spike_figures
from recrawler.pipelines import commit
from recrawler.redact import redact_url
from recrawler.revisits import Revisits
from recrawler.runtime import component_of, runtime_of
from recrawler.state import RUN_HELD

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from recrawler.cpu import Worked
    from recrawler.kb.chunking import Chunk
    from recrawler.kb.embedders import Embedder
    from recrawler.pipelines import PageUpdate
    from recrawler.runtime import Runtime
    from recrawler.state import KnowledgeBase, Lifecycle, Run

logger = logging.getLogger(__name__)


class IndexPipeline:
    """Chunks new and changed pages and writes each page's chunks with its state and events in one
    transaction; quarantined pages coming back get their kept chunks again (no re-embedding).
    What to write comes on the item: ClassifyPipeline's decision (``Page.update``).

    With ``RECRAWLER_PUBLISH=run`` (default) chunks are staged and the Reconciler embeds and
    publishes the whole run at the end; with ``page`` each page is embedded and visible as it
    commits, and a change spike holds the rest of the run as soon as it shows.

    Settings: ``RECRAWLER_INDEX_ENABLED``, ``RECRAWLER_CHUNK_SIZE``, ``RECRAWLER_CHUNK_OVERLAP``,
    ``RECRAWLER_CHUNK_MAX_PER_PAGE``,
    ``RECRAWLER_PUBLISH``, ``RECRAWLER_EMBEDDER*``, ``RECRAWLER_CHANGE_ALERT_RATIO``,
    ``RECRAWLER_CHANGE_ALERT_MIN``, ``RECRAWLER_DRY_RUN``.
    Stats: ``recrawler/index/{upserted,chunks,restored,error,capped}``, ``recrawler/embed/{texts,calls}``,
    ``recrawler/run/held``. Signals: sends ``page_classified`` after the write.
    """

    def __init__(
        self,
        kb: KnowledgeBase,
        lifecycle: Lifecycle,
        chunker: Chunker,
        *,
        runtime: Runtime,
        embedder: Embedder,
        publish_each_page: bool = False,
        alert_ratio: float = 0.5,
        alert_min: int = 10,
        dry_run: bool = False,
        revisits: Revisits | None = None,
    ) -> None:
        self.kb = kb
        #: what the store's page writes came to (its committed and lost outcomes)
        self.lifecycle = lifecycle
        self.chunker = chunker
        #: each checked page's next revisit, written with it (None: the schedule is off)
        self.revisits = revisits
        self.runtime = runtime
        #: the run's embedder (a page's texts no worker embedded, in page mode)
        self.embedder = embedder
        self.publish_each_page = publish_each_page and not dry_run
        self.alert_ratio = alert_ratio
        self.alert_min = alert_min
        self._held = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Enabled by ``RECRAWLER_INDEX_ENABLED`` (ClassifyPipeline then leaves each page's write
        to this pipeline)."""
        meta.require_opt_in(crawler)
        s = crawler.settings
        if not s.getbool("RECRAWLER_INDEX_ENABLED"):
            # silently, as configured (a message would make Scrapy log a WARNING every run)
            raise NotConfigured
        runtime = runtime_of(crawler)
        return cls(
            runtime.store.kb,
            runtime.store,
            Chunker(
                s.getint("RECRAWLER_CHUNK_SIZE"),
                s.getint("RECRAWLER_CHUNK_OVERLAP"),
                s.getint("RECRAWLER_CHUNK_MAX_PER_PAGE"),
            ),
            runtime=runtime,
            publish_each_page=publish_mode(s) == "page",
            alert_ratio=s.getfloat("RECRAWLER_CHANGE_ALERT_RATIO"),
            alert_min=s.getint("RECRAWLER_CHANGE_ALERT_MIN"),
            dry_run=s.getbool("RECRAWLER_DRY_RUN"),
            revisits=Revisits.of(
                crawler, component_of(crawler, SchedulePolicy), component_of(crawler, Auditor)
            ),
            embedder=component_of(crawler, RunEmbedder).embedder,
        )

    async def process_item(self, item: Any) -> Any:
        """Add the page's chunks to the update ClassifyPipeline put on it and write both."""
        if not isinstance(item, Page):
            return item
        worked: Worked | None = item.worked
        update: PageUpdate | None = item.update
        item.worked = item.update = None
        if update is None:
            return item  # an error page, or one ClassifyPipeline already wrote
        run = self.runtime.run
        if run is None:
            raise DropItem("the recrawler run did not begin")
        chunks: list[Chunk] | None = None
        restore = False
        embeddings: list[tuple[str, str, bytes]] = []
        if item.text and (update.status in (PageStatus.NEW, PageStatus.CHANGED) or update.backfill):
            if worked is not None and worked.chunks is not None:
                chunks = worked.chunks  # a CPU worker chunked the same text with the same settings
                if worked.vectors:
                    # and embedded its texts (hashing embedder): cache rows, in the page's transaction
                    embeddings = self._worker_vectors(worked.vectors)
            else:
                chunks = await self.runtime.offload(
                    self.chunker.chunk, item.text, key=item.key, url=item.url, headings=item.headings
                )
        elif update.restored:
            restore = True
            self.runtime.counters.inc("recrawler/index/restored")
        if chunks is not None:
            update.record = dataclasses.replace(update.record, chunks=len(chunks))
            if len(chunks) >= self.chunker.max_chunks:
                self._capped(item)
        if chunks and self.publish_each_page and not self._held:
            embeddings += await self._embed(chunks, have={h for _, h, _ in embeddings})
        page = await commit(
            self.runtime,
            run,
            item,
            update,
            chunks=chunks,
            restore=restore,
            embeddings=embeddings,
            revisits=self.revisits,
        )
        if self.publish_each_page and not self._held:
            await self._check_spike(run)
        return page

    def _capped(self, item: Page) -> None:
        """A page at RECRAWLER_CHUNK_MAX_PER_PAGE chunks: only its first ones are indexed."""
        counters = self.runtime.counters
        if not counters["recrawler/index/capped"]:
            logger.warning(
                "%(url)s is indexed in its first %(n)d chunks only (RECRAWLER_CHUNK_MAX_PER_PAGE); "
                "further pages over the bound are only counted",
                {"url": redact_url(item.url), "n": self.chunker.max_chunks},
            )
        counters.inc("recrawler/index/capped")

    def _worker_vectors(self, vectors: list[tuple[str, bytes]]) -> list[tuple[str, str, bytes]]:
        embedder_id = self.embedder.id
        counters = self.runtime.counters
        counters.inc("recrawler/embed/texts", len(vectors))
        counters.inc("recrawler/cpu/worker_embedded", len(vectors))
        return [(embedder_id, h, blob) for h, blob in vectors]

    async def _embed(self, chunks: list[Chunk], have: set[str]) -> list[tuple[str, str, bytes]]:
        """Embed the chunk texts the cache does not hold yet and no worker embedded (page mode only)."""
        embedder = self.embedder
        unique = {c.chunk_hash: c.text for c in chunks if c.chunk_hash not in have}
        if not unique:
            return []
        try:
            missing = await self.kb.missing_for(embedder.id, list(unique))
            if not missing:
                return []
            texts = [unique[h] for h in missing]
            calls = embedder.calls
            vectors = await asyncio.to_thread(embedder.embed, texts)
        except (EmbedderError, StateStoreError) as exc:
            self.runtime.counters.inc("recrawler/index/error")
            logger.error("embedding failed, page not indexed: %(exc)s", {"exc": exc})
            raise DropItem(f"embedding failed: {exc}") from exc
        self.runtime.counters.inc("recrawler/embed/texts", len(texts))
        self.runtime.counters.inc("recrawler/embed/calls", embedder.calls - calls)
        return [(embedder.id, h, vector_to_blob(v)) for h, v in zip(missing, vectors, strict=True)]

    async def _check_spike(self, run: Run) -> None:
        """Page mode decides early: hold the run the moment its changes look like a spike."""
        c, store = self.runtime.counters, self.lifecycle
        verdicts = Verdicts.from_outcomes(store.outcomes, store.lost)
        new_changed, judged = spike_figures(
            verdicts, skipped=c["recrawler/page/skipped"], backfill=run.backfill
        )
        if is_spike(
            prior_pages=run.prior_pages,
            new_changed=new_changed,
            judged=judged,
            ratio=self.alert_ratio,
            minimum=self.alert_min,
        ):
            self._held = True
            await self.kb.set_run_state(run.id, RUN_HELD)
            c.set("recrawler/run/held", 1)
            logger.warning(
                "change spike: %(n)d of %(c)d pages new or changed; run %(run)d held, "
                "nothing more is embedded (recrawler runs approve %(run)d / discard %(run)d)",
                {"n": new_changed, "c": judged, "run": run.id},
            )


__all__ = ["IndexPipeline"]
