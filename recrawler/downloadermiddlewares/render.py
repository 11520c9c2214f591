"""RenderMiddleware: pages that need JavaScript are rendered in a headless browser, after a 200."""

from __future__ import annotations

import contextlib
import inspect
import logging
import re
import shutil
from typing import TYPE_CHECKING, Any, Self

from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.utils.misc import load_object

from recrawler import meta
from recrawler.documents import HTML_TYPES, sniff
from recrawler.exceptions import ConfigurationError
from recrawler.meta import is_page_request, request_key
from recrawler.misses import record_page_error
from recrawler.redact import redact_url
from recrawler.runtime import find_runtime, runtime_of
from recrawler.urls import KeyMaker, UrlPolicy, spider_url_policy, url_origin

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy.crawler import Crawler
    from scrapy.http import Request, Response
    from scrapy.settings import BaseSettings

    from recrawler.runtime import Runtime
    from recrawler.urls import Origin

logger = logging.getLogger(__name__)

#: scrapy-playwright's download handler: a request with ``playwright`` meta goes to the browser,
#: any other to Scrapy's own HTTP handler
PLAYWRIGHT_HANDLER = "scrapy_playwright.handler.ScrapyPlaywrightDownloadHandler"
#: browsers tried on PATH when ``RECRAWLER_RENDER_BROWSER`` is not set (Debian's, then others)
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
#: what a headless Chromium needs on a server: no sandbox (it refuses to run as root without
#: it), no GPU, /tmp for shared memory (a container's /dev/shm is small), no background traffic
BROWSER_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-extensions",
    "--mute-audio",
)
#: what a page's text never needs: the browser does not fetch them
_SKIPPED_RESOURCES = frozenset({"image", "media", "font"})
_WAIT_UNTIL = ("load", "domcontentloaded", "networkidle", "commit")


#: the scrapy-playwright hooks the browser's guard takes over (wrapping a project's own)
GUARDED_SETTINGS = ("PLAYWRIGHT_ABORT_REQUEST", "PLAYWRIGHT_PROCESS_REQUEST_HEADERS")
#: request headers that carry credentials, besides those ``RECRAWLER_AUTH_HEADERS`` names
_CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})
_USE_SCRAPY_HEADERS = "scrapy_playwright.headers.use_scrapy_headers"


