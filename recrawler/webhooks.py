"""Signed webhooks: committed outbox events POSTed in batches, HMAC-SHA256 over timestamp and body."""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import logging
import random
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Self
from urllib.parse import urlsplit

from recrawler import __version__
from recrawler.exceptions import ConfigurationError, EventDeliveryError
from recrawler.redact import redact_endpoint, redact_text, redact_url

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from email.message import Message

    from scrapy.settings import BaseSettings

__all__ = [
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "WebhookSink",
    "idempotency_key",
    "sign",
    "verify",
]

logger = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Recrawler-Signature"
TIMESTAMP_HEADER = "X-Recrawler-Timestamp"
#: answers worth another attempt: the receiver is overloaded, restarting or briefly failing
#: (RFC 9110 §15.5.9 408, §15.6 5xx; RFC 6585 §4 429); any other non-2xx stops the delivery
RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
#: the longest wait between two attempts, whatever the backoff or Retry-After says
MAX_BACKOFF_SECS = 60.0


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The ``X-Recrawler-Signature`` value: ``sha256=`` + hex HMAC-SHA256 of ``<timestamp>.<body>``."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return f"sha256={mac.hexdigest()}"


def verify(
    secret: str,
    timestamp: str,
    body: bytes,
    signature: str,
    *,
    tolerance_secs: float = 300.0,
    now: float | None = None,
) -> bool:
    """A receiver's check: the signature matches and the timestamp is within *tolerance_secs*."""
    try:
        sent = int(timestamp)
    except ValueError:
        return False
    if abs((time.time() if now is None else now) - sent) > tolerance_secs:
        return False
    return hmac.compare_digest(sign(secret, timestamp, body), signature)


def idempotency_key(payload: str) -> str:
    """``<run_id>:<key>:<action>:<digest>`` of one stored event, the same on every delivery attempt
    (the digest is of the event as stored in the outbox, so two events never share one)."""
    event = json.loads(payload)
    digest = hashlib.sha256(payload.encode()).hexdigest()[:16]
    return f"{event['run_id']}:{event['key']}:{event['action']}:{digest}"


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    # a redirected POST becomes a body-less GET whose 200 would count as delivered: refuse it
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


