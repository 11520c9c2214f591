"""ConditionalRequestMiddleware: stored validators out, 304s and final outcomes in."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Self

from scrapy.exceptions import IgnoreRequest
from scrapy.extensions.httpcache import RFC2616Policy
from scrapy.utils.misc import load_object

from recrawler import meta
from recrawler.auditor import Auditor
from recrawler.counters import Counting
from recrawler.exceptions import ConfigurationError, StateStoreError
from recrawler.meta import is_page_request, is_sitemap_request, request_key
from recrawler.misses import miss_moves, record_page_error, stage_miss, state_error
from recrawler.redact import redact_text, redact_url
from recrawler.runtime import component_of, runtime_of
from recrawler.state import GONE, LIVE, MOVED, PageRecord
from recrawler.urls import KeyMaker, key_host

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Request, Response

    from recrawler.runtime import Runtime
    from recrawler.state import Frontier, Pages

logger = logging.getLogger(__name__)

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


class ConditionalRequestMiddleware(Counting):
    """Sends stored validators back and accounts for every page request's final outcome.

    Sends the stored ``ETag`` byte for byte as ``If-None-Match`` and the stored ``Last-Modified`` as
    ``If-Modified-Since`` (RFC 9110 §13.1) and lets the 304 reach the callback; sitemap files get
    their stored validators too, and an unchanged one (304) is listed from the database. The stored
    record it reads rides on to the callback in the request's meta. It sits below the redirect
    middleware (PageRedirectMiddleware), so it sees final answers: 404/410 of stored pages (and of
    the pages a permanent redirect moved there) are staged as misses for the Reconciler; 5xx, other
    error statuses, an unfollowed redirect and download exceptions are counted as errors and change
    nothing else. (URLs outside the spider's policy never get here: see UrlPolicyMiddleware.)

    Settings: ``RECRAWLER_CONDITIONAL_ENABLED``, ``RECRAWLER_DB_URI``, ``RECRAWLER_URL_*_PARAMS``,
    ``RECRAWLER_GONE_STATUSES``, ``RECRAWLER_MISSING_STATUSES``, ``RECRAWLER_INDEX_ENABLED`` with
    ``ITEM_PIPELINES`` (IndexPipeline on: a page stored without chunks is fetched whole),
    ``HTTPERROR_ALLOWED_CODES`` (its statuses reach the callback as they are), ``HTTPCACHE_ENABLED``
    with ``HTTPCACHE_POLICY`` (RFC2616Policy also sends validators: a ConfigurationError).
    Stats: ``recrawler/conditional/{sent,not_modified,ignored}`` (and per host below each;
    ``ignored``: a 200 carrying the very validators the request sent),
    ``recrawler/request/{count,failed}``, ``recrawler/page/missing/http_<code>``,
    ``recrawler/page/error/<reason>``,
    ``recrawler/sitemap/{fetched,error,conditional,not_modified}``, ``recrawler/bytes/received``,
    ``recrawler/state/error/<Exception>``.
    Meta: ``recrawler_enabled=False`` skips a request, ``recrawler_key`` overrides its page key,
    ``recrawler_conditional=False`` sends no validators.
    """

    def __init__(
        self,
        pages: Pages,
        frontier: Frontier,
        *,
        key_maker: KeyMaker | None = None,
        conditional: bool = True,
        missing_statuses: tuple[int, ...] = (404,),
        gone_statuses: tuple[int, ...] = (410,),
        indexing: bool = False,
        crawler: Crawler | None = None,
        runtime: Runtime | None = None,
        auditor: Auditor | None = None,
    ) -> None:
        self.pages = pages
        self.frontier = frontier
        self.runtime = runtime
        #: the run's audit: validators a host was caught lying with are not sent
        self.auditor = auditor
        self.counters = runtime.counters if runtime is not None else None
        self.key_maker = key_maker or KeyMaker()
        self.conditional = conditional
        self.miss_statuses = frozenset(missing_statuses) | frozenset(gone_statuses)
        if self.miss_statuses & {200, 304}:
            msg = (
                "RECRAWLER_MISSING_STATUSES/RECRAWLER_GONE_STATUSES: 200 and 304 are not misses "
                f"({sorted(self.miss_statuses)})"
            )
            raise ConfigurationError(msg)
        #: the knowledge base is kept (IndexPipeline): a page stored without chunks is fetched whole
        self.indexing = indexing
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
            runtime.store.pages,
            runtime.store.frontier,
            key_maker=KeyMaker(
                s.getlist("RECRAWLER_URL_DROP_PARAMS"), s.getlist("RECRAWLER_URL_KEEP_PARAMS")
            ),
            conditional=s.getbool("RECRAWLER_CONDITIONAL_ENABLED"),
            missing_statuses=tuple(int(x) for x in s.getlist("RECRAWLER_MISSING_STATUSES")),
            gone_statuses=tuple(int(x) for x in s.getlist("RECRAWLER_GONE_STATUSES")),
            indexing=meta.indexes_pages(s),
            crawler=crawler,
            runtime=runtime,
            auditor=component_of(crawler, Auditor),
        )

    def _state_error(self, exc: StateStoreError) -> None:
        if self.runtime is not None:
            state_error(self.runtime, exc)

    async def process_request(self, request: Request) -> None:
        """Attach the stored validators of the request's page (or sitemap file)."""
        # A redirect hop re-enters here: drop validators set for the previous URL first.
        if request.meta.pop(meta.SENT, False):
            for header in _VALIDATOR_HEADERS:
                request.headers.pop(header, None)
        if request.meta.get(meta.ENABLED, True) is False:
            return
        if is_sitemap_request(request):
            if self.conditional and request.meta.get(meta.CONDITIONAL) is not False:
                await self._attach_sitemap(request)
            return
        if not is_page_request(request):
            return
        key = request_key(request, self.key_maker)
        request.meta[meta.KEY] = key
        if not self.conditional or request.meta.get(meta.CONDITIONAL) is False:
            return
        if meta.RECORD in request.meta:
            # read with its frontier batch, a moment ago
            rec = request.meta[meta.RECORD]
        else:
            try:
                rec = await self.pages.get(key)
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
        if self.auditor is not None:
            rec = self.auditor.trusted_validators(rec)
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
            file = await self.frontier.sitemap_file(request.url)
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
        """Count 304s; stage 404/410 of stored pages; count other errors."""
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
        self._inc("recrawler/request/count")
        if status == 304 and request.meta.get(meta.SENT):
            self._inc("recrawler/conditional/not_modified")
            self._inc(f"recrawler/conditional/not_modified/{key_host(key)}")
            return response
        if status == 200:
            rec = request.meta.get(meta.RECORD)
            if isinstance(rec, PageRecord) and _same_validator(response, rec):
                # the server calls this the same entity: if its text moved, that is noise
                request.meta[meta.SAME_VALIDATOR] = True
                if request.meta.get(meta.SENT):
                    # RFC 9110 §13.2.2: a match of the validators sent should have been a 304 — the
                    # evidence that a host ignores them (new validators are a new entity: a
                    # redeploy's files; an error answer says nothing either way)
                    self._inc("recrawler/conditional/ignored")
                    self._inc(f"recrawler/conditional/ignored/{key_host(key)}")
        if 200 <= status < 300 or status == 304:
            return response
        if status in self.miss_statuses:
            await self._miss(request, status, key)
            for source in request.meta.get(meta.MOVED_FROM, ()):
                # a move that leads to a missing page: the old address is missing too
                await self._miss(request, status, source)
            # and so are the others this run found moving there (their hops were not fetched again)
            if self.runtime is not None:
                await miss_moves(self.runtime, key, status)
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

    async def _miss(self, request: Request, status: int, key: str) -> None:
        if self.runtime is not None:
            await stage_miss(self.runtime, key, request.url, status)

    async def _error(
        self, request: Request, key: str, reason: str, *, http_status: int | None = None
    ) -> None:
        if self.runtime is not None:
            await record_page_error(self.runtime, key, request.url, reason, http_status=http_status)
