"""CredentialsMiddleware: credentials go to the site's own origins only; a refused login stops the run."""

from __future__ import annotations

import asyncio
import http.cookiejar
import logging
import re
from typing import TYPE_CHECKING, Self
from urllib.parse import urljoin

from scrapy import signals
from scrapy.downloadermiddlewares.cookies import CookiesMiddleware
from scrapy.exceptions import IgnoreRequest, NotConfigured
from w3lib.http import basic_auth_header

from recrawler import meta
from recrawler.exceptions import ConfigurationError
from recrawler.redact import redact_url
from recrawler.runtime import runtime_of
from recrawler.urls import origin_url, url_origin

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Request, Response

    from recrawler.runtime import Runtime
    from recrawler.urls import Origin

logger = logging.getLogger(__name__)

#: the close reason of a run whose credentials the site refused
CLOSE_AUTH_FAILED = "recrawler_auth_failed"
#: the CookiesMiddleware jar of a request to another origin (with the origin): never the site's
COOKIEJAR_ELSEWHERE = "recrawler_elsewhere"
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
# a header line ends at CR or LF: a value holding one would smuggle in headers of its own
_LINE_BREAK = re.compile(r"[\r\n\x00]")


def load_cookies(path: str) -> list[http.cookiejar.Cookie]:
    """The cookies of a Netscape ``cookies.txt`` file (curl's ``-c``, browsers' exports), session
    cookies included; expired ones are kept for the caller to count."""
    jar = http.cookiejar.MozillaCookieJar()
    try:
        jar.load(path, ignore_discard=True, ignore_expires=True)
    except (OSError, http.cookiejar.LoadError) as exc:
        raise ConfigurationError(f"RECRAWLER_AUTH_COOKIES_FILE: cannot read {path!r}: {exc}") from exc
    cookies = list(jar)
    for cookie in cookies:
        if cookie.expires == 0:
            # the format's session cookie (curl writes 0): it lasts as long as the run
            cookie.expires, cookie.discard = None, True
    return cookies


def _domain_matches(host: str, cookie: http.cookiejar.Cookie) -> bool:
    domain = cookie.domain.lower().removeprefix(".")
    return host == domain or (cookie.domain.startswith(".") and host.endswith("." + domain))


def _for_host(cookie: http.cookiejar.Cookie, host: str) -> http.cookiejar.Cookie:
    """*cookie* as a host-only cookie of *host*: never sent to a sibling or a subdomain."""
    return http.cookiejar.Cookie(
        version=cookie.version,
        name=cookie.name,
        value=cookie.value,
        port=None,
        port_specified=False,
        domain=host,
        domain_specified=False,
        domain_initial_dot=False,
        path=cookie.path,
        path_specified=cookie.path_specified,
        secure=cookie.secure,
        expires=cookie.expires,
        discard=cookie.discard,
        comment=None,
        comment_url=None,
        rest={},
    )


