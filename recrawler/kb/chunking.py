"""Heading-aware chunks of rendered text (pure: no Scrapy, no database)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from recrawler.detect.hashing import content_hash
from recrawler.detect.text import FENCE, parse
from recrawler.exceptions import ConfigurationError
from recrawler.state.records import Chunk

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["Chunk", "Chunker"]

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _split_long(block: str, size: int) -> list[str]:
    """Cut a block longer than *size* at sentence ends, then at spaces, never mid-word if avoidable."""
    if len(block) <= size:
        return [block]
    pieces: list[str] = []
    current = ""
    units = block.splitlines() if block.startswith(FENCE) else _SENTENCE_END.split(block)
    joiner = "\n" if block.startswith(FENCE) else " "
    for unit in units:
        while len(unit) > size:
            cut = unit.rfind(" ", 0, size)
            cut = cut if cut > size // 2 else size
            head, unit = unit[:cut], unit[cut:].lstrip()
            if current:
                pieces.append(current)
                current = ""
            pieces.append(head)
        candidate = f"{current}{joiner}{unit}" if current else unit
        if len(candidate) > size and current:
            pieces.append(current)
            current = unit
        else:
            current = candidate
    if current:
        pieces.append(current)
    return pieces


def _tail(text: str, overlap: int) -> str:
    """The last *overlap* characters of *text*, starting at a word boundary."""
    if overlap <= 0 or len(text) <= overlap:
        return "" if overlap <= 0 else text
    tail = text[-overlap:]
    space = tail.find(" ")
    return tail[space + 1 :] if 0 <= space < len(tail) - 1 else tail


class Chunker:
    """Splits a page's text into chunks: a new chunk at every heading, sections longer than
    ``size`` characters packed block by block with ``overlap`` characters carried over.

    Each chunk starts with its section's heading line, carries the heading path (breadcrumb)
    and the URL of the nearest heading anchor (``url#anchor``). A page gives at most
    ``max_chunks`` chunks, its first ones (a 30 MB page would be tens of thousands: each one
    embedded, with a paid embedder each one paid for).
    """

    def __init__(self, size: int = 1200, overlap: int = 150, max_chunks: int = 500) -> None:
        if size < 100:
            msg = f"RECRAWLER_CHUNK_SIZE: must be at least 100 characters, got {size!r}"
            raise ConfigurationError(msg)
        if not 0 <= overlap < size // 2:
            msg = (
                "RECRAWLER_CHUNK_OVERLAP: must be between 0 and half of RECRAWLER_CHUNK_SIZE, "
                f"got {overlap!r}"
            )
            raise ConfigurationError(msg)
        if max_chunks < 1:
            raise ConfigurationError(f"RECRAWLER_CHUNK_MAX_PER_PAGE: must be at least 1, got {max_chunks!r}")
        self.size = size
        self.overlap = overlap
        self.max_chunks = max_chunks

    def chunk(
        self,
        text: str,
        *,
        key: str,
        url: str,
        headings: Sequence[tuple[int, str, str | None]] = (),
    ) -> list[Chunk]:
        """Return the chunks of *text* in order (``chunk_index`` 0, 1, ...)."""
        base_url = url.split("#", 1)[0]
        anchors = list(headings)
        stack: list[tuple[int, str]] = []
        sections: list[tuple[str, str | None, str | None, list[str]]] = []
        heading_line: str | None = None
        anchor: str | None = None
        body: list[str] = []
        next_heading = 0
        for block in parse(text):
            if not block.level:
                body.append(block.text)
                continue
            if heading_line is not None or body:
                sections.append((" > ".join(t for _, t in stack), anchor, heading_line, body))
            level, title = block.level, block.title
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title))
            anchor = None
            # headings come in document order: take the next recorded one if it is this heading
            if next_heading < len(anchors) and anchors[next_heading][1] == title:
                anchor = anchors[next_heading][2]
                next_heading += 1
            heading_line, body = block.text, []
        if heading_line is not None or body:
            sections.append((" > ".join(t for _, t in stack), anchor, heading_line, body))

        # a heading with nothing under it lives on in the next section's breadcrumb
        kept = [sec for sec in sections if sec[3]] or sections[:1]
        chunks: list[Chunk] = []
        for path, section_anchor, line, blocks in kept:
            if len(chunks) >= self.max_chunks:
                break
            section_url = f"{base_url}#{section_anchor}" if section_anchor else base_url
            for piece in self._pack(line, blocks)[: self.max_chunks - len(chunks)]:
                chunks.append(
                    Chunk(
                        key=key,
                        url=section_url,
                        chunk_index=len(chunks),
                        heading=path,
                        text=piece,
                        chunk_hash=content_hash(piece),
                    )
                )
        return chunks

    def _pack(self, heading_line: str | None, blocks: list[str]) -> list[str]:
        prefix = f"{heading_line}\n\n" if heading_line else ""
        room = max(self.size - len(prefix), self.size // 2)
        units = [u for block in blocks for u in _split_long(block, room)]
        if not units:
            return [heading_line] if heading_line else []
        pieces: list[str] = []
        current: list[str] = []
        length = 0
        for unit in units:
            if current and length + len(unit) + 2 > room:
                pieces.append("\n\n".join(current))
                carry = _tail(pieces[-1], self.overlap) if not unit.startswith(FENCE) else ""
                current, length = ([carry] if carry else []), len(carry)
            current.append(unit)
            length += len(unit) + 2
        pieces.append("\n\n".join(current))
        return [prefix + p for p in pieces]
