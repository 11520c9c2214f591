"""ClassifyPipeline: new / changed / unchanged against stored state, noise taken out first."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Self

from scrapy.exceptions import DropItem

from recrawler import meta
from recrawler.auditor import Auditor
from recrawler.counters import Counting, state_error_key
from recrawler.detect import decide, fingerprint
from recrawler.detect.verdict import BY_HASH, Verdict
from recrawler.exceptions import ConfigurationError, StateStoreError
from recrawler.intervals import SchedulePolicy
from recrawler.items import Page, PageStatus, Unread
from recrawler.learning import NoiseRegistry
from recrawler.misses import state_error
from recrawler.pipelines.commit import hand_over, page_update
from recrawler.revisits import Revisits
from recrawler.runtime import component_of, runtime_of
from recrawler.state import (
    GONE,
    LIVE,
    MOVED,
    PENDING_CHANGED,
    Event,
    utcnow,
)
from recrawler.urls import key_host

if TYPE_CHECKING:
    from collections.abc import Mapping
    from datetime import datetime

    from scrapy.crawler import Crawler

    from recrawler.cpu import Worked
    from recrawler.detect import Fingerprint, SiteNoise
    from recrawler.runtime import Runtime
    from recrawler.state import History, PageRecord, Pages, Run

logger = logging.getLogger(__name__)

#: stored states of a page that is out of the knowledge base for good
_REMOVED = (GONE, MOVED)


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


class ClassifyPipeline(Counting):
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
    ``recrawler/volatile/learned`` (the regions a recheck learned: see RecheckMiddleware),
    ``recrawler/state/error/<Exception>``.
    Signals: sends ``page_classified`` (through the write).
    """

    def __init__(
        self,
        pages: Pages,
        history: History,
        crawler: Crawler | None = None,
        *,
        noise: NoiseRegistry | None = None,
        threshold: int | None = None,
        thresholds: Mapping[str, int | None] | None = None,
        diff_limit: int = 20_000,
        indexing: bool = False,
        runtime: Runtime | None = None,
        revisits: Revisits | None = None,
    ) -> None:
        self.pages = pages
        self.history = history
        #: each checked page's next revisit, written with it (None: the schedule is off)
        self.revisits = revisits
        self.crawler = crawler
        self.runtime = runtime
        self.counters = runtime.counters if runtime is not None else None
        self.noise = noise
        self.threshold = threshold
        self.thresholds = dict(thresholds or {})
        self.diff_limit = diff_limit
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
            runtime.store.pages,
            runtime.store.history,
            crawler,
            noise=component_of(crawler, NoiseRegistry),
            threshold=_threshold(s.get("RECRAWLER_FUZZY_THRESHOLD"), "RECRAWLER_FUZZY_THRESHOLD"),
            thresholds=thresholds,
            diff_limit=s.getint("RECRAWLER_DIFF_MAX_BYTES"),
            indexing=meta.indexes_pages(s),
            runtime=runtime,
            revisits=Revisits.of(
                crawler, component_of(crawler, SchedulePolicy), component_of(crawler, Auditor)
            ),
        )

    async def process_item(self, item: Any) -> Any:
        """Classify a Page; other items pass through untouched.

        One way through: the stored state and the site's noise model, the fingerprint, the verdict
        (:func:`~recrawler.detect.decide`), then the update and its commit
        (:mod:`~recrawler.pipelines.commit`).
        """
        if not isinstance(item, Page):
            return item
        assert self.runtime is not None
        run = self.runtime.run
        if run is None:
            raise DropItem("the recrawler run did not begin")
        now = utcnow()
        if item.error:
            return await self._error(run, item, now)
        rec = await self._record(item)
        if item.http_status == 304 and (rec is None or rec.status in _REMOVED):
            item.error = "not_modified_without_record"
            return await self._error(run, item, now)
        site = key_host(item.key)
        noise = await self._noise(site, item, now)
        fp = old = None
        revert = False
        if noise is not None:
            fp = await self._fingerprint(item, noise)
            moved = rec is not None and rec.status not in _REMOVED and fp.content_hash != rec.content_hash
            # back to what the knowledge base shows: what the unpublished runs saw is undone
            revert = (
                moved
                and rec is not None
                and rec.pending == PENDING_CHANGED
                and rec.status == LIVE
                and fp.content_hash == rec.published_hash
            )
            if moved and not revert:
                try:
                    old = await self.history.get_fields(item.key)
                except StateStoreError as exc:
                    self._inc(state_error_key(exc))
        if revert:
            verdict = Verdict(status=PageStatus.UNCHANGED, how=BY_HASH)
            self._inc("recrawler/page/reverted")
        else:
            verdict = decide(item, rec, fp, noise, old, threshold=self.thresholds.get(site, self.threshold))
        if verdict.guarded:
            self._inc("recrawler/page/changed/guard")
        update = page_update(
            item,
            rec,
            verdict,
            run=run,
            now=now,
            fp=fp,
            noise_key=noise.key if noise else None,
            old=old,
            diff_limit=self.diff_limit,
            revert=revert,
        )
        return await hand_over(
            self.runtime, run, item, update, indexing=self.indexing, revisits=self.revisits
        )

    async def _record(self, item: Page) -> PageRecord | None:
        """The page's stored state: from its request's way, else read now."""
        rec: PageRecord | Unread | None = item.record
        if rec is not Unread.UNREAD:
            return rec
        try:
            return await self.pages.get(item.key)
        except StateStoreError as exc:
            # A read failure is treated as "no record" (the page is then new; nothing is lost).
            state_error(self.runtime, exc, "state read", item.url)
            return None

    async def _noise(self, site: str, item: Page, now: datetime) -> SiteNoise | None:
        """The site's noise model, with the regions a recheck of *item* learned added (None: a 304,
        or noise is off)."""
        if item.http_status == 304 or self.noise is None:
            return None
        noise = await self.noise.ensure(site, self.history)
        if item.learned_regions:
            new = await self.history.add_regions(
                site, item.learned_regions, source="recheck", learned_from=item.url, at=now
            )
            self._inc("recrawler/volatile/learned", new)
            noise = self.noise.site(site)
        return noise

    async def _fingerprint(self, item: Page, noise: SiteNoise) -> Fingerprint:
        """The page's fingerprint under *noise*: made with its other CPU work, else made now."""
        assert item.text is not None
        assert self.runtime is not None
        worked: Worked | None = item.worked
        if worked is not None and worked.noise is noise and worked.fingerprint is not None:
            # made with the page's other CPU work, under this very model
            return worked.fingerprint
        return await self.runtime.offload(fingerprint, item.text, noise)

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
            await self.pages.record_error(run, item.key, [event])
        except StateStoreError as exc:
            state_error(self.runtime, exc, "state write", item.url)
        item.status = PageStatus.ERROR
        item.raw_body = item.worked = None
        return item
