"""A page's version and language: from its URL (``RECRAWLER_VERSION_PATTERN``) or from its HTML
(DocSearch's ``docsearch:version`` and ``docsearch:language``, a ``hreflang`` naming the page
itself, ``<html lang>``). Pure: no Scrapy."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urljoin

from recrawler.exceptions import ConfigurationError

if TYPE_CHECKING:
    from lxml.etree import _Element

__all__ = ["ANY", "FacetPattern", "html_facets", "lang_filter", "normal_lang", "normal_version"]

#: the search filter value that means "every version" (or language)
ANY = "*"
# a BCP 47 language tag as pages write it (en, en-US, pt_BR, zh-Hans)
_LANG = re.compile(r"^[a-z]{2,8}(?:-[a-z0-9]{1,8})*$")


def normal_lang(value: str | None) -> str | None:
    """A language tag lowercased, ``_`` read as ``-`` (``pt_BR`` is ``pt-br``); None for none or a
    value that is no tag (``x-default`` names no language)."""
    if not value:
        return None
    tag = value.strip().replace("_", "-").lower()
    return tag if _LANG.match(tag) and tag != "x-default" else None


def normal_version(value: str | None) -> str | None:
    """A version label as stored: the first of a comma-separated list (DocSearch allows several),
    spaces trimmed, at most 100 characters; None for an empty one."""
    if not value:
        return None
    first = value.split(",", 1)[0].strip()
    return first[:100] or None


def lang_filter(value: str) -> str:
    """A ``--lang`` filter as stored tags are compared with it (``en`` also finds ``en-us``), or a
    ConfigurationError naming the bad value."""
    tag = normal_lang(value)
    if tag is None:
        raise ConfigurationError(f"lang: not a language tag: {value!r} (en, en-US, pt_BR)")
    return tag


def _same_page(href: str, url: str) -> bool:
    return urljoin(url, href).split("#", 1)[0].rstrip("/") == url.split("#", 1)[0].rstrip("/")


def html_facets(root: _Element | None, url: str = "") -> tuple[str | None, str | None]:
    """(version, language) an HTML document gives itself: ``docsearch:version``; then
    ``docsearch:language``, the ``hreflang`` of an alternate link to the page's own *url*, or
    ``<html lang>`` (``xml:lang``), in that order."""
    if root is None:
        return None, None
    version = lang = None
    for el in root.iter("meta"):
        name = (el.get("name") or "").strip().lower()
        if name == "docsearch:version" and version is None:
            version = normal_version(el.get("content"))
        elif name == "docsearch:language" and lang is None:
            lang = normal_lang(el.get("content"))
    if lang is None and url:
        for el in root.iter("link"):
            rel = (el.get("rel") or "").lower().split()
            if "alternate" in rel and el.get("hreflang") and _same_page(el.get("href") or "", url):
                lang = normal_lang(el.get("hreflang"))
                if lang is not None:
                    break
    if lang is None and isinstance(root.tag, str) and root.tag.lower() == "html":
        lang = normal_lang(root.get("lang") or root.get("{http://www.w3.org/XML/1998/namespace}lang"))
    return version, lang


@dataclass(frozen=True, slots=True)
class FacetPattern:
    """``RECRAWLER_VERSION_PATTERN``: a regex searched in a page's URL whose named groups
    ``version`` and ``lang`` (either or both) give the page's version and language; they win over
    what the page says."""

    regex: re.Pattern[str]

    @classmethod
    def from_setting(cls, value: str | None) -> FacetPattern | None:
        """The pattern of the setting's *value* (None: not set), or a ConfigurationError naming it."""
        if not value:
            return None
        try:
            regex = re.compile(str(value))
        except re.error as exc:
            raise ConfigurationError(f"RECRAWLER_VERSION_PATTERN: bad pattern {value!r}: {exc}") from exc
        if not {"version", "lang"} & set(regex.groupindex):
            raise ConfigurationError(
                f"RECRAWLER_VERSION_PATTERN: {value!r} names no group: "
                "use (?P<version>...) and/or (?P<lang>...)"
            )
        return cls(regex)

    def of(self, url: str) -> tuple[str | None, str | None]:
        """(version, language) *url* gives (None where the pattern does not match or has no group)."""
        found = self.regex.search(url)
        if found is None:
            return None, None
        groups = found.groupdict()
        return normal_version(groups.get("version")), normal_lang(groups.get("lang"))
