"""Main-content extraction: HTML in, markdown-like cleaned text out (pure, lxml only)."""

from __future__ import annotations

import dataclasses
import re
import threading
import unicodedata
from dataclasses import dataclass
from typing import TYPE_CHECKING

import lxml.etree
from cssselect import SelectorError
from lxml.cssselect import CSSSelector

from recrawler import default_settings
from recrawler.encoding import read_bom
from recrawler.exceptions import ConfigurationError, RecrawlerError
from recrawler.facets import html_facets

if TYPE_CHECKING:
    from collections.abc import Iterable

    from lxml.etree import _Element

# Always removed from the main content: never text a reader reads as the page's own.
ALWAYS_NOISE = (
    "script",
    "style",
    "noscript",
    "template",
    "nav",
    "footer",
    "aside",
    "form",
    "iframe",
    "svg",
    "canvas",
    "button",
    "select",
    "textarea",
    "input",
    "dialog",
    "[hidden]",
)
_HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
_BLOCKS = frozenset(
    {
        "address",
        "article",
        "blockquote",
        "dd",
        "details",
        "div",
        "dl",
        "dt",
        "fieldset",
        "figcaption",
        "figure",
        "hgroup",
        "li",
        "main",
        "ol",
        "p",
        "section",
        "summary",
        "ul",
        "table",
        "tr",
        "hr",
        "body",
        "html",
        "center",
        "caption",
    }
)
_WS = re.compile(r"\s+")
# deeper element nesting than this is flattened to its text (no recursion limit on odd pages)
_MAX_DEPTH = 200
# plain etree parsers (no lxml.html element-class lookup per node), one per encoding and thread:
# a parser's error log (read for the depth limit) belongs to the thread that parsed
_LOCAL = threading.local()


def _parsers() -> dict[str | None, lxml.etree.HTMLParser]:
    parsers: dict[str | None, lxml.etree.HTMLParser] | None = getattr(_LOCAL, "parsers", None)
    if parsers is None:
        parsers = _LOCAL.parsers = {}
    return parsers


def _parser(encoding: str | None) -> lxml.etree.HTMLParser | None:
    """This thread's parser for *encoding*; None when libxml2 does not know its name."""
    parsers = _parsers()
    if encoding not in parsers:
        try:
            # huge_tree: libxml2 otherwise stops at depth 256 or at 10 MB text nodes, silently
            # dropping the rest of the page
            parsers[encoding] = lxml.etree.HTMLParser(
                encoding=encoding, remove_comments=True, remove_pis=True, huge_tree=True
            )
        except LookupError:
            return None
    return parsers[encoding]


_XML_DECL = re.compile(r"^\s*<\?xml[^>]*\?>", re.IGNORECASE)
# terminal escape sequences (ECMA-48 CSI and OSC, 7- and 8-bit) and C0/C1 controls: never stored,
# hashed or shown. An OSC must end within 256 characters, or only its introducer goes.
_ESCAPES = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"
    r"|(?:\x1b\]|\x9d)[^\x07\x1b\x9c\n]{0,256}(?:\x07|\x1b\\|\x9c)"
    r"|\x1b[@-_]?"
)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# line-breaking controls (str.splitlines) stay line breaks; the others go
_CONTROLS: dict[int, str | None] = dict.fromkeys(
    (*range(0x00, 0x09), *range(0x0E, 0x1C), 0x1F, *range(0x7F, 0x85), *range(0x86, 0xA0))
)
_CONTROLS.update(dict.fromkeys((0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x85), "\n"))
# binary sniffing, as file(1) and git do: look at the start of the body only
_SNIFF_SIZE = 8192
# bytes no text puts in a page: C0 controls but tab, LF, FF, CR and ESC (terminal captures have
# those); random bytes are 10.5% of them, text next to none
_BINARY_BYTES = bytes((*range(0x00, 0x09), 0x0B, *range(0x0E, 0x1B), *range(0x1C, 0x20)))
_BINARY_CHARS = dict.fromkeys(_BINARY_BYTES)
_WIDE_ENCODINGS = ("utf-16", "utf16", "utf-32", "utf32")


