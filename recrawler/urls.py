"""Page keys (one normalised string per page, whatever URL variant reached it) and the URL policy
(which URLs recrawler may fetch or store at all). Pure: no Scrapy."""

from __future__ import annotations

import re
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, TypeAlias
from urllib.parse import SplitResult, parse_qsl, unquote_plus, urlencode, urlsplit, urlunsplit

from w3lib.url import canonicalize_url, safe_url_string

from recrawler import default_settings

if TYPE_CHECKING:
    from collections.abc import Iterable

_DEFAULT_PORTS = {"http": 80, "https": 443}
# empty path segments: "//docs/a" and "/docs//a" are "/docs/a" to the servers that serve docs
# (nginx's merge_slashes, Apache's own mapping), so they are one page
_EMPTY_SEGMENTS = re.compile(r"/{2,}")


def _host(parts: SplitResult) -> str:
    host = (parts.hostname or "").rstrip(".").removeprefix("www.")
    if ":" in host:
        # an IPv6 literal keeps its brackets, so the port stays unambiguous
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is not None and port != _DEFAULT_PORTS.get(parts.scheme):
        host = f"{host}:{port}"
    return host


def url_host(url: str) -> str:
    """Return the folded ``host[:port]`` of *url* as page keys spell it (cheap: no full key)."""
    return _host(urlsplit(url.strip()))


#: an origin (RFC 6454 §4): scheme, host name, port; the unit credentials are scoped to
Origin: TypeAlias = tuple[str, str, int]


def url_origin(url: str) -> Origin | None:
    """The origin of an http(s) *url*, its port spelled out; None for another scheme or a URL
    without a host. Nothing is folded: ``www.`` is a host of its own, and so is each port."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme, host = parts.scheme.lower(), (parts.hostname or "").rstrip(".")
    if scheme not in _DEFAULT_PORTS or not host:
        return None
    return scheme, host, port or _DEFAULT_PORTS[scheme]


def origin_url(origin: Origin) -> str:
    """*origin* as a URL prefix, for logs: ``https://docs.example.com``, ``http://127.0.0.1:8080``."""
    scheme, host, port = origin
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}" if port == _DEFAULT_PORTS[scheme] else f"{scheme}://{host}:{port}"


class KeyMaker:
    """Builds page keys; the parameter lists come from ``RECRAWLER_URL_*_PARAMS``."""

    __slots__ = ("_drop", "_keep")

    def __init__(
        self,
        drop_params: Iterable[str] = default_settings.RECRAWLER_URL_DROP_PARAMS,
        keep_params: Iterable[str] = default_settings.RECRAWLER_URL_KEEP_PARAMS,
    ) -> None:
        self._drop = tuple(p.lower() for p in drop_params)
        self._keep = tuple(p.lower() for p in keep_params)

    def _kept(self, name: str) -> bool:
        low = name.lower()
        if self._keep:
            return any(fnmatchcase(low, p) for p in self._keep)
        return not any(fnmatchcase(low, p) for p in self._drop)

    def __call__(self, url: str) -> str:
        """Return the key of *url*: ``host[:port]/path[?sorted&query]``.

        Scheme and a leading ``www.`` are folded, the host is lowercased, default ports, the
        fragment, a trailing slash, empty path segments (``//``), dot segments and tracking
        parameters are dropped; the path keeps its case.
        """
        # canonicalize_url percent-encodes consistently, resolves dot segments, sorts the query
        # and drops the fragment.
        parts = urlsplit(canonicalize_url(safe_url_string(url.strip())))
        host = _host(parts)
        path = _EMPTY_SEGMENTS.sub("/", parts.path).rstrip("/")
        query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if self._kept(k)]
        key = host + path
        if query:
            key += "?" + urlencode(sorted(query))
        return key

    def clean_url(self, url: str) -> str:
        """*url* as it is stored and cited: the tracking parameters its key drops are dropped here
        too (``p2.html?utm_source=newsletter`` is cited as ``p2.html``), and so is its fragment;
        everything else (scheme, host, path, the other parameters and their order) is kept."""
        parts = urlsplit(url)
        kept = [
            part
            for part in parts.query.split("&")
            if part and self._kept(unquote_plus(part.partition("=")[0]))
        ]
        query = "&".join(kept)
        if query == parts.query and not parts.fragment:
            return url
        return urlunsplit(parts._replace(query=query, fragment=""))


