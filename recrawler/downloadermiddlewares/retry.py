"""PoliteRetryMiddleware: Scrapy's retries, slowing a host down when it asks (429, 503, Retry-After)."""

from __future__ import annotations

import logging
import time
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Self

from scrapy.downloadermiddlewares.retry import RetryMiddleware

from recrawler.exceptions import ConfigurationError
from recrawler.logformatter import mask_logger

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

    Settings: Scrapy's ``RETRY_*``, ``RECRAWLER_RETRY_AFTER_MAX_SECS``.
    """

    def __init__(self, settings: BaseSettings) -> None:
        super().__init__(settings)
        self.max_delay = settings.getfloat("RECRAWLER_RETRY_AFTER_MAX_SECS")
        if self.max_delay < 0:
            raise ConfigurationError(f"RECRAWLER_RETRY_AFTER_MAX_SECS: bad value {self.max_delay!r}")
        mask_logger(logging.getLogger(RetryMiddleware.__module__))
        #: the delay of each slot this middleware slowed down, before it did
        self._own_delay: dict[str, float] = {}
        self._logged = False

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
        return super().process_response(request, response)

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


__all__ = ["SLOW_DOWN", "PoliteRetryMiddleware", "retry_after"]
