"""The glue for users' own spiders: ``RecrawlerSpiderMixin`` opts a spider in and gives it
``recrawler_page(response)``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from recrawler import meta
from recrawler.documents import HTML
from recrawler.exceptions import ConfigurationError
from recrawler.learning import NoiseRegistry
from recrawler.runtime import find_component, find_runtime
from recrawler.spiders.page_builder import PageBuilder
from recrawler.urls import UrlPolicy, spider_url_policy, url_host, url_origin

if TYPE_CHECKING:
    from collections.abc import Iterable

    from scrapy.http import Response

    from recrawler.items import Page


class RecrawlerSpiderMixin:
    """Opts a user's spider in to recrawler and gives it ``recrawler_page(response)``: yield its
    result from any callback.

    Every request of the spider is a page request unless its meta says otherwise
    (``recrawler_enabled=False``, ``recrawler_role``). ``recrawler_url_policy`` says which URLs
    may be fetched and stored: http(s) only, no credentials, on the site's own hosts: those of
    ``recrawler_site``, ``allowed_domains`` and ``start_urls``, or, for a spider that names none
    of them, those of the requests it starts from. Whatever yields a request (a callback following
    a link, a redirect), a URL on another host is never fetched, stored or indexed.
    """

    #: the spider attribute recrawler's add-on and components look for (any spider may set it)
    recrawler_enabled = True
    #: the docs were just deployed: the run checks every listed page (``-a deployed=1``)
    recrawler_deployed = False
    _recrawler_builder: PageBuilder | None = None
    _recrawler_policy: UrlPolicy | None = None
    _recrawler_site: str | None = None

    @property
    def recrawler_site(self) -> str | None:
        """The host whose stored pages a run of this spider reconciles and publishes (set it, as a
        class attribute or in ``__init__``): by default the first of ``allowed_domains``, else of
        ``start_urls``."""
        if self._recrawler_site is not None:
            return self._recrawler_site
        domains = [d.strip() for d in getattr(self, "allowed_domains", None) or () if isinstance(d, str)]
        starts = [u for u in getattr(self, "start_urls", None) or () if isinstance(u, str)]
        named = [f"http://{d}" for d in domains if d] + [u for u in starts if url_origin(u) is not None]
        return url_host(named[0]) if named else None

    @recrawler_site.setter
    def recrawler_site(self, value: str | None) -> None:
        self._recrawler_site = value
        self._recrawler_policy = None

    @property
    def recrawler_url_policy(self) -> UrlPolicy:
        """Which URLs this spider may fetch and store."""
        if self._recrawler_policy is None:
            self._recrawler_policy = spider_url_policy(self)
        return self._recrawler_policy

    def recrawler_checked_again(self, response: Response, **kwargs: Any) -> Iterable[Any]:
        """Callback of a deploy probe's second conditional request (do its new validators hold?):
        ScheduleMiddleware reads the answer on its way; there is nothing to parse."""
        return ()

    @property
    def recrawler_home_paths(self) -> tuple[str, ...]:
        """Paths that are the site's home: a page redirected there was removed (a soft 404)."""
        return ("/",)

    def recrawler_page(self, response: Response, lastmod: str | None = None) -> Page:
        """Return the Page item for *response* (304s are not parsed)."""
        return self._recrawler_counted(self._recrawler_page_builder().page(response, lastmod))

    async def recrawler_page_async(self, response: Response, lastmod: str | None = None) -> Page:
        """:meth:`recrawler_page` off the reactor: its CPU work in a worker process
        (``RECRAWLER_CPU_PROCESSES``) or else on a CPU thread (``RECRAWLER_CPU_THREADS``).

        A 304 or an empty body has nothing to extract and is not handed over.
        """
        return self._recrawler_counted(await self._recrawler_page_async(response, lastmod))

    def _recrawler_counted(self, page: Page) -> Page:
        # documents other than HTML are counted by type (recrawler/document/pdf)
        runtime = find_runtime(getattr(self, "crawler", None))
        if runtime is not None and page.document not in (None, HTML):
            runtime.counters.inc(f"recrawler/document/{page.document}")
        return page

    async def _recrawler_page_async(self, response: Response, lastmod: str | None) -> Page:
        builder = self._recrawler_page_builder()
        runtime = find_runtime(getattr(self, "crawler", None))
        if runtime is None or response.status == 304 or not response.body or meta.FIRST_BODY in response.meta:
            return builder.page(response, lastmod)
        if runtime.cpu_pool.active:
            page = await builder.page_in_worker(response, lastmod, runtime.cpu_pool)
            if page is not None:
                return page
        if runtime.cpu_threads:
            return await runtime.offload(builder.page, response, lastmod)
        return builder.page(response, lastmod)

    def _recrawler_page_builder(self) -> PageBuilder:
        if self._recrawler_builder is None:
            crawler = getattr(self, "crawler", None)
            if crawler is None:
                raise ConfigurationError("recrawler_page() needs a spider created by a crawler")
            self._recrawler_builder = PageBuilder.from_settings(crawler.settings)
            noise = find_component(crawler, NoiseRegistry)
            if noise is not None:
                self._recrawler_builder.noise = noise
        return self._recrawler_builder
