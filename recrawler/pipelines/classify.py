"""ClassifyPipeline: new / changed / unchanged against stored state, written with its events."""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any, Self

from recrawler.exceptions import StateStoreError
from recrawler.fingerprint import fuzzy_hash
from recrawler.items import Page, PageStatus
from recrawler.pipelines import PageUpdate, commit, pending_for
from recrawler.state import (
    GONE,
    LIVE,
    QUARANTINED,
    Event,
    PageRecord,
    RecordHints,
    hints_for,
    run_for,
    store_for,
    utcnow,
)
from recrawler.urls import key_host

if TYPE_CHECKING:
    from datetime import datetime

    from scrapy.crawler import Crawler

    from recrawler.state import Run, StateStore

logger = logging.getLogger(__name__)


def classify(page: Page, rec: PageRecord | None) -> PageStatus:
    """Return the verdict for *page* against its stored record (pure; errors decided earlier).

    A 304 is unchanged; a 200 is new without a live or quarantined record, changed when the hash
    differs, unchanged when it is equal. Empty text never reaches here (it is an error).
    """
    if rec is None or rec.status == GONE:
        return PageStatus.NEW
    if page.http_status == 304:
        return PageStatus.UNCHANGED
    if rec.content_hash != page.content_hash:
        return PageStatus.CHANGED
    return PageStatus.UNCHANGED


def next_record(page: Page, rec: PageRecord | None, status: PageStatus, now: datetime) -> PageRecord:
    """Build the page's new stored state."""
    if page.http_status == 304:
        assert rec is not None
        # RFC 9110 §15.4.5: a 304 carries the validators a 200 would have had; keep ours otherwise.
        return dataclasses.replace(
            rec,
            url=page.url,
            etag=page.etag or rec.etag,
            last_modified=page.last_modified or rec.last_modified,
            lastmod=page.lastmod or rec.lastmod,
            status=LIVE,
            misses=0,
            last_checked=now,
        )
    changed = status in (PageStatus.NEW, PageStatus.CHANGED)
    return PageRecord(
        key=page.key,
        site=key_host(page.key),
        url=page.url,
        # a 200 refreshes the validators, dropping those the server no longer sends
        etag=page.etag,
        last_modified=page.last_modified,
        lastmod=page.lastmod or (rec.lastmod if rec else None),
        content_hash=page.content_hash,
        # TLSH only where the text moved: an unchanged page keeps its stored digest
        fuzzy_hash=fuzzy_hash(page.text) if changed and page.text else (rec.fuzzy_hash if rec else None),
        title=page.title,
        status=LIVE,
        misses=0,
        first_seen=rec.first_seen if rec else now,
        last_checked=now,
        last_changed=now if changed else (rec.last_changed if rec else now),
    )


class ClassifyPipeline:
    """Classifies each Page and writes its new state and events in one transaction.

    A page's state is written only once it is classified; a failed write leaves the old state,
    so the page is checked again next run. Error pages (``Page.error``) leave state untouched.

    Settings: ``RECRAWLER_DB_URI``. Stats: ``recrawler/page/{new,changed,unchanged,restored,error}``,
    ``recrawler/page/unchanged/{not_modified,hash}``, ``recrawler/page/error/<reason>``,
    ``recrawler/state/error/<Exception>``. Signals: sends ``page_classified``.
    """

    def __init__(self, store: StateStore, crawler: Crawler | None = None) -> None:
        self.store = store
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Use the crawler's single store."""
        return cls(store_for(crawler), crawler)

    async def open_spider(self) -> None:
        """Open the store and begin the run before the first page arrives."""
        if self.crawler is not None:
            await run_for(self.crawler)

    def _inc(self, name: str) -> None:
        if self.crawler is not None and self.crawler.stats is not None:
            self.crawler.stats.inc_value(name)

    async def process_item(self, item: Any) -> Any:
        """Classify a Page; other items pass through untouched."""
        if not isinstance(item, Page):
            return item
        assert self.crawler is not None
        run = await run_for(self.crawler)
        now = utcnow()
        if item.error:
            return await self._error(run, item, now)
        rec = hints_for(self.crawler).pop(item.key)
        try:
            if rec is RecordHints.MISSING:
                rec = await self.store.get(item.key)
        except StateStoreError as exc:
            # A read failure is treated as "no record" (the page is then new; nothing is lost).
            self._inc(f"recrawler/state/error/{type(exc).__name__}")
            logger.error("state read failed for %(url)s: %(exc)s", {"url": item.url, "exc": exc})
            rec = None
        if item.http_status == 304 and (rec is None or rec.status == GONE):
            item.error = "not_modified_without_record"
            return await self._error(run, item, now)
        status = classify(item, rec)
        new_rec = next_record(item, rec, status, now)
        restored = rec is not None and rec.status == QUARANTINED
        events = []
        if restored:
            events.append(self._event(run, PageStatus.RESTORED, new_rec, now))
        if status in (PageStatus.NEW, PageStatus.CHANGED):
            events.append(self._event(run, status, new_rec, now))
        update = PageUpdate(
            page=item,
            status=status,
            record=new_rec,
            events=events,
            restored=restored,
            # stored before the knowledge base existed: index it now that its text is here
            backfill=status == PageStatus.UNCHANGED
            and bool(item.text)
            and rec is not None
            and rec.chunks == 0,
        )
        pending = pending_for(self.crawler)
        if pending is not None:
            # IndexPipeline adds the page's chunks and writes everything in one transaction
            pending.put(update)
            item.status = status
            return item
        return await commit(self.crawler, self.store, run, update)

    @staticmethod
    def _event(run: Run, action: PageStatus, rec: PageRecord, now: datetime) -> Event:
        return Event(
            run_id=run.id,
            action=action,
            url=rec.url,
            key=rec.key,
            content_hash=rec.content_hash,
            status=rec.status,
            at=now,
            extra={"title": rec.title} if rec.title else {},
        )

    async def _error(self, run: Run, item: Page, now: datetime) -> Page:
        reason = item.error or "unknown"
        self._inc(f"recrawler/page/{PageStatus.ERROR}")
        self._inc(f"recrawler/page/{PageStatus.ERROR}/{reason}")
        logger.warning("page error %(reason)s: %(url)s", {"reason": reason, "url": item.url})
        event = Event(
            run_id=run.id,
            action=PageStatus.ERROR,
            url=item.url,
            key=item.key,
            content_hash=None,
            status=PageStatus.ERROR,
            at=now,
            reason=reason,
            http_status=item.http_status,
        )
        try:
            await self.store.record_error(run, item.key, [event])
        except StateStoreError as exc:
            self._inc(f"recrawler/state/error/{type(exc).__name__}")
            logger.error("state write failed for %(url)s: %(exc)s", {"url": item.url, "exc": exc})
        item.status = PageStatus.ERROR
        return item