def skip_resource(request: Any) -> bool:
    """``PLAYWRIGHT_ABORT_REQUEST``: images, media and fonts are never fetched by the browser."""
    return bool(request.resource_type in _SKIPPED_RESOURCES)


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class BrowserGuard:
    """Keeps the browser to the site, as UrlPolicyMiddleware and CredentialsMiddleware keep
    Scrapy to it: scrapy-playwright asks it about every request Chromium makes.

    A navigation (a script's ``location``, a meta refresh, a frame, a redirect the browser
    follows) to an origin that is not the site's is aborted, counted and logged once: only the
    page's own first load may be elsewhere (a page of an allowed host; the URL policy let it
    through). A request to another origin (a script, a stylesheet, a fetch) goes with the
    browser's own headers, none of the Scrapy request's and no credential (``Authorization``,
    ``Cookie``, ``RECRAWLER_AUTH_HEADERS``); a request to the site's own origins goes as the
    project's ``PLAYWRIGHT_PROCESS_REQUEST_HEADERS`` (scrapy-playwright's ``use_scrapy_headers`` by
    default) says. The project's ``PLAYWRIGHT_ABORT_REQUEST`` (else :func:`skip_resource`) decides
    the rest. Stats: ``recrawler/render/refused``.
    """

    def __init__(
        self,
        crawler: Crawler | None = None,
        *,
        abort: Callable[..., Any] | None = skip_resource,
        headers: Callable[..., Any] | None = None,
        credential_headers: frozenset[str] = _CREDENTIAL_HEADERS,
    ) -> None:
        self.crawler = crawler
        self._abort = abort
        self._headers = headers
        self.credential_headers = credential_headers
        self._policy: UrlPolicy | None = None
        self._warned = False

    @classmethod
    def from_crawler(cls, crawler: Crawler, settings: BaseSettings) -> Self:
        """The guard of *crawler*, over the project's own hooks in *settings* (if any)."""
        abort = settings.get("PLAYWRIGHT_ABORT_REQUEST")
        if "PLAYWRIGHT_PROCESS_REQUEST_HEADERS" in settings:
            headers = settings.get("PLAYWRIGHT_PROCESS_REQUEST_HEADERS")
        else:
            headers = _USE_SCRAPY_HEADERS
        names = set(_CREDENTIAL_HEADERS)
        # a bad value: CredentialsMiddleware refuses the setting with one line of its own
        with contextlib.suppress(ValueError):
            names.update(str(name).lower() for name in settings.getdict("RECRAWLER_AUTH_HEADERS"))
        return cls(
            crawler,
            abort=load_object(abort) if abort else skip_resource,
            headers=load_object(headers) if headers else None,
            credential_headers=frozenset(names),
        )

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        # a setting's value, and the crawler's own: a copy of the settings shares it
        return self

    @property
    def policy(self) -> UrlPolicy:
        """The spider's URL policy (one made as the mixin makes it for a spider without one)."""
        spider = self.crawler.spider if self.crawler is not None else None
        policy: UrlPolicy | None = getattr(spider, "recrawler_url_policy", None)
        if policy is None:
            if self._policy is None:
                self._policy = spider_url_policy(spider) if spider is not None else UrlPolicy()
            policy = self._policy
        return policy

    def navigation_allowed(self, request: Any) -> bool:
        """Whether a navigation request of the browser stays on the site."""
        url = str(request.url)
        origin = url_origin(url)
        if origin is None:
            # about:blank, a frame's srcdoc: no request leaves the browser
            return url.startswith("about:")
        if origin in self.policy.origins:
            return True
        first = request
        while first.redirected_from is not None:
            first = first.redirected_from
        # a navigation always has its frame (only a service worker's requests have none)
        frame = first.frame
        initial = frame.parent_frame is None and frame.url in ("", "about:blank")
        # the page's own first load (and its hops within its origin): the Scrapy request's
        return initial and origin == url_origin(str(first.url))

    async def abort_request(self, request: Any) -> bool:
        """``PLAYWRIGHT_ABORT_REQUEST``: True for a navigation off the site, else the project's hook."""
        if request.is_navigation_request() and not self.navigation_allowed(request):
            self._refused(str(request.url))
            return True
        return bool(await _maybe_await(self._abort(request))) if self._abort is not None else False

    async def request_headers(
        self, *, browser_type_name: str, playwright_request: Any, scrapy_request_data: dict[str, Any]
    ) -> dict[str, str]:
        """``PLAYWRIGHT_PROCESS_REQUEST_HEADERS``: never a credential to another origin."""
        if url_origin(str(playwright_request.url)) in self.policy.origins:
            if self._headers is None:
                return dict(await playwright_request.all_headers())
            headers: dict[str, str] = await _maybe_await(
                self._headers(
                    browser_type_name=browser_type_name,
                    playwright_request=playwright_request,
                    scrapy_request_data=scrapy_request_data,
                )
            )
            return headers
        own = await playwright_request.all_headers()
        safe = {k: v for k, v in own.items() if k.lower() not in self.credential_headers}
        agent = scrapy_request_data["headers"].get("User-Agent")
        if agent:
            safe["user-agent"] = agent.decode("latin-1")
        return safe

    def _refused(self, url: str) -> None:
        runtime = find_runtime(self.crawler)
        if runtime is not None:
            runtime.counters.inc("recrawler/render/refused")
        if not self._warned:
            self._warned = True
            logger.warning(
                "a rendered page sent the browser off the site, to %(url)s (a script, a meta refresh, "
                "a frame or a redirect): refused, as every navigation off the site is "
                "(recrawler/render/refused)",
                {"url": redact_url(url)},
            )


