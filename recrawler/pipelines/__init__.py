"""Item pipelines: ClassifyPipeline decides, IndexPipeline (when enabled) adds the knowledge base;
the decision rides on the Page, and whichever runs last writes the page's state, chunks and
events in one transaction."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy.exceptions import DropItem

from recrawler import signals
from recrawler.exceptions import StateStoreError
from recrawler.items import PageStatus
from recrawler.pipelines.handover import PageUpdate

if TYPE_CHECKING:
    from collections.abc import Sequence

    from recrawler.items import Page
    from recrawler.kb.chunking import Chunk
    from recrawler.runtime import Runtime
    from recrawler.state import Run

logger = logging.getLogger(__name__)


async def commit(
    runtime: Runtime,
    run: Run,
    page: Page,
    update: PageUpdate,
    *,
    chunks: Sequence[Chunk] | None = None,
    restore: bool = False,
    embeddings: Sequence[tuple[str, str, bytes]] = (),
) -> Page:
    """Write *page*'s *update* (its state and events), knowledge-base rows and next revisit (when
    the schedule is on) in one transaction; count; signal.

    A failed write leaves the old state (the page is checked again next run) and drops the item.
    """
    counters, store = runtime.counters, runtime.store
    status = update.status
    how = update.how or ("not_modified" if page.http_status == 304 else "hash")
    outcome = [str(status)]
    if status == PageStatus.UNCHANGED:
        outcome.append(f"{status}/{how}")
    if status == PageStatus.NEW and page.moved_from:
        outcome.append(f"{status}/moved_in")
    if update.restored:
        outcome.append(str(PageStatus.RESTORED))
    revisits = runtime.revisits
    revisit = revisits.revisit_update(page, status) if revisits is not None else None
    try:
        before = await store.record(
            run,
            update.record,
            update.events,
            chunks=chunks,
            restore=restore,
            revert=update.revert,
            embeddings=embeddings,
            fields=update.fields,
            change=update.change,
            outcome=outcome,
            revisit=revisit,
        )
    except StateStoreError as exc:
        # the store counts the page as lost (the summary's write_failed); each reason is logged
        # once a run, then only counted (a database gone mid-run fails every page after it)
        reason = type(exc).__name__
        counters.inc(f"recrawler/state/error/{reason}")
        if runtime.first(f"write_failed/{reason}"):
            logger.error(
                "state write failed for %(url)s: %(exc)s; further %(reason)s write failures are only counted",
                {"url": page.url, "exc": exc, "reason": reason},
            )
            raise DropItem(f"state write failed: {exc}") from exc
        raise DropItem(f"state write failed: {exc}", log_level="DEBUG") from exc
    page.status = status
    # live monitoring; the run's report counts what committed (the store's outcomes)
    for label in outcome:
        counters.inc(f"recrawler/page/{label}")
    if chunks is not None:
        counters.inc("recrawler/index/upserted")
        counters.inc("recrawler/index/chunks", len(chunks))
    if revisits is not None and revisit is not None:
        await revisits.checked(page, status, before)
    await runtime.crawler.signals.send_catch_log_async(signals.page_classified, page=page, status=status)
    return page


__all__: list[str] = ["PageUpdate", "commit"]
