"""PDF documents: text, headings and code out of a PDF, in the rendered-text format (pure, pypdf only).

A page's lines come with their place on the page (pypdf's text visitor); the outermost lines that
repeat across pages (running headers and footers) and page numbers are dropped, the outline's
entries become headings (anchored ``page=N``, the PDF open parameter), monospace lines become code
blocks, and the rest is grouped into paragraphs by the gaps between lines.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import re
import signal
import threading
import time
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from recrawler.extract import Content, ExtractionError, clean_text

if TYPE_CHECKING:
    from collections.abc import Iterator

#: page errors a PDF can make (``recrawler/page/error/<reason>``)
PDF_UNREADABLE, PDF_ENCRYPTED, PDF_TOO_LONG, PDF_TIMEOUT, PDF_UNSUPPORTED = (
    "pdf_unreadable",
    "pdf_encrypted",
    "pdf_too_long",
    "pdf_timeout",
    "pdf_unsupported",
)
_PDF_TYPES = frozenset({b"application/pdf", b"application/x-pdf", b"application/acrobat"})
# a server that does not say what it sends: the body's own header decides
_UNTYPED = frozenset({b"", b"application/octet-stream", b"binary/octet-stream", b"application/download"})
#: the header a PDF starts with (within its first KB, by the specification's implementation notes)
MAGIC = b"%PDF-"
# outermost lines per page edge that may be running furniture
_EDGE_LINES = 2
# a page number alone on a line: "7", "- 7 -", "Page 7", "7 / 20", "Page 7 of 20", "vii"
_PAGE_NUMBER = re.compile(
    r"(?:[-\u2013\u2014\s]*(?:page|p\.|seite|pagina)?\s*\d{1,5}(?:\s*(?:/|of|von|de)\s*\d{1,5})?[-\u2013\u2014\s]*"
    r"|[ivxlcdm]{1,7})",
    re.IGNORECASE,
)
_DIGITS = re.compile(r"\d+")
_BULLET = re.compile(r"^(?:[\u2022\u25e6\u25aa\u2023\u2043\u2219\u25cf\u25cb*\-\u2013]\s+|\d{1,3}[.)]\s+)")
_MONO = ("courier", "mono", "consol", "menlo", "code", "typewriter", "fixed")
# outline entries read at most (a malformed outline can name millions)
_MAX_OUTLINE = 10_000
# the visitor checks the clock every this many text pieces
_CHECK_EVERY = 64


@dataclass(frozen=True, slots=True, kw_only=True)
class PdfLimits:
    """How much of a PDF is read: pages at most, seconds at most (``RECRAWLER_PDF_*``)."""

    max_pages: int = 2000
    timeout_secs: float = 60.0


@dataclass(slots=True)
class _Line:
    text: str
    y: float
    size: float
    mono: bool
    #: the outline heading this line is (level), 0 for text
    level: int = 0
    furniture: bool = False


@dataclass(slots=True)
class _Page:
    lines: list[_Line] = field(default_factory=list)
    #: outline headings with no line of their own: (index of the line they precede, level, title)
    inserted: list[tuple[int, int, str]] = field(default_factory=list)


class _Deadline(Exception):
    """The reading ran out of time."""


def document_is_pdf(content_type: bytes, body: bytes) -> bool:
    """Whether a response is a PDF: by its ``Content-Type``, or by its header when the server
    did not say (no type, or a generic binary one)."""
    if content_type in _PDF_TYPES:
        return True
    return content_type in _UNTYPED and MAGIC in body[:1024]


def read_pdf(body: bytes, limits: PdfLimits = PdfLimits()) -> Content:  # frozen: shared safely
    """Return a PDF's title, text, headings and code as :class:`Content` (empty text when it has
    none: a scanned document).

    Raises :class:`ExtractionError`: ``pdf_unreadable`` (not a PDF pypdf can read),
    ``pdf_encrypted`` (it needs a password), ``pdf_too_long`` (more than ``limits.max_pages``),
    ``pdf_timeout`` (not read within ``limits.timeout_secs``), ``pdf_unsupported`` (pypdf is not
    installed: ``pip install 'recrawler[pdf]'``).
    """
    try:
        import pypdf  # optional: recrawler[pdf]
    except ImportError:
        raise ExtractionError(
            PDF_UNSUPPORTED, "reading PDFs needs pypdf: pip install 'recrawler[pdf]'"
        ) from None
    parser_log = logging.getLogger("pypdf")
    if parser_log.level == logging.NOTSET:
        # pypdf warns about every flaw it repairs (common in real files): a file it cannot read
        # is a page error of its own; set the "pypdf" logger's level to see them
        parser_log.setLevel(logging.ERROR)
    deadline = time.monotonic() + limits.timeout_secs
    try:
        with _alarm(limits.timeout_secs):
            return _read(pypdf, body, limits, deadline)
    except _Deadline:
        raise ExtractionError(PDF_TIMEOUT, f"not read within {limits.timeout_secs} s") from None
    except ExtractionError:
        raise
    except RecursionError:
        raise ExtractionError(PDF_UNREADABLE, "nested too deep to read") from None
    # an untrusted file read by a third-party parser: whatever it raises on a malformed file
    # (PdfReadError, KeyError, ValueError, ...) makes this document an error, never the crawl's
    except Exception as exc:
        raise ExtractionError(PDF_UNREADABLE, f"{type(exc).__name__}: {exc}"[:300]) from None


@contextlib.contextmanager
def _alarm(secs: float) -> Iterator[None]:
    """A wall-clock bound for the parser's own loops, where a timer signal may be used: on the main
    thread of a process (a CPU worker) that has no SIGALRM handler and no timer of its own."""
    usable = (
        hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGALRM) is signal.SIG_DFL
        and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    )
    if not usable:
        yield
        return

    def expired(signum: int, frame: Any) -> None:
        raise _Deadline

    signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, max(secs, 0.001) + 0.5)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)


def _read(pypdf: Any, body: bytes, limits: PdfLimits, deadline: float) -> Content:
    reader = pypdf.PdfReader(io.BytesIO(body), strict=False)
    # an owner password alone (printing, copying restricted) opens with the empty user password
    if reader.is_encrypted and not reader.decrypt(""):
        raise ExtractionError(PDF_ENCRYPTED, "the PDF needs a password")
    count = len(reader.pages)
    if count > limits.max_pages:
        raise ExtractionError(PDF_TOO_LONG, f"{count} pages (RECRAWLER_PDF_MAX_PAGES={limits.max_pages})")
    pages = [_page_lines(page, deadline) for page in reader.pages]
    _mark_furniture(pages)
    _place_outline(reader, pages)
    text, headings, code = _render(pages)
    return Content(title=_title(reader, headings, pages), text=text, headings=headings, code=code)


def _page_lines(page: Any, deadline: float) -> _Page:
    """The lines of one page in the order the file draws them, each with its baseline and size."""
    lines: list[_Line] = []
    parts: list[str] = []
    place: list[float] = []  # y, size, mono of the line being read
    seen = 0

    def end_line() -> None:
        text = " ".join(clean_text("".join(parts)).split())
        if text and place:
            lines.append(_Line(text=text, y=place[0], size=place[1], mono=bool(place[2])))
        parts.clear()
        place.clear()

    def visit(text: str, cm: list[float], tm: list[float], font: Any, size: float) -> None:
        nonlocal seen
        seen += 1
        if seen % _CHECK_EVERY == 0 and time.monotonic() > deadline:
            raise _Deadline
        if not text:
            return
        y = tm[4] * cm[1] + tm[5] * cm[3] + cm[5]
        scale = math.hypot(tm[2], tm[3]) * math.hypot(cm[2], cm[3])
        height = abs(size * scale) or 1.0
        name = str(font.get("/BaseFont", "")).lower() if hasattr(font, "get") else ""
        if place and abs(place[0] - y) > height / 2:
            end_line()
        pieces = text.split("\n")
        for i, piece in enumerate(pieces):
            if i:
                end_line()
            if piece.strip() and not place:
                place.extend((y - i * height * 1.2, height, any(m in name for m in _MONO)))
            parts.append(piece)

    if time.monotonic() > deadline:
        raise _Deadline
    page.extract_text(visitor_text=visit)
    end_line()
    return _Page(lines=lines)


def _shape(text: str) -> str:
    return _DIGITS.sub("0", text.lower())


def _mark_furniture(pages: list[_Page]) -> None:
    """Drop page numbers and running headers and footers. Among the outermost lines of each page:
    a page number alone; a text outermost on at least two pages, and on three or half of them;
    a text with the page's number in it ("Manual - page 7": alike but for a number that follows
    the page's position) outermost on three pages and half of them."""
    edges: list[list[_Line]] = []
    texts: Counter[str] = Counter()
    shapes: dict[str, list[tuple[int, list[int]]]] = {}
    for number, page in enumerate(pages):
        by_height = sorted(page.lines, key=lambda line: line.y)
        outer = by_height[:_EDGE_LINES] + by_height[-_EDGE_LINES:] if len(by_height) > 1 else by_height
        unique = list({id(line): line for line in outer}.values())
        edges.append(unique)
        texts.update({line.text for line in unique})
        for shape, line in {_shape(line.text): line for line in unique}.items():
            shapes.setdefault(shape, []).append((number, [int(d) for d in _DIGITS.findall(line.text)]))
    n = len(pages)
    numbered = {
        shape for shape, seen in shapes.items() if len(seen) >= 3 and 2 * len(seen) >= n and _paged(seen)
    }
    for outer in edges:
        for line in outer:
            same = texts[line.text]
            line.furniture = bool(
                _PAGE_NUMBER.fullmatch(line.text)
                or (same >= 2 and (same >= 3 or 2 * same >= n))
                or _shape(line.text) in numbered
            )


