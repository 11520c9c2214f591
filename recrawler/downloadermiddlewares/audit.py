"""AuditMiddleware: the run's audit sample is fetched in full, whatever the cheap layers say."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Self

from scrapy.exceptions import NotConfigured

from recrawler import meta
from recrawler import signals as recrawler_signals
from recrawler.auditor import Auditor
from recrawler.intervals import parse_audit_sample
from recrawler.items import PageStatus
from recrawler.meta import is_page_request, request_key
from recrawler.runtime import component_of, runtime_of
from recrawler.urls import KeyMaker

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Request, Response

    from recrawler.counters import RunCounters
    from recrawler.items import Page

logger = logging.getLogger(__name__)


class AuditMiddleware:
    """Checks the claims of the run's audit sample (``RECRAWLER_AUDIT_SAMPLE``).

    Sampled pages are requested whatever their schedule and lastmod say (ScheduleMiddleware and
    the Reconciler see to that). A 304 to a sampled page is not believed: the page is fetched
    again without validators and, once classified, a change means the validator lied (the
    ``etag`` when If-None-Match was sent, else ``last_modified``; RFC 9110 §13.2.2 evaluates
    If-None-Match first). Lies are recorded per host; a signal that lied is switched off.

    Not installed when ``RECRAWLER_AUDIT_SAMPLE`` is 0 (a host's lost trust still holds: the
    conditional middleware reads it).

    Settings: ``RECRAWLER_AUDIT_SAMPLE``, ``RECRAWLER_AUDIT_DISTRUST_AFTER``,
    ``RECRAWLER_URL_DROP_PARAMS``, ``RECRAWLER_URL_KEEP_PARAMS``.
    Stats: ``recrawler/audit/{sampled,refetched,checked,lies,distrusted}``,
    ``recrawler/audit/lies/<signal>``. Signals: listens to ``page_classified``.
    """

    def __init__(self, auditor: Auditor, counters: RunCounters, *, key_maker: KeyMaker | None = None) -> None:
        self.auditor = auditor
        self.counters = counters
        self.key_maker = key_maker or KeyMaker()
        self._claims: dict[str, str] = {}
        self._checked: set[str] = set()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Use the run's Auditor (the Runtime binds it, loads trust and draws the sample before the
        first request) and connect the signal."""
        meta.require_opt_in(crawler)
        s = crawler.settings
        if not parse_audit_sample(s.get("RECRAWLER_AUDIT_SAMPLE")):
            # no page is sampled: nothing to refetch or compare (nor a signal to hear per page);
            # silently, as configured (a message would make Scrapy log a WARNING every run)
            raise NotConfigured
        mw = cls(
            component_of(crawler, Auditor),
            runtime_of(crawler).counters,
            key_maker=KeyMaker(
                s.getlist("RECRAWLER_URL_DROP_PARAMS"), s.getlist("RECRAWLER_URL_KEEP_PARAMS")
            ),
        )
        crawler.signals.connect(mw.page_classified, signal=recrawler_signals.page_classified)
        return mw

    async def process_response(self, request: Request, response: Response) -> Request | Response:
        """A 304 to a sampled page: fetch it again, without validators."""
        if response.status != 304 or request.meta.get(meta.AUDIT_CLAIM):
            return response
        if not is_page_request(request):
            return response
        key = request_key(request, self.key_maker)
        if not self.auditor.in_sample(key):
            return response
        signal = "etag" if request.headers.get(b"If-None-Match") else "last_modified"
        self.counters.inc("recrawler/audit/refetched")
        logger.debug("audit: %(url)s answered 304, fetching it in full", {"url": request.url})
        return request.replace(
            dont_filter=True, meta={**request.meta, meta.CONDITIONAL: False, meta.AUDIT_CLAIM: signal}
        )

    async def page_classified(self, page: Page, status: PageStatus) -> None:
        """Compare a sampled page's 304 claim with what the full fetch found."""
        if not self.auditor.in_sample(page.key) or page.key in self._checked:
            return
        if status not in (PageStatus.CHANGED, PageStatus.UNCHANGED, PageStatus.NEW):
            return
        self._checked.add(page.key)
        self.counters.inc("recrawler/audit/checked")
        signal = self._claims.pop(page.key, None)
        # a second 304, to a request without validators, proves nothing either way
        if signal is not None and page.http_status != 304 and status != PageStatus.NEW:
            await self.auditor.observe(page.key, signal, lied=status == PageStatus.CHANGED, url=page.url)

    def process_request(self, request: Request) -> None:
        """Remember which signal a refetch checks (the response's callback only sees the Page)."""
        signal = request.meta.get(meta.AUDIT_CLAIM)
        if signal:
            self._claims[request_key(request, self.key_maker)] = str(signal)
