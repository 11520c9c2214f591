"""PageRedirectMiddleware: Scrapy's redirects, deciding whether a page's redirect moves it or misses it."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Self
from urllib.parse import urljoin, urlsplit

from scrapy.downloadermiddlewares.redirect import RedirectMiddleware
from scrapy.exceptions import IgnoreRequest
from scrapy.utils.httpobj import urlparse_cached
from w3lib.url import safe_url_string

from recrawler import meta, notfound
from recrawler.counters import Counting
from recrawler.exceptions import StateStoreError
from recrawler.items import Loan
from recrawler.meta import is_page_request, request_key, spider_opted_in
from recrawler.misses import record_page_error, stage_miss, stage_soft_miss, state_error
from recrawler.queues import queue_of
from recrawler.runtime import find_runtime
from recrawler.scheduler import frontier_enabled
from recrawler.urls import KeyMaker, UrlPolicy, resolve_dots

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Request, Response
    from scrapy.settings import BaseSettings

    from recrawler.queues import FrontierQueue
    from recrawler.runtime import Runtime

logger = logging.getLogger(__name__)

#: RFC 9110 §15.4: 301 and 308 move a resource for good; 302, 303 and 307 lend it another address
PERMANENT_REDIRECTS = frozenset({301, 308})
REDIRECTS = frozenset({301, 302, 303, 307, 308})
#: pages of one run lent the same target by a temporary redirect: from this many on, each is a
#: soft 404 (permanent redirects to one target are moves: a consolidation)
SHARED_TARGET_MIN = 3
#: redirect targets remembered per run (then it starts again): bounded memory
_LOANS_MAX = 4096
#: the validators sent for the previous URL are not the next hop's
_VALIDATOR_HEADERS = (b"If-None-Match", b"If-Modified-Since")


class PageRedirectMiddleware(Counting, RedirectMiddleware):
    """Scrapy's :class:`~scrapy.downloadermiddlewares.redirect.RedirectMiddleware`, deciding what a
    page's redirect means. The add-on puts it in RedirectMiddleware's place, at 541: after
    CredentialsMiddleware (545) has seen a redirect to the login page, before
    ConditionalRequestMiddleware (540), which then sees final answers only.

    Requests that are not pages (sitemaps, robots.txt, ``recrawler_enabled=False``) and requests of
    spiders that did not opt in are Scrapy's own. A page request's redirect within the URL policy
    is followed with Scrapy's machinery (``REDIRECT_MAX_TIMES``, ``redirect_urls`` /
    ``redirect_reasons`` meta, ``handle_httpstatus_list``, cookies and ``Authorization`` dropped
    across hosts); a permanent one (301, 308) moves the page to the target's own key (the move is
    staged now and applies when the run reconciles, if the target is a live page by then; the
    source's record is not carried to the target), a temporary one (302, 303, 307) keeps the
    source's key and URL and indexes the target's content. It is not followed, and ends the request
    here: to a URL the policy refuses (a miss of the source, as a 404 is), a loop or a chain longer
    than ``REDIRECT_MAX_TIMES`` (an error that changes nothing), and a soft 404 (a miss of the pages
    it leads away from): to the site's root or the listing's home (the spider's
    ``recrawler_home_paths``), or to a target this run already had other pages redirected to
    (``SHARED_TARGET_MIN`` of them, each a miss; pages that permanently redirect to one target
    are moves, however many: a consolidation).

    It marks page requests ``dont_redirect`` so Scrapy's MetaRefreshMiddleware leaves them alone;
    one a spider marks itself is not followed (the 3xx is an error of the page).
    Settings: ``REDIRECT_ENABLED``, ``REDIRECT_MAX_TIMES``, ``REDIRECT_PRIORITY_ADJUST``,
    ``RECRAWLER_SOFT404_ENABLED``, ``RECRAWLER_URL_*_PARAMS``.
    Stats: ``recrawler/redirect/{permanent,temporary,refused}``, ``recrawler/url/refused/<reason>``,
    ``recrawler/page/error/{redirect_loop,redirect_limit}``, ``recrawler/page/missing/http_<code>``,
    ``recrawler/page/soft_404/{redirect_home,redirect_shared}``.
    """

    def __init__(self, settings: BaseSettings) -> None:
        super().__init__(settings)
        self.key_maker = KeyMaker(
            settings.getlist("RECRAWLER_URL_DROP_PARAMS"), settings.getlist("RECRAWLER_URL_KEEP_PARAMS")
        )
        self.soft_404 = settings.getbool("RECRAWLER_SOFT404_ENABLED")
        self.runtime: Runtime | None = None
        #: the run's frontier queue (None: the frontier is off), to claim a moved page's new address
        self.queue: FrontierQueue | None = None
        #: this run's redirect targets, each with its loan (on each hop's meta and its page: the
        #: commit step drops an answer from a target found shared meanwhile) and the pages sent
        #: there until it is shared (bounded: at most _LOANS_MAX targets, SHARED_TARGET_MIN pages each)
        self._loans: dict[str, tuple[Loan, set[str]]] = {}

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Scrapy's, with the crawl's Runtime (None for a spider recrawler does not run for)."""
        mw = super().from_crawler(crawler)
        mw.runtime = find_runtime(crawler)
        mw.counters = mw.runtime.counters if mw.runtime is not None else None
        if mw.runtime is not None and frontier_enabled(crawler):
            mw.queue = queue_of(crawler)
        return mw

    @property
    def policy(self) -> UrlPolicy | None:
        """The spider's URL policy (None for a spider without one: nothing is refused)."""
        return getattr(self.crawler.spider, "recrawler_url_policy", None)

    def process_request(self, request: Request) -> None:
        """Mark a page request as one whose redirects this middleware decides."""
        if (
            self.runtime is None
            or "dont_redirect" in request.meta
            or not is_page_request(request)
            or not spider_opted_in(self.crawler.spider)
        ):
            return
        # MetaRefreshMiddleware honours it: a page's meta refresh is its content, not a hop
        request.meta["dont_redirect"] = True
        request.meta[meta.REDIRECTS] = True

    async def process_response(  # type: ignore[override]  # async (it reads the store); spider-less
        self, request: Request, response: Response
    ) -> Request | Response:
        """Scrapy's redirects for other requests; a page's redirect followed or ended as above."""
        if not request.meta.get(meta.REDIRECTS) or self.runtime is None:
            return super().process_response(request, response)
        if request.meta.get(meta.TOO_LARGE) or self._handled_by_spider(request, response):
            # an error (ConditionalRequestMiddleware's), or a status the spider reads itself
            return response
        if response.status in REDIRECTS and b"Location" in response.headers:
            # what the run downloaded (ConditionalRequestMiddleware counts the final answers)
            self._inc("recrawler/bytes/received", len(response.body))
            return await self._follow(request, response)
        loan = request.meta.get(meta.LOAN)
        if (
            loan is not None
            and loan.shared
            and request.meta.get("redirect_urls")
            and not (response.status == 304 and request.meta.get(meta.SENT))
        ):
            # an earlier page sent to a target many pages were sent to: its miss is staged
            self._inc("recrawler/bytes/received", len(response.body))
            self._inc("recrawler/request/count")
            raise IgnoreRequest("a soft 404 (redirect_shared)")
        return response

    def _handled_by_spider(self, request: Request, response: Response) -> bool:
        """Scrapy's reasons to leave a redirect to the callback."""
        return bool(
            response.status in getattr(self.crawler.spider, "handle_httpstatus_list", ())
            or response.status in request.meta.get("handle_httpstatus_list", ())
            or request.meta.get("handle_httpstatus_all", False)
        )

    @staticmethod
    def _target(request: Request, response: Response) -> str:
        """The absolute URL a redirect points at, as Scrapy resolves it ("" when it cannot be read)."""
        location = (response.headers[b"Location"] or b"").decode("latin-1").strip()
        try:
            target = safe_url_string(location)
            if location.startswith("//"):
                target = f"{urlparse_cached(request).scheme}://{target.lstrip('/')}"
            target = urljoin(request.url, target)
            fragment = urlparse_cached(request).fragment
            if fragment and not urlsplit(target).fragment:
                target = urljoin(target, f"#{fragment}")
        except ValueError:
            return ""
        return target

    async def _end(self, request: Request, key: str, reason: str, status: int) -> None:
        """A redirect not followed, as an error of the page (it changes nothing)."""
        assert self.runtime is not None
        self._inc("recrawler/request/count")
        self._inc("recrawler/request/failed")
        await record_page_error(self.runtime, key, request.url, reason, http_status=status)

    async def _follow(self, request: Request, response: Response) -> Request:
        """The next hop of a page request, or IgnoreRequest when the redirect is not followed."""
        assert self.runtime is not None
        status, key = response.status, request_key(request, self.key_maker)
        target = self._target(request, response)
        policy = self.policy
        reason = policy.refusal(target) if policy is not None and target else None
        if not target or reason is not None:
            # never followed, never stored: the page did not answer at its address, a miss
            self._inc("recrawler/request/count")
            self._inc("recrawler/redirect/refused")
            location = (response.headers[b"Location"] or b"").decode("latin-1")
            self.runtime.counters.refused(
                target or location, reason or "malformed", "redirect", self.crawler.spider
            )
            await stage_miss(self.runtime, key, request.url, status)
            raise IgnoreRequest(f"redirect to a refused URL ({reason or 'malformed'})")
        target_key = self.key_maker(target)
        hops = [*request.meta.get("redirect_urls", ()), request.url]
        if target_key in {self.key_maker(u) for u in hops}:
            await self._end(request, key, "redirect_loop", status)
            raise IgnoreRequest("redirect loop")
        ttl = request.meta.get("redirect_ttl", self.max_redirect_times)
        if not ttl or request.meta.get("redirect_times", 0) + 1 > self.max_redirect_times:
            await self._end(request, key, "redirect_limit", status)
            raise IgnoreRequest("max redirections reached")
        # a permanent hop moves the page, unless a temporary hop already lent it its address
        moves = status in PERMANENT_REDIRECTS and self.key_maker(request.url) == key
        shape = await self._soft_redirect(request, key, target, target_key, lends=not moves)
        if shape is not None:
            # a removed page sent home, or one of many lent the same target: a miss, never content
            self._inc("recrawler/request/count")
            staged = False
            for source in dict.fromkeys([*request.meta.get(meta.MOVED_FROM, ()), key]):
                answer = await stage_soft_miss(
                    self.runtime, source, request.url, shape, error_if_unknown=source == key and not staged
                )
                staged = staged or answer == "staged"
            raise IgnoreRequest(f"a soft 404 ({shape})")
        if (status in {301, 302} and request.method == "POST") or (
            status == 303 and request.method not in {"GET", "HEAD"}
        ):
            redirected = self._redirect_request_using_get(request, response, target)
        else:
            redirected = self._build_redirect_request(request, response, url=target)
        for header in _VALIDATOR_HEADERS:
            redirected.headers.pop(header, None)
        hop = redirected.meta
        for name in (meta.SENT, "handle_httpstatus_list"):
            hop.pop(name, None)
        if moves:
            self._inc("recrawler/redirect/permanent")
            moved_from = [*request.meta.get(meta.MOVED_FROM, ()), key]
            hop.update(
                {
                    meta.KEY: target_key,
                    meta.MOVED_FROM: moved_from,
                    meta.FOUND_VIA: "redirect",
                    meta.FOUND_FROM: hops[0],
                }
            )
            # the source's stored record is not the new address's
            for name in (meta.LASTMOD, meta.CANONICAL_URL, meta.RECORD, meta.LOAN):
                hop.pop(name, None)
            # staged now: the listing may fetch the new address itself (the duplicate filter then
            # drops this hop); the move applies only if the new address is a live page by the end
            await self._stage_moves(moved_from, target_key)
            if not await self._claim(target_key):
                # the listing has the new address in the run's frontier: fetched once, from there
                raise IgnoreRequest("the new address is fetched from the frontier")
        else:
            self._inc("recrawler/redirect/temporary")
            hop[meta.CANONICAL_URL] = request.meta.get(meta.CANONICAL_URL) or request.url
            # the target's loan, when the soft-404 check lent it (its answer is dropped if shared)
            known = self._loans.get(target_key)
            if known is not None:
                hop[meta.LOAN] = known[0]
            else:
                hop.pop(meta.LOAN, None)
        redirected = self._redirect(redirected, request, status)
        # a moved page's new address is a page of its own: fetched once, even if also listed
        redirected.dont_filter = not moves
        return redirected

    async def _soft_redirect(
        self, request: Request, key: str, target: str, target_key: str, *, lends: bool
    ) -> str | None:
        """The soft-404 shape of a page redirect (None: follow it)."""
        if not self.soft_404 or self.runtime is None or target_key == key:
            return None
        homes = getattr(self.crawler.spider, "recrawler_home_paths", ("/",))
        source_path = urlsplit(resolve_dots(request.url)).path or "/"
        if notfound.home_redirect(source_path, urlsplit(resolve_dots(target)).path or "/", homes):
            return notfound.HOME_REDIRECT
        if not lends:
            # a permanent redirect moves the page, however many move to one target (a
            # consolidation: the target holds the content once); the target is fetched and
            # judged as a page of its own (a not-found page there makes the sources misses), and
            # the moves leave through the bounded-removal path
            return None
        known = self._loans.get(target_key)
        if known is not None and known[0].shared:
            # known to be everybody's: the pages sent there need not be remembered (a site that
            # sends every page to its login page would cost a key a page for the whole run)
            return notfound.SHARED_REDIRECT
        if len(self._loans) >= _LOANS_MAX and target_key not in self._loans:
            self._loans.clear()
        loan, lent = self._loans.setdefault(target_key, (Loan(), set()))
        lent.add(key)
        if len(lent) < SHARED_TARGET_MIN:
            return None
        if len(lent) == SHARED_TARGET_MIN:
            # the pages sent there before it was plain that it is everybody's: misses too (and
            # their answers, still on their way, are dropped: see process_response, and the commit
            # step for an answer already past this middleware)
            loan.shared = True
            for earlier in sorted(lent - {key}):
                await stage_soft_miss(self.runtime, earlier, request.url, notfound.SHARED_REDIRECT)
        return notfound.SHARED_REDIRECT

    async def _claim(self, key: str) -> bool:
        """Whether to follow a move to page *key*: not when the run's frontier holds it (Scrapy's
        duplicate filter never sees what the frontier feeds)."""
        runtime = self.runtime
        if runtime is None or runtime.run is None or self.queue is None:
            return True
        try:
            return await self.queue.claim(runtime.run, key)
        except StateStoreError as exc:
            state_error(runtime, exc)
            return True

    async def _stage_moves(self, sources: list[str], target: str) -> None:
        """Stage the move of each stored page among *sources* to page *target*."""
        sources = [k for k in sources if k != target]
        runtime = self.runtime
        if not sources or runtime is None or runtime.run is None:
            return
        try:
            await runtime.store.pages.record_moves(runtime.run, sources, target, http_status=301)
        except StateStoreError as exc:
            state_error(runtime, exc)


__all__ = ["PERMANENT_REDIRECTS", "REDIRECTS", "SHARED_TARGET_MIN", "PageRedirectMiddleware"]