def render_settings(settings: BaseSettings, crawler: Crawler | None = None) -> dict[str, Any]:
    """The Scrapy settings rendering needs (applied by the add-on at its priority, so a project's
    own ``PLAYWRIGHT_*`` and ``DOWNLOAD_HANDLERS`` win): scrapy-playwright as the http(s) download
    handler, Chromium headless from ``RECRAWLER_RENDER_BROWSER`` (or PATH), a few pages at once.
    With *crawler*, the :class:`BrowserGuard` hooks (:data:`GUARDED_SETTINGS`, which wrap a
    project's own and must win over them)."""
    try:
        import scrapy_playwright  # noqa: F401  # optional: recrawler[render]
    except ImportError:
        msg = "RECRAWLER_RENDER_PATTERNS: rendering needs scrapy-playwright: pip install 'recrawler[render]'"
        raise ConfigurationError(msg) from None
    executable = settings.get("RECRAWLER_RENDER_BROWSER") or next(
        filter(None, map(shutil.which, BROWSERS)), None
    )
    launch: dict[str, Any] = {"headless": True, "args": list(BROWSER_ARGS)}
    if executable:
        # the system's browser: nothing is downloaded (`playwright install` is never needed)
        launch["executable_path"] = str(executable)
    handlers = settings.getdict("DOWNLOAD_HANDLERS")
    for scheme in ("http", "https"):
        handlers.setdefault(scheme, PLAYWRIGHT_HANDLER)
    out: dict[str, Any] = {
        "DOWNLOAD_HANDLERS": handlers,
        "PLAYWRIGHT_BROWSER_TYPE": "chromium",
        "PLAYWRIGHT_LAUNCH_OPTIONS": launch,
        "PLAYWRIGHT_MAX_PAGES_PER_CONTEXT": settings.getint("RECRAWLER_RENDER_CONCURRENCY"),
        "PLAYWRIGHT_ABORT_REQUEST": "recrawler.downloadermiddlewares.render.skip_resource",
        # milliseconds: the page's own download timeout
        "PLAYWRIGHT_DEFAULT_NAVIGATION_TIMEOUT": settings.getfloat("DOWNLOAD_TIMEOUT") * 1000,
    }
    if crawler is not None:
        guard = BrowserGuard.from_crawler(crawler, settings)
        out["PLAYWRIGHT_ABORT_REQUEST"] = guard.abort_request
        out["PLAYWRIGHT_PROCESS_REQUEST_HEADERS"] = guard.request_headers
    return out


