"""Builders for realistic documentation pages and sitemaps (pure: no server, no Scrapy)."""

from __future__ import annotations

import gzip
import html
import re
from typing import TYPE_CHECKING, TypeAlias
from xml.sax.saxutils import escape

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from datetime import date

# (heading, paragraphs) or (heading, paragraphs, code): paragraphs are HTML, the rest plain text.
Section: TypeAlias = "tuple[str, Sequence[str]] | tuple[str, Sequence[str], str | None]"
# A URL (or site path) with an optional <lastmod>: a W3C datetime string, a date or a datetime.
Lastmod: TypeAlias = "str | date | None"
Entry: TypeAlias = "str | tuple[str, Lastmod]"

_NAV = (("Home", "/"), ("Guides", "/guides/"), ("API", "/api/"), ("Blog", "/blog/"))


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


def page(title: str, sections: Sequence[Section], *, chrome_noise: bool = False, extra_main: str = "") -> str:
    """Return a docs page; with ``chrome_noise`` the mockserver's placeholders go in the chrome.

    ``{{NOW}}``, ``{{TOKEN}}`` and ``{{WIDGET}}`` appear only in the header, aside and footer,
    never inside ``<main>``, so the main content is identical across requests.
    ``extra_main`` is raw HTML appended inside ``<main>``.
    """
    nav = "".join(f'<li><a href="{href}">{name}</a></li>' for name, href in _NAV)
    csrf = '<input type="hidden" name="csrf" value="{{TOKEN}}">' if chrome_noise else ""
    built = '<p class="build">Built {{NOW}}</p>' if chrome_noise else ""
    widget = "{{WIDGET}}" if chrome_noise else ""
    toc = "".join(f'<li><a href="#{slug(s[0])}">{html.escape(s[0])}</a></li>' for s in sections)
    body = []
    for heading, paragraphs, *code in sections:
        body.append(f'<section><h2 id="{slug(heading)}">{html.escape(heading)}</h2>')
        body.extend(f"<p>{paragraph}</p>" for paragraph in paragraphs)
        if code and code[0] is not None:
            body.append(f"<pre><code>{html.escape(code[0])}</code></pre>")
        body.append("</section>")
    content = "\n".join(body)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{html.escape(title)} | Example Docs</title>
<link rel="stylesheet" href="/static/site.css">
</head>
<body>
<header class="site-header">
<a class="logo" href="/">Example Docs</a>
<nav aria-label="Site"><ul>{nav}</ul></nav>
<form class="search" action="/search">{csrf}<input type="search" name="q"></form>
</header>
<aside class="sidebar">
<nav aria-label="On this page"><ul>{toc}</ul></nav>
{widget}
</aside>
<main>
<h1>{html.escape(title)}</h1>
{content}
{extra_main}
</main>
<footer class="site-footer">
<p>© 2026 Example Inc. All rights reserved.</p>
{built}
</footer>
</body>
</html>
"""


def guide(
    title: str,
    text: str = "The original text.",
    usage: str | None = None,
    code: str | None = None,
    *,
    extra: str = "",
) -> str:
    """A short guide: an "Overview" paragraph (*text*, then *extra*) and, given *usage*, a "Usage"
    section with *code* as its example."""
    sections: list[Section] = [("Overview", [text + extra])]
    if usage is not None:
        sections.append(("Usage", [usage], code))
    return page(title, sections)


def tool_guide(title: str, text: str = "The original text.", usage: str = "Run it like this.") -> str:
    """A guide to a tool: its Usage section ends with the example ``tool --run``."""
    return guide(title, text, usage, "tool --run")


def feature_page(i: int, extra: str = "") -> str:
    """Page *i* of a site of pages alike: one paragraph on feature *i*, *extra* after it."""
    return guide(f"Page {i}", f"Page {i} explains feature {i}." + (f" {extra}" if extra else ""))


def widget_page(n: int, extra: str = "") -> str:
    """Page *n* of a site of pages alike: how widget *n* retries (*extra* after it), how to run it."""
    return guide(
        f"Page {n}",
        f"Page {n} explains how widget {n} retries its uploads after {n} seconds.{extra}",
        f"Run widget {n} from the command line.",
        f"widget-{n} --retry {n}",
    )


def _lastmod(value: Lastmod) -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else value.isoformat()
    return f"<lastmod>{escape(text)}</lastmod>"


def _entries(entries: Iterable[Entry], tag: str) -> str:
    rows = []
    for entry in entries:
        loc, lastmod = (entry, None) if isinstance(entry, str) else entry
        rows.append(f"<{tag}><loc>{escape(loc)}</loc>{_lastmod(lastmod)}</{tag}>")
    return "\n".join(rows)


def sitemap(urls_with_lastmod: Iterable[Entry]) -> str:
    """Return a ``<urlset>``; each entry is a URL or a ``(url, lastmod)`` tuple."""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
        f"{_entries(urls_with_lastmod, 'url')}\n</urlset>\n"
    )


def sitemap_index(urls: Iterable[Entry]) -> str:
    """Return a ``<sitemapindex>``; each entry is a sitemap URL or a ``(url, lastmod)`` tuple."""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
        f"{_entries(urls, 'sitemap')}\n</sitemapindex>\n"
    )


def gzip_bytes(text: str | bytes) -> bytes:
    """Gzip ``text`` (UTF-8) reproducibly: the same input always gives the same bytes."""
    data = text.encode() if isinstance(text, str) else text
    return gzip.compress(data, mtime=0)