_default_key_maker = KeyMaker()


def page_key(url: str) -> str:
    """Return the page key of *url* with the default parameter lists."""
    return _default_key_maker(url)


def remove_dot_segments(path: str) -> str:
    """*path* with its ``.`` and ``..`` segments resolved (RFC 3986 §5.2.4): ``/docs/../private/x``
    is ``/private/x``, the page a server answers for it. A ``..`` above the root stays at the root."""
    if "." not in path:
        return path
    out: list[str] = []
    segments = path.split("/")
    for i, segment in enumerate(segments):
        last = i == len(segments) - 1
        if segment == ".":
            if last:
                out.append("")
        elif segment == "..":
            if len(out) > 1:
                out.pop()
            if last:
                out.append("")
        else:
            out.append(segment)
    resolved = "/".join(out)
    return resolved if not path.startswith("/") or resolved.startswith("/") else "/" + resolved


def resolve_dots(url: str) -> str:
    """*url* with the dot segments of its path resolved (see :func:`remove_dot_segments`)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    path = remove_dot_segments(parts.path)
    return url if path == parts.path else parts._replace(path=path).geturl()


def key_host(key: str) -> str:
    """Return the host part (``host[:port]``) of a page key."""
    return key.split("/", 1)[0].split("?", 1)[0]


#: the only schemes recrawler fetches or stores
ALLOWED_SCHEMES = frozenset({"http", "https"})
#: why a URL is refused (the ``recrawler/url/refused/<reason>`` stats)
REFUSED_MALFORMED, REFUSED_SCHEME, REFUSED_CREDENTIALS, REFUSED_OFFSITE = (
    "malformed",
    "scheme",
    "credentials",
    "offsite",
)
# control characters never belong in a URL taken from a listing or a link (spaces are escaped later)
_BAD_CHARS = re.compile(r"[\x00-\x1f\x7f]")
# a host name or an IPv4 address: letters, digits, hyphens, underscores and dots (IDNA is ASCII)
_HOSTNAME = re.compile(r"^[A-Za-z0-9._-]+$", re.ASCII)


def _well_formed_host(parts: SplitResult) -> bool:
    host = parts.hostname or ""
    if not host:
        return False
    if ":" in host:
        # an IPv6 literal, which urlsplit only accepts in brackets
        return "[" in parts.netloc
    try:
        # an internationalised name is checked in its ASCII form
        ascii_host = host.encode("idna").decode("ascii")
    except UnicodeError:
        return False
    return bool(_HOSTNAME.match(ascii_host))


#: URLs whose decision a policy remembers (then it starts again): bounded memory
_DECIDED_MAX = 4096


class UrlPolicy:
    """Which URLs recrawler may fetch or store: ``http``/``https``, no credentials, a well-formed
    host and port, on one of the allowed hosts (folded as page keys fold them).

    Every URL is checked where it enters: a sitemap or feed entry, a link, a redirect target, a
    stored page checked directly, and every request before it is downloaded.
    """

    __slots__ = ("_decided", "any_host", "from_start", "hosts", "origins")

    def __init__(
        self,
        hosts: Iterable[str] = (),
        *,
        any_host: bool = False,
        origins: Iterable[Origin] = (),
        from_start: bool = False,
    ) -> None:
        self.hosts = frozenset(hosts)
        self.any_host = any_host
        #: the site's own origins: where its credentials may go (``any_host`` never widens them)
        self.origins = frozenset(origins)
        #: a spider that names no host: the URLs it starts from name its site (see :meth:`start`)
        self.from_start = from_start
        #: the last decisions by URL: a listed page's URL is checked again before its download
        self._decided: dict[str, str | None] = {}

    @classmethod
    def for_urls(
        cls,
        urls: Iterable[str],
        extra_hosts: Iterable[str] = (),
        *,
        any_host: bool = False,
        from_start: bool = False,
    ) -> UrlPolicy:
        """The policy of a site reached through *urls* (its sitemaps), plus *extra_hosts*
        (``host[:port]``). Its origins are those of *urls*, and each extra host under the schemes
        of *urls* (both http and https when there is none). *from_start*: see :meth:`start`."""
        extra = [h.strip() for h in extra_hosts if h.strip()]
        hosts = {url_host(u) for u in urls}
        hosts.update(url_host("http://" + h) for h in extra)
        origins = {o for u in urls if (o := url_origin(u)) is not None}
        schemes = sorted({o[0] for o in origins}) or sorted(_DEFAULT_PORTS)
        origins.update(o for h in extra for s in schemes if (o := url_origin(f"{s}://{h}")) is not None)
        return cls(hosts, any_host=any_host, origins=origins, from_start=from_start)

    @classmethod
    def for_site(
        cls, site: str | None = None, domains: Iterable[str] = (), start_urls: Iterable[str] = ()
    ) -> UrlPolicy:
        """The policy of a spider of its own (not a sitemap's): the hosts of its *site*, *domains*
        (``allowed_domains``) and *start_urls*; one that names none keeps to the hosts it starts
        from (:meth:`start`)."""
        named = [d.strip() for d in (*domains, site or "") if isinstance(d, str) and d.strip()]
        starts = [u for u in start_urls if isinstance(u, str) and url_origin(u) is not None]
        return cls.for_urls(starts, named, from_start=not named and not starts)

    def start(self, url: str) -> None:
        """A URL the spider starts from: for a policy ``from_start``, its host and origin are the
        site's from now on (a URL that is not http(s) on a well-formed host teaches nothing)."""
        if not self.from_start or self.any_host or not isinstance(url, str):
            return
        origin = url_origin(url)
        if origin is None or self._refusal(url) not in (None, REFUSED_OFFSITE):
            return
        host = url_host(url)
        if host not in self.hosts or origin not in self.origins:
            self.hosts = self.hosts | {host}
            self.origins = self.origins | {origin}
            # a URL refused before this host was known may be allowed now
            self._decided.clear()

    def refusal(self, url: str) -> str | None:
        """Why *url* is refused (``malformed``, ``scheme``, ``credentials``, ``offsite``), or None."""
        if not isinstance(url, str):
            return REFUSED_MALFORMED
        try:
            return self._decided[url]
        except KeyError:
            pass
        if len(self._decided) >= _DECIDED_MAX:
            self._decided.clear()
        reason = self._decided[url] = self._refusal(url)
        return reason

    def _refusal(self, url: str) -> str | None:
        if not url or _BAD_CHARS.search(url.strip()):
            return REFUSED_MALFORMED
        url = url.strip()
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError:
            # "http://[127.0.0.1:80/x" (an unclosed IPv6 literal), "http://host:99999/"
            return REFUSED_MALFORMED
        if parts.scheme.lower() not in ALLOWED_SCHEMES:
            return REFUSED_SCHEME
        if "@" in parts.netloc:
            return REFUSED_CREDENTIALS
        if port == 0 or not _well_formed_host(parts):
            return REFUSED_MALFORMED
        try:
            # what Scrapy's Request() does to a URL: it must not raise there
            safe_url_string(url)
        except (ValueError, UnicodeError):
            return REFUSED_MALFORMED
        if not self.any_host and _host(parts) not in self.hosts:
            return REFUSED_OFFSITE
        return None

    def allows(self, url: str) -> bool:
        """True when *url* may be fetched and stored."""
        return self.refusal(url) is None


def spider_url_policy(spider: object) -> UrlPolicy:
    """The URL policy of a user's own opted-in spider, from its ``recrawler_site``,
    ``allowed_domains`` and ``start_urls`` attributes (see :meth:`UrlPolicy.for_site`)."""
    return UrlPolicy.for_site(
        getattr(spider, "recrawler_site", None),
        getattr(spider, "allowed_domains", None) or (),
        getattr(spider, "start_urls", None) or (),
    )