class ExtractionError(RecrawlerError):
    """A body that cannot be read faithfully; ``reason`` is the page error it makes.

    ``too_deep``: elements nested past the parser's depth limit (libxml2 silently drops
    everything below it).
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def clean_text(text: str) -> str:
    """Return *text* without terminal escape sequences or control characters.

    Tab and newline stay; the other line-breaking controls (CR, VT, FF, ...) become newlines.
    """
    if _CONTROL.search(text) is None:
        return text
    return _ESCAPES.sub("", text).replace("\r\n", "\n").translate(_CONTROLS)


def looks_binary(body: bytes | str, encoding: str | None = None) -> bool:
    """Whether *body* is binary, not text: a NUL or over 5% control bytes in its first 8 KB.

    UTF-16 and UTF-32 bodies are judged by their characters (their NUL bytes are text).
    """
    sample = body[:_SNIFF_SIZE]
    if isinstance(sample, bytes) and encoding and encoding.lower().startswith(_WIDE_ENCODINGS):
        sample = sample.decode(encoding, "replace")
    if isinstance(sample, bytes):
        controls = len(sample) - len(sample.translate(None, _BINARY_BYTES))
        nul = b"\x00" in sample
    else:
        controls = len(sample) - len(sample.translate(_BINARY_CHARS))
        nul = "\x00" in sample
    return nul or controls * 20 > len(sample)


@dataclass(frozen=True, slots=True, kw_only=True)
class Content:
    """What a page says: its title and its main content as markdown-like text."""

    title: str
    text: str
    #: the text's headings in order: (level, heading text, anchor id or None)
    headings: tuple[tuple[int, str, str | None], ...] = ()
    #: inline code spans and code blocks, in order
    code: tuple[str, ...] = ()
    #: links of the main content: (href, text)
    links: tuple[tuple[str, str], ...] = ()
    #: how many elements the site's learned volatile regions removed from this page
    region_hits: int = 0
    #: the version and language the page gives itself (None: it says none)
    version: str | None = None
    lang: str | None = None


def _compile(selectors: Iterable[str], setting: str) -> list[CSSSelector]:
    compiled = []
    for sel in selectors:
        try:
            compiled.append(CSSSelector(sel, translator="html"))
        except SelectorError as exc:
            msg = f"{setting}: bad CSS selector {sel!r}: {exc}"
            raise ConfigurationError(msg) from exc
    return compiled


class ContentExtractor:
    """Finds the main content, drops chrome and noise, renders headings, lists, tables and code."""

    def __init__(
        self,
        selectors: Iterable[str] = default_settings.RECRAWLER_CONTENT_SELECTORS,
        noise_selectors: Iterable[str] = default_settings.RECRAWLER_CONTENT_NOISE_SELECTORS,
    ) -> None:
        self._main = _compile(selectors, "RECRAWLER_CONTENT_SELECTORS")
        if not self._main:
            raise ConfigurationError("RECRAWLER_CONTENT_SELECTORS: needs at least one selector")
        extra = list(noise_selectors)
        _compile(extra, "RECRAWLER_CONTENT_NOISE_SELECTORS")
        self._noise = CSSSelector(", ".join([*ALWAYS_NOISE, *extra]), translator="html")

    def parse(self, body: bytes | str, encoding: str | None = None) -> _Element | None:
        """Parse a document leniently; ``None`` when nothing parseable is left.

        Raises :class:`ExtractionError` for a body nested past the parser's depth limit.
        """
        try:
            parser = None
            if isinstance(body, bytes):
                _, bom = read_bom(body)
                if bom:
                    # libxml2 reads a byte order mark as text
                    body = body[len(bom) :]
                parser = _parser(encoding)
                if parser is None:
                    # a name Python's codecs know and libxml2 does not (utf-16-le): decode here
                    body = body.decode(encoding or "utf-8", "replace")
            if isinstance(body, str):
                # lxml refuses str input that still carries an XML encoding declaration.
                body = _XML_DECL.sub("", body).removeprefix("\ufeff")
                parser = _parser(None)
            assert parser is not None
            root = lxml.etree.fromstring(body, parser)
        except (lxml.etree.ParserError, ValueError, LookupError):
            return None
        for entry in parser.error_log:
            # libxml2 stops at its depth limit (2048 with huge_tree) and drops the rest unsaid
            if "depth" in entry.message.lower():
                raise ExtractionError("too_deep", f"elements nested too deep to parse: {entry.message}")
        return root

    def main(self, body: bytes | str, encoding: str | None = None) -> tuple[str, _Element | None]:
        """Return the title and the main-content element with chrome and noise removed.

        ``("", None)`` when there is none, or the body cannot be read faithfully.
        """
        try:
            root = self.parse(body, encoding)
        except ExtractionError:
            return "", None
        return self._select(root)

    def _select(self, root: _Element | None) -> tuple[str, _Element | None]:
        if root is None:
            return "", None
        title_el = root.find(".//title")
        title = _WS.sub(" ", clean_text(_text(title_el))).strip() if title_el is not None else ""
        main = None
        for sel in self._main:
            found = sel(root)
            if found:
                main = found[0]
                break
        if main is None:
            return title, None
        for el in self._noise(main):
            if el is not main:
                _drop(el)
        for el in list(main.iter("header")):
            # Page chrome lives in <header>, but an article's own <header> holds its title.
            if not any(h.tag in _HEADINGS for h in el.iter()):
                _drop(el)
        return title, main

    def extract(
        self,
        body: bytes | str,
        encoding: str | None = None,
        *,
        regions: CSSSelector | None = None,
        url: str = "",
    ) -> Content:
        """Return the page's title, cleaned main text and fields (empty text when there is none),
        and the version and language the page gives itself (*url*: the page's own, which a
        ``hreflang`` may name).

        *regions* drops a site's learned volatile regions before rendering. Raises
        :class:`ExtractionError` when the body cannot be read faithfully.
        """
        root = self.parse(body, encoding)
        version, lang = html_facets(root, url)
        title, main = self._select(root)
        if main is None:
            return Content(title=title, text="", version=version, lang=lang)
        removed = 0
        if regions is not None:
            for el in regions(main):
                # nested regions: an element already dropped with its ancestor counts once
                if el is not main and any(a is main for a in el.iterancestors()):
                    removed += 1
                    _drop(el)
        return dataclasses.replace(content_of(title, main), region_hits=removed, version=version, lang=lang)


def content_of(title: str, main: _Element) -> Content:
    """Render a cleaned main element into Content (text, headings, code, links)."""
    code: list[str] = []
    for el in main.iter("code", "pre", "kbd", "samp", "tt"):
        if el.tag == "pre":
            code.append(clean_text(_code_text(el)).strip("\n"))
        elif next(el.iterancestors("pre"), None) is None:  # lxml filters the ancestors by tag
            span = " ".join(clean_text(_words(el)).split())
            if span:
                code.append(span)
    links = tuple(
        (clean_text(a.get("href", "")), " ".join(clean_text(_words(a)).split()))
        for a in main.iter("a")
        if a.get("href")
    )
    text, headings = render_with_headings(main)
    return Content(title=title, text=text, headings=tuple(headings), code=tuple(code), links=links)


def _text(el: _Element) -> str:
    return "".join(el.itertext())


# what a browser shows apart: a line break or a block boundary inside a cell, heading or link is
# whitespace, never glue ("8.2.8-1<br>8.2.2-1" is two versions, not the number "8.2.8-18.2.2-1")
_SPACED = frozenset({"br", "td", "th", "tr", "pre", *_BLOCKS, *_HEADINGS})


def _words(el: _Element) -> str:
    """The text of *el* with a space at each line break and block boundary inside it."""
    if not len(el):
        # the common case: a cell, a link or a code span with no element inside
        return el.text or ""
    if not any(d.tag in _SPACED for d in el.iterdescendants()):
        return _text(el)
    parts: list[str] = []
    for event, node in lxml.etree.iterwalk(el, events=("start", "end")):
        tag = node.tag
        if not isinstance(tag, str):
            # comments and processing instructions: only their tail is text
            if event == "end" and node.tail and node is not el:
                parts.append(node.tail)
            continue
        spaced = node is not el and tag.lower() in _SPACED
        if event == "start":
            if spaced:
                parts.append(" ")
            if node.text:
                parts.append(node.text)
        else:
            if spaced:
                parts.append(" ")
            if node.tail and node is not el:
                parts.append(node.tail)
    return "".join(parts)


def _code_text(el: _Element) -> str:
    """The text of a ``<pre>``: a ``<br>`` inside it is a line break, as a browser shows it."""
    if not len(el) or next(el.iterdescendants("br"), None) is None:
        return _text(el)
    parts: list[str] = []
    for event, node in lxml.etree.iterwalk(el, events=("start", "end")):
        if event == "start":
            if node.tag == "br":
                parts.append("\n")
            elif isinstance(node.tag, str) and node.text:
                parts.append(node.text)
        elif node.tail and node is not el:
            parts.append(node.tail)
    return "".join(parts)


def _drop(el: _Element) -> None:
    """Remove *el* and its subtree, keeping the text that follows it (its tail)."""
    parent = el.getparent()
    if parent is None:
        return
    if el.tail:
        prev = el.getprevious()
        if prev is not None:
            prev.tail = (prev.tail or "") + el.tail
        else:
            parent.text = (parent.text or "") + el.tail
    parent.remove(el)


class _Renderer:
    __slots__ = ("blocks", "headings", "inline")

    def __init__(self) -> None:
        self.blocks: list[str] = []
        self.inline: list[str] = []
        self.headings: list[tuple[int, str, str | None]] = []

    def flush(self, prefix: str = "") -> None:
        if not self.inline:
            return
        # str.split() collapses every whitespace run (Unicode too) faster than a regex
        text = " ".join(clean_text("".join(self.inline)).split())
        self.inline = []
        if text:
            self.blocks.append(prefix + text)

    def walk(self, el: _Element, prefix: str = "", depth: int = 0) -> None:
        tag = el.tag  # each read of an lxml element's tag makes a new str: read it once
        if not isinstance(tag, str) or not tag:
            # comments and processing instructions: only their tail is text
            tail = el.tail
            if tail:
                self.inline.append(tail)
            return
        tag = tag.lower()
        depth += 1
        if depth > _MAX_DEPTH:
            # pathological nesting: keep the words, stop recursing
            self.inline.append(_words(el))
        elif tag in _HEADINGS:
            self.flush(prefix)
            words = _words(el)
            self.inline.append(words)
            level = int(tag[1])
            anchor = _anchor(el)
            heading = _WS.sub(" ", clean_text(words)).strip()
            self.headings.append((level, heading, clean_text(anchor) or None if anchor else None))
            self.flush("#" * level + " ")
        elif tag == "pre":
            self.flush(prefix)
            code = clean_text(_code_text(el)).strip("\n")
            lines = [line.rstrip() for line in code.splitlines()]
            if any(lines):
                self.blocks.append("```\n" + "\n".join(lines) + "\n```")
        elif tag == "table":
            self.flush(prefix)
            for row in el.iter("tr"):
                cells = [_WS.sub(" ", clean_text(_words(c))).strip() for c in row if c.tag in ("td", "th")]
                if any(cells):
                    self.blocks.append("| " + " | ".join(cells) + " |")
        elif tag in ("ul", "ol"):
            self.flush(prefix)
            n = 0
            for child in el:
                if isinstance(child.tag, str) and child.tag.lower() == "li":
                    n += 1
                    marker = f"{n}. " if tag == "ol" else "- "
                    self.walk_children(child, prefix + marker, depth)
                    self.flush(prefix + marker)
                else:
                    self.walk(child, prefix, depth)
        elif tag == "br":
            self.flush(prefix)
        elif tag == "blockquote":
            self.flush(prefix)
            self.walk_children(el, prefix + "> ", depth)
            self.flush(prefix + "> ")
        elif tag in _BLOCKS or tag in ("td", "th"):
            self.flush(prefix)
            self.walk_children(el, prefix, depth)
            self.flush(prefix)
        else:
            self.walk_children(el, prefix, depth)
        tail = el.tail
        if tail:
            self.inline.append(tail)

    def walk_children(self, el: _Element, prefix: str, depth: int = 0) -> None:
        text = el.text
        if text:
            self.inline.append(text)
        for child in el:
            self.walk(child, prefix, depth)


def _anchor(heading: _Element) -> str | None:
    """The fragment that links to a heading: its id, an anchor inside it, or its section's id."""
    found: str | None = heading.get("id")
    if found:
        return found
    for a in heading.iter("a"):
        found = a.get("id") or a.get("name")
        if found:
            return found
    parent = heading.getparent()
    if parent is not None and len(parent) and parent[0] is heading:
        found = parent.get("id")
    return found or None


def render_with_headings(el: _Element) -> tuple[str, list[tuple[int, str, str | None]]]:
    """Render *el* (see :func:`render`) and list its headings as (level, text, anchor)."""
    r = _Renderer()
    r.walk_children(el, "")
    r.flush()
    return unicodedata.normalize("NFC", "\n\n".join(r.blocks)), r.headings


def render(el: _Element) -> str:
    """Render an element as markdown-like text: one block per line pair, whitespace collapsed."""
    return render_with_headings(el)[0]
