"""ConditionalRequestMiddleware: stored validators out, 304s and final outcomes in."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Self

from scrapy.extensions.httpcache import RFC2616Policy
from scrapy.http.request import NO_CALLBACK
from scrapy.utils.misc import load_object

from recrawler.audit import trusted_validators
from recrawler.exceptions import ConfigurationError, StateStoreError
from recrawler.items import PageStatus
from recrawler.pipelines import pending_for
from recrawler.state import GONE, LIVE, Event, PageRecord, hints_for, run_for, store_for, utcnow
from recrawler.urls import KeyMaker, key_host

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Request, Response

    from recrawler.state import StateStore

logger = logging.getLogger(__name__)

#: request meta keys that this middleware reads and writes
META_KEY = "recrawler_key"
META_ENABLED = "recrawler_enabled"
#: ``False``: send no validators with this request (it is still accounted for)
META_CONDITIONAL = "recrawler_conditional"
_META_SENT = "_recrawler_validators"
#: set on a 200 whose validators equal the stored ones
META_SAME_VALIDATOR = "_recrawler_same_validator"
_VALIDATOR_HEADERS = (b"If-None-Match", b"If-Modified-Since")


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


def is_sitemap_request(request: Request, spider: object) -> bool:
    """True for a SitemapSpider's sitemap, sitemap index and robots.txt fetches."""
    parse_sitemap = getattr(spider, "_parse_sitemap", None)
    return parse_sitemap is not None and request.callback == parse_sitemap


def is_page_request(request: Request, spider: object) -> bool:
    """True for requests whose answer is a page recrawler keeps state for."""
    if request.meta.get(META_ENABLED, True) is False or request.callback is NO_CALLBACK:
        return False
    if request.meta.get("dont_obey_robotstxt") and request.url.endswith("/robots.txt"):
        return False
    return not is_sitemap_request(request, spider)


def request_key(request: Request, key_maker: KeyMaker) -> str:
    """The page key of a request: ``recrawler_key`` meta, else the first URL of its redirect chain."""
    key = request.meta.get(META_KEY)
    if key:
        return str(key)
    first_url = (request.meta.get("redirect_urls") or [request.url])[0]
    return key_maker(first_url)


