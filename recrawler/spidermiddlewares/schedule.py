"""ScheduleMiddleware: requests only the listed pages that are due, sees deploys, reschedules each check."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Self

from scrapy import Request, signals

from recrawler import meta
from recrawler.auditor import Auditor
from recrawler.counters import Counting, state_error_key
from recrawler.exceptions import ConfigurationError, StateStoreError
from recrawler.intervals import SKIP_LASTMOD, Decision, SchedulePolicy, parse_now
from recrawler.items import Page
from recrawler.learning import NoiseRegistry
from recrawler.meta import is_page_request, is_sitemap_request, request_key
from recrawler.misses import state_error
from recrawler.queues import queue_of
from recrawler.runtime import component_of, find_runtime, runtime_of
from recrawler.scheduler import frontier_enabled
from recrawler.spidermiddlewares.deploys import SAMPLED, DeployChecks, parse_signals
from recrawler.urls import KeyMaker, key_host

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from recrawler.counters import RunCounters
    from recrawler.queues import FrontierQueue
    from recrawler.state import Frontier, Run, Schedule, ScheduledPage

logger = logging.getLogger(__name__)

#: due reasons that say the page changed: they go first
_LIKELY_CHANGED = frozenset({"lastmod", "feed"})
#: how a page found by following a link came (beyond a sitemap, or in the link crawl that lists a site)
_BY_LINK = frozenset({"link", "crawl"})


class ScheduleMiddleware(Counting):
    """Lets through only the page requests that are due; skipped pages keep their state. Sees
    deploys: the run after a deploy checks every listed page of the site.

    Page requests yielded by callbacks (sitemaps, feeds, discovered links) are decided in
    batches, one database round trip each: new pages, the audit sample, feed entries and
    lastmods newer than the last check are due at once; a lastmod (or feed entry) not newer
    vouches for its page where the host's lastmods are trusted for it (the page is verified
    without a request); otherwise the page's time within its staleness bound decides
    (``recrawler.intervals``). Start requests are not filtered. Each checked page's next check is
    stored in the page's own write (the commit step's ``recrawler.revisits.Revisits``, while this
    middleware is enabled), and its lastmod's claim is audited.

    Deploys (``recrawler.deploys``, with DeployChecks): each adaptive run first probes the site's
    home page and ``RECRAWLER_DEPLOY_PROBES`` live pages drawn at random (conditional requests sent
    before anything else), and weighs the listing's moves, the probes' build fingerprint and
    rewritten files, and changes among pages checked for no sign of change. The first signal of
    ``RECRAWLER_DEPLOY_SIGNALS`` (or ``-a deployed=1``) makes every page of the site not checked
    since due: those the listing already skipped are requested from here, the rest as they are
    listed; pages stored but not listed are the Reconciler's direct checks. The deploy is stored,
    so a run that could not check every page leaves the rest due (and unverified) for the next.

    Links (``-a follow_links=1``, or a crawl from ``-a start_url=``) to pages no one stored spend
    the run's budget of pages found through links (``RECRAWLER_FOLLOW_MAX_LINKS``); beyond it
    they are dropped. A page whose links are the run's listing (``_recrawler_links``) is due every
    run (``links``): its conditional request is how the listing is read.

    Settings: ``RECRAWLER_SCHEDULE``, ``RECRAWLER_SCHEDULE_BATCH_SIZE``, ``RECRAWLER_NOW``,
    ``RECRAWLER_MAX_INTERVAL_SECS``, ``RECRAWLER_INTERVAL_OVERRIDES``, ``RECRAWLER_LASTMOD_MODE``,
    ``RECRAWLER_AUDIT_TRUST_AFTER``, ``RECRAWLER_DEPLOY_PROBES``, ``RECRAWLER_DEPLOY_SIGNALS``,
    ``RECRAWLER_FOLLOW_MAX_LINKS``, ``RECRAWLER_URL_DROP_PARAMS``, ``RECRAWLER_URL_KEEP_PARAMS``.
    Stats: ``recrawler/schedule/due``, ``recrawler/schedule/due/<reason>``,
    ``recrawler/schedule/vouched``, ``recrawler/schedule/vouched/{lastmod,feed}``,
    ``recrawler/page/skipped``, ``recrawler/page/skipped/{schedule,lastmod}``,
    ``recrawler/deploy/detected``, ``recrawler/deploy/detected/<signal>``,
    ``recrawler/deploy/pages``, ``recrawler/deploy/false_alarm``,
    ``recrawler/sitemap/pages`` (the page keys the sitemaps named, each once: what the outage
    guard compares with the last run's listing; the due ones are counted by the frontier,
    FrontierScheduler, when it is on), ``recrawler/follow/{links,max_links}`` (pages found
    through links, and refused past the budget), ``recrawler/state/error/<Exception>``.
    Meta: reads ``recrawler_lastmod``, ``recrawler_feed_updated``, ``recrawler_found_via``;
    sets ``recrawler_due``. Spider attribute: ``recrawler_deployed`` (``-a deployed=1``).
    Signals: listens to ``spider_opened`` and ``spider_closed`` (the site's build is stored).
    """

    def __init__(
        self,
        schedule: Schedule,
        frontier: Frontier,
        policy: SchedulePolicy,
        auditor: Auditor,
        *,
        crawler: Crawler,
        counters: RunCounters | None = None,
        batch_size: int = 500,
        key_maker: KeyMaker | None = None,
        max_links: int = 0,
        deploys: DeployChecks | None = None,
        queue: FrontierQueue | None = None,
    ) -> None:
        if batch_size < 1:
            raise ConfigurationError(f"RECRAWLER_SCHEDULE_BATCH_SIZE: bad value {batch_size!r}")
        if max_links < 0:
            raise ConfigurationError(f"RECRAWLER_FOLLOW_MAX_LINKS: bad value {max_links!r}")
        #: pages found through links this run, at most (0: no limit)
        self.max_links = max_links
        #: the pages links found this run that no one stored before (at most max_links of them)
        self._discovered: set[str] = set()
        self.schedule = schedule
        self.frontier = frontier
        self.policy = policy
        self.auditor = auditor
        self.crawler = crawler
        self.counters = counters
        self.batch_size = batch_size
        self.key_maker = key_maker or KeyMaker()
        self._lock = asyncio.Lock()
        #: the due pages a sitemap named are counted by the frontier (each key once) when it is on
        self._frontier = frontier_enabled(crawler)
        #: the run's frontier queue (None: the frontier is off), asked which linked pages it holds
        self.queue = queue
        #: the run's deploy detection (None: switched off, in tests built without it)
        self.deploys = deploys

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Read settings (a bad one stops the crawl before it starts) and connect signals."""
        meta.require_opt_in(crawler)
        s = crawler.settings
        runtime = runtime_of(crawler)
        policy = component_of(crawler, SchedulePolicy)
        key_maker = KeyMaker(s.getlist("RECRAWLER_URL_DROP_PARAMS"), s.getlist("RECRAWLER_URL_KEEP_PARAMS"))
        mw = cls(
            runtime.store.schedule,
            runtime.store.frontier,
            policy,
            component_of(crawler, Auditor),
            crawler=crawler,
            counters=runtime.counters,
            batch_size=s.getint("RECRAWLER_SCHEDULE_BATCH_SIZE"),
            key_maker=key_maker,
            max_links=s.getint("RECRAWLER_FOLLOW_MAX_LINKS"),
            deploys=DeployChecks(
                crawler,
                runtime,
                policy,
                noise=component_of(crawler, NoiseRegistry),
                probes=s.getint("RECRAWLER_DEPLOY_PROBES"),
                signals=parse_signals(s.getlist("RECRAWLER_DEPLOY_SIGNALS")),
                key_maker=key_maker,
            ),
            queue=queue_of(crawler) if frontier_enabled(crawler) else None,
        )
        crawler.signals.connect(mw.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(mw.spider_closed, signal=signals.spider_closed)
        return mw

    async def spider_opened(self) -> None:
        """Log the run clock and modes once."""
        logger.info(
            "schedule: %(mode)s, lastmod %(lastmod)s, run clock %(now)s",
            {
                "mode": self.policy.mode,
                "lastmod": self.policy.lastmod_mode,
                "now": self.policy.now.isoformat(timespec="seconds"),
            },
            extra={"spider": self.crawler.spider},
        )

    async def spider_closed(self, reason: str) -> None:
        """Store what the run learned of the site's build (its fingerprint, noise, false alarms)."""
        run = runtime_of(self.crawler).run
        if run is not None and self.deploys is not None and self.deploys.ready_started:
            await self.deploys.closed(run, reason)

    async def process_start(self, start: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """The run's deploy probes first (once the site's build is loaded), then the spider's own."""
        run = await runtime_of(self.crawler).started()
        if run is not None and self.deploys is not None:
            await self.deploys.ready(run)
            for request in await self.deploys.probe_requests(run):
                yield request
        async for r in start:
            yield r

    async def process_spider_output(
        self, response: Response, result: AsyncIterator[Any]
    ) -> AsyncIterator[Any]:
        """Pass items and other requests through; decide page requests batch by batch; weigh
        what the response says of a deploy, and once one is seen request what was skipped."""
        batch: list[Request] = []
        pages: list[Page] = []
        # the pages a sitemap names: counted once per page key (a listing may name one page often)
        listing = response.request is not None and is_sitemap_request(response.request)
        async for r in result:
            if isinstance(r, Request) and is_page_request(r):
                batch.append(r)
                if len(batch) >= self.batch_size:
                    async for request in self._decide(batch, listing):
                        yield request
                    batch = []
            else:
                if isinstance(r, Page):
                    pages.append(r)
                yield r
        if batch:
            async for request in self._decide(batch, listing):
                yield request
        async for request in self._deploy(response, pages, listing):
            yield request

    async def _deploy(self, response: Response, pages: list[Page], listing: bool) -> AsyncIterator[Request]:
        """What the response says of a deploy; once one is seen, the pages skipped before it."""
        runtime = runtime_of(self.crawler)
        run, checks = runtime.run, self.deploys
        if (
            run is None
            or checks is None
            or run.site is None
            or self.policy.mode != "adaptive"
            or not runtime.leads
        ):
            return
        await checks.ready(run)
        if listing:
            host = run.site
            await checks.listing(
                lastmods_vouch=self.policy.lastmod_vouches(
                    trusted=self.auditor.trusted(host, "lastmod"), honest=self.auditor.honest(host, "lastmod")
                )
            )
        else:
            for request in await checks.response(response, pages):
                yield request
        if checks.pending:
            # a decision under way finishes first: the skips it marks are taken back too
            async with self._lock:
                pass
            async for request in checks.take_skipped(run):
                yield request

    async def _decide(self, batch: list[Request], listing: bool = False) -> AsyncIterator[Request]:
        run = runtime_of(self.crawler).run
        if run is None:
            # the run could not begin (the spider is closing): request nothing
            return
        # one batch at a time: a feed and a sitemap listing the same page see each other's marks
        async with self._lock:
            passed = await self._decide_locked(run, batch, listing)
        for request in passed:
            yield request

    async def _decide_locked(self, run: Run, batch: list[Request], listing: bool = False) -> list[Request]:
        if self.deploys is not None:
            # the site's build (a deploy its last run left unchecked, -a deployed=1) first
            await self.deploys.ready(run)
        probed = self.deploys.probed if self.deploys is not None else set()
        keys = [request_key(r, self.key_maker) for r in batch]
        try:
            known = await self.schedule.scheduled(sorted(set(keys)))
        except StateStoreError as exc:
            # without the schedule, every page is due: a read failure never hides a page
            state_error(find_runtime(self.crawler), exc, "schedule read (the batch is requested)")
            return batch
        decided: dict[str, Decision] = {}
        passed: list[Request] = []
        in_frontier = await self._listed_now(run, batch, keys, known)
        for request, key in zip(batch, keys, strict=True):
            request.meta[meta.KEY] = key
            if key in probed:
                # asked first this run (a deploy probe): listed, not asked again; a change the
                # listing announces (a newer lastmod, a feed entry) is no sign of a deploy
                if (
                    key not in decided
                    and listing
                    and not (known.get(key) and known[key].listed_run == run.id)
                ):
                    self._inc("recrawler/sitemap/pages")
                lastmod = str(request.meta.get(meta.LASTMOD) or "") or None
                said = self._decision(request, key, known.get(key), lastmod, run.site)
                if self.deploys is not None and said.reason in _LIKELY_CHANGED:
                    self.deploys.explained.add(key)
                decided[key] = Decision(True, "probe")
                continue
            lastmod = str(request.meta.get(meta.LASTMOD) or "") or None
            info = known.get(key)
            if (
                info is None
                and key not in in_frontier
                and request.meta.get(meta.FOUND_VIA) in _BY_LINK
                and not self._discover(key)
            ):
                continue
            decision = decided.get(key) or self._decision(request, key, info, lastmod, run.site)
            if not decision.due and request.meta.get(meta.LINKS):
                # a page whose links are the listing is read every run, as a sitemap file is:
                # asked conditionally, its 304 lists the links it had (LinkListingMiddleware)
                decision = Decision(True, "links")
            # an earlier listing of the page in this run (a sitemap variant, a feed, a link), and
            # the layer that skipped it then (None: it was requested)
            earlier = key in decided or (info is not None and info.listed_run == run.id)
            was_skipped: str | None = None
            if key in decided:
                was_skipped = None if decided[key].due else decided[key].reason
            elif earlier and info is not None:
                was_skipped = info.listed_skip
            if was_skipped is not None and not request.meta.get(meta.FEED_UPDATED):
                # a link (or another listing of the page) brings no news of a change: the
                # decision the listing's lastmod and schedule made this run stands
                decision = Decision(False, was_skipped)
            if decision.due:
                request.meta[meta.DUE] = decision.reason
                if lastmod:
                    request.meta[meta.LASTMOD] = lastmod
                if decision.reason in SAMPLED and (
                    (info is not None and info.solo)
                    or self._decision(request, key, info, lastmod, run.site, audit=False).reason
                    in _LIKELY_CHANGED
                ):
                    # its change is no sample of the site: it changes alone, or the listing said so
                    request.meta[meta.NO_SAMPLE] = True
                if decision.reason in _LIKELY_CHANGED:
                    # hint and skip order the work: pages said to have changed go first
                    request.priority += 1
                if not earlier or was_skipped is not None:
                    if was_skipped is not None:
                        # skipped by an earlier listing, due by this one (a feed entry): not a skip
                        self._inc("recrawler/page/skipped", -1)
                        self._inc(f"recrawler/page/skipped/{was_skipped}", -1)
                    self._inc("recrawler/schedule/due")
                    self._inc(f"recrawler/schedule/due/{decision.reason}")
                if (listing or request.meta.get(meta.LISTED)) and not earlier and not self._frontier:
                    # without the frontier (which counts the due ones once per key), here
                    self._inc("recrawler/sitemap/pages")
                decided[key] = decision
                passed.append(request)
                continue
            if not earlier:
                if listing:
                    # a stored page: its listed_run marks it for the rest of the run
                    self._inc("recrawler/sitemap/pages")
                self._inc("recrawler/page/skipped")
                self._inc(f"recrawler/page/skipped/{decision.reason}")
                if decision.verified:
                    self._inc("recrawler/schedule/vouched")
                    self._inc(f"recrawler/schedule/vouched/{decision.verified}")
                logger.debug("not due (%(why)s): %(url)s", {"why": decision.reason, "url": request.url})
                decided[key] = decision
        listed = [(k, None if d.due else d.reason) for k, d in decided.items() if k in known]
        vouched = [(k, d.verified) for k, d in decided.items() if k in known and d.verified]
        try:
            # before the requests go out: the idle-time check of unseen pages must not take them
            await self.schedule.mark_listed(run, listed, vouched=vouched, at=self.policy.now)
        except StateStoreError as exc:
            self._inc(state_error_key(exc))
            logger.error("could not mark listed pages: %(exc)s", {"exc": exc})
        return passed

    async def _listed_now(
        self, run: Run, batch: list[Request], keys: list[str], known: dict[str, ScheduledPage]
    ) -> set[str]:
        """Keys of links in *batch* to pages no one stored that this run's listing named already
        (a first run's navigation links): not discoveries."""
        unknown = sorted(
            {
                k
                for r, k in zip(batch, keys, strict=True)
                if k not in known and r.meta.get(meta.FOUND_VIA) in _BY_LINK
            }
        )
        if not unknown or self.queue is None:
            return set()
        try:
            return await self.queue.has(run, unknown)
        except StateStoreError as exc:
            self._inc(state_error_key(exc))
            return set()

    def _discover(self, key: str) -> bool:
        """A link reached a page no one stored: within the run's budget of such pages? (A link trap
        costs the budget, links between known pages cost nothing.)"""
        if key in self._discovered:
            return True
        if self.max_links and len(self._discovered) >= self.max_links:
            self._inc("recrawler/follow/max_links")
            return False
        self._inc("recrawler/follow/links")
        if self.max_links:
            self._discovered.add(key)
        return True

    def _decision(
        self,
        request: Request,
        key: str,
        info: ScheduledPage | None,
        lastmod: str | None,
        site: str | None,
        *,
        audit: bool = True,
    ) -> Decision:
        host = key_host(key)
        feed_updated = None
        if request.meta.get(meta.FEED_UPDATED):
            try:
                feed_updated = parse_now(request.meta[meta.FEED_UPDATED])
            except ConfigurationError:
                feed_updated = None
        return self.policy.decide(
            info.revisit if info is not None else None,
            url=request.url,
            status=info.status if info is not None else None,
            site=site,
            lastmod=lastmod if self.policy.lastmod_mode != "ignore" else None,
            feed_updated=feed_updated,
            audit=audit and self.auditor.in_sample(key),
            lastmod_trusted=self.auditor.trusted(host, "lastmod"),
            lastmod_honest=self.auditor.honest(host, "lastmod"),
            waiting=info is not None and info.waiting,
        )


__all__ = ["SKIP_LASTMOD", "ScheduleMiddleware"]
