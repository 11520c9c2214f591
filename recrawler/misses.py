"""A page request's failed outcomes: a 404/410 or a soft 404 staged as a miss, an error recorded."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from recrawler.exceptions import StateStoreError, StateStoreLost
from recrawler.items import PageStatus
from recrawler.state import Event, utcnow

if TYPE_CHECKING:
    from recrawler.runtime import Runtime

logger = logging.getLogger(__name__)

__all__ = ["miss_moves", "record_page_error", "stage_miss", "stage_soft_miss", "state_error"]


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
        staged = await runtime.store.pages.record_miss(run, key, 404)
    except StateStoreError as exc:
        state_error(runtime, exc, "state store write")
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
            await runtime.store.pages.record_error(run, key, [event])
        except StateStoreError as exc:
            state_error(runtime, exc, "state store write")
    logger.debug("soft 404 (%(shape)s): %(url)s", {"shape": shape, "url": url})
    return staged


async def miss_moves(runtime: Runtime, target: str, status: int, *, soft: str | None = None) -> int:
    """The run's staged moves to page *target*, which answered that it is not there (*status*, or
    a soft 404 of shape *soft*), become misses of the pages moving there; returns how many."""
    run = runtime.run
    if run is None:
        return 0
    try:
        n = await runtime.store.pages.miss_moves(run, target, http_status=status)
    except StateStoreError as exc:
        state_error(runtime, exc)
        return 0
    if n:
        if soft is not None:
            runtime.counters.inc("recrawler/page/soft_404", n)
            runtime.counters.inc(f"recrawler/page/soft_404/{soft}", n)
            runtime.counters.inc("recrawler/page/missing/soft_404", n)
        else:
            runtime.counters.inc(f"recrawler/page/missing/http_{status}", n)
    return n


def state_error(
    runtime: Runtime | None, exc: StateStoreError, doing: str = "state store read", url: str | None = None
) -> None:
    """Count a state store failure that the run goes on without (``recrawler/state/error/<Name>``):
    the first of each kind a run is one ERROR line, the rest DEBUG (a database gone mid-run fails
    every page's read and write: one cause, one line, and the count)."""
    name = type(exc).__name__
    about = f" for {url}" if url else ""
    if runtime is None:
        logger.error("%(doing)s failed%(about)s: %(exc)s", {"doing": doing, "about": about, "exc": exc})
        return
    runtime.counters.state_error(exc)
    # a database lost mid-run was said once, by the store, when it noticed
    if not isinstance(exc, StateStoreLost) and runtime.counters.first(f"state/error/{name}"):
        logger.error(
            "%(doing)s failed%(about)s: %(exc)s; more %(name)s failures are only counted "
            "(recrawler/state/error/%(name)s)",
            {"doing": doing, "about": about, "exc": exc, "name": name},
        )
    else:
        logger.debug("%(doing)s failed%(about)s: %(exc)s", {"doing": doing, "about": about, "exc": exc})


async def stage_miss(runtime: Runtime, key: str, url: str, status: int) -> None:
    """Stage a 404/410 (a status of ``RECRAWLER_MISSING_STATUSES`` / ``RECRAWLER_GONE_STATUSES``)
    of page *key* for the Reconciler; a gone page answering it again is a tombstone, an unknown
    URL an error (a broken listing, not a page)."""
    run = runtime.run
    if run is None:
        return
    try:
        staged = await runtime.store.pages.record_miss(run, key, status)
    except StateStoreError as exc:
        state_error(runtime, exc)
        return
    if staged == "staged":
        runtime.counters.inc(f"recrawler/page/missing/http_{status}")
    elif staged == "tombstone":
        # A gone page still answering 404/410: nothing new; not a page check either.
        runtime.counters.inc("recrawler/page/tombstone")
    else:
        await record_page_error(runtime, key, url, f"http_{status}", http_status=status)


async def record_page_error(
    runtime: Runtime, key: str, url: str, reason: str, *, http_status: int | None = None
) -> None:
    """Count a page request that ended in an error (``recrawler/page/error/<reason>``) and record
    its event: uncertainty, which changes nothing else."""
    runtime.counters.inc(f"recrawler/page/{PageStatus.ERROR}")
    runtime.counters.inc(f"recrawler/page/{PageStatus.ERROR}/{reason}")
    logger.debug("page error %(reason)s: %(url)s", {"reason": reason, "url": url})
    run = runtime.run
    if run is None:
        return
    event = Event(
        run_id=run.id,
        action=PageStatus.ERROR,
        url=url,
        key=key,
        content_hash=None,
        status=PageStatus.ERROR,
        at=utcnow(),
        reason=reason,
        http_status=http_status,
    )
    try:
        await runtime.store.pages.record_error(run, key, [event])
    except StateStoreError as exc:
        state_error(runtime, exc)
