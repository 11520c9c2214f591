"""The commit step: a page's verdict as its update (state, history, events, fields), handed to
IndexPipeline on the Page or written at once, in one transaction."""

from __future__ import annotations

import dataclasses
import difflib
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scrapy.exceptions import DropItem

from recrawler import signals
from recrawler.detect.hashing import pack_blocks
from recrawler.detect.verdict import BY_HASH, RESTORED
from recrawler.exceptions import StateStoreError, StateStoreLost
from recrawler.items import PageStatus
from recrawler.state import (
    LIVE,
    PENDING_CHANGED,
    PENDING_NEW,
    QUARANTINED,
    ChangeRow,
    Event,
    FieldsRow,
    PageRecord,
)
from recrawler.urls import key_host

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    from recrawler.detect import Fingerprint, Verdict
    from recrawler.items import Page
    from recrawler.kb.chunking import Chunk
    from recrawler.revisits import Revisits
    from recrawler.runtime import Runtime
    from recrawler.state import Run

logger = logging.getLogger(__name__)


@dataclass(slots=True, kw_only=True)
class PageUpdate:
    """What ClassifyPipeline decided for a page, waiting to be written with it (``Page.update``
    carries it to IndexPipeline when the knowledge base is kept)."""

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
    #: the page answers with what the knowledge base shows again: what unpublished runs changed
    #: of it is undone
    revert: bool = False


def changed_fields(old: FieldsRow, page: Page) -> list[str]:
    """Which of title, headings, code, links and text differ."""
    out = []
    if (old.title or "") != (page.title or ""):
        out.append("title")
    if old.headings != [h[1] for h in page.headings]:
        out.append("headings")
    if old.code != list(page.code):
        out.append("code")
    if old.links != [list(x) for x in page.links]:
        out.append("links")
    if old.text != (page.text or ""):
        out.append("text")
    return out


def unified_diff(old: str, new: str, *, url: str, limit: int) -> str:
    """A unified diff of two texts, capped at *limit* characters."""
    diff = "\n".join(
        difflib.unified_diff(old.splitlines(), new.splitlines(), "before", "after", n=2, lineterm="")
    )
    if len(diff) > limit:
        diff = diff[:limit] + f"\n... diff truncated at {limit} characters ({url})"
    return diff


def pending_after(rec: PageRecord | None, verdict: Verdict, *, each_page: bool) -> str | None:
    """Whether the page's new state waits for a publication: ``new`` (the knowledge base never
    held it), ``changed`` (it shows an earlier state), None (published, or nothing moved)."""
    if each_page:
        return None
    if rec is None:
        return PENDING_NEW
    moved = verdict.status in (PageStatus.NEW, PageStatus.CHANGED) or rec.status != LIVE
    return rec.pending or (PENDING_CHANGED if moved else None)


def next_record(
    page: Page,
    rec: PageRecord | None,
    verdict: Verdict,
    now: datetime,
    fp: Fingerprint | None = None,
    noise_key: str | None = None,
    run_id: int | None = None,
    *,
    each_page: bool = True,
) -> PageRecord:
    """Build the page's new stored state (*each_page*: published as it is written)."""
    pending = pending_after(rec, verdict, each_page=each_page)
    if page.http_status == 304:
        assert rec is not None
        # RFC 9110 §15.4.5: a 304 carries the validators a 200 would have had; keep ours otherwise.
        return dataclasses.replace(
            rec,
            pending=pending,
            url=page.url,
            etag=page.etag or rec.etag,
            last_modified=page.last_modified or rec.last_modified,
            lastmod=page.lastmod or rec.lastmod,
            status=LIVE,
            misses=0,
            last_checked=now,
            found_depth=page.found_depth,
            moved_to=None,
            # no body: what the URL pattern names, else what the page said when last read
            version=page.version or rec.version,
            lang=page.lang or rec.lang,
        )
    changed = verdict.status in (PageStatus.NEW, PageStatus.CHANGED)
    keep_old = rec is not None and not verdict.advance
    return PageRecord(
        key=page.key,
        site=key_host(page.key),
        url=page.url,
        # a 200 refreshes the validators, dropping those the server no longer sends
        etag=page.etag,
        last_modified=page.last_modified,
        lastmod=page.lastmod or (rec.lastmod if rec else None),
        # a fuzzy "unchanged" keeps the old baseline, so small drifts add up and get caught
        content_hash=rec.content_hash if keep_old and rec else (fp.content_hash if fp else page.content_hash),
        fuzzy_hash=rec.fuzzy_hash if keep_old and rec else (fp.fuzzy_hash if fp else None),
        title=rec.title if keep_old and rec else page.title,
        status=LIVE,
        misses=0,
        first_seen=rec.first_seen if rec else now,
        last_checked=now,
        last_changed=now if changed else (rec.last_changed if rec else now),
        chunks=rec.chunks if rec else 0,
        noise_key=rec.noise_key if keep_old and rec else noise_key,
        found_depth=page.found_depth,
        moved_to=None,
        changed_run=run_id if changed else (rec.changed_run if rec else None),
        pending=pending,
        version=page.version,
        lang=page.lang,
    )


def _event(
    run: Run, action: PageStatus, rec: PageRecord, now: datetime, extra: dict[str, Any] | None = None
) -> Event:
    return Event(
        run_id=run.id,
        action=action,
        url=rec.url,
        key=rec.key,
        content_hash=rec.content_hash,
        status=rec.status,
        at=now,
        extra={**({"title": rec.title} if rec.title else {}), **(extra or {})},
    )