class ConditionalRequestMiddleware:
    """Sends stored validators back and accounts for every page request's final outcome.

    Sends the stored ``ETag`` byte for byte as ``If-None-Match`` and the stored ``Last-Modified``
    as ``If-Modified-Since`` (RFC 9110 §13.1) and lets the 304 reach the callback. Final 404/410
    answers of stored pages are staged as misses for the Reconciler; 5xx, other error statuses
    and download exceptions are counted as errors and change nothing else.

    Settings: ``RECRAWLER_CONDITIONAL_ENABLED``, ``RECRAWLER_DB_URI``, ``RECRAWLER_URL_*_PARAMS``,
    ``RECRAWLER_GONE_STATUSES``, ``RECRAWLER_MISSING_STATUSES``.
    Stats: ``recrawler/conditional/{sent,not_modified}`` (and per host below each),
    ``recrawler/request/{count,failed}``, ``recrawler/page/missing/http_<code>``,
    ``recrawler/page/error/<reason>``, ``recrawler/sitemap/{fetched,error}``,
    ``recrawler/state/error/<Exception>``.
    Meta: ``recrawler_enabled=False`` skips a request, ``recrawler_key`` overrides its page key,
    ``recrawler_conditional=False`` sends no validators.
    """

    def __init__(
        self,
        store: StateStore,
        *,
        key_maker: KeyMaker | None = None,
        conditional: bool = True,
        missing_statuses: tuple[int, ...] = (404,),
        gone_statuses: tuple[int, ...] = (410,),
        crawler: Crawler | None = None,
    ) -> None:
        self.store = store
        self.key_maker = key_maker or KeyMaker()
        self.conditional = conditional
        self.miss_statuses = frozenset(missing_statuses) | frozenset(gone_statuses)
        if self.miss_statuses & {200, 304}:
            msg = (
                "RECRAWLER_MISSING_STATUSES/RECRAWLER_GONE_STATUSES: 200 and 304 are not misses "
                f"({sorted(self.miss_statuses)})"
            )
            raise ConfigurationError(msg)
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Build from settings; the store is the crawler's single store."""
        s = crawler.settings
        if s.getbool("HTTPCACHE_ENABLED") and _is_rfc2616(s.get("HTTPCACHE_POLICY")):
            # Both would set validators: RFC2616Policy answers "fresh" pages without asking.
            msg = (
                "HTTPCACHE_POLICY: RFC2616Policy conflicts with ConditionalRequestMiddleware; "
                "use DummyPolicy or disable HTTPCACHE"
            )
            raise ConfigurationError(msg)
        return cls(
            store_for(crawler),
            key_maker=KeyMaker(
                s.getlist("RECRAWLER_URL_DROP_PARAMS"), s.getlist("RECRAWLER_URL_KEEP_PARAMS")
            ),
            conditional=s.getbool("RECRAWLER_CONDITIONAL_ENABLED"),
            missing_statuses=tuple(int(x) for x in s.getlist("RECRAWLER_MISSING_STATUSES")),
            gone_statuses=tuple(int(x) for x in s.getlist("RECRAWLER_GONE_STATUSES")),
            crawler=crawler,
        )

    def _indexing(self) -> bool:
        # an enabled IndexPipeline registers its hand-over when it is built
        return self.crawler is not None and pending_for(self.crawler) is not None

    def _inc(self, name: str, count: int = 1) -> None:
        if self.crawler is not None and self.crawler.stats is not None:
            self.crawler.stats.inc_value(name, count)

    def _state_error(self, exc: StateStoreError) -> None:
        self._inc(f"recrawler/state/error/{type(exc).__name__}")
        logger.error("state store read failed: %(exc)s", {"exc": exc})

    async def process_request(self, request: Request) -> None:
        """Attach the stored validators of the request's page."""
        spider = self.crawler.spider if self.crawler else None
        # A redirect re-enters here: drop validators we set for the previous URL first.
        if request.meta.pop(_META_SENT, False):
            for header in _VALIDATOR_HEADERS:
                request.headers.pop(header, None)
        if not is_page_request(request, spider):
            return
        key = request_key(request, self.key_maker)
        request.meta[META_KEY] = key
        if not self.conditional or request.meta.get(META_CONDITIONAL) is False:
            return
        try:
            rec = await self.store.get(key)
        except StateStoreError as exc:
            # A read failure is treated as "no record" (as httpcache does): the page is fetched.
            self._state_error(exc)
            return
        if self.crawler is not None:
            hints_for(self.crawler).put(key, rec)
        if rec is None or rec.status == GONE:
            return
        if rec.status == LIVE and rec.chunks == 0 and self._indexing():
            # stored before the knowledge base was on: fetch the body once so it gets indexed
            return
        # validators a host was caught lying with are switched off for it (see AuditMiddleware)
        sent = self._attach(request, trusted_validators(self.crawler, rec))
        if sent:
            request.meta[_META_SENT] = True
            host = key_host(key)
            self._inc("recrawler/conditional/sent")
            self._inc(f"recrawler/conditional/sent/{host}")
            allowed = request.meta.get("handle_httpstatus_list")
            if allowed is None:
                allowed = [
                    *getattr(spider, "handle_httpstatus_list", ()),
                    *(self.crawler.settings.getlist("HTTPERROR_ALLOWED_CODES") if self.crawler else ()),
                ]
            if 304 not in allowed:
                request.meta["handle_httpstatus_list"] = [*allowed, 304]

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

    async def process_response(self, request: Request, response: Response) -> Response:
        """Count 304s; stage 404/410 of stored pages; count other error statuses."""
        spider = self.crawler.spider if self.crawler else None
        if is_sitemap_request(request, spider):
            if response.status == 200:
                if not response.url.endswith("/robots.txt"):
                    self._inc("recrawler/sitemap/fetched")
            else:
                self._inc("recrawler/sitemap/error")
                logger.error(
                    "sitemap %(url)s answered HTTP %(status)d",
                    {"url": response.url, "status": response.status},
                )
            return response
        if not is_page_request(request, spider):
            return response
        self._inc("recrawler/request/count")
        status = response.status
        key = request_key(request, self.key_maker)
        if status == 304 and request.meta.get(_META_SENT):
            self._inc("recrawler/conditional/not_modified")
            self._inc(f"recrawler/conditional/not_modified/{key_host(key)}")
            return response
        if status == 200 and self.crawler is not None:
            rec = hints_for(self.crawler).peek(key)
            if isinstance(rec, PageRecord) and _same_validator(response, rec):
                # the server calls this the same entity: if its text moved, that is noise
                request.meta[META_SAME_VALIDATOR] = True
        if 200 <= status < 300 or status == 304:
            return response
        if status in self.miss_statuses:
            await self._miss(request, response, key)
            return response
        # 5xx, 429, 403, an unfollowed redirect: uncertainty, never evidence of absence.
        self._inc("recrawler/request/failed")
        await self._error(request, key, f"http_{status}", http_status=status)
        return response

    async def process_exception(self, request: Request, exception: Exception) -> None:
        """Count a download failure that retries did not fix; nothing else changes."""
        spider = self.crawler.spider if self.crawler else None
        if is_sitemap_request(request, spider):
            self._inc("recrawler/sitemap/error")
            logger.error("sitemap %(url)s failed: %(exc)r", {"url": request.url, "exc": exception})
            return
        if not is_page_request(request, spider):
            return
        self._inc("recrawler/request/count")
        self._inc("recrawler/request/failed")
        await self._error(request, request_key(request, self.key_maker), type(exception).__name__)

    async def _miss(self, request: Request, response: Response, key: str) -> None:
        if self.crawler is None:
            return
        run = await run_for(self.crawler)
        try:
            staged = await self.store.record_miss(run, key, response.status)
        except StateStoreError as exc:
            self._state_error(exc)
            return
        if staged == "staged":
            self._inc(f"recrawler/page/missing/http_{response.status}")
        elif staged == "tombstone":
            # A gone page still answering 404/410: nothing new; not a page check either.
            self._inc("recrawler/page/tombstone")
        else:
            # An unknown URL that does not exist: a broken listing, not a page.
            await self._error(request, key, f"http_{response.status}", http_status=response.status)

    async def _error(
        self, request: Request, key: str, reason: str, *, http_status: int | None = None
    ) -> None:
        self._inc(f"recrawler/page/{PageStatus.ERROR}")
        self._inc(f"recrawler/page/{PageStatus.ERROR}/{reason}")
        logger.debug("page error %(reason)s: %(url)s", {"reason": reason, "url": request.url})
        if self.crawler is None:
            return
        run = await run_for(self.crawler)
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