def _paged(seen: list[tuple[int, list[int]]]) -> bool:
    """Whether one of the numbers of these lines follows the page's position (a page number)."""
    width = min(len(numbers) for _, numbers in seen)
    return any(len({numbers[k] - page for page, numbers in seen}) == 1 for k in range(width))


def _outline(reader: Any) -> Iterator[tuple[int, Any]]:
    """(level, entry) of the outline in order, level 1 at the top."""
    stack: list[tuple[list[Any], int]] = [(list(reader.outline or ()), 1)]
    read = 0
    while stack and read < _MAX_OUTLINE:
        items, level = stack.pop()
        for i, item in enumerate(items):
            if isinstance(item, list):
                # a nested list holds the children of the entry before it: read them now
                stack.append((items[i + 1 :], level))
                stack.append((item, level + 1))
                break
            read += 1
            yield level, item


def _norm(text: str) -> str:
    return " ".join(unicodedata.normalize("NFC", text).casefold().split())


def _place_outline(reader: Any, pages: list[_Page]) -> None:
    """Make each outline entry a heading: its own line when the page has one with its title,
    else a heading inserted where its destination points (or at the top of its page)."""
    try:
        entries = list(_outline(reader))
    except Exception:  # a malformed outline: the text is still worth reading, without headings
        return
    for level, entry in entries:
        title = " ".join(clean_text(str(getattr(entry, "title", "") or "")).split())
        try:
            number = reader.get_destination_page_number(entry)
        except Exception:  # a destination that names no page of this file: no heading
            number = None
        if not title or number is None or not 0 <= number < len(pages):
            continue
        page = pages[number]
        wanted = _norm(title)
        line = next(
            (x for x in page.lines if not x.level and not x.furniture and _norm(x.text) == wanted), None
        )
        if line is not None:
            line.level = min(level, 6)
            continue
        top = getattr(entry, "top", None)
        at = 0
        if isinstance(top, int | float):
            at = next(
                (i for i, x in enumerate(page.lines) if not x.furniture and x.y <= float(top) + 1),
                len(page.lines),
            )
        page.inserted.append((at, min(level, 6), title))


