"""The deploy detection of a run, on ScheduleMiddleware's side: probes, evidence, the site's build."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import TYPE_CHECKING, Any

from scrapy import Request

from recrawler import meta
from recrawler.cpu.jobs import Worked
from recrawler.deploys import SIGNALS, DeployWatch, ListingMoves
from recrawler.detect import fingerprint
from recrawler.detect.build import BuildFingerprint, build_markers
from recrawler.exceptions import ConfigurationError, StateStoreError
from recrawler.items import Page, Unread
from recrawler.misses import state_error
from recrawler.state import LIVE, SiteBuild, utcnow

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable

    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from recrawler.intervals import SchedulePolicy
    from recrawler.learning import NoiseRegistry
    from recrawler.runtime import Runtime
    from recrawler.state import Run
    from recrawler.urls import KeyMaker

logger = logging.getLogger(__name__)

#: due reasons of checks made for no sign of change: what they find samples the site
SAMPLED = frozenset({"probe", "audit", "scheduled", "unscheduled"})
#: probes go out before everything else (sitemap files carry 0 + 100 a level, pages 0 or 1)
PROBE_PRIORITY = 1000
#: skipped pages a deploy's check takes from the database at a time
_TAKE = 500
#: pages whose build markers make a site's first fingerprint (a run that sent no probe)
_FIRST_PAGES = 4


def parse_signals(value: Iterable[str]) -> frozenset[str]:
    """``RECRAWLER_DEPLOY_SIGNALS``: the signals that make a run check every page."""
    signals = frozenset(str(s).strip() for s in value if str(s).strip())
    unknown = sorted(signals - set(SIGNALS))
    if unknown:
        msg = (
            f"RECRAWLER_DEPLOY_SIGNALS: unknown signal(s) {', '.join(unknown)} (known: {', '.join(SIGNALS)})"
        )
        raise ConfigurationError(msg)
    return signals


class DeployChecks:
    """One run's deploy detection for ScheduleMiddleware: loads the site's build (its fingerprint,
    and a deploy whose check did not finish), sends the probes, weighs each piece of evidence,
    and once a deploy is detected makes the schedule due every page not checked since, taking
    back the pages the listing already skipped; stores what the run learned when it closes."""

    def __init__(
        self,
        crawler: Crawler,
        runtime: Runtime,
        policy: SchedulePolicy,
        *,
        noise: NoiseRegistry,
        probes: int,
        signals: frozenset[str],
        key_maker: KeyMaker,
    ) -> None:
        if probes < 0:
            raise ConfigurationError(f"RECRAWLER_DEPLOY_PROBES: bad value {probes!r}")
        self.crawler = crawler
        self.runtime = runtime
        self.policy = policy
        self.noise = noise
        self.probes = probes
        self.key_maker = key_maker
        self.watch = DeployWatch(enabled=signals)
        self.build: SiteBuild | None = None
        #: the site's live pages when the run began (what a sample of its pages is drawn from)
        self.pages = 0
        #: the keys this run probed (the listing does not ask them again)
        self.probed: set[str] = set()
        #: listing moves already weighed
        self._moves = ListingMoves()
        #: probes found changed before the listing was read: (key, url, solo), weighed once it is
        #: (a change the listing announces, by a newer lastmod or a feed entry, is no deploy sign)
        self._held: list[tuple[str, str, bool]] = []
        #: probed keys the listing says changed (or are new to it)
        self.explained: set[str] = set()
        self._listed = False
        #: a deploy was detected whose skipped pages are still to be taken back
        self._take = False
        self._ready: asyncio.Future[None] | None = None

    @property
    def ready_started(self) -> bool:
        """Whether the run began loading the site's build (its probes, its evidence)."""
        return self._ready is not None

    @property
    def pending(self) -> bool:
        """A deploy was detected whose skipped pages are still to be taken back."""
        return self._take

    @property
    def site(self) -> str | None:
        run = self.runtime.run
        return run.site if run is not None else None

    # -- the run's start -----------------------------------------------------------------------

    async def ready(self, run: Run) -> None:
        """Load the site's build once (every caller awaits the same work)."""
        if self._ready is None:
            self._ready = asyncio.ensure_future(self._load(run))
        await asyncio.shield(self._ready)

    async def _load(self, run: Run) -> None:
        if run.site is None or not self.runtime.leads:
            # (a worker that joined a shared run: the leader lists and sees deploys)
            return
        try:
            self.build = await self.runtime.store.schedule.site_build(run.site)
            self.pages = await self.runtime.store.schedule.live_pages(run.site)
        except StateStoreError as exc:
            self._state_error(exc, "reading the site's build")
        build = self.build
        if build is not None:
            self.watch.stored = BuildFingerprint(dict(build.fingerprint), frozenset(build.noise))
            if build.deploy_at is not None:
                # an earlier run's deploy: its pages not checked since are due (a finished check
                # leaves none)
                self.policy.deployed(run.site, build.deploy_at)
        if getattr(self.crawler.spider, "recrawler_deployed", False):
            await self.detect("flag", "deployed: the run was told the docs were just deployed")

    async def probe_requests(self, run: Run) -> list[Request]:
        """The run's probes: the site's home page and a few live pages drawn at random, each a
        conditional request sent before anything else."""
        if run.site is None or self.policy.mode != "adaptive" or not self.runtime.leads:
            # (a worker that joined a shared run: the leader probes)
            return []
        if getattr(self.crawler.spider, "recrawler_listing", None) == "links":
            # the links are the listing: every page is read every run (a probe would only read one
            # without the links it lists)
            return []
        homes = self._home_keys()
        if not self.probes:
            return []
        try:
            drawn = await self.runtime.store.schedule.probe_sample(run, self.probes, homes)
        except StateStoreError as exc:
            self._state_error(exc, "drawing the run's deploy probes")
            return []
        requests = []
        for key, url, lastmod in drawn:
            request = self._page_request(url, lastmod)
            if request is None:
                continue
            request.meta.update({meta.KEY: key, meta.DUE: "probe", meta.PROBE: True})
            request.priority = PROBE_PRIORITY
            self.probed.add(key)
            requests.append(request)
        c = self.runtime.counters
        if requests:
            c.inc("recrawler/schedule/due", len(requests))
            c.inc("recrawler/schedule/due/probe", len(requests))
        return requests

    def _page_request(self, url: str, lastmod: str | None) -> Request | None:
        """The spider's request of a stored page (its sitemap rules' callback, its lastmod), or a
        plain request to its ``parse`` (a spider of one's own)."""
        spider = self.crawler.spider
        build = getattr(spider, "recrawler_page_request", None)
        if build is not None:
            request: Request | None = build(url, lastmod)
            return request
        parse = getattr(spider, "parse", None)
        return Request(url, callback=parse) if parse is not None else None

    def _home_keys(self) -> list[str]:
        spider = self.crawler.spider
        homes: list[str] = []
        for sitemap in getattr(spider, "sitemap_urls", ()) or ():
            root = sitemap.split("://", 1)
            if len(root) != 2:
                continue
            origin = root[0] + "://" + root[1].split("/", 1)[0]
            for path in getattr(spider, "recrawler_home_paths", ("/",)):
                for url in (origin + path, origin + path.rstrip("/") + "/index.html"):
                    key = self.key_maker(url)
                    if key not in homes:
                        homes.append(key)
        # the deepest home first: the docs' own start page before the host's root
        return sorted(homes, key=len, reverse=True)

    # -- evidence --------------------------------------------------------------------------------

    async def detect(self, signal: str, why: str) -> bool:
        """Count a deploy signal; the first makes the run a deploy's: every page of the site not
        checked since is due, the listing's skips are taken back, the deploy is stored."""
        run = self.runtime.run
        if run is None or run.site is None or signal in self.watch.fired:
            return False
        first = self.watch.fire(signal, why)
        if signal not in self.watch.fired:
            return False
        c = self.runtime.counters
        c.inc(f"recrawler/deploy/detected/{signal}")
        if not first:
            return False
        now = self.policy.now
        self.policy.deployed(run.site, now)
        c.set("recrawler/deploy/detected", 1)
        self._take = True
        store = self.runtime.store
        try:
            pages = await store.schedule.live_pages(run.site)
            base = self.build or SiteBuild(site=run.site)
            self.build = dataclasses.replace(base, deploy_at=now, deploy_run=run.id, deploy_reason=why)
            await store.schedule.record_site_build(self.build, utcnow())
        except StateStoreError as exc:
            self._state_error(exc, "storing the deploy")
            pages = 0
        c.set("recrawler/deploy/pages", pages)
        logger.info(
            "deploy detected: %(why)s; checking all %(n)d pages",
            {"why": why, "n": pages},
            extra={"spider": self.crawler.spider},
        )
        return True

    async def listing(self, *, lastmods_vouch: bool) -> None:
        """Weigh the listing's moves counted since the last look (ListingMiddleware counts them),
        and the probes' changes the listing did not announce."""
        self._listed = True
        held, self._held = self._held, []
        for key, url, solo in held:
            await self._sampled(key, url, solo=solo)
        c = self.runtime.counters
        total = ListingMoves(
            added=c["recrawler/sitemap/moved/added"],
            removed=c["recrawler/sitemap/moved/removed"],
            lastmod=c["recrawler/sitemap/moved/lastmod"],
        )
        if total == self._moves:
            return
        self._moves = total
        noise = self.build is not None and self.build.lastmod_noise
        why = total.reason(lastmods_vouch=lastmods_vouch, lastmod_noise=noise)
        if why is not None:
            await self.detect("listing", why)

    async def response(self, response: Response, pages: list[Page]) -> list[Request]:
        """Weigh a page response's evidence (a probe's build and validators, a sampled page's
        change); returns the further requests it calls for (a probe's second conditional request)."""
        request = response.request
        if request is None or self.site is None:
            return []
        rm = request.meta
        if rm.get(meta.REPROBE):
            if response.status == 304:
                await self.detect("validators", self.watch.rewritten(response.url))
            return []
        follow: list[Request] = []
        probe = bool(rm.get(meta.PROBE))
        if response.status == 200 and (probe or (not self.probed and len(self.watch.markers) < _FIRST_PAGES)):
            # a probe's build, or (no probe this run) the first pages' build
            expected = len(self.probed) or _FIRST_PAGES
            why = self.watch.build(build_markers(response.body, response.url), expected=expected)
            if why is not None:
                await self.detect("fingerprint", why)
            if probe and not self.watch.detected:
                follow.extend(self._reprobe(response))
        if str(rm.get(meta.DUE) or "") in SAMPLED and not self.watch.detected:
            for page in pages:
                if await self._changed(page, rm.get(meta.RECORD, Unread.UNREAD)):
                    solo = bool(rm.get(meta.NO_SAMPLE))
                    if probe and not self._listed:
                        # sent before the listing: it may yet say the page changed
                        self._held.append((page.key, page.url, solo))
                    else:
                        await self._sampled(page.key, page.url, solo=solo)
        return follow

    async def _sampled(self, key: str, url: str, *, solo: bool) -> None:
        if key in self.explained or self.watch.detected:
            return
        c = self.runtime.counters
        sampled = sum(c[f"recrawler/schedule/due/{reason}"] for reason in SAMPLED)
        why = self.watch.sampled(key, url, sampled=sampled, pages=self.pages, solo=solo)
        if why is not None:
            await self.detect("sample", why)

    def _reprobe(self, response: Response) -> list[Request]:
        """A probe answered in full with validators other than the stored ones: ask again with the
        new ones. A 304 says they hold (the file was rewritten: a deploy); a 200 says they change
        on every request (no evidence)."""
        spider = self.crawler.spider
        callback = getattr(spider, "recrawler_checked_again", None)
        rec = response.request.meta.get(meta.RECORD) if response.request is not None else None
        if callback is None or not _record(rec) or rec is None:
            return []
        etag, modified = response.headers.get(b"ETag"), response.headers.get(b"Last-Modified")
        new_etag = etag.decode("latin-1") if etag else None
        new_modified = modified.decode("latin-1") if modified else None
        if not (rec.etag or rec.last_modified) or not (new_etag or new_modified):
            return []
        if (new_etag, new_modified) == (rec.etag, rec.last_modified) or (new_etag and new_etag == rec.etag):
            return []
        headers = {}
        if new_etag:
            # RFC 9110 §13.1.2: the entity-tag goes back exactly as received
            headers["If-None-Match"] = new_etag
        if new_modified:
            headers["If-Modified-Since"] = new_modified
        return [
            Request(
                response.url,
                callback=callback,
                headers=headers,
                dont_filter=True,
                priority=PROBE_PRIORITY,
                meta={
                    # not a page check: no state, no accounting; only its answer is read
                    meta.ENABLED: False,
                    meta.REPROBE: True,
                    "dont_redirect": True,
                    "handle_httpstatus_list": [304],
                },
            )
        ]

    async def _changed(self, page: Page, rec: Any) -> bool:
        """Whether *page*'s text moved from its stored state under the site's noise model (what
        ClassifyPipeline will decide, without its fuzzy stage); False when it cannot tell."""
        if page.http_status != 200 or page.error or not page.text:
            return False
        if rec is Unread.UNREAD:
            rec = page.record
        if rec is Unread.UNREAD:
            try:
                rec = await self.runtime.store.pages.get(page.key)
            except StateStoreError:
                return False
        if not _record(rec) or rec is None or rec.status != LIVE or not rec.content_hash:
            return False
        noise = self.noise.site(self.site or "")
        if rec.noise_key != noise.key:
            # stored under another noise model: the hashes do not compare
            return False
        worked = page.worked
        if isinstance(worked, Worked) and worked.noise is noise and worked.fingerprint is not None:
            fp = worked.fingerprint
        else:
            fp = await self.runtime.offload(fingerprint, page.text, noise)
            if worked is None:
                # made under the very model the pipeline uses: it need not make it again
                page.worked = Worked(noise=noise, fingerprint=fp, chunks=None)
        return bool(fp.content_hash != rec.content_hash)

    # -- a deploy's check ------------------------------------------------------------------------

    async def take_skipped(self, run: Run) -> AsyncIterator[Request]:
        """Once a deploy is detected: the requests of the pages the listing skipped before, read
        from the database a batch at a time (each page once)."""
        if not self._take:
            return
        self._take = False
        c = self.runtime.counters
        while True:
            try:
                batch = await self.runtime.store.schedule.take_skipped(
                    run, before=self.policy.now, limit=_TAKE
                )
            except StateStoreError as exc:
                self._state_error(exc, "taking back the pages the listing skipped")
                return
            if not batch:
                return
            for key, url, lastmod, layer in batch:
                request = self._page_request(url, lastmod)
                if request is None:
                    continue
                request.meta.update({meta.KEY: key, meta.DUE: "deploy"})
                # skipped before the deploy was seen: requested now, and counted so
                c.inc("recrawler/page/skipped", -1)
                c.inc(f"recrawler/page/skipped/{layer}", -1)
                c.inc("recrawler/schedule/due")
                c.inc("recrawler/schedule/due/deploy")
                yield request

    # -- the run's end ---------------------------------------------------------------------------

    async def closed(self, run: Run, reason: str) -> None:
        """Store what the run learned of the site's build; a deploy whose check found nothing
        (no page new, changed or missing beyond those that made it) was a false alarm: its
        fingerprint slots become noise, its sampled pages change on their own, its moved
        lastmods are no sign."""
        if run.site is None:
            return
        c = self.runtime.counters
        watch = self.watch
        found = c["recrawler/page/new"] + c["recrawler/page/changed"] + c.total("recrawler/page/missing")
        finished = reason == "finished" and not c.total("recrawler/state/error")
        false_alarm = (
            finished and watch.detected and "flag" not in watch.fired and found <= len(watch.sample_keys)
        )
        store = self.runtime.store
        base = self.build or SiteBuild(site=run.site)
        learned = watch.learned(false_alarm=false_alarm)
        lastmod_noise = base.lastmod_noise or (
            false_alarm
            and watch.reason is not None
            and watch.reason.startswith("listing")
            and "lastmod" in watch.reason
        )
        build = dataclasses.replace(
            base,
            fingerprint=learned.markers if learned is not None else base.fingerprint,
            noise=tuple(sorted(learned.noise)) if learned is not None else base.noise,
            lastmod_noise=lastmod_noise,
        )
        try:
            if false_alarm and "sample" in watch.fired:
                await store.schedule.mark_solo(watch.sample_keys, solo=True)
            if build != self.build:
                await store.schedule.record_site_build(build, utcnow())
        except StateStoreError as exc:
            self._state_error(exc, "storing the site's build")
            return
        if false_alarm:
            c.set("recrawler/deploy/false_alarm", 1)
            logger.info(
                "deploy check found nothing new: %(why)s is learned as noise for %(site)s",
                {"why": watch.reason, "site": run.site},
                extra={"spider": self.crawler.spider},
            )

    def _state_error(self, exc: StateStoreError, doing: str) -> None:
        # counted; the first failure of a kind is one line (a database lost mid-run: none, the
        # store said it when it noticed)
        state_error(self.runtime, exc, doing)


def _record(rec: Any) -> bool:
    """True for a stored page record (not Unread, not None)."""
    from recrawler.state import PageRecord

    return isinstance(rec, PageRecord)


__all__ = ["SAMPLED", "DeployChecks", "parse_signals"]