class CredentialsMiddleware:
    """Sends the site's credentials with every request to the site's own origins (scheme, host,
    port), and to no other: HTTP basic auth (``RECRAWLER_AUTH_USER`` / ``RECRAWLER_AUTH_PASSWORD``),
    any headers (``RECRAWLER_AUTH_HEADERS``: a bearer token, an API key) and the cookies of a
    Netscape ``cookies.txt`` (``RECRAWLER_AUTH_COOKIES_FILE``, loaded into Scrapy's own
    CookiesMiddleware as host-only cookies of the site's hosts, so the site's ``Set-Cookie`` keeps
    them fresh).

    The site's origins are those of its URL policy (the sitemaps' origins, and ``allowed_hosts``
    under the sitemaps' schemes, never ``*``; a user spider's ``allowed_domains``): a redirect to
    another host, port or scheme, a link elsewhere, the embedder and the webhook never get them.
    A cookie names a host, not a port (RFC 6265 §8.5), so a request to another origin uses a
    cookie jar of its own (``cookiejar`` meta): the site's cookies, rotated ones included, stay
    with the site, and another origin's ``Set-Cookie`` never reaches it.
    A header a request already carries is left as it is (a project's own ``Authorization``, or
    Scrapy's HttpAuthMiddleware's, wins), and the credentials leave the request once its answer
    is in, so no retry or redirect hop queued meanwhile carries them.

    When the site refuses them (an answer in ``RECRAWLER_AUTH_FAILED_STATUSES``, or a redirect to
    a URL ``RECRAWLER_AUTH_LOGIN_URL`` matches: a login that expired), the answer is dropped,
    one ERROR line says so and the spider closes (``recrawler_auth_failed``): an unfinished run
    removes and publishes nothing and exits 4; the next run, with fresh credentials, goes on.

    Not installed when no credentials are set. Values are never logged, stored or reported.
    Settings: ``RECRAWLER_AUTH_*``, ``COOKIES_ENABLED``. Stats: ``recrawler/auth/refused``.
    Signals: listens to ``spider_opened``.
    """

    def __init__(
        self,
        headers: dict[bytes, bytes],
        *,
        cookies: list[http.cookiejar.Cookie] | None = None,
        login_url: re.Pattern[str] | None = None,
        failed_statuses: frozenset[int] = frozenset({401, 403}),
        crawler: Crawler | None = None,
        runtime: Runtime | None = None,
    ) -> None:
        self.headers = headers
        self.cookies = cookies or []
        self.login_url = login_url
        self.failed_statuses = failed_statuses
        self.crawler = crawler
        self.runtime = runtime
        #: the site's own origins, known once the spider opens
        self.origins: frozenset[Origin] = frozenset()
        self._stopped = False
        self._closing: asyncio.Future[None] | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Build from ``RECRAWLER_AUTH_*``; not installed when none is set."""
        meta.require_opt_in(crawler)
        s = crawler.settings
        headers: dict[bytes, bytes] = {}
        user, password = s.get("RECRAWLER_AUTH_USER") or "", s.get("RECRAWLER_AUTH_PASSWORD") or ""
        if user or password:
            headers[b"Authorization"] = basic_auth_header(str(user), str(password))
        try:
            extra = s.getdict("RECRAWLER_AUTH_HEADERS")
        except ValueError:
            # the value is not shown: it holds the secret
            raise ConfigurationError(
                "RECRAWLER_AUTH_HEADERS: expected a JSON object of header: value"
            ) from None
        for name, value in extra.items():
            if not isinstance(value, str) or not name or _LINE_BREAK.search(f"{name}{value}"):
                raise ConfigurationError(
                    f"RECRAWLER_AUTH_HEADERS: bad header {name!r} (its value is not shown)"
                )
            headers[name.encode("latin-1")] = value.encode("latin-1")
        path = s.get("RECRAWLER_AUTH_COOKIES_FILE")
        cookies = load_cookies(str(path)) if path else []
        if path and not s.getbool("COOKIES_ENABLED"):
            raise ConfigurationError("RECRAWLER_AUTH_COOKIES_FILE: needs COOKIES_ENABLED = True")
        if not headers and not cookies:
            raise NotConfigured
        login = s.get("RECRAWLER_AUTH_LOGIN_URL")
        try:
            login_url = re.compile(login) if login else None
        except re.error as exc:
            raise ConfigurationError(f"RECRAWLER_AUTH_LOGIN_URL: bad regex {login!r}: {exc}") from None
        o = cls(
            headers,
            cookies=cookies,
            login_url=login_url,
            failed_statuses=frozenset(int(x) for x in s.getlist("RECRAWLER_AUTH_FAILED_STATUSES")),
            crawler=crawler,
            runtime=runtime_of(crawler),
        )
        crawler.signals.connect(o.spider_opened, signal=signals.spider_opened)
        return o

    def spider_opened(self) -> None:
        """Take the site's origins from the spider's URL policy; hand the cookies to Scrapy's jar."""
        spider = self.crawler.spider if self.crawler is not None else None
        policy = getattr(spider, "recrawler_url_policy", None)
        self.origins = frozenset(getattr(policy, "origins", ()))
        if not self.origins:
            logger.error(
                "credentials are set but the spider names no host of its own (allowed_domains): none are sent"
            )
            return
        if self.cookies:
            self._seed_cookies()
        logger.info(
            "credentials are sent to %(origins)s only (%(what)s)",
            {"origins": ", ".join(sorted(map(origin_url, self.origins))), "what": self._kinds()},
            extra={"spider": spider},
        )

    def _kinds(self) -> str:
        kinds = [name.decode("latin-1") for name in self.headers]
        if self.cookies:
            kinds.append(f"{len(self.cookies)} cookies")
        return ", ".join(kinds)

    def _seed_cookies(self) -> None:
        engine = self.crawler.engine if self.crawler is not None else None
        jars = [
            mw
            for mw in (engine.downloader.middleware.middlewares if engine is not None else ())
            if isinstance(mw, CookiesMiddleware)
        ]
        if not jars:
            logger.error("RECRAWLER_AUTH_COOKIES_FILE: no CookiesMiddleware is installed: no cookie is sent")
            return
        hostnames = {host for _, host, _ in self.origins}
        seeded = expired = elsewhere = 0
        for cookie in self.cookies:
            if cookie.is_expired():
                expired += 1
                continue
            mine = [h for h in hostnames if _domain_matches(h, cookie)]
            if not mine:
                elsewhere += 1
            for host in mine:
                # the default jar (no cookiejar meta): the one every request of the run uses
                jars[0].jars[None].jar.set_cookie(_for_host(cookie, host))
                seeded += 1
        if expired or elsewhere:
            logger.warning(
                "RECRAWLER_AUTH_COOKIES_FILE: %(expired)d cookies expired, %(elsewhere)d for other "
                "hosts than the site's: not sent (the login may need renewing)",
                {"expired": expired, "elsewhere": elsewhere},
            )
        if not seeded:
            logger.error("RECRAWLER_AUTH_COOKIES_FILE: no cookie of the file is for the site's hosts")

    def _own(self, url: str) -> bool:
        return url_origin(url) in self.origins

    def process_request(self, request: Request) -> None:
        """Attach the credentials to a request for one of the site's origins; take them off any
        other, whose cookies come from a jar of its own."""
        origin = url_origin(request.url)
        own = origin in self.origins
        if not own:
            request.meta["cookiejar"] = (COOKIEJAR_ELSEWHERE, origin)
        for name, value in self.headers.items():
            if own:
                request.headers.setdefault(name, value)
            elif request.headers.get(name) == value:
                request.headers.pop(name)

    def process_response(self, request: Request, response: Response) -> Response:
        """Drop the credentials from the request; stop the run when the site refused them."""
        self._detach(request)
        if not self._own(request.url):
            return response
        status = response.status
        login = None
        if self.login_url is not None:
            location = response.headers.get(b"Location") if status in _REDIRECTS else None
            if location is not None:
                target = urljoin(request.url, location.decode("latin-1"))
                login = target if self.login_url.search(target) else None
            elif request.meta.get("redirect_urls") and self.login_url.search(response.url):
                # Scrapy's RedirectMiddleware already followed it (a sitemap's redirect)
                login = response.url
        if status in self.failed_statuses or login is not None:
            self._refused(request, status, login)
            raise IgnoreRequest("the site refused its credentials")
        return response

    def process_exception(self, request: Request, exception: Exception) -> None:
        """Drop the credentials from a request that failed (a retry attaches them again)."""
        self._detach(request)

    def _detach(self, request: Request) -> None:
        for name, value in self.headers.items():
            if request.headers.get(name) == value:
                request.headers.pop(name)

    def _refused(self, request: Request, status: int, login: str | None) -> None:
        if self.runtime is not None:
            self.runtime.counters.inc("recrawler/auth/refused")
        if self._stopped:
            return
        self._stopped = True
        why = f"a redirect to the login page {redact_url(login)}" if login else f"HTTP {status}"
        logger.error(
            "the site refused its credentials (%(why)s at %(url)s): a login that expired? The run "
            "stops here: nothing is removed or published, exit 4; renew the credentials (RECRAWLER_AUTH_*)",
            {"why": why, "url": redact_url(request.url)},
            extra={"spider": self.crawler.spider if self.crawler else None},
        )
        engine = self.crawler.engine if self.crawler is not None else None
        if engine is not None:
            # not awaited here: closing waits for the downloads in progress, this one among them
            self._closing = asyncio.ensure_future(engine.close_spider_async(reason=CLOSE_AUTH_FAILED))

    def __repr__(self) -> str:
        # never the values: a component's repr may be logged
        origins = sorted(map(origin_url, self.origins))
        return f"<{type(self).__name__} origins={origins} credentials={self._kinds()!r}>"
