"""Builders for real PDF manuals (reportlab): outline, running header and footer, page numbers, code.

Pure: no server, no Scrapy. A manual regenerated with another ``generated`` date differs in its
bytes (the date on its title page and in every footer, the file's creation date) and in nothing
a reader would call content.
"""

from __future__ import annotations

import io
import zlib
from typing import TYPE_CHECKING, TypeAlias

from reportlab.lib.pagesizes import A4
from reportlab.pdfgen.canvas import Canvas

if TYPE_CHECKING:
    from collections.abc import Sequence

# (title, paragraphs, code lines or None)
Section: TypeAlias = "tuple[str, Sequence[str], Sequence[str] | None]"
Chapter: TypeAlias = "tuple[str, Sequence[Section]]"

_W, _H = A4
_LEFT, _RIGHT = 72.0, _W - 72.0
_TOP, _BOTTOM = _H - 90.0, 80.0


def paragraph(topic: str, n: int) -> str:
    """A realistic paragraph about *topic*, different for each *n*."""
    return (
        f"The {topic} step {n} runs after the agent has read acme.toml. It retries a failed part "
        f"up to {n + 2} times, waiting {n * 5} seconds between attempts, and logs each attempt at "
        f"the info level. Set {topic.replace(' ', '_')}_limit to change it; the default suits "
        f"links of {10 * (n + 1)} Mbit/s or more."
    )


def chapters(name: str, n_chapters: int = 4, n_sections: int = 5) -> list[Chapter]:
    """A manual's chapters: each has sections of two paragraphs, every other one with code."""
    out: list[Chapter] = []
    for c in range(1, n_chapters + 1):
        sections: list[Section] = []
        for s in range(1, n_sections + 1):
            topic = f"{name} part {c}.{s}"
            code = [f"acme {name.lower()} --part {c}.{s} --retries {s + 2}", "acme status"] if s % 2 else None
            sections.append(
                (f"{c}.{s} Configuring {topic}", [paragraph(topic, s), paragraph(topic, s + c)], code)
            )
        out.append((f"Chapter {c}: {name} {c}", sections))
    return out


class _Writer:
    def __init__(self, title: str, generated: str) -> None:
        self.buf = io.BytesIO()
        # invariant=0: a real generator stamps the file with the time it was made
        self.c = Canvas(self.buf, pagesize=A4, invariant=0)
        self.c.setTitle(title)
        self.c.setAuthor("Acme Docs")
        self.title = title
        self.generated = generated
        self.y = _TOP
        self.bookmarks = 0
        self.furniture()

    def furniture(self) -> None:
        c = self.c
        c.setFont("Helvetica", 8)
        c.drawString(_LEFT, _H - 40, f"{self.title} - User manual")
        c.drawString(_LEFT, 30, f"Generated on {self.generated}")
        c.drawRightString(_RIGHT, 30, f"Page {c.getPageNumber()}")

    def new_page(self) -> None:
        self.c.showPage()
        self.furniture()
        self.y = _TOP

    def room(self, height: float) -> None:
        if self.y - height < _BOTTOM:
            self.new_page()

    def heading(self, text: str, level: int) -> None:
        size = 18 if level == 0 else 13
        self.room(size * 3)
        self.bookmarks += 1
        key = f"h{self.bookmarks}"
        self.c.bookmarkPage(key, fit="XYZ", top=self.y + size)
        self.c.addOutlineEntry(text, key, level=level)
        self.c.setFont("Helvetica-Bold", size)
        self.c.drawString(_LEFT, self.y, text)
        self.y -= size * 1.8

    def text(self, text: str, font: str = "Helvetica", size: float = 10) -> None:
        c = self.c
        line = ""
        for word in text.split():
            if line and c.stringWidth(f"{line} {word}", font, size) > _RIGHT - _LEFT:
                self.line(line, font, size)
                line = word
            else:
                line = f"{line} {word}".strip()
        if line:
            self.line(line, font, size)
        self.y -= size

    def line(self, text: str, font: str, size: float) -> None:
        self.room(size * 1.3)
        self.c.setFont(font, size)
        self.c.drawString(_LEFT, self.y, text)
        self.y -= size * 1.3

    def code(self, lines: Sequence[str]) -> None:
        for text in lines:
            self.line(text, "Courier", 9)
        self.y -= 9

    def save(self) -> bytes:
        self.c.showPage()
        self.c.save()
        return self.buf.getvalue()


def manual(
    title: str,
    content: Sequence[Chapter],
    *,
    generated: str = "2026-11-02 09:15 UTC",
    outline: bool = True,
) -> bytes:
    """A PDF manual: a title page (with its generation date), then each chapter on a new page;
    a running header (the title), a footer (the generation date, the page number) on every page."""
    w = _Writer(title, generated)
    w.c.setFont("Helvetica-Bold", 26)
    w.c.drawString(_LEFT, _H - 220, title)
    w.c.setFont("Helvetica", 12)
    w.c.drawString(_LEFT, _H - 250, f"Generated on {generated}")
    for name, sections in content:
        w.new_page()
        if outline:
            w.heading(name, 0)
        else:
            w.line(name, "Helvetica-Bold", 18)
            w.y -= 12
        for heading, paragraphs, code in sections:
            if outline:
                w.heading(heading, 1)
            else:
                w.line(heading, "Helvetica-Bold", 13)
                w.y -= 8
            for p in paragraphs:
                w.text(p)
            if code:
                w.code(code)
    return w.save()


def encrypted(body_text: str, password: str = "s3cret") -> bytes:
    """A one-page PDF that needs a password to open."""
    buf = io.BytesIO()
    c = Canvas(buf, pagesize=A4, encrypt=password)
    c.drawString(_LEFT, _TOP, body_text)
    c.showPage()
    c.save()
    return buf.getvalue()


def bomb(decompressed: int = 100_000_000) -> bytes:
    """A small PDF whose one content stream inflates to *decompressed* bytes (a decompression bomb)."""
    stream = zlib.compress(b"0 0 m " * (decompressed // 6), 9)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Contents 4 0 R >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
    ]
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for i, obj in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % i + obj + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()
