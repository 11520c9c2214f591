"""ConditionalRequestMiddleware: stored validators out, 304s and final outcomes in."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Self
from urllib.parse import urljoin, urlsplit

from scrapy.exceptions import IgnoreRequest
from scrapy.extensions.httpcache import RFC2616Policy
from scrapy.utils.misc import load_object
from w3lib.url import safe_url_string

from recrawler import meta, notfound
from recrawler.exceptions import ConfigurationError, StateStoreError
from recrawler.items import PageStatus
from recrawler.meta import is_page_request, is_sitemap_request, request_key
from recrawler.misses import stage_soft_miss
from recrawler.redact import redact_text, redact_url
from recrawler.runtime import runtime_of
from recrawler.scheduler import frontier_enabled
from recrawler.state import GONE, LIVE, MOVED, Event, PageRecord, utcnow
from recrawler.urls import KeyMaker, UrlPolicy, key_host, resolve_dots, url_host

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Request, Response

    from recrawler.runtime import Runtime
    from recrawler.state import StateStore

logger = logging.getLogger(__name__)

_VALIDATOR_HEADERS = (b"If-None-Match", b"If-Modified-Since")
#: RFC 9110 §15.4: 301 and 308 move a resource for good; 302, 303 and 307 lend it another address
PERMANENT_REDIRECTS = frozenset({301, 308})
REDIRECTS = frozenset({301, 302, 303, 307, 308})
#: pages of one run redirected to the same target (one that is no live stored page, for permanent
#: redirects): from this many on, each is a soft 404
SHARED_TARGET_MIN = 3
#: redirect targets remembered per run (then it starts again): bounded memory
_LOANS_MAX = 4096


def _is_rfc2616(policy: object) -> bool:
    try:
        cls = load_object(policy) if isinstance(policy, str) else policy
    except (ImportError, ValueError, NameError, AttributeError):
        return False
    return isinstance(cls, type) and issubclass(cls, RFC2616Policy)


def _same_validator(response: Response, rec: PageRecord) -> bool:
    etag = response.headers.get(b"ETag")
    if etag and rec.etag:
        return bool(etag.decode("latin-1") == rec.etag)
    last_modified = response.headers.get(b"Last-Modified")
    return bool(last_modified and rec.last_modified and last_modified.decode("latin-1") == rec.last_modified)


class ConditionalRequestMiddleware:
    """Sends stored validators back, follows page redirects itself and accounts for every page
    request's final outcome.

    Every request of the spider passes the spider's URL policy first (``http``/``https`` on the
    site's hosts, no credentials): anything else is never downloaded. Sends the stored ``ETag`` byte
    for byte as ``If-None-Match`` and the stored ``Last-Modified`` as ``If-Modified-Since`` (RFC
    9110 §13.1) and lets the 304 reach the callback; sitemap files get their stored validators too,
    and an unchanged one (304) is listed from the database. Redirects of page requests are followed
    here, not by Scrapy's RedirectMiddleware: a permanent one (301, 308) within the site moves the
    page to the target's own key (the source becomes ``moved`` when the run reconciles); a temporary
    one (302, 303, 307) keeps the source's key and URL and indexes the target's content; one to a
    refused URL is never followed and counts as a miss of the source (as a 404 does); a loop or a
    chain longer than ``REDIRECT_MAX_TIMES`` is an error that changes nothing. Final 404/410 answers
    of stored pages are staged as misses for the Reconciler; 5xx, other error statuses and download
    exceptions are counted as errors and change nothing else. A redirect that is a soft 404 is not
    followed and is staged as a miss of the pages it leads away from, as a 404 is: one to the site's
    root or the listing's home (the spider's ``recrawler_home_paths``), and one whose target this
    run already had other pages redirected to (``SHARED_TARGET_MIN`` of them, each a miss; pages
    that permanently redirect to a live stored page are moves, however many).

    Settings: ``RECRAWLER_CONDITIONAL_ENABLED``, ``RECRAWLER_DB_URI``, ``RECRAWLER_URL_*_PARAMS``,
    ``RECRAWLER_GONE_STATUSES``, ``RECRAWLER_MISSING_STATUSES``, ``RECRAWLER_INDEX_ENABLED`` with
    ``ITEM_PIPELINES`` (IndexPipeline on: a page stored without chunks is fetched whole),
    ``REDIRECT_ENABLED``,
    ``REDIRECT_MAX_TIMES``, ``RECRAWLER_SOFT404_ENABLED``, ``HTTPERROR_ALLOWED_CODES`` (its statuses
    reach the callback as they are), ``HTTPCACHE_ENABLED`` with ``HTTPCACHE_POLICY`` (RFC2616Policy
    also sends validators: a ConfigurationError).
    Stats: ``recrawler/conditional/{sent,not_modified}`` (and per host below each),
    ``recrawler/request/{count,failed}``, ``recrawler/page/missing/http_<code>``,
    ``recrawler/page/error/<reason>``, ``recrawler/redirect/{permanent,temporary,refused}``,
    ``recrawler/url/refused/<reason>``, ``recrawler/sitemap/{fetched,error,conditional,not_modified}``,
    ``recrawler/state/error/<Exception>``, ``recrawler/page/soft_404/{redirect_home,redirect_shared}``,
    ``recrawler/page/missing/soft_404``.
    Meta: ``recrawler_enabled=False`` skips a request, ``recrawler_key`` overrides its page key,
    ``recrawler_conditional=False`` sends no validators, ``dont_redirect`` leaves redirects to Scrapy.
    """

    def __init__(
        self,
        store: StateStore,
        *,
        key_maker: KeyMaker | None = None,
        conditional: bool = True,
        missing_statuses: tuple[int, ...] = (404,),
        gone_statuses: tuple[int, ...] = (410,),
        follow_redirects: bool = True,
        max_redirects: int = 20,
        soft_404: bool = True,
        indexing: bool = False,
        crawler: Crawler | None = None,
        runtime: Runtime | None = None,
    ) -> None:
        self.store = store
        self.runtime = runtime
        self.key_maker = key_maker or KeyMaker()
        self.conditional = conditional
        self.miss_statuses = frozenset(missing_statuses) | frozenset(gone_statuses)
        if self.miss_statuses & {200, 304}:
            msg = (
                "RECRAWLER_MISSING_STATUSES/RECRAWLER_GONE_STATUSES: 200 and 304 are not misses "
                f"({sorted(self.miss_statuses)})"
            )
            raise ConfigurationError(msg)
        self.follow_redirects = follow_redirects
        self.max_redirects = max_redirects
        self.soft_404 = soft_404
        #: the knowledge base is kept (IndexPipeline): a page stored without chunks is fetched whole
        self.indexing = indexing
        #: this run's redirect targets and the pages sent to each (bounded), and the targets found
        #: shared by too many pages
        self._loans: dict[str, set[str]] = {}
        self._shared: set[str] = set()
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Build from settings; the store is the crawler's single store."""
        meta.require_opt_in(crawler)
        s = crawler.settings
        if s.getbool("HTTPCACHE_ENABLED") and _is_rfc2616(s.get("HTTPCACHE_POLICY")):
            # Both would set validators: RFC2616Policy answers "fresh" pages without asking.
            msg = (
                "HTTPCACHE_POLICY: RFC2616Policy conflicts with ConditionalRequestMiddleware; "
                "use DummyPolicy or disable HTTPCACHE"
            )
            raise ConfigurationError(msg)
        runtime = runtime_of(crawler)
        return cls(
            runtime.store,
            key_maker=KeyMaker(
                s.getlist("RECRAWLER_URL_DROP_PARAMS"), s.getlist("RECRAWLER_URL_KEEP_PARAMS")
            ),
            conditional=s.getbool("RECRAWLER_CONDITIONAL_ENABLED"),
            missing_statuses=tuple(int(x) for x in s.getlist("RECRAWLER_MISSING_STATUSES")),
            gone_statuses=tuple(int(x) for x in s.getlist("RECRAWLER_GONE_STATUSES")),
            follow_redirects=s.getbool("REDIRECT_ENABLED"),
            max_redirects=s.getint("REDIRECT_MAX_TIMES"),
            soft_404=s.getbool("RECRAWLER_SOFT404_ENABLED"),
            indexing=meta.indexes_pages(s),
            crawler=crawler,
            runtime=runtime,
        )

    @property
    def policy(self) -> UrlPolicy | None:
        """The spider's URL policy (None for a spider without one: nothing is refused)."""
        spider = self.crawler.spider if self.crawler else None
        return getattr(spider, "recrawler_url_policy", None)

    def _inc(self, name: str, count: int = 1) -> None:
        if self.runtime is not None:
            self.runtime.counters.inc(name, count)

    def _state_error(self, exc: StateStoreError) -> None:
        self._inc(f"recrawler/state/error/{type(exc).__name__}")
        logger.error("state store read failed: %(exc)s", {"exc": exc})

    def _refused(self, url: str, reason: str, source: str) -> None:
        if self.runtime is not None:
            self.runtime.refused(url, reason, source)

    async def process_request(self, request: Request) -> None:
        """Refuse URLs the policy does not allow; attach the stored validators of the request's page."""
        # A redirect hop re-enters here: drop validators set for the previous URL first.
        if request.meta.pop(meta.SENT, False):
            for header in _VALIDATOR_HEADERS:
                request.headers.pop(header, None)
        if request.meta.get(meta.ENABLED, True) is False:
            return
        policy = self.policy
        if policy is not None:
            reason = policy.refusal(request.url)
            if reason is not None:
                self._refused(request.url, reason, meta.role(request))
                raise IgnoreRequest(f"recrawler refused the URL ({reason})")
        if is_sitemap_request(request):
            if self.conditional and request.meta.get(meta.CONDITIONAL) is not False:
                await self._attach_sitemap(request)
            return
        if not is_page_request(request):
            return
        key = request_key(request, self.key_maker)
        request.meta[meta.KEY] = key
        if self.follow_redirects and "dont_redirect" not in request.meta:
            # recrawler decides what a page's redirect means (a move, a loan, a miss)
            request.meta["dont_redirect"] = True
            request.meta[meta.REDIRECTS] = True
        if not self.conditional or request.meta.get(meta.CONDITIONAL) is False:
            return
        if meta.RECORD in request.meta:
            # read with its frontier batch, a moment ago
            rec = request.meta[meta.RECORD]
        else:
            try:
                rec = await self.store.get(key)
            except StateStoreError as exc:
                # A read failure is treated as "no record" (as httpcache does): the page is fetched.
                self._state_error(exc)
                return
            # the response and its Page carry it on: the pipelines need not read it again
            request.meta[meta.RECORD] = rec
        if rec is None or rec.status in (GONE, MOVED):
            return
        if rec.status == LIVE and rec.chunks == 0 and self.indexing:
            # stored before the knowledge base was on: fetch the body once so it gets indexed
            return
        # validators a host was caught lying with are switched off for it (see AuditMiddleware)
        if self.runtime is not None:
            rec = self.runtime.auditor.trusted_validators(rec)
        sent = self._attach(request, rec)
        if sent:
            request.meta[meta.SENT] = True
            host = key_host(key)
            self._inc("recrawler/conditional/sent")
            self._inc(f"recrawler/conditional/sent/{host}")
            self._allow_304(request)

    def _allow_304(self, request: Request) -> None:
        allowed = request.meta.get("handle_httpstatus_list")
        if allowed is None:
            spider = self.crawler.spider if self.crawler else None
            allowed = [
                *getattr(spider, "handle_httpstatus_list", ()),
                *(self.crawler.settings.getlist("HTTPERROR_ALLOWED_CODES") if self.crawler else ()),
            ]
        if 304 not in allowed:
            request.meta["handle_httpstatus_list"] = [*allowed, 304]

    async def _attach_sitemap(self, request: Request) -> None:
        """Send a sitemap file's stored validators: an unchanged file answers 304 and its listing
        is taken from the database (robots.txt is always read)."""
        if request.url.endswith("/robots.txt"):
            return
        try:
            file = await self.store.sitemap_file(request.url)
        except StateStoreError as exc:
            # without them the file is simply read again
            self._state_error(exc)
            return
        if file is None:
            return
        sent = False
        if file.etag:
            request.headers[b"If-None-Match"] = file.etag
            sent = True
        if file.last_modified:
            request.headers[b"If-Modified-Since"] = file.last_modified
            sent = True
        if sent:
            request.meta[meta.SENT] = True
            self._inc("recrawler/sitemap/conditional")
            self._allow_304(request)

    @staticmethod
    def _attach(request: Request, rec: PageRecord) -> bool:
        sent = False
        if rec.etag:
            # RFC 9110 §13.1.2: the entity-tag goes back exactly as received, quotes and W/ kept.
            request.headers[b"If-None-Match"] = rec.etag
            sent = True
        if rec.last_modified:
            # RFC 9110 §13.1.3: send the server's own date string (nginx compares it exactly).
            request.headers[b"If-Modified-Since"] = rec.last_modified
            sent = True
        return sent

    async def process_response(self, request: Request, response: Response) -> Request | Response:
        """Count 304s; follow page redirects; stage 404/410 of stored pages; count other errors."""
        if is_sitemap_request(request) or is_page_request(request):
            # what the run downloaded (bodies, after decompression): a 304 costs none
            self._inc("recrawler/bytes/received", len(response.body))
        if is_sitemap_request(request):
            if response.status == 304 and request.meta.get(meta.SENT):
                # RFC 9110 §15.4.5: the file is as it was; ListingMiddleware lists it from the database
                self._inc("recrawler/sitemap/fetched")
                self._inc("recrawler/sitemap/not_modified")
            elif response.status == 200:
                if not response.url.endswith("/robots.txt"):
                    self._inc("recrawler/sitemap/fetched")
            else:
                self._inc("recrawler/sitemap/error")
                logger.error(
                    "sitemap %(url)s answered HTTP %(status)d",
                    {"url": redact_url(response.url), "status": response.status},
                )
            return response
        if not is_page_request(request):
            return response
        status = response.status
        key = request_key(request, self.key_maker)
        if request.meta.pop(meta.TOO_LARGE, False):
            # its body decompressed past DOWNLOAD_MAXSIZE (a gzip bomb): an error, never content
            self._inc("recrawler/request/count")
            self._inc("recrawler/request/failed")
            await self._error(request, key, "too_large", http_status=status)
            raise IgnoreRequest("the page decompresses past DOWNLOAD_MAXSIZE")
        if status in REDIRECTS and request.meta.get(meta.REDIRECTS) and b"Location" in response.headers:
            return await self._redirect(request, response, key)
        self._inc("recrawler/request/count")
        if status == 304 and request.meta.get(meta.SENT):
            self._inc("recrawler/conditional/not_modified")
            self._inc(f"recrawler/conditional/not_modified/{key_host(key)}")
            return response
        if self._shared and request.meta.get(meta.HOPS) and self.key_maker(request.url) in self._shared:
            # an earlier page sent to a target many pages were sent to: its miss is staged
            raise IgnoreRequest("a soft 404 (redirect_shared)")
        if status == 200:
            rec = request.meta.get(meta.RECORD)
            if isinstance(rec, PageRecord) and _same_validator(response, rec):
                # the server calls this the same entity: if its text moved, that is noise
                request.meta[meta.SAME_VALIDATOR] = True
        if 200 <= status < 300 or status == 304:
            return response
        if status in self.miss_statuses:
            await self._miss(request, status, key)
            for source in request.meta.get(meta.MOVED_FROM, ()):
                # a move that leads to a missing page: the old address is missing too
                await self._miss(request, status, source)
            return response
        # 5xx, 429, 403, an unfollowed redirect: uncertainty, never evidence of absence.
        self._inc("recrawler/request/failed")
        await self._error(request, key, f"http_{status}", http_status=status)
        return response

    async def process_exception(self, request: Request, exception: Exception) -> None:
        """Count a download failure that retries did not fix; nothing else changes."""
        if isinstance(exception, IgnoreRequest):
            return
        if is_sitemap_request(request):
            self._inc("recrawler/sitemap/error")
            logger.error(
                "sitemap %(url)s failed: %(exc)s",
                {"url": redact_url(request.url), "exc": redact_text(repr(exception))},
            )
            return
        if not is_page_request(request):
            return
        self._inc("recrawler/request/count")
        self._inc("recrawler/request/failed")
        await self._error(request, request_key(request, self.key_maker), type(exception).__name__)

    async def _redirect(self, request: Request, response: Response, key: str) -> Request:
        """The next hop of a page request, or IgnoreRequest when the redirect is not followed."""
        status = response.status
        location = response.headers[b"Location"] or b""
        hops = [*request.meta.get(meta.HOPS, ()), request.url]
        try:
            target = urljoin(request.url, safe_url_string(location.decode("latin-1").strip()))
        except ValueError:
            target = ""
        policy = self.policy
        reason = policy.refusal(target) if policy is not None else None
        if not target or reason is not None:
            # never followed, never stored: the page did not answer at its address, a miss
            self._inc("recrawler/request/count")
            self._inc("recrawler/redirect/refused")
            self._refused(target or location.decode("latin-1"), reason or "malformed", "redirect")
            await self._miss(request, status, key)
            raise IgnoreRequest(f"redirect to a refused URL ({reason or 'malformed'})")
        target_key = self.key_maker(target)
        if target_key in {self.key_maker(u) for u in hops}:
            self._inc("recrawler/request/count")
            self._inc("recrawler/request/failed")
            await self._error(request, key, "redirect_loop", http_status=status)
            raise IgnoreRequest("redirect loop")
        if len(hops) > self.max_redirects:
            self._inc("recrawler/request/count")
            self._inc("recrawler/request/failed")
            await self._error(request, key, "redirect_limit", http_status=status)
            raise IgnoreRequest("too many redirects")
        # a permanent hop moves the page, unless a temporary hop already lent it its address
        moves = status in PERMANENT_REDIRECTS and self.key_maker(request.url) == key
        shape = await self._soft_redirect(request, key, target, target_key, lends=not moves)
        if shape is not None:
            # a removed page sent home, or one of many lent the same target: a miss, never content
            self._inc("recrawler/request/count")
            sources = list(dict.fromkeys([*request.meta.get(meta.MOVED_FROM, ()), key]))
            staged = False
            for source in sources:
                answer = (
                    await stage_soft_miss(
                        self.runtime,
                        source,
                        request.url,
                        shape,
                        error_if_unknown=source == key and not staged,
                    )
                    if self.runtime is not None
                    else "unknown"
                )
                staged = staged or answer == "staged"
            raise IgnoreRequest(f"a soft 404 ({shape})")
        new_meta = {k: v for k, v in request.meta.items() if k not in (meta.SENT, "handle_httpstatus_list")}
        new_meta[meta.HOPS] = hops
        if moves:
            self._inc("recrawler/redirect/permanent")
            moved_from = [*request.meta.get(meta.MOVED_FROM, ()), key]
            new_meta.update(
                {
                    meta.KEY: target_key,
                    meta.MOVED_FROM: moved_from,
                    meta.FOUND_VIA: "redirect",
                    meta.FOUND_FROM: hops[0],
                }
            )
            # the source's stored record is not the new address's
            for name in (meta.LASTMOD, meta.CANONICAL_URL, meta.RECORD):
                new_meta.pop(name, None)
            # staged now: the listing may fetch the new address itself (the duplicate filter then
            # drops this hop); the move applies only if the new address is a live page by the end
            await self._stage_moves(moved_from, target_key)
            if not await self._claim(target_key):
                # the listing has the new address in the run's frontier: fetched once, from there
                raise IgnoreRequest("the new address is fetched from the frontier")
        else:
            self._inc("recrawler/redirect/temporary")
            new_meta[meta.CANONICAL_URL] = request.meta.get(meta.CANONICAL_URL) or request.url
        logger.debug(
            "page redirect (%(status)d) %(src)s -> %(dst)s",
            {"status": status, "src": request.url, "dst": target},
        )
        follow = request.replace(
            url=target,
            meta=new_meta,
            # a moved page's new address is a page of its own: fetched once, even if also listed
            dont_filter=not moves,
        )
        for header in (*_VALIDATOR_HEADERS, b"Cookie", b"Authorization"):
            if header in _VALIDATOR_HEADERS or url_host(target) != url_host(request.url):
                follow.headers.pop(header, None)
        return follow

    async def _soft_redirect(
        self, request: Request, key: str, target: str, target_key: str, *, lends: bool
    ) -> str | None:
        """The soft-404 shape of a page redirect (None: follow it)."""
        if not self.soft_404 or self.runtime is None or target_key == key:
            return None
        spider = self.crawler.spider if self.crawler else None
        homes = getattr(spider, "recrawler_home_paths", ("/",))
        source_path = urlsplit(resolve_dots(request.url)).path or "/"
        if notfound.home_redirect(source_path, urlsplit(resolve_dots(target)).path or "/", homes):
            return notfound.HOME_REDIRECT
        if not lends and await self._live(target_key):
            # pages merged into a page the site has: moves (one key live)
            return None
        if len(self._loans) >= _LOANS_MAX and target_key not in self._loans:
            self._loans.clear()
            self._shared.clear()
        lent = self._loans.setdefault(target_key, set())
        lent.add(key)
        if len(lent) < SHARED_TARGET_MIN:
            return None
        if len(lent) == SHARED_TARGET_MIN:
            # the pages sent there before it was plain that it is everybody's: misses too (and
            # their answers, still on their way, are dropped: see process_response)
            self._shared.add(target_key)
            for earlier in sorted(lent - {key}):
                await stage_soft_miss(self.runtime, earlier, request.url, notfound.SHARED_REDIRECT)
        return notfound.SHARED_REDIRECT

    async def _live(self, key: str) -> bool:
        """Whether page *key* is a live stored page (a read failure: it is not known to be)."""
        try:
            rec = await self.store.get(key)
        except StateStoreError as exc:
            self._state_error(exc)
            return False
        return rec is not None and rec.status == LIVE

    async def _claim(self, key: str) -> bool:
        """Whether to follow a move to page *key*: not when the run's frontier holds it (Scrapy's
        duplicate filter never sees what the frontier feeds)."""
        run = self.runtime.run if self.runtime is not None else None
        if run is None or self.runtime is None or not frontier_enabled(self.crawler):
            return True
        try:
            return await self.store.frontier_claim(run, key)
        except StateStoreError as exc:
            self._state_error(exc)
            return True

    async def _stage_moves(self, sources: list[str], target: str) -> None:
        """Stage the move of each stored page among *sources* to page *target*."""
        sources = [k for k in sources if k != target]
        run = self.runtime.run if self.runtime is not None else None
        if not sources or run is None:
            return
        try:
            await self.store.record_moves(run, sources, target, http_status=301)
        except StateStoreError as exc:
            self._state_error(exc)

    async def _miss(self, request: Request, status: int, key: str) -> None:
        run = self.runtime.run if self.runtime is not None else None
        if run is None:
            return
        try:
            staged = await self.store.record_miss(run, key, status)
        except StateStoreError as exc:
            self._state_error(exc)
            return
        if staged == "staged":
            self._inc(f"recrawler/page/missing/http_{status}")
        elif staged == "tombstone":
            # A gone page still answering 404/410: nothing new; not a page check either.
            self._inc("recrawler/page/tombstone")
        else:
            # An unknown URL that does not exist: a broken listing, not a page.
            await self._error(request, key, f"http_{status}", http_status=status)

    async def _error(
        self, request: Request, key: str, reason: str, *, http_status: int | None = None
    ) -> None:
        self._inc(f"recrawler/page/{PageStatus.ERROR}")
        self._inc(f"recrawler/page/{PageStatus.ERROR}/{reason}")
        logger.debug("page error %(reason)s: %(url)s", {"reason": reason, "url": request.url})
        run = self.runtime.run if self.runtime is not None else None
        if run is None:
            return
        event = Event(
            run_id=run.id,
            action=PageStatus.ERROR,
            url=request.url,
            key=key,
            content_hash=None,
            status=PageStatus.ERROR,
            at=utcnow(),
            reason=reason,
            http_status=http_status,
        )
        try:
            await self.store.record_error(run, key, [event])
        except StateStoreError as exc:
            self._state_error(exc)