def page_update(
    page: Page,
    rec: PageRecord | None,
    verdict: Verdict,
    *,
    run: Run,
    now: datetime,
    fp: Fingerprint | None,
    noise_key: str | None,
    old: FieldsRow | None,
    diff_limit: int,
    revert: bool = False,
) -> PageUpdate:
    """The update *verdict* makes of *page* (stored as *rec*, its field record *old*): its next
    record, events, field record and history entry (a diff capped at *diff_limit* characters).

    *revert*: the page shows what the knowledge base shows again (an unchanged verdict by hash):
    its state is published at once and keeps its stored fields.
    """
    if revert:
        assert rec is not None
        new_rec = next_record(page, rec, verdict, now, fp, noise_key, run.id)
        page.content_hash = new_rec.content_hash
        return PageUpdate(
            status=verdict.status,
            how=verdict.how,
            record=dataclasses.replace(new_rec, pending=None),
            revert=True,
        )
    status = verdict.status
    new_rec = next_record(page, rec, verdict, now, fp, noise_key, run.id, each_page=run.each_page)
    if fp is not None:
        page.content_hash = new_rec.content_hash
    restored = rec is not None and (rec.status == QUARANTINED or verdict.how == RESTORED)
    changed = None
    if old is not None and status in (PageStatus.CHANGED, PageStatus.UNCHANGED) and verdict.how != BY_HASH:
        changed = ChangeRow(
            key=page.key,
            url=page.url,
            at=now,
            verdict="changed" if status == PageStatus.CHANGED else f"unchanged_{verdict.how}",
            old_hash=rec.content_hash if rec else None,
            new_hash=fp.content_hash if fp else None,
            changed_fields=changed_fields(old, page),
            distance=verdict.distance,
            critical=verdict.critical,
            diff=unified_diff(old.text, page.text or "", url=page.url, limit=diff_limit),
            old_blocks=old.blocks,
        )
    events = []
    if restored:
        events.append(_event(run, PageStatus.RESTORED, new_rec, now))
    if status in (PageStatus.NEW, PageStatus.CHANGED):
        extra = {"changed_fields": changed.changed_fields} if changed else {}
        events.append(_event(run, status, new_rec, now, extra))
    fields = None
    if fp is not None and (verdict.advance or status == PageStatus.NEW):
        # the stored forms a worker made with this very fingerprint (else the write makes them)
        worked = page.worked if page.worked is not None and page.worked.fingerprint is fp else None
        fields = FieldsRow(
            title=page.title or "",
            headings=[h[1] for h in page.headings],
            code=list(page.code),
            links=[list(x) for x in page.links],
            text=page.text or "",
            blocks=pack_blocks(fp.blocks),
            samples=fp.samples,
            packed_text=worked.packed_text if worked is not None else None,
            samples_json=worked.samples_json if worked is not None else None,
        )
    return PageUpdate(
        status=status,
        how=verdict.how,
        record=new_rec,
        events=events,
        restored=restored,
        fields=fields,
        change=changed,
        # stored before the knowledge base existed, removed and back, or re-baselined to a new
        # text format: index it now that its text is here (the same texts cost no embedding)
        backfill=status == PageStatus.UNCHANGED
        and bool(page.text)
        and rec is not None
        and (rec.chunks == 0 or verdict.how == RESTORED or verdict.reindex),
    )


async def hand_over(
    runtime: Runtime,
    run: Run,
    page: Page,
    update: PageUpdate,
    *,
    indexing: bool,
    revisits: Revisits | None = None,
) -> Page:
    """Hand *page*'s *update* on: to IndexPipeline on the Page (*indexing*: it adds the page's
    chunks, the worker's if made, and writes everything in one transaction), else commit it now."""
    page.raw_body = None
    if indexing:
        page.update = update
        page.status = update.status
        return page
    page.worked = None
    return await commit(runtime, run, page, update, revisits=revisits)


async def commit(
    runtime: Runtime,
    run: Run,
    page: Page,
    update: PageUpdate,
    *,
    chunks: Sequence[Chunk] | None = None,
    restore: bool = False,
    embeddings: Sequence[tuple[str, str, bytes]] = (),
    revisits: Revisits | None = None,
) -> Page:
    """Write *page*'s *update* (its state and events), knowledge-base rows and next revisit (the
    *revisits* collaborator: the schedule is on) in one transaction; count; signal.

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
    if page.loan is not None and page.loan.shared:
        # lent an address many pages were sent to since its answer passed the redirects: a soft
        # 404, whose miss PageRedirectMiddleware staged (checked here, where the write is queued)
        raise DropItem("a soft 404 (redirect_shared)", log_level="DEBUG")
    revisit = revisits.revisit_update(page, status) if revisits is not None else None
    try:
        before = await store.pages.record(
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
        counters.state_error(exc)
        # a database lost mid-run was said once, by the store, when it noticed
        if not isinstance(exc, StateStoreLost) and runtime.counters.first(f"write_failed/{reason}"):
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


__all__ = [
    "PageUpdate",
    "changed_fields",
    "commit",
    "hand_over",
    "next_record",
    "page_update",
    "pending_after",
    "unified_diff",
]
