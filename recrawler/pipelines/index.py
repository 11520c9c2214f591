"""IndexPipeline: keeps the knowledge base in sync, page by page, in the page's own transaction."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import TYPE_CHECKING, Any, Self
from weakref import WeakKeyDictionary

from scrapy.exceptions import DropItem, NotConfigured

from recrawler import meta
from recrawler.embedders import Embedder, EmbedderError, embedder_from_spec, vector_to_blob
from recrawler.exceptions import ConfigurationError, StateStoreError
from recrawler.items import Page, PageStatus
from recrawler.kb.chunking import Chunker
from recrawler.pipelines import commit, enable_handover
from recrawler.state import RUN_HELD, run_for, store_for

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings
    from scrapy.statscollectors import StatsCollector

    from recrawler.kb.chunking import Chunk
    from recrawler.pipelines import PendingUpdates
    from recrawler.state import Run, StateStore

logger = logging.getLogger(__name__)

PUBLISH_MODES = ("run", "page")
_embedders: WeakKeyDictionary[Crawler, Embedder] = WeakKeyDictionary()


def embedder_from_settings(settings: BaseSettings) -> Embedder:
    """Build the embedder ``RECRAWLER_EMBEDDER`` names, with its ``RECRAWLER_EMBEDDER_*`` options."""
    return embedder_from_spec(
        str(settings.get("RECRAWLER_EMBEDDER")),
        base_url=settings.get("RECRAWLER_EMBEDDER_BASE_URL") or None,
        api_key=settings.get("RECRAWLER_EMBEDDER_API_KEY") or None,
        batch_size=settings.getint("RECRAWLER_EMBEDDER_BATCH_SIZE"),
        max_retries=settings.getint("RECRAWLER_EMBEDDER_MAX_RETRIES"),
        timeout_secs=settings.getfloat("RECRAWLER_EMBEDDER_TIMEOUT_SECS"),
    )


def embedder_for(crawler: Crawler) -> Embedder:
    """The crawler's single embedder, built on first use."""
    embedder = _embedders.get(crawler)
    if embedder is None:
        embedder = _embedders[crawler] = embedder_from_settings(crawler.settings)
    return embedder


def publish_mode(settings: BaseSettings) -> str:
    """``RECRAWLER_PUBLISH``, checked."""
    mode = str(settings.get("RECRAWLER_PUBLISH"))
    if mode not in PUBLISH_MODES:
        raise ConfigurationError(f"RECRAWLER_PUBLISH: {mode!r} is not one of {', '.join(PUBLISH_MODES)}")
    return mode


def spike(run: Run, new_changed: int, crawled: int, *, ratio: float, minimum: int) -> bool:
    """True when this run's new+changed pages look like a template change, not a docs sprint.

    A first run into an empty knowledge base is never a spike: everything is new by nature.
    """
    return bool(run.prior_pages) and new_changed >= minimum and crawled > 0 and new_changed / crawled > ratio


async def embed_missing(
    store: StateStore, embedder: Embedder, *, include_run: int | None = None
) -> tuple[int, int]:
    """Embed every current chunk text the cache lacks, batch by batch; return (texts, calls).

    Committed batch by batch: a failure half way loses nothing already paid for.
    """
    texts = 0
    calls = embedder.calls
    limit = max(64, getattr(embedder, "batch_size", 64)) * 4
    after = ""
    while rows := await store.missing_embeddings(embedder.id, limit, include_run=include_run, after=after):
        vectors = await asyncio.to_thread(embedder.embed, [text for _, text in rows])
        await store.store_embeddings(
            [(embedder.id, h, vector_to_blob(v)) for (h, _), v in zip(rows, vectors, strict=True)]
        )
        texts += len(rows)
        after = rows[-1][0]
    return texts, embedder.calls - calls


