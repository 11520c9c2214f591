"""Start URLs: their folders, and where a site crawled from one may keep a listing (the sitemaps
robots.txt names, ``sitemap.xml``, ``llms.txt``), asked one place after the other."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy import Request
from scrapy.utils.sitemap import sitemap_urls_from_robots

from recrawler import meta

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy.http import Response

    from recrawler.urls import UrlPolicy

__all__ = ["FOUND", "MISSING", "folder", "index_variants", "probe_answer", "probe_request", "probe_urls"]

#: what a probe's answer says: a listing is there, or not (any other answer is a failure)
FOUND, MISSING = "found", "missing"


def folder(url: str) -> str:
    """The folder of *url*'s path: ``/docs/sitemap.xml`` and ``/docs/`` are ``/docs/``."""
    return urlsplit(url).path.rsplit("/", 1)[0] + "/"


def index_variants(url: str) -> tuple[str, ...]:
    """*url* and the other addresses of the same folder index: ``/docs/`` and ``/docs/index.html``."""
    parts = urlsplit(url)
    base, _, name = parts.path.rpartition("/")
    if name not in ("", "index.html", "index.htm"):
        return (url,)
    return (url, *(parts._replace(path=f"{base}/{n}").geturl() for n in ("", "index.html", "index.htm")))


def probe_urls(start_url: str, prefix: str) -> list[str]:
    """Where to look, in order: robots.txt, then a sitemap and an llms.txt in *prefix* (the start
    URL's folder) and at the root."""
    parts = urlsplit(start_url)
    folders = dict.fromkeys((prefix, "/"))
    paths = ("/robots.txt", *(f + name for name in ("sitemap.xml", "llms.txt") for f in folders))
    return [parts._replace(path=path, query="", fragment="").geturl() for path in paths]


def probe_request(urls: list[str], callback: Callable[..., Any], errback: Callable[..., Any]) -> Request:
    """The request that asks whether the first of *urls* exists (robots.txt is read, the rest are
    asked with ``HEAD``); the others ride on its meta."""
    url = urls[0]
    return Request(
        url,
        method="GET" if url.endswith("/robots.txt") else "HEAD",
        callback=callback,
        errback=errback,
        dont_filter=True,
        meta={meta.ROLE: meta.ROLE_PROBE, meta.PROBES: urls[1:], "handle_httpstatus_all": True},
    )


def probe_answer(response: Response, policy: UrlPolicy) -> tuple[str | None, list[str]]:
    """What a probe's *response* says: (``FOUND``, the listings), (``MISSING``, []), or (None, [])
    for an answer that says neither (a 5xx, a 403: whether there is one is unknown). A robots.txt
    that names no sitemap of the site, or answers anything but 200, names none."""
    url = response.request.url if response.request is not None else response.url
    if url.endswith("/robots.txt"):
        named = (
            sitemap_urls_from_robots(response.body, base_url=response.url) if response.status == 200 else []
        )
        found = [u for u in named if policy.allows(u)]
        return (FOUND, found) if found else (MISSING, [])
    if response.status == 200:
        return FOUND, [url]
    if response.status in (404, 410):
        return MISSING, []
    return None, []