class RenderMiddleware:
    """Renders the pages ``RECRAWLER_RENDER_PATTERNS`` names (URL regexes, searched) in a headless
    Chromium through scrapy-playwright, and hands the rendered DOM to the same extraction.

    The page is asked with its stored validators first, by Scrapy's own HTTP handler: a 304
    costs no browser. Only a 200 of an HTML page is fetched again in the browser (without
    validators), which waits for ``RECRAWLER_RENDER_WAIT_UNTIL`` before the DOM is read. Any other
    answer (a 304, a 404, a PDF) goes on as it came.

    The browser keeps to the site (:class:`BrowserGuard`), and a rendered page whose final URL is
    off the site (another origin than the site's or the page's own) is refused: a page error
    (``render_offsite``), never indexed.

    Not installed without patterns. Settings: ``RECRAWLER_RENDER_*`` (the add-on sets scrapy-playwright's
    ``PLAYWRIGHT_*`` and ``DOWNLOAD_HANDLERS``). Stats: ``recrawler/render/pages``,
    ``recrawler/render/refused``, ``recrawler/page/error/render_offsite``.
    """

    def __init__(
        self,
        patterns: list[re.Pattern[str]],
        *,
        wait_until: str = "networkidle",
        runtime: Runtime | None = None,
        crawler: Crawler | None = None,
        key_maker: KeyMaker | None = None,
    ) -> None:
        self.patterns = patterns
        self.wait_until = wait_until
        self.runtime = runtime
        self.crawler = crawler
        self.key_maker = key_maker or KeyMaker()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Build from ``RECRAWLER_RENDER_PATTERNS`` and ``RECRAWLER_RENDER_WAIT_UNTIL``."""
        meta.require_opt_in(crawler)
        s = crawler.settings
        patterns = []
        for pattern in s.getlist("RECRAWLER_RENDER_PATTERNS"):
            try:
                patterns.append(re.compile(pattern))
            except re.error as exc:
                raise ConfigurationError(f"RECRAWLER_RENDER_PATTERNS: bad regex {pattern!r}: {exc}") from None
        if not patterns:
            raise NotConfigured
        wait_until = s.get("RECRAWLER_RENDER_WAIT_UNTIL")
        if wait_until not in _WAIT_UNTIL:
            msg = f"RECRAWLER_RENDER_WAIT_UNTIL: expected one of {', '.join(_WAIT_UNTIL)}, got {wait_until!r}"
            raise ConfigurationError(msg)
        return cls(
            patterns,
            wait_until=wait_until,
            runtime=runtime_of(crawler),
            crawler=crawler,
            key_maker=KeyMaker(
                s.getlist("RECRAWLER_URL_DROP_PARAMS"), s.getlist("RECRAWLER_URL_KEEP_PARAMS")
            ),
        )

    def _origins(self, request: Request) -> set[Origin]:
        """Where a rendered page may end: the site's origins and the page's own."""
        spider = self.crawler.spider if self.crawler is not None else None
        policy = getattr(spider, "recrawler_url_policy", None) or spider_url_policy(spider)
        return {*policy.origins, url_origin(request.url)} - {None}

    async def process_response(self, request: Request, response: Response) -> Request | Response:
        """A 200 of an HTML page to render: the same request again, in the browser. A rendered
        page that ended off the site: a page error, never indexed."""
        if request.meta.get("playwright") and is_page_request(request):
            if url_origin(response.url) not in self._origins(request):
                await self._offsite(request, response)
            return response
        if (
            response.status != 200
            or request.meta.get("playwright")
            or not is_page_request(request)
            or not any(p.search(request.url) for p in self.patterns)
        ):
            return response
        ctype = (response.headers.get(b"Content-Type") or b"").split(b";")[0].strip().lower()
        if (ctype and ctype not in HTML_TYPES) or sniff(response.body) is not None:
            # a PDF or an archive served as HTML: its bytes say so, no browser renders it
            return response
        if self.runtime is not None:
            self.runtime.counters.inc("recrawler/render/pages")
            # the answer that made the browser necessary was downloaded too
            self.runtime.counters.inc("recrawler/bytes/received", len(response.body))
        logger.debug("rendering %(url)s in the browser", {"url": request.url})
        return request.replace(
            # the browser's fetch carries no validators: a 304 to it would render nothing
            meta={
                **request.meta,
                "playwright": True,
                "playwright_page_goto_kwargs": {"wait_until": self.wait_until},
                meta.CONDITIONAL: False,
            },
            dont_filter=True,
        )

    async def _offsite(self, request: Request, response: Response) -> None:
        logger.warning(
            "the rendered page %(url)s ended at %(there)s, off the site: refused, never indexed",
            {"url": redact_url(request.url), "there": redact_url(response.url)},
        )
        if self.runtime is not None:
            self.runtime.counters.inc("recrawler/request/count")
            self.runtime.counters.inc("recrawler/request/failed")
            key = request_key(request, self.key_maker)
            await record_page_error(
                self.runtime, key, request.url, "render_offsite", http_status=response.status
            )
        raise IgnoreRequest("the rendered page ended off the site")
