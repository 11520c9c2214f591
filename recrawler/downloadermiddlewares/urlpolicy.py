"""UrlPolicyMiddleware: only the spider's own http(s) URLs are downloaded, whatever asked for them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Self

from scrapy.exceptions import IgnoreRequest

from recrawler import meta
from recrawler.runtime import runtime_of
from recrawler.urls import spider_url_policy

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Request

    from recrawler.runtime import Runtime
    from recrawler.urls import UrlPolicy


class UrlPolicyMiddleware:
    """Refuses every request of the spider whose URL its URL policy does not allow (another
    scheme than ``http``/``https``, a host not the site's, credentials in the URL, a malformed
    URL), whoever made it: a sitemap entry, a link, a feed, a redirect hop Scrapy followed, a
    direct check, robots.txt, a link a user's spider follows. A refused URL is never downloaded: it
    is counted by reason and the first of each reason is logged. A spider that names no host
    (no ``recrawler_site``, ``allowed_domains`` or ``start_urls``) keeps to the hosts of its start
    requests (Scrapy's ``is_start_request`` meta). The add-on places it at 40, before every middleware that
    could download or send anything for it (Scrapy's OffsiteMiddleware is at 50, robots.txt at 100).

    Stats: ``recrawler/url/refused``, ``recrawler/url/refused/<reason>``.
    Meta: ``recrawler_enabled=False`` leaves a request alone.
    """

    def __init__(self, *, crawler: Crawler | None = None, runtime: Runtime | None = None) -> None:
        self.crawler = crawler
        self.runtime = runtime
        #: the policy of an opted-in spider that has none of its own (``recrawler_enabled = True``)
        self._fallback: UrlPolicy | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """The spider's policy, refusals counted by the crawl's Runtime."""
        meta.require_opt_in(crawler)
        return cls(crawler=crawler, runtime=runtime_of(crawler))

    @property
    def policy(self) -> UrlPolicy | None:
        """The spider's URL policy; for an opted-in spider without one (``recrawler_enabled =
        True`` and no mixin), one made as the mixin makes it. None without a spider."""
        spider = self.crawler.spider if self.crawler else None
        if spider is None:
            return None
        policy: UrlPolicy | None = getattr(spider, "recrawler_url_policy", None)
        if policy is None:
            if self._fallback is None:
                self._fallback = spider_url_policy(spider)
            policy = self._fallback
        return policy

    def process_request(self, request: Request) -> None:
        """IgnoreRequest for a URL the policy refuses."""
        if request.meta.get(meta.ENABLED, True) is False:
            return
        policy = self.policy
        if policy is not None and request.meta.get("is_start_request"):
            # a spider that names no host keeps to the hosts it starts from (Scrapy marks them)
            policy.start(request.url)
        reason = policy.refusal(request.url) if policy is not None else None
        if reason is None:
            return
        if self.runtime is not None:
            self.runtime.counters.refused(
                request.url, reason, meta.role(request), self.crawler.spider if self.crawler else None
            )
        raise IgnoreRequest(f"recrawler refused the URL ({reason})")


__all__ = ["UrlPolicyMiddleware"]
