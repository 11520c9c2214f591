"""Staging a soft 404 as a miss: what a 404 would stage, from wherever the soft 404 was found."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from recrawler.exceptions import StateStoreError
from recrawler.items import PageStatus
from recrawler.state import Event, utcnow

if TYPE_CHECKING:
    from recrawler.runtime import Runtime

logger = logging.getLogger(__name__)

__all__ = ["stage_soft_miss"]


async def stage_soft_miss(
    runtime: Runtime, key: str, url: str, shape: str, *, error_if_unknown: bool = True
) -> str:
    """Stage a soft 404 of page *key* as a miss, as a 404 would be (quarantined when the run
    reconciles, gone after ``RECRAWLER_GONE_AFTER_MISSES``); a page never stored is an error
    (``soft_404``). Returns the store's answer (``staged``, ``tombstone``, ``unknown``)."""
    counters, run = runtime.counters, runtime.run
    if run is None:
        return "unknown"
    counters.inc("recrawler/page/soft_404")
    counters.inc(f"recrawler/page/soft_404/{shape}")
    try:
        staged = await runtime.store.record_miss(run, key, 404)
    except StateStoreError as exc:
        counters.inc(f"recrawler/state/error/{type(exc).__name__}")
        logger.error("state store write failed: %(exc)s", {"exc": exc})
        return "unknown"
    if staged == "staged":
        counters.inc("recrawler/page/missing/soft_404")
    elif staged == "tombstone":
        counters.inc("recrawler/page/tombstone")
    elif error_if_unknown:
        counters.inc(f"recrawler/page/{PageStatus.ERROR}")
        counters.inc(f"recrawler/page/{PageStatus.ERROR}/soft_404")
        event = Event(
            run_id=run.id,
            action=PageStatus.ERROR,
            url=url,
            key=key,
            content_hash=None,
            status=PageStatus.ERROR,
            at=utcnow(),
            reason="soft_404",
            http_status=200,
        )
        try:
            await runtime.store.record_error(run, key, [event])
        except StateStoreError as exc:
            counters.inc(f"recrawler/state/error/{type(exc).__name__}")
            logger.error("state store write failed: %(exc)s", {"exc": exc})
    logger.debug("soft 404 (%(shape)s): %(url)s", {"shape": shape, "url": url})
    return staged