class _Blocks:
    """The rendered text being built: blocks, headings and code, and the paragraph or code block
    being read."""

    def __init__(self) -> None:
        self.blocks: list[str] = []
        self.headings: list[tuple[int, str, str | None]] = []
        self.code: list[str] = []
        self.paragraph: list[str] = []
        self.mono: list[str] = []

    def flush(self) -> None:
        if self.paragraph:
            self.blocks.append(_joined(self.paragraph))
            self.paragraph = []
        if self.mono:
            body = "\n".join(self.mono)
            self.blocks.append(f"```\n{body}\n```")
            self.code.append(body)
            self.mono = []

    def heading(self, level: int, title: str, anchor: str) -> None:
        self.flush()
        self.blocks.append(f"{'#' * level} {title}")
        self.headings.append((level, title, anchor))

    def page(self, page: _Page, anchor: str) -> None:
        """Add one page's blocks: its headings, code blocks, list items and paragraphs."""
        inserted = sorted(page.inserted, key=lambda h: h[0])
        last: _Line | None = None
        for i, line in enumerate(page.lines):
            while inserted and inserted[0][0] <= i:
                _, level, title = inserted.pop(0)
                self.heading(level, title, anchor)
                last = None
            if line.furniture:
                continue
            if line.level:
                self.heading(line.level, line.text, anchor)
                last = None
            elif line.mono:
                if self.paragraph:
                    self.flush()
                self.mono.append(line.text)
                last = line
            else:
                bullet = _BULLET.match(line.text)
                if self.mono or last is None or bullet or _new_paragraph(last, line):
                    self.flush()
                text = line.text
                if bullet and not text[0].isdigit():
                    text = "- " + text[bullet.end() :]
                self.paragraph.append(text)
                last = line
        for _, level, title in inserted:
            self.heading(level, title, anchor)
        self.flush()


