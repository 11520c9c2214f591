"""ClassifyPipeline: new / changed / unchanged against stored state, noise taken out first."""

from __future__ import annotations

import dataclasses
import difflib
import logging
from typing import TYPE_CHECKING, Any, Self

from scrapy import Request
from scrapy.exceptions import DropItem

from recrawler import meta
from recrawler.detect import decide, fingerprint
from recrawler.detect.hashing import pack_blocks
from recrawler.detect.verdict import BY_HASH, RESTORED, Verdict
from recrawler.exceptions import ConfigurationError, StateStoreError
from recrawler.items import Page, PageStatus, Unread
from recrawler.pipelines import PageUpdate, commit
from recrawler.runtime import runtime_of
from recrawler.state import (
    GONE,
    LIVE,
    MOVED,
    PENDING_CHANGED,
    PENDING_NEW,
    QUARANTINED,
    ChangeRow,
    Event,
    FieldsRow,
    PageRecord,
    utcnow,
)
from recrawler.urls import key_host

if TYPE_CHECKING:
    from collections.abc import Mapping
    from datetime import datetime

    from scrapy.crawler import Crawler

    from recrawler.cpu import Worked
    from recrawler.detect import Fingerprint, SiteNoise
    from recrawler.learning import NoiseRegistry
    from recrawler.runtime import Runtime
    from recrawler.state import Run, StateStore

logger = logging.getLogger(__name__)

#: stored states of a page that is out of the knowledge base for good
_REMOVED = (GONE, MOVED)


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
    )


def _threshold(value: Any, setting: str) -> int | None:
    if value in (None, "", "None", "none", "off"):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = -1
    if number < 0:
        raise ConfigurationError(
            f"{setting}: expected a TLSH distance (an integer >= 0) or None, got {value!r}"
        )
    return number