class WebhookSink:
    """Delivers committed events to ``RECRAWLER_WEBHOOK_URL`` (an event sink of the outbox).

    Each batch is one POST of ``{"events": [...]}``, every event carrying its ``idempotency_key``,
    signed with ``RECRAWLER_WEBHOOK_SECRET`` (:func:`sign`, headers ``X-Recrawler-Timestamp`` and
    ``X-Recrawler-Signature``). 408, 425, 429, 5xx, timeouts and connection errors are retried
    with exponential backoff and jitter; when the retries run out, or on any other answer, it
    raises :class:`~recrawler.exceptions.EventDeliveryError` and the events stay in the outbox.
    A network sink is not ``immediate``: it runs when a delivery is asked for (the end of a run,
    ``recrawler events deliver``), never after each commit. The secret is never logged, and the URL
    is shown only as far as its host (a Slack-style URL's path is its secret).

    Settings: ``RECRAWLER_WEBHOOK_URL``, ``RECRAWLER_WEBHOOK_SECRET``,
    ``RECRAWLER_WEBHOOK_BATCH_SIZE``, ``RECRAWLER_WEBHOOK_MAX_RETRIES``,
    ``RECRAWLER_WEBHOOK_BACKOFF_SECS``, ``RECRAWLER_WEBHOOK_TIMEOUT_SECS``.
    """

    immediate = False

    def __init__(
        self,
        url: str,
        secret: str,
        *,
        batch_size: int = 100,
        max_retries: int = 5,
        backoff_secs: float = 1.0,
        timeout_secs: float = 10.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).hostname:
            raise ConfigurationError(f"RECRAWLER_WEBHOOK_URL: not an http(s) URL: {redact_url(url)!r}")
        if not secret:
            raise ConfigurationError(
                "RECRAWLER_WEBHOOK_SECRET: empty; webhooks are always signed (set it in the environment)"
            )
        for name, value, ok in (
            ("RECRAWLER_WEBHOOK_BATCH_SIZE", batch_size, batch_size >= 1),
            ("RECRAWLER_WEBHOOK_MAX_RETRIES", max_retries, max_retries >= 0),
            ("RECRAWLER_WEBHOOK_BACKOFF_SECS", backoff_secs, backoff_secs >= 0),
            ("RECRAWLER_WEBHOOK_TIMEOUT_SECS", timeout_secs, timeout_secs > 0),
        ):
            if not ok:
                raise ConfigurationError(f"{name}: bad value {value!r}")
        self.url = url
        self._secret = secret
        self.batch_size = batch_size
        self.max_retries = max_retries
        self.backoff_secs = backoff_secs
        self.timeout_secs = timeout_secs
        self._sleep = sleep
        self._opener = urllib.request.build_opener(_NoRedirects)

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> Self | None:
        """The sink of ``RECRAWLER_WEBHOOK_URL``, or None when it is not set."""
        url = settings.get("RECRAWLER_WEBHOOK_URL")
        if not url:
            return None
        return cls(
            str(url),
            str(settings.get("RECRAWLER_WEBHOOK_SECRET") or ""),
            batch_size=settings.getint("RECRAWLER_WEBHOOK_BATCH_SIZE"),
            max_retries=settings.getint("RECRAWLER_WEBHOOK_MAX_RETRIES"),
            backoff_secs=settings.getfloat("RECRAWLER_WEBHOOK_BACKOFF_SECS"),
            timeout_secs=settings.getfloat("RECRAWLER_WEBHOOK_TIMEOUT_SECS"),
        )

    def __repr__(self) -> str:
        # the path of a webhook URL is often its secret (Slack's /services/T000/B000/XXXX)
        return f"webhook {redact_endpoint(self.url)}"

    def deliver(self, lines: Sequence[str]) -> None:
        """POST *lines* in signed batches of ``batch_size``; raise EventDeliveryError on failure."""
        for start in range(0, len(lines), self.batch_size):
            self._post(lines[start : start + self.batch_size])

    def close(self) -> None:
        """Nothing is kept open between batches."""

    def body(self, lines: Sequence[str]) -> bytes:
        """The JSON body of one batch: ``{"events": [{..., "idempotency_key": ...}, ...]}``."""
        events = [{**json.loads(line), "idempotency_key": idempotency_key(line)} for line in lines]
        return json.dumps({"events": events}, separators=(",", ":")).encode()

    def _post(self, lines: Sequence[str]) -> None:
        body = self.body(lines)
        attempt = 0
        while True:
            status, retry_after, why = self._attempt(body)
            if status is not None and 200 <= status < 300:
                logger.debug("webhook: %(n)d events delivered (%(why)s)", {"n": len(lines), "why": why})
                return
            if status is not None and status not in RETRY_STATUSES:
                raise EventDeliveryError(f"{self!r} answered {why}; not retried")
            if attempt >= self.max_retries:
                raise EventDeliveryError(f"{self!r} failed {attempt + 1} times, last: {why}")
            delay = self._backoff(attempt, retry_after)
            logger.debug(
                "webhook: %(why)s; attempt %(n)d again in %(delay).1f s",
                {"why": why, "n": attempt + 2, "delay": delay},
            )
            self._sleep(delay)
            attempt += 1

    def _attempt(self, body: bytes) -> tuple[int | None, str | None, str]:
        """One signed POST: (status or None, Retry-After, what happened, secret-free)."""
        timestamp = str(int(time.time()))
        request = urllib.request.Request(  # noqa: S310  # http(s) only, checked in __init__
            self.url,
            data=body,
            method="POST",
            headers={
                "Content-Type": "application/json",
                "User-Agent": f"recrawler/{__version__}",
                TIMESTAMP_HEADER: timestamp,
                SIGNATURE_HEADER: sign(self._secret, timestamp, body),
            },
        )
        try:
            with self._opener.open(request, timeout=self.timeout_secs) as response:
                response.read()
                return int(response.status), None, f"HTTP {response.status}"
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, _retry_after(exc.headers), f"HTTP {exc.code}"
        # a refused connection, a timeout, or an answer that is not HTTP (http.client's errors)
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            parts = urlsplit(self.url)
            secrets = [self._secret, parts.path if parts.path != "/" else None, parts.query]
            return None, None, redact_text(str(reason) or type(reason).__name__, secrets)

    def _backoff(self, attempt: int, retry_after: str | None) -> float:
        """``backoff_secs * 2**attempt`` with jitter (half to all of it), or the receiver's
        Retry-After in seconds (RFC 9110 §10.2.3), at most MAX_BACKOFF_SECS."""
        if retry_after is not None and retry_after.strip().isdigit():
            return min(float(retry_after.strip()), MAX_BACKOFF_SECS)
        base = min(self.backoff_secs * 2.0**attempt, MAX_BACKOFF_SECS)
        jitter: float = random.uniform(0.5, 1.0)  # noqa: S311  # spreads retries, no secret
        return base * jitter


def _retry_after(headers: Message | None) -> str | None:
    return headers.get("Retry-After") if headers is not None else None