def _render(
    pages: list[_Page],
) -> tuple[str, tuple[tuple[int, str, str | None], ...], tuple[str, ...]]:
    """The rendered text (headings, code blocks, list items, paragraphs), headings and code."""
    out = _Blocks()
    for number, page in enumerate(pages, 1):
        # the PDF open parameter a viewer takes to its page (RFC 8118 section 3)
        out.page(page, f"page={number}")
    text = unicodedata.normalize("NFC", "\n\n".join(out.blocks))
    return text, tuple(out.headings), tuple(out.code)


def _new_paragraph(last: _Line, line: _Line) -> bool:
    """A gap of more than about one and a half lines, a jump up the page (a new column) or a
    change of type size starts a new paragraph."""
    gap = last.y - line.y
    size = max(last.size, line.size)
    return gap <= 0 or gap > 1.6 * size or abs(last.size - line.size) > 0.5


def _joined(lines: list[str]) -> str:
    out = lines[0]
    for line in lines[1:]:
        # a word broken at the line's end ("command-" / "line") is joined back, hyphen kept
        out = out + line if out.endswith("-") and line[:1].islower() else f"{out} {line}"
    return out


def _title(reader: Any, headings: tuple[tuple[int, str, str | None], ...], pages: list[_Page]) -> str:
    """The document's title: its metadata's, else its first heading, else its first line."""
    try:
        meta = reader.metadata
        title = str(meta.title) if meta is not None and meta.title else ""
    except Exception:  # unreadable metadata: a title from the text instead
        title = ""
    title = " ".join(clean_text(title).split())
    if title:
        return title
    if headings:
        return headings[0][1]
    first = next((line.text for page in pages for line in page.lines if not line.furniture), "")
    return first[:200]


__all__ = [
    "MAGIC",
    "PDF_ENCRYPTED",
    "PDF_TIMEOUT",
    "PDF_TOO_LONG",
    "PDF_UNREADABLE",
    "PDF_UNSUPPORTED",
    "PdfLimits",
    "document_is_pdf",
    "read_pdf",
]
