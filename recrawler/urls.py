"""Page keys: one normalised string per page, whatever URL variant reached it."""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import TYPE_CHECKING
from urllib.parse import SplitResult, parse_qsl, urlencode, urlsplit

from w3lib.url import canonicalize_url, safe_url_string

from recrawler import default_settings

if TYPE_CHECKING:
    from collections.abc import Iterable

_DEFAULT_PORTS = {"http": 80, "https": 443}


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
        fragment, a trailing slash and tracking parameters are dropped; the path keeps its case.
        """
        # canonicalize_url percent-encodes consistently, sorts the query and drops the fragment.
        parts = urlsplit(canonicalize_url(safe_url_string(url.strip())))
        host = _host(parts)
        path = parts.path.rstrip("/")
        query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if self._kept(k)]
        key = host + path
        if query:
            key += "?" + urlencode(sorted(query))
        return key


_default_key_maker = KeyMaker()


def page_key(url: str) -> str:
    """Return the page key of *url* with the default parameter lists."""
    return _default_key_maker(url)


def key_host(key: str) -> str:
    """Return the host part (``host[:port]``) of a page key."""
    return key.split("/", 1)[0].split("?", 1)[0]
