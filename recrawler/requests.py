"""PageKeyRequestFingerprinter: one request per page key, so URL variants are fetched once."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Self
from weakref import WeakKeyDictionary

from scrapy.utils.request import RequestFingerprinter

from recrawler import meta
from recrawler.urls import KeyMaker

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler


class PageKeyRequestFingerprinter:
    """Fingerprints body-less GET requests by page key (scheme, ``www.``, trailing slash, fragment
    and tracking parameters folded); everything else by Scrapy's default fingerprinter.

    The key is the request's ``recrawler_key`` meta when set, else the key of its URL; it is never
    written back into the request. For a spider that did not opt in to recrawler, every request
    gets Scrapy's own fingerprint.

    Settings: ``RECRAWLER_URL_DROP_PARAMS``, ``RECRAWLER_URL_KEEP_PARAMS``.
    """

    def __init__(self, key_maker: KeyMaker, fallback: RequestFingerprinter, *, enabled: bool = True) -> None:
        self.key_maker = key_maker
        self.fallback = fallback
        self.enabled = enabled
        self._cache: WeakKeyDictionary[Request, bytes] = WeakKeyDictionary()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Build from the crawler's settings."""
        s = crawler.settings
        return cls(
            KeyMaker(s.getlist("RECRAWLER_URL_DROP_PARAMS"), s.getlist("RECRAWLER_URL_KEEP_PARAMS")),
            RequestFingerprinter(crawler),
            enabled=crawler.spider is None or meta.spider_opted_in(crawler.spider),
        )

    def fingerprint(self, request: Request) -> bytes:
        """Return the request's fingerprint (20 bytes)."""
        if not self.enabled or request.method not in ("GET", "HEAD") or request.body:
            return self.fallback.fingerprint(request)
        fp = self._cache.get(request)
        if fp is None:
            key = request.meta.get(meta.KEY) or self.key_maker(request.url)
            fp = hashlib.sha1(f"{request.method} {key}".encode(), usedforsecurity=False).digest()
            self._cache[request] = fp
        return fp