class ClassifyPipeline:
    """Classifies each Page against its stored state, with site noise taken out first: volatile
    tokens normalised, learned volatile regions dropped, the site's furniture (blocks chained to a
    page edge by boilerplate block pairs) left out of the hash; optionally a TLSH match (with the
    critical-token guard) counts as unchanged. Changes go to the page's append-only history with
    the fields that changed and a capped diff.

    The page's stored state comes on the item (``Page.record``, read on its request's way) or is
    read here. A page's state is written only once it is classified: here, or, while IndexPipeline
    keeps the knowledge base (``RECRAWLER_INDEX_ENABLED``, the pipeline among ``ITEM_PIPELINES``),
    there with its chunks, the decision riding on the item (``Page.update``); a failed write leaves
    the old state, so the page is checked again next run. Error pages (``Page.error``) leave state
    untouched.

    Settings: ``RECRAWLER_DB_URI``, ``RECRAWLER_INDEX_ENABLED``, ``ITEM_PIPELINES``,
    ``RECRAWLER_FUZZY_THRESHOLD``, ``RECRAWLER_FUZZY_THRESHOLDS``,
    ``RECRAWLER_DIFF_MAX_BYTES``, ``RECRAWLER_VOLATILE_*``, ``RECRAWLER_BOILERPLATE_*``.
    Stats: ``recrawler/page/{new,changed,unchanged,restored,error}``,
    ``recrawler/page/unchanged/{not_modified,hash,rebaseline,fuzzy}``,
    ``recrawler/page/changed/guard``, ``recrawler/page/error/<reason>``,
    ``recrawler/volatile/{recheck,learned}``, ``recrawler/state/error/<Exception>``.
    Signals: sends ``page_classified`` (through the write).
    """

    def __init__(
        self,
        store: StateStore,
        crawler: Crawler | None = None,
        *,
        noise: NoiseRegistry | None = None,
        threshold: int | None = None,
        thresholds: Mapping[str, int | None] | None = None,
        diff_limit: int = 20_000,
        learn: bool = True,
        indexing: bool = False,
        runtime: Runtime | None = None,
    ) -> None:
        self.store = store
        self.crawler = crawler
        self.runtime = runtime
        self.noise = noise
        self.threshold = threshold
        self.thresholds = dict(thresholds or {})
        self.diff_limit = diff_limit
        self.learn = learn
        #: IndexPipeline writes each page (with its chunks): the decision goes on with the item
        self.indexing = indexing

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Use the crawler's single store and noise registry."""
        meta.require_opt_in(crawler)
        s = crawler.settings
        thresholds = {
            str(site): _threshold(v, "RECRAWLER_FUZZY_THRESHOLDS")
            for site, v in s.getdict("RECRAWLER_FUZZY_THRESHOLDS").items()
        }
        runtime = runtime_of(crawler)
        return cls(
            runtime.store,
            crawler,
            noise=runtime.noise,
            threshold=_threshold(s.get("RECRAWLER_FUZZY_THRESHOLD"), "RECRAWLER_FUZZY_THRESHOLD"),
            thresholds=thresholds,
            diff_limit=s.getint("RECRAWLER_DIFF_MAX_BYTES"),
            learn=s.getbool("RECRAWLER_VOLATILE_ENABLED") and s.getbool("RECRAWLER_VOLATILE_LEARN"),
            indexing=meta.indexes_pages(s),
            runtime=runtime,
        )

    def _inc(self, name: str, count: int = 1) -> None:
        if self.runtime is not None:
            self.runtime.counters.inc(name, count)

    async def process_item(self, item: Any) -> Any:
        """Classify a Page; other items pass through untouched."""
        if not isinstance(item, Page):
            return item
        assert self.runtime is not None
        run = self.runtime.run
        if run is None:
            raise DropItem("the recrawler run did not begin")
        now = utcnow()
        if item.error:
            return await self._error(run, item, now)
        rec: PageRecord | Unread | None = item.record
        if rec is Unread.UNREAD:
            try:
                rec = await self.store.get(item.key)
            except StateStoreError as exc:
                # A read failure is treated as "no record" (the page is then new; nothing is lost).
                self._inc(f"recrawler/state/error/{type(exc).__name__}")
                logger.error("state read failed for %(url)s: %(exc)s", {"url": item.url, "exc": exc})
                rec = None
        if item.http_status == 304 and (rec is None or rec.status in _REMOVED):
            item.error = "not_modified_without_record"
            return await self._error(run, item, now)
        site = key_host(item.key)
        noise = fp = old = None
        if item.http_status != 304 and self.noise is not None:
            noise = await self.noise.ensure(site, self.store)
            if item.learned_regions:
                new = await self.store.add_regions(
                    site, item.learned_regions, source="recheck", learned_from=item.url, at=now
                )
                self._inc("recrawler/volatile/learned", new)
                noise = self.noise.site(site)
            assert item.text is not None
            worked: Worked | None = item.worked
            if worked is not None and worked.noise is noise and worked.fingerprint is not None:
                # made with the page's other CPU work, under this very model
                fp = worked.fingerprint
            else:
                fp = await self.runtime.offload(fingerprint, item.text, noise)
            if (
                rec is not None
                and rec.pending == PENDING_CHANGED
                and rec.status == LIVE
                and fp.content_hash != rec.content_hash
                and fp.content_hash == rec.published_hash
            ):
                # back to what the knowledge base shows: what the unpublished runs saw is undone
                return await self._revert(run, item, rec, fp, noise, now)
            if rec is not None and rec.status not in _REMOVED and fp.content_hash != rec.content_hash:
                old = await self._old_fields(item)
                if self._recheck(item, rec, old):
                    item.worked = None
                    return item
        threshold = self.thresholds.get(site, self.threshold)
        verdict = decide(item, rec, fp, noise, old, threshold=threshold)
        return await self._write(run, item, rec, verdict, fp, noise, old, now)

    async def _old_fields(self, item: Page) -> FieldsRow | None:
        try:
            return await self.store.get_fields(item.key)
        except StateStoreError as exc:
            self._inc(f"recrawler/state/error/{type(exc).__name__}")
            return None

    def _recheck(self, item: Page, rec: PageRecord, old: FieldsRow | None) -> bool:
        """The server says "same entity" but the text moved: fetch again at once and learn the
        regions that differ between the two fetches (volatile noise), then decide."""
        if not self.learn or item.rechecked or self.crawler is None or self.crawler.engine is None:
            # one re-fetch per page and run: a page that still differs is decided as it is
            return False
        same_validator = (item.etag and item.etag == rec.etag) or (
            item.last_modified and item.last_modified == rec.last_modified and not item.etag
        )
        if not same_validator or item.raw_body is None:
            return False
        spider = self.crawler.spider
        callback = getattr(spider, "recrawler_verify_callback", None) or getattr(spider, "parse", None)
        self.crawler.engine.crawl(
            Request(
                item.url,
                callback=callback,
                dont_filter=True,
                meta={
                    meta.KEY: item.key,
                    meta.ENABLED: True,
                    meta.FIRST_BODY: item.raw_body,
                    meta.DEPTH: item.found_depth,
                },
            )
        )
        self._inc("recrawler/volatile/recheck")
        return True

    async def _write(
        self,
        run: Run,
        item: Page,
        rec: PageRecord | None,
        verdict: Verdict,
        fp: Fingerprint | None,
        noise: SiteNoise | None,
        old: FieldsRow | None,
        now: datetime,
    ) -> Any:
        assert self.crawler is not None
        status = verdict.status
        new_rec = next_record(
            item, rec, verdict, now, fp, noise.key if noise else None, run.id, each_page=run.each_page
        )
        if fp is not None:
            item.content_hash = new_rec.content_hash
        restored = rec is not None and (rec.status == QUARANTINED or verdict.how == RESTORED)
        changed = None
        if (
            old is not None
            and status in (PageStatus.CHANGED, PageStatus.UNCHANGED)
            and verdict.how != BY_HASH
        ):
            changed = ChangeRow(
                key=item.key,
                url=item.url,
                at=now,
                verdict="changed" if status == PageStatus.CHANGED else f"unchanged_{verdict.how}",
                old_hash=rec.content_hash if rec else None,
                new_hash=fp.content_hash if fp else None,
                changed_fields=changed_fields(old, item),
                distance=verdict.distance,
                critical=verdict.critical,
                diff=unified_diff(old.text, item.text or "", url=item.url, limit=self.diff_limit),
                old_blocks=old.blocks,
            )
        events = []
        if restored:
            events.append(self._event(run, PageStatus.RESTORED, new_rec, now))
        if status in (PageStatus.NEW, PageStatus.CHANGED):
            extra = {"changed_fields": changed.changed_fields} if changed else {}
            events.append(self._event(run, status, new_rec, now, extra))
        if verdict.guarded:
            self._inc("recrawler/page/changed/guard")
        fields = None
        if fp is not None and (verdict.advance or status == PageStatus.NEW):
            # the stored forms a worker made with this very fingerprint (else the write makes them)
            worked = item.worked if item.worked is not None and item.worked.fingerprint is fp else None
            fields = FieldsRow(
                title=item.title or "",
                headings=[h[1] for h in item.headings],
                code=list(item.code),
                links=[list(x) for x in item.links],
                text=item.text or "",
                blocks=pack_blocks(fp.blocks),
                samples=fp.samples,
                packed_text=worked.packed_text if worked is not None else None,
                samples_json=worked.samples_json if worked is not None else None,
            )
        update = PageUpdate(
            status=status,
            how=verdict.how,
            record=new_rec,
            events=events,
            restored=restored,
            fields=fields,
            change=changed,
            # stored before the knowledge base existed, or removed and back: index it now that
            # its text is here (the same texts cost no embedding)
            backfill=status == PageStatus.UNCHANGED
            and bool(item.text)
            and rec is not None
            and (rec.chunks == 0 or verdict.how == RESTORED),
        )
        return await self._hand_over(run, item, update)

    async def _revert(
        self, run: Run, item: Page, rec: PageRecord, fp: Fingerprint, noise: SiteNoise | None, now: datetime
    ) -> Any:
        verdict = Verdict(status=PageStatus.UNCHANGED, how=BY_HASH)
        new_rec = next_record(item, rec, verdict, now, fp, noise.key if noise else None, run.id)
        item.content_hash = new_rec.content_hash
        update = PageUpdate(
            status=PageStatus.UNCHANGED,
            how=BY_HASH,
            record=dataclasses.replace(new_rec, pending=None),
            revert=True,
        )
        self._inc("recrawler/page/reverted")
        return await self._hand_over(run, item, update)

    async def _hand_over(self, run: Run, item: Page, update: PageUpdate) -> Any:
        status = update.status
        item.raw_body = None
        assert self.runtime is not None
        if self.indexing:
            # IndexPipeline adds the page's chunks (the worker's, if made) and writes everything
            # in one transaction
            item.update = update
            item.status = status
            return item
        item.worked = None
        return await commit(self.runtime, run, item, update)

    @staticmethod
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
        item.raw_body = item.worked = None
        return item
