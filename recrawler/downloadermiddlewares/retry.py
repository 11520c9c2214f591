"""PoliteRetryMiddleware: Scrapy's retries, slowing a host down when it asks (429, 503, Retry-After),
and stopping the run when the site is down."""

from __future__ import annotations

import asyncio
import logging
import time
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, Self

from scrapy.downloadermiddlewares.retry import RetryMiddleware
from scrapy.exceptions import IgnoreRequest

from recrawler.exceptions import ConfigurationError
from recrawler.logformatter import mask_logger
from recrawler.redact import redact_url

if TYPE_CHECKING:
    from scrapy.core.downloader import Slot
    from scrapy.crawler import Crawler
    from scrapy.http import Request, Response
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

#: RFC 6585 §4 (429 Too Many Requests) and RFC 9110 §15.6.4 (503): the server asks for less
SLOW_DOWN = frozenset({429, 503})
#: the first wait when the server gives no Retry-After (doubled while it keeps asking)
_FIRST_BACKOFF_SECS = 1.0
#: the close reason of a run stopped because the site answered nothing but failures
CLOSE_SITE_DOWN = "recrawler_site_down"
#: failed answers in a row, at least, before the site is taken for down (a slow error is not an outage)
_OUTAGE_MIN_FAILURES = 3
#: how often a slowed-down crawl looks whether it is being stopped (Ctrl-C), to drop its waits
_STOP_CHECK_SECS = 1.0


def failed_answer(status: int) -> bool:
    """A server error (RFC 9110 §15.6) or 429 (RFC 6585 §4): the site could not serve the request."""
    return status >= 500 or status == 429


