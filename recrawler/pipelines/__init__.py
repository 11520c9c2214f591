"""Item pipelines: ClassifyPipeline decides, IndexPipeline (when enabled) adds the knowledge base;
whichever runs last writes the page's state, chunks and events in one transaction."""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from scrapy.exceptions import DropItem

from recrawler import signals
from recrawler.exceptions import StateStoreError
from recrawler.items import PageStatus

if TYPE_CHECKING:
    from collections.abc import Sequence

    from recrawler.items import Page
    from recrawler.kb.chunking import Chunk
    from recrawler.runtime import Runtime
    from recrawler.state import ChangeRow, Event, FieldsRow, PageRecord, Run

logger = logging.getLogger(__name__)


@dataclass(slots=True, kw_only=True)
class PageUpdate:
    """What ClassifyPipeline decided for a page, waiting to be written."""

    page: Page
    status: PageStatus
    record: PageRecord
    #: how an unchanged verdict was reached: not_modified, hash, rebaseline or fuzzy
    how: str = ""
    events: list[Event] = field(default_factory=list)
    #: the page's new field-level record (None: keep the stored one)
    fields: FieldsRow | None = None
    #: an entry for the page's history
    change: ChangeRow | None = None
    #: the page was quarantined and is back: it counts as restored
    restored: bool = False
    #: the page has text but no chunks yet (stored before indexing was on): index it
    backfill: bool = False


class PendingUpdates:
    """Updates handed from ClassifyPipeline to IndexPipeline, by page key; bounded, oldest dropped
    (a dropped update only means the page is checked again next run)."""

    def __init__(self, maxsize: int = 10_000) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[str, PageUpdate] = OrderedDict()

    def put(self, update: PageUpdate) -> None:
        """Hand *update* over."""
        self._data[update.page.key] = update
        if len(self._data) > self.maxsize:
            self._data.popitem(last=False)

    def pop(self, key: str) -> PageUpdate | None:
        """Take the update for *key*."""
        return self._data.pop(key, None)


async def commit(
    runtime: Runtime,
    run: Run,
    update: PageUpdate,
    *,
    chunks: Sequence[Chunk] | None = None,
    restore: bool = False,
    embeddings: Sequence[tuple[str, str, bytes]] = (),
) -> Page:
    """Write a page's state, events and knowledge-base rows in one transaction; count; signal.

    A failed write leaves the old state (the page is checked again next run) and drops the item.
    """
    counters, store = runtime.counters, runtime.store
    page, status = update.page, update.status
    how = update.how or ("not_modified" if page.http_status == 304 else "hash")
    outcome = [str(status)]
    if status == PageStatus.UNCHANGED:
        outcome.append(f"{status}/{how}")
    if status == PageStatus.NEW and page.moved_from:
        outcome.append(f"{status}/moved_in")
    if update.restored:
        outcome.append(str(PageStatus.RESTORED))
    try:
        await store.record(
            run,
            update.record,
            update.events,
            chunks=chunks,
            restore=restore,
            embeddings=embeddings,
            fields=update.fields,
            change=update.change,
            outcome=outcome,
        )
    except StateStoreError as exc:
        counters.inc(f"recrawler/state/error/{type(exc).__name__}")
        logger.error("state write failed for %(url)s: %(exc)s", {"url": page.url, "exc": exc})
        raise DropItem(f"state write failed: {exc}") from exc
    page.status = status
    # live monitoring; the run's report counts what committed (the store's outcomes)
    for label in outcome:
        counters.inc(f"recrawler/page/{label}")
    if chunks is not None:
        counters.inc("recrawler/index/upserted")
        counters.inc("recrawler/index/chunks", len(chunks))
    await runtime.crawler.signals.send_catch_log_async(signals.page_classified, page=page, status=status)
    return page


__all__: list[str] = ["PageUpdate", "PendingUpdates", "commit"]
