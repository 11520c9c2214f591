"""Request vocabulary: every request-meta key recrawler reads or writes, and the request predicates.

Public keys are ``recrawler_*`` (a spider may set them); private ones are ``_recrawler_*``.
The request side and the item side both import this module, never each other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy.exceptions import NotConfigured
from scrapy.http.request import NO_CALLBACK
from scrapy.utils.conf import build_component_list
from scrapy.utils.misc import load_object

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

# --- public: a spider may set these ------------------------------------------------------------------
#: ``False``: recrawler leaves the request alone (no validators, no state, no accounting)
ENABLED = "recrawler_enabled"
#: the page key of the request (overrides the one computed from its URL)
KEY = "recrawler_key"
#: ``False``: send no validators with this page request (it is still accounted for)
CONDITIONAL = "recrawler_conditional"
#: what the request fetches: ``page`` (default), ``sitemap`` or ``feed``
ROLE = "recrawler_role"
ROLE_PAGE, ROLE_SITEMAP, ROLE_FEED = "page", "sitemap", "feed"
#: a request that asks the site a question, never a page: its not-found answer (a path no site
#: has) or whether a listing exists (the spider's look for a sitemap or llms.txt)
ROLE_PROBE = "probe"
#: the listing's lastmod of the page (W3C datetime)
LASTMOD = "recrawler_lastmod"
#: when a feed entry says the page was updated (ISO 8601)
FEED_UPDATED = "recrawler_feed_updated"
#: how the page was found (``sitemap``, ``feed``, ``link``, ``redirect``; ``start`` and ``crawl``:
#: a start URL and the pages its links reached, when the links are the listing) and from where
FOUND_VIA = "recrawler_found_via"
FOUND_FROM = "recrawler_found_from"
#: the page's own URL when the request fetches another copy of it (a markdown twin an llms.txt
#: names): the page is cited under it (and keyed, with ``recrawler_key``)
PAGE_URL = "recrawler_page_url"
#: how many links away from a listed page a link-found page is (0: listed)
DEPTH = "recrawler_depth"
#: set by recrawler: why the page is requested this run
DUE = "recrawler_due"
#: set by recrawler: the request checks a stored page the run's listing did not reach
VERIFY = "recrawler_verify"

# --- private: set and read by recrawler's own components --------------------------------------------
#: the validators ConditionalRequestMiddleware attached (they are removed again on a redirect hop)
SENT = "_recrawler_validators"
#: set on a 200 whose validators equal the stored ones
SAME_VALIDATOR = "_recrawler_same_validator"
#: PageRedirectMiddleware decides this page request's redirects (its ``dont_redirect`` only keeps
#: MetaRefreshMiddleware away); the hops so far are Scrapy's ``redirect_urls``
REDIRECTS = "_recrawler_redirects"
#: keys of stored pages a permanent redirect chain moved to this request's key
MOVED_FROM = "_recrawler_moved_from"
#: a soft-404 probe's scope (the origin and listing folder whose not-found page it asks for)
PROBE_SCOPE = "_recrawler_probe_scope"
#: the URL a page is cited under when a temporary redirect served it from elsewhere
CANONICAL_URL = "_recrawler_canonical_url"
#: the places still to look for a listing, on a probe request (the spider's look, in order)
PROBES = "_recrawler_probes"
#: how many sitemap files deep this sitemap request is (0: a start URL)
SITEMAP_DEPTH = "_recrawler_sitemap_depth"
#: set by recrawler: the request came out of the run's frontier (FrontierScheduler)
FED = "_recrawler_fed"
#: the page's stored record as read for this request (a ``PageRecord``; None: the store holds
#: none), by FrontierScheduler with its batch or ConditionalRequestMiddleware; absent: not read.
#: The spider puts it on the Page (``Page.record``) for the pipelines
RECORD = "_recrawler_record"
#: set by ListingMiddleware on a page request a sitemap named (the frontier counts each key once),
#: and by the spider on a page its link crawl reached when the links are the run's listing
LISTED = "_recrawler_listed"
#: set by the spider on a page request whose links are the run's listing (a site crawled from a
#: start URL): LinkListingMiddleware stores a 200's links and lists a 304's stored ones
LINKS = "_recrawler_links"
#: the body of a first fetch, on the immediate re-fetch that learns volatile regions
FIRST_BODY = "_recrawler_first_body"
#: the signal whose 304 an audit re-fetch checks
AUDIT_CLAIM = "_recrawler_audit_claim"
#: set on a page whose body decompressed past DOWNLOAD_MAXSIZE (a gzip bomb): an error, dropped
TOO_LARGE = "_recrawler_too_large"
#: a large sitemap file's body, moved to an open temporary file by ListingBodyMiddleware (the
#: response's own body is then empty); the spider's listing parser reads it, then closes it
LISTING_BODY = "_recrawler_listing_body"
#: set by ScheduleMiddleware on a run's deploy probes (sent first; their build markers are read)
PROBE = "_recrawler_probe"
#: the page key a probe's second conditional request (with the validators of its 200) checks
REPROBE = "_recrawler_reprobe"
#: set on a sampled page request whose change would say nothing of a deploy: the page changes on
#: its own, or the listing announced its change (a newer lastmod, a feed entry)
NO_SAMPLE = "_recrawler_no_sample"

#: the spider attribute by which a spider opts in (the recrawler spiders and mixin set it)
SPIDER_OPT_IN = "recrawler_enabled"
#: the item pipeline that writes each page with its chunks (by path: this module imports no side)
INDEX_PIPELINE = "recrawler.pipelines.index.IndexPipeline"


def spider_opted_in(spider: Any) -> bool:
    """True for a spider (instance or class) that asked for recrawler; every other spider is left
    exactly as if recrawler were not installed."""
    return getattr(spider, SPIDER_OPT_IN, False) is True


def require_opt_in(crawler: Crawler) -> None:
    """In a component's ``from_crawler``: NotConfigured when the crawler's spider did not opt in
    (every other spider runs as if recrawler were absent)."""
    if crawler.spider is not None and not spider_opted_in(crawler.spider):
        raise NotConfigured


def indexes_pages(settings: BaseSettings) -> bool:
    """True when IndexPipeline (or a subclass) writes each page with its chunks:
    ``RECRAWLER_INDEX_ENABLED`` is on and the pipeline is among ``ITEM_PIPELINES`` (the add-on
    places it; a project without the add-on may list ClassifyPipeline alone)."""
    if not settings.getbool("RECRAWLER_INDEX_ENABLED"):
        return False
    for component in build_component_list(settings.getwithbase("ITEM_PIPELINES")):
        cls = load_object(component) if isinstance(component, str) else component
        if any(f"{c.__module__}.{c.__qualname__}" == INDEX_PIPELINE for c in getattr(cls, "__mro__", ())):
            return True
    return False


def role(request: Request) -> str:
    """What a request fetches: ``page``, ``sitemap`` or ``feed``."""
    return str(request.meta.get(ROLE) or ROLE_PAGE)


def is_page_request(request: Request) -> bool:
    """True for requests whose answer is a page recrawler keeps state for."""
    meta = request.meta
    if meta.get(ENABLED, True) is False or request.callback is NO_CALLBACK:
        return False
    if role(request) != ROLE_PAGE:
        return False
    # the robots.txt fetch of RobotsTxtMiddleware
    return not (meta.get("dont_obey_robotstxt") and request.url.endswith("/robots.txt"))


def is_sitemap_request(request: Request) -> bool:
    """True for a sitemap, sitemap index or robots.txt fetched as a listing."""
    return request.meta.get(ENABLED, True) is not False and role(request) == ROLE_SITEMAP


def request_key(request: Request, key_maker: Callable[[str], str]) -> str:
    """The page key of a request: ``recrawler_key`` meta, else the key of its URL."""
    key = request.meta.get(KEY)
    if key:
        return str(key)
    return key_maker(request.url)