def retry_after(value: bytes | None, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` value asks for (RFC 9110 §10.2.3: delay-seconds or an HTTP-date),
    or None when there is none or it cannot be read."""
    if not value:
        return None
    text = value.decode("latin-1").strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class PoliteRetryMiddleware(RetryMiddleware):
    """Scrapy's :class:`~scrapy.downloadermiddlewares.retry.RetryMiddleware`, polite about 429 and 503.

    A 429 or 503 slows its download slot (the host) down before the retry goes out: to the
    ``Retry-After`` the server sent (seconds or a date, at most ``RECRAWLER_RETRY_AFTER_MAX_SECS``),
    or, without one, to a delay that doubles from 1 s while the host keeps asking. Scrapy's slot
    delay spaces every request to that host, so a 429 storm is not answered by the crawl's whole
    concurrency at once. Each other answer halves the added delay again, back to the slot's own
    (``DOWNLOAD_DELAY``, or what AutoThrottle set). Retries and their counts are Scrapy's own; their
    log lines mask credentials in URLs. The add-on puts it in RetryMiddleware's place.

    Patience is bounded by an outage detector, not by the retries: when every answer for
    ``RECRAWLER_OUTAGE_SECS`` (and at least three in a row) was a failure (5xx, 429, a timeout, a
    refused connection), the site is down: one ERROR line says so and the spider closes
    (``recrawler_site_down``: nothing is removed, exit 4). The requests waiting for their turn in a
    slowed-down host's queue are dropped when the run stops (the site is down, or Ctrl-C): a stop
    does not wait a ``Retry-After`` for each of them.

    Settings: Scrapy's ``RETRY_*``, ``RECRAWLER_RETRY_AFTER_MAX_SECS``, ``RECRAWLER_OUTAGE_SECS``.
    """

    def __init__(self, settings: BaseSettings) -> None:
        super().__init__(settings)
        self.max_delay = settings.getfloat("RECRAWLER_RETRY_AFTER_MAX_SECS")
        if self.max_delay < 0:
            raise ConfigurationError(f"RECRAWLER_RETRY_AFTER_MAX_SECS: bad value {self.max_delay!r}")
        mask_logger(logging.getLogger(RetryMiddleware.__module__))
        self.outage_secs = settings.getfloat("RECRAWLER_OUTAGE_SECS")
        if self.outage_secs < 0:
            raise ConfigurationError(f"RECRAWLER_OUTAGE_SECS: bad value {self.outage_secs!r}")
        #: the delay of each slot this middleware slowed down, before it did
        self._own_delay: dict[str, float] = {}
        self._logged = False
        #: failed answers in a row, and when the first of them came (monotonic)
        self._failures = 0
        self._failing_since = 0.0
        self._down = False
        self._watching: asyncio.Future[None] | None = None
        self._background: set[asyncio.Future[None]] = set()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Build from the crawler's settings, as Scrapy's RetryMiddleware is."""
        return super().from_crawler(crawler)

    def process_response(self, request: Request, response: Response) -> Request | Response:  # type: ignore[override]
        """Slow the host down on 429 and 503, then retry as Scrapy does; ease off on other answers."""
        if response.status in SLOW_DOWN:
            self._slow_down(request, response)
        else:
            self._ease_off(request)
        if not failed_answer(response.status):
            self._failures = 0
        elif self._failed(request, f"HTTP {response.status}"):
            # the site is down: no retry (the run is stopping), the answer counts as it is
            return response
        return super().process_response(request, response)

    def process_exception(  # type: ignore[override]
        self, request: Request, exception: Exception
    ) -> Request | Response | None:
        """Count a download that failed toward an outage, then retry as Scrapy does."""
        if isinstance(exception, self.exceptions_to_retry) and self._failed(
            request, type(exception).__name__
        ):
            return None
        return super().process_exception(request, exception)

    def _failed(self, request: Request, why: str) -> bool:
        """Count a failed answer; True once the site is down (the run is stopping)."""
        if self._down:
            return True
        now = time.monotonic()
        if not self._failures:
            self._failing_since = now
        self._failures += 1
        elapsed = now - self._failing_since
        if not self.outage_secs or self._failures < _OUTAGE_MIN_FAILURES or elapsed < self.outage_secs:
            return False
        self._down = True
        logger.error(
            "the site is down: every answer for %(secs).0f s was a failure (%(n)d in a row, the last "
            "%(why)s for %(url)s); the run stops here, nothing is removed, exit 4 (RECRAWLER_OUTAGE_SECS)",
            {"secs": elapsed, "n": self._failures, "why": why, "url": redact_url(request.url)},
            extra={"spider": self.crawler.spider},
        )
        self._drop_waiting("the site is down")
        engine = self.crawler.engine
        if engine is not None:
            # not awaited here: closing waits for the downloads in progress, this one among them
            self._keep(engine.close_spider_async(reason=CLOSE_SITE_DOWN))
        return True

    def _keep(self, work: Any) -> asyncio.Future[None]:
        task: asyncio.Future[None] = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def _drop_waiting(self, why: str) -> None:
        """Give every slowed-down host its own delay back and drop the requests queued for their
        turn (each would wait a ``Retry-After``): a run that stops does not wait for them. They
        were not sent: no page is checked, nor counted as an error, by them."""
        engine = self.crawler.engine
        if engine is None:
            return
        for key, own in list(self._own_delay.items()):
            slot = engine.downloader.slots.get(key)
            del self._own_delay[key]
            if slot is None:
                continue
            slot.delay = own
            if slot.latercall is not None:
                slot.latercall.cancel()
                slot.latercall = None
            while slot.queue:
                _, waiting = slot.queue.popleft()
                waiting.errback(IgnoreRequest(f"not sent: {why}"))

    async def _watch_stop(self) -> None:
        """While a host is slowed down, drop its queued requests as soon as the crawl is stopped
        (Ctrl-C, ``crawler.stop()``): Scrapy's graceful stop waits for every request it sent."""
        while self._own_delay:
            if not self.crawler.crawling:
                self._drop_waiting("the crawl is stopping")
                return
            await asyncio.sleep(_STOP_CHECK_SECS)

    def _slot(self, request: Request) -> tuple[str | None, Slot | None]:
        key = request.meta.get("download_slot")
        engine = self.crawler.engine
        if key is None or engine is None:
            return None, None
        return key, engine.downloader.slots.get(key)

    def _slow_down(self, request: Request, response: Response) -> None:
        key, slot = self._slot(request)
        if key is None or slot is None:
            return
        own = self._own_delay.setdefault(key, slot.delay)
        asked = retry_after(response.headers.get(b"Retry-After"))
        wait = asked if asked is not None else max(_FIRST_BACKOFF_SECS, 2 * (slot.delay - own))
        delay = max(slot.delay, own + min(wait, self.max_delay))
        if delay > slot.delay:
            slot.delay = delay
            if self._watching is None or self._watching.done():
                self._watching = self._keep(self._watch_stop())
            if not self._logged:
                self._logged = True
                logger.warning(
                    "%(host)s answered %(status)d%(after)s: slowing down to one request every %(delay).1f s",
                    {
                        "host": key,
                        "status": response.status,
                        "after": "" if asked is None else f" (Retry-After: {asked:g} s)",
                        "delay": delay,
                    },
                    extra={"spider": self.crawler.spider},
                )

    def _ease_off(self, request: Request) -> None:
        key, slot = self._slot(request)
        if key is None or slot is None or key not in self._own_delay:
            return
        own = self._own_delay[key]
        added = (slot.delay - own) / 2
        if added < 0.05:
            slot.delay = own
            del self._own_delay[key]
        else:
            slot.delay = own + added


__all__ = ["CLOSE_SITE_DOWN", "SLOW_DOWN", "PoliteRetryMiddleware", "failed_answer", "retry_after"]
