"""Document types: which reader turns a response body into Content (pure: one function per type).

Every consumer (the spider's own process, a CPU worker) reads a body through :class:`Documents`:
the same Content, fingerprint, chunks and validators follow for every type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from recrawler.exceptions import ConfigurationError
from recrawler.markdown import MARKDOWN_TYPES, read_markdown
from recrawler.pdf import MAGIC, PdfLimits, document_is_pdf, read_pdf

if TYPE_CHECKING:
    from lxml.cssselect import CSSSelector
    from scrapy.settings import BaseSettings

    from recrawler.extract import Content, ContentExtractor

#: the document types recrawler reads (the ``recrawler/document/<type>`` stats)
HTML, PDF, MARKDOWN = "html", "pdf", "markdown"
HTML_TYPES = frozenset({b"text/html", b"application/xhtml+xml"})
#: what a body of another format starts with (file(1)'s magic): a server that labels every file
#: ``text/html`` sends archives, images and office files as "HTML", and some of them read as text
_BINARY_MAGIC = (
    b"PK\x03\x04",  # zip: docx, xlsx, odt, epub, jar
    b"\x1f\x8b",  # gzip
    b"\xfd7zXZ\x00",  # xz
    b"\x28\xb5\x2f\xfd",  # zstd
    b"7z\xbc\xaf\x27\x1c",
    b"Rar!\x1a\x07",
    b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1",  # OLE: doc, xls, ppt, msi
    b"\x89PNG\r\n\x1a\n",
    b"\xff\xd8\xff",  # JPEG
    b"GIF87a",
    b"GIF89a",
    b"wOFF",  # web fonts
    b"wOF2",
    b"\x7fELF",
    b"%!PS-Adobe",  # PostScript: text, all of it drawing instructions
    b"{\\rtf",
)


def sniff(body: bytes) -> str | None:
    """What *body* is by its first bytes, whatever its ``Content-Type`` says: :data:`PDF`,
    ``"binary"`` (another format recrawler does not read) or None (no signature: the type decides)."""
    head = body[:64].lstrip(b"\t\n\r\x0c ")
    if head.startswith(MAGIC):
        return PDF
    return "binary" if head.startswith(_BINARY_MAGIC) else None


# what servers send a ``.md`` file as when they do not know markdown
_PLAIN_TYPES = frozenset({b"", b"text/plain", b"application/octet-stream", b"binary/octet-stream"})


def pdf_limits(settings: BaseSettings) -> PdfLimits | None:
    """``RECRAWLER_PDF_*`` as limits, or None when PDFs are not read (``RECRAWLER_PDF_ENABLED``)."""
    if not settings.getbool("RECRAWLER_PDF_ENABLED"):
        return None
    limits = PdfLimits(
        max_pages=settings.getint("RECRAWLER_PDF_MAX_PAGES"),
        timeout_secs=settings.getfloat("RECRAWLER_PDF_TIMEOUT_SECS"),
    )
    if limits.max_pages < 1:
        raise ConfigurationError(f"RECRAWLER_PDF_MAX_PAGES: must be at least 1, got {limits.max_pages!r}")
    if limits.timeout_secs <= 0:
        raise ConfigurationError(f"RECRAWLER_PDF_TIMEOUT_SECS: must be above 0, got {limits.timeout_secs!r}")
    return limits


@dataclass(frozen=True, slots=True)
class Documents:
    """The readers of a crawl: HTML through its ContentExtractor, PDF through :func:`read_pdf`
    within its limits (None: PDFs are not read, they are ``not_html`` errors as any other type),
    markdown (a page's twin that an llms.txt names) through :func:`read_markdown`."""

    html: ContentExtractor
    pdf: PdfLimits | None = None

    def kind(self, content_type: bytes, body: bytes, *, text: bool, path: str = "") -> str | None:
        """The type of a 200's body (``html``, ``pdf``, ``markdown``), or None for a type recrawler
        does not read. *content_type* is the header's media type (lowercase, no parameters); *text*
        says whether Scrapy made a text response of it; *path* is the URL's path (a ``.md`` file
        served as plain text is markdown). The body's own signature wins over the type: a PDF
        served as ``text/html`` is read as a PDF (or refused with PDFs off), never as HTML."""
        sniffed = sniff(body)
        if sniffed == PDF or document_is_pdf(content_type, body):
            return PDF if self.pdf is not None else None
        if sniffed is None and (
            content_type in MARKDOWN_TYPES or (path.endswith(".md") and content_type in _PLAIN_TYPES)
        ):
            return MARKDOWN
        if sniffed is None and text and (not content_type or content_type in HTML_TYPES):
            return HTML
        return None

    def read(
        self,
        kind: str,
        body: bytes,
        encoding: str | None = None,
        *,
        regions: CSSSelector | None = None,
        url: str = "",
    ) -> Content:
        """The Content of *body*, a document of type *kind* fetched for the page at *url*;
        *regions* (a site's learned volatile regions) apply to HTML. Raises
        :class:`~recrawler.extract.ExtractionError`."""
        if kind == PDF:
            assert self.pdf is not None
            return read_pdf(body, self.pdf)
        if kind == MARKDOWN:
            return read_markdown(body, encoding)
        return self.html.extract(body, encoding, regions=regions, url=url)


__all__ = ["HTML", "HTML_TYPES", "MARKDOWN", "PDF", "Documents", "pdf_limits", "sniff"]