class IndexPipeline:
    """Chunks new and changed pages and writes each page's chunks with its state and events in one
    transaction; quarantined pages coming back get their kept chunks again (no re-embedding).

    With ``RECRAWLER_PUBLISH=run`` (default) chunks are staged and the Reconciler embeds and
    publishes the whole run at the end; with ``page`` each page is embedded and visible as it
    commits, and a change spike holds the rest of the run as soon as it shows.

    Settings: ``RECRAWLER_INDEX_ENABLED``, ``RECRAWLER_CHUNK_SIZE``, ``RECRAWLER_CHUNK_OVERLAP``,
    ``RECRAWLER_PUBLISH``, ``RECRAWLER_EMBEDDER*``, ``RECRAWLER_CHANGE_ALERT_RATIO``,
    ``RECRAWLER_CHANGE_ALERT_MIN``, ``RECRAWLER_DRY_RUN``.
    Stats: ``recrawler/index/{upserted,chunks,restored,error}``, ``recrawler/embed/{texts,calls}``,
    ``recrawler/run/held``. Signals: sends ``page_classified`` after the write.
    """

    def __init__(
        self,
        store: StateStore,
        chunker: Chunker,
        pending: PendingUpdates,
        *,
        crawler: Crawler,
        publish_each_page: bool = False,
        alert_ratio: float = 0.5,
        alert_min: int = 10,
        dry_run: bool = False,
    ) -> None:
        self.store = store
        self.chunker = chunker
        self.pending = pending
        self.crawler = crawler
        self.publish_each_page = publish_each_page and not dry_run
        self.alert_ratio = alert_ratio
        self.alert_min = alert_min
        self._held = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Read settings; from now on ClassifyPipeline hands its pages to this pipeline."""
        if crawler.spider is not None and not meta.spider_opted_in(crawler.spider):
            raise NotConfigured
        s = crawler.settings
        if not s.getbool("RECRAWLER_INDEX_ENABLED"):
            raise NotConfigured("RECRAWLER_INDEX_ENABLED is off")
        pipeline = cls(
            store_for(crawler),
            Chunker(s.getint("RECRAWLER_CHUNK_SIZE"), s.getint("RECRAWLER_CHUNK_OVERLAP")),
            enable_handover(crawler),
            crawler=crawler,
            publish_each_page=publish_mode(s) == "page",
            alert_ratio=s.getfloat("RECRAWLER_CHANGE_ALERT_RATIO"),
            alert_min=s.getint("RECRAWLER_CHANGE_ALERT_MIN"),
            dry_run=s.getbool("RECRAWLER_DRY_RUN"),
        )
        embedder_for(crawler)  # a bad RECRAWLER_EMBEDDER stops the crawl before it starts
        return pipeline

    @property
    def _stats(self) -> StatsCollector:
        stats = self.crawler.stats
        assert stats is not None
        return stats

    async def open_spider(self) -> None:
        """Begin the run (published from the start when each page publishes itself)."""
        await run_for(self.crawler)

    async def process_item(self, item: Any) -> Any:
        """Add the page's chunks to its pending update and write both."""
        if not isinstance(item, Page):
            return item
        update = self.pending.pop(item.key)
        if update is None:
            return item  # an error page, or one ClassifyPipeline already wrote
        run = await run_for(self.crawler)
        chunks: list[Chunk] | None = None
        restore = False
        if item.text and (update.status in (PageStatus.NEW, PageStatus.CHANGED) or update.backfill):
            chunks = self.chunker.chunk(item.text, key=item.key, url=item.url, headings=item.headings)
        elif update.restored:
            restore = True
            self._stats.inc_value("recrawler/index/restored")
        if chunks is not None:
            update.record = dataclasses.replace(update.record, chunks=len(chunks))
        embeddings: list[tuple[str, str, bytes]] = []
        if chunks and self.publish_each_page and not self._held:
            embeddings = await self._embed(chunks)
        page = await commit(
            self.crawler, self.store, run, update, chunks=chunks, restore=restore, embeddings=embeddings
        )
        if self.publish_each_page and not self._held:
            await self._check_spike(run)
        return page

    async def _embed(self, chunks: list[Chunk]) -> list[tuple[str, str, bytes]]:
        """Embed the chunk texts the cache does not hold yet (page mode only)."""
        embedder = embedder_for(self.crawler)
        unique = {c.chunk_hash: c.text for c in chunks}
        try:
            missing = await self.store.missing_for(embedder.id, list(unique))
            if not missing:
                return []
            texts = [unique[h] for h in missing]
            calls = embedder.calls
            vectors = await asyncio.to_thread(embedder.embed, texts)
        except (EmbedderError, StateStoreError) as exc:
            self._stats.inc_value("recrawler/index/error")
            logger.error("embedding failed, page not indexed: %(exc)s", {"exc": exc})
            raise DropItem(f"embedding failed: {exc}") from exc
        self._stats.inc_value("recrawler/embed/texts", len(texts))
        self._stats.inc_value("recrawler/embed/calls", embedder.calls - calls)
        return [(embedder.id, h, vector_to_blob(v)) for h, v in zip(missing, vectors, strict=True)]

    async def _check_spike(self, run: Run) -> None:
        """Page mode decides early: hold the run the moment its changes look like a spike."""
        stats = self.crawler.stats
        assert stats is not None
        new_changed = int(stats.get_value("recrawler/page/new", 0)) + int(
            stats.get_value("recrawler/page/changed", 0)
        )
        crawled = sum(
            int(stats.get_value(f"recrawler/page/{s}", 0))
            for s in (PageStatus.NEW, PageStatus.CHANGED, PageStatus.UNCHANGED)
        )
        # pages a layer skipped count as unchanged (as in the Reconciler's report)
        crawled += int(stats.get_value("recrawler/page/skipped", 0))
        if spike(run, new_changed, crawled, ratio=self.alert_ratio, minimum=self.alert_min):
            self._held = True
            await self.store.set_run_state(run.id, RUN_HELD)
            stats.set_value("recrawler/run/held", 1)
            logger.warning(
                "change spike: %(n)d of %(c)d pages new or changed; run %(run)d held, "
                "nothing more is embedded (recrawler runs approve %(run)d / discard %(run)d)",
                {"n": new_changed, "c": crawled, "run": run.id},
            )


__all__ = [
    "IndexPipeline",
    "embed_missing",
    "embedder_for",
    "embedder_from_settings",
    "publish_mode",
    "spike",
]
