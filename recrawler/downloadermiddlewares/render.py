"""RenderMiddleware: pages that need JavaScript are rendered in a headless browser, after a 200."""

from __future__ import annotations

import logging
import re
import shutil
from typing import TYPE_CHECKING, Any, Self

from scrapy.exceptions import NotConfigured

from recrawler import meta
from recrawler.documents import HTML_TYPES, sniff
from recrawler.exceptions import ConfigurationError
from recrawler.meta import is_page_request
from recrawler.runtime import runtime_of

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Request, Response
    from scrapy.settings import BaseSettings

    from recrawler.runtime import Runtime

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


def skip_resource(request: Any) -> bool:
    """``PLAYWRIGHT_ABORT_REQUEST``: images, media and fonts are never fetched by the browser."""
    return bool(request.resource_type in _SKIPPED_RESOURCES)


def render_settings(settings: BaseSettings) -> dict[str, Any]:
    """The Scrapy settings rendering needs (applied by the add-on at its priority, so a project's
    own ``PLAYWRIGHT_*`` and ``DOWNLOAD_HANDLERS`` win): scrapy-playwright as the http(s) download
    handler, Chromium headless from ``RECRAWLER_RENDER_BROWSER`` (or PATH), a few pages at once."""
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
    return {
        "DOWNLOAD_HANDLERS": handlers,
        "PLAYWRIGHT_BROWSER_TYPE": "chromium",
        "PLAYWRIGHT_LAUNCH_OPTIONS": launch,
        "PLAYWRIGHT_MAX_PAGES_PER_CONTEXT": settings.getint("RECRAWLER_RENDER_CONCURRENCY"),
        "PLAYWRIGHT_ABORT_REQUEST": "recrawler.downloadermiddlewares.render.skip_resource",
        # milliseconds: the page's own download timeout
        "PLAYWRIGHT_DEFAULT_NAVIGATION_TIMEOUT": settings.getfloat("DOWNLOAD_TIMEOUT") * 1000,
    }


class RenderMiddleware:
    """Renders the pages ``RECRAWLER_RENDER_PATTERNS`` names (URL regexes, searched) in a headless
    Chromium through scrapy-playwright, and hands the rendered DOM to the same extraction.

    The page is asked with its stored validators first, by Scrapy's own HTTP handler: a 304
    costs no browser. Only a 200 of an HTML page is fetched again in the browser (without
    validators), which waits for ``RECRAWLER_RENDER_WAIT_UNTIL`` before the DOM is read. Any other
    answer (a 304, a 404, a PDF) goes on as it came.

    Not installed without patterns. Settings: ``RECRAWLER_RENDER_*`` (the add-on sets scrapy-playwright's
    ``PLAYWRIGHT_*`` and ``DOWNLOAD_HANDLERS``). Stats: ``recrawler/render/pages``.
    """

    def __init__(
        self,
        patterns: list[re.Pattern[str]],
        *,
        wait_until: str = "networkidle",
        runtime: Runtime | None = None,
    ) -> None:
        self.patterns = patterns
        self.wait_until = wait_until
        self.runtime = runtime

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
        return cls(patterns, wait_until=wait_until, runtime=runtime_of(crawler))

    def process_response(self, request: Request, response: Response) -> Request | Response:
        """A 200 of an HTML page to render: the same request again, in the browser."""
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
