"""A page's build markers, and a site's build fingerprint: what every page of one build shares (pure).

A static site generator stamps each page of a build alike: hashed asset names
(``styles.3f2a91c0.css``), ``<meta name="generator">`` and build or version meta. Each marker sits
in a *slot* (its kind and its URL or name with hashes and query values masked); the marker is the
slot's value. What varies per request (a cache-busting ``?v=`` token, a request id) varies between
pages of one run too: :meth:`BuildFingerprint.combine` learns such slots as noise, and a fingerprint
moves only on the slots that are not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import urljoin, urlsplit

from lxml import etree, html

__all__ = ["BuildFingerprint", "build_markers", "slot_of"]

#: where a page's head ends (markers live there): what is parsed of a page, at most
_HEAD_END = re.compile(rb"</head\s*>", re.IGNORECASE)
_HEAD_MAX = 64 * 1024
#: link relations that load a build's assets
_ASSET_RELS = frozenset({"stylesheet", "preload", "modulepreload", "icon", "manifest", "prefetch"})
#: meta names that carry the build or the version
_BUILD_META = re.compile(r"generator|version|build|revision|commit|release", re.IGNORECASE)
#: a hash or a number inside a file name or path segment (``3f2a91c0``, ``20260301``, ``v2``)
_HASHY = re.compile(r"(?<![a-z])(?:[0-9a-f]{6,}|\d+)(?![a-z])", re.IGNORECASE)
#: a query's values
_QUERY_VALUE = re.compile(r"=[^&]*")
#: markers kept per page, at most
_MAX_MARKERS = 64


def slot_of(kind: str, value: str) -> str:
    """The slot a marker sits in: its hashes, numbers and query values masked with ``#``."""
    if kind == "meta":
        return f"meta:{value}"
    parts = urlsplit(value)
    path = _HASHY.sub("#", parts.path)
    query = _QUERY_VALUE.sub("=#", parts.query)
    return f"{kind}:{path}" + (f"?{query}" if query else "")


def build_markers(body: bytes, url: str) -> dict[str, str]:
    """Slot -> marker of a page's build: the asset URLs its head (and script tags) load, on the
    site's own host, and its generator, version and build meta. Empty when there is no HTML."""
    cut = _HEAD_END.search(body, 0, _HEAD_MAX)
    head = body[: cut.end() if cut else _HEAD_MAX]
    try:
        tree = html.fromstring(head)
    except (etree.ParserError, ValueError):
        return {}
    host = urlsplit(url).netloc
    base = url
    for element in tree.iter("base"):
        href = element.get("href")
        if href:
            base = urljoin(url, href.strip())
            break
    markers: dict[str, str] = {}
    for element in tree.iter("link", "script", "meta"):
        if len(markers) >= _MAX_MARKERS:
            break
        tag = element.tag
        if tag == "meta":
            name = (element.get("name") or element.get("property") or "").strip().lower()
            content = (element.get("content") or "").strip()
            if name and content and _BUILD_META.search(name):
                markers[slot_of("meta", name)] = content[:200]
            continue
        if tag == "link":
            rels = set((element.get("rel") or "").lower().split())
            src = element.get("href") if rels & _ASSET_RELS else None
        else:
            src = element.get("src")
        if not src:
            continue
        resolved = urlsplit(urljoin(base, src.strip()))
        if resolved.netloc != host:
            # a CDN's or a tracker's: not the site's build
            continue
        marker = resolved.path + (f"?{resolved.query}" if resolved.query else "")
        markers[slot_of(tag, marker)] = marker[:300]
    return markers


@dataclass(frozen=True, slots=True)
class BuildFingerprint:
    """A site's build fingerprint: slot -> marker, for the slots every probed page of a run shared
    with one value; ``noise``: slots learned to vary per request (never compared)."""

    markers: dict[str, str] = field(default_factory=dict)
    noise: frozenset[str] = frozenset()

    @classmethod
    def combine(cls, pages: list[dict[str, str]], noise: frozenset[str] = frozenset()) -> BuildFingerprint:
        """The fingerprint of pages fetched in one run: the slots all of them carry with one value;
        a slot two of them carry with different values varies per request: noise from now on."""
        if not pages:
            return cls({}, noise)
        values: dict[str, set[str]] = {}
        for markers in pages:
            for slot, marker in markers.items():
                values.setdefault(slot, set()).add(marker)
        varying = {slot for slot, seen in values.items() if len(seen) > 1}
        shared = set(pages[0]).intersection(*pages[1:]) - varying - noise
        return cls({slot: pages[0][slot] for slot in sorted(shared)}, noise | varying)

    def moved(self, now: BuildFingerprint, *, pages: int) -> list[str]:
        """The slots whose marker is not what it was (noise left out): a changed value, and with
        two pages or more seen now, build meta every one of them gained (a generator named). An
        asset slot the pages seen now lack, or all carry, says nothing: pages of one build load
        different assets (a home page its own scripts)."""
        noise = self.noise | now.noise
        moved = [
            slot
            for slot in sorted(set(self.markers) & set(now.markers) - noise)
            if self.markers[slot] != now.markers[slot]
        ]
        if pages >= 2:
            moved += sorted(s for s in set(now.markers) - set(self.markers) - noise if s.startswith("meta:"))
        return moved

    def describe(self, now: BuildFingerprint, slots: list[str]) -> str:
        """A few of *slots* in words: ``meta:generator Sphinx 7.2 -> 7.3``."""
        shown = []
        for slot in slots[:3]:
            before, after = self.markers.get(slot, "-"), now.markers.get(slot, "-")
            shown.append(f"{slot} {before} -> {after}")
        more = f" and {len(slots) - 3} more" if len(slots) > 3 else ""
        return ", ".join(shown) + more
