"""UrlPolicyMiddleware: only the spider's own http(s) URLs are downloaded, whatever asked for them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Self

from scrapy.exceptions import IgnoreRequest

from recrawler import meta
from recrawler.runtime import runtime_of

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Request

    from recrawler.runtime import Runtime
    from recrawler.urls import UrlPolicy


class UrlPolicyMiddleware:
    """Refuses every request of the spider whose URL its URL policy does not allow (another
    scheme than ``http``/``https``, a host not the site's, credentials in the URL, a malformed
    URL), whoever made it: a sitemap entry, a link, a feed, a redirect hop Scrapy followed, a
    direct check, robots.txt. A refused URL is never downloaded: it is counted by reason and the
    first of each reason is logged. The add-on places it at 40, before every middleware that
    could download or send anything for it (Scrapy's OffsiteMiddleware is at 50, robots.txt at 100).

    Stats: ``recrawler/url/refused``, ``recrawler/url/refused/<reason>``.
    Meta: ``recrawler_enabled=False`` leaves a request alone.
    """

    def __init__(self, *, crawler: Crawler | None = None, runtime: Runtime | None = None) -> None:
        self.crawler = crawler
        self.runtime = runtime

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """The spider's policy, refusals counted by the crawl's Runtime."""
        meta.require_opt_in(crawler)
        return cls(crawler=crawler, runtime=runtime_of(crawler))

    @property
    def policy(self) -> UrlPolicy | None:
        """The spider's URL policy (None for a spider without one: nothing is refused)."""
        spider = self.crawler.spider if self.crawler else None
        return getattr(spider, "recrawler_url_policy", None)

    def process_request(self, request: Request) -> None:
        """IgnoreRequest for a URL the policy refuses."""
        if request.meta.get(meta.ENABLED, True) is False:
            return
        policy = self.policy
        reason = policy.refusal(request.url) if policy is not None else None
        if reason is None:
            return
        if self.runtime is not None:
            self.runtime.refused(request.url, reason, meta.role(request))
        raise IgnoreRequest(f"recrawler refused the URL ({reason})")


__all__ = ["UrlPolicyMiddleware"]
