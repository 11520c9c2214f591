"""The rendered-text format of extraction: blocks, headings, fenced code and list markers.

The one reader of that format: hashing, chunking and the critical-token guard all read text through it.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

FENCE = "```"
#: the version of the format: raised when extraction renders the same HTML to other text (2: a line
#: break or a block boundary inside a table cell, heading or link is a space, never glue). It is part
#: of every site's noise key, so the first run after an upgrade re-baselines a page whose text moved
#: in whitespace only, instead of reporting it changed
TEXT_FORMAT = 2
# a heading is a block of one line: 1 to 6 "#", spaces or tabs, then its text
_HEADING = re.compile(r"(#{1,6})[ \t]+(.+)")
# a fenced block: an opening fence line (an info string allowed), the code, a closing fence line
_CODE = re.compile(r"```[^\n]*\n(?:(.*)\n)?```[ \t]*", re.DOTALL)
# list item and quote markers at the start of a line: "- ", "1. ", "2) ", "> ", nested ones too
_MARKER = re.compile(r"^(?:(?:[-*+>]|\d{1,3}[.)])[ \t]+)+")
_SENTENCE_END = re.compile(r"[.!?\u2026]+[\"'\u201d\u2019)\]]*\s+(?=[^\sa-z])")
_ABBREVIATIONS = frozenset(
    {"e.g", "i.e", "etc", "vs", "cf", "approx", "dr", "mr", "mrs", "ms", "fig", "eq", "incl", "al", "resp"}
)


@dataclass(frozen=True, slots=True)
class Block:
    """One block of rendered text: a heading, a fenced code block or text (lines, list items, rows)."""

    text: str
    #: the heading's level (1 to 6), 0 for any other block
    level: int = 0
    #: the heading's text (whitespace collapsed, NFC), "" for any other block
    title: str = ""
    #: the code between the fence lines of a code block, None for any other block
    code: str | None = None


def clean(text: str) -> str:
    """NFC with every whitespace run collapsed to one space and none at either end."""
    return " ".join(unicodedata.normalize("NFC", text).split())


def clean_code(code: str) -> str:
    """NFC code with trailing spaces and leading or trailing blank lines removed."""
    lines = [line.rstrip() for line in unicodedata.normalize("NFC", code).splitlines()]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def unmarked(line: str) -> str:
    """*line* without its list item or quote markers."""
    return _MARKER.sub("", line)


def blocks(text: str) -> list[str]:
    """Split rendered text into blocks, keeping fenced code blocks (which may hold blank lines) whole.

    The page hash is made of these blocks: changing how text splits changes every stored hash.
    """
    out: list[str] = []
    fence: list[str] | None = None
    for part in text.split("\n\n"):
        if fence is not None:
            fence.append(part)
            if part.rstrip().endswith(FENCE):
                out.append("\n\n".join(fence))
                fence = None
            continue
        if part.startswith(FENCE) and (part.count(FENCE) % 2 == 1):
            fence = [part]
            continue
        if part.strip():
            out.append(part)
    if fence is not None:
        out.append("\n\n".join(fence))
    return out


def heading(block: str) -> tuple[int, str] | None:
    """(level, text) when *block* is a heading: one line of 1 to 6 ``#``, spaces or tabs, then text."""
    lines = block.strip().splitlines()
    if len(lines) != 1:
        return None
    m = _HEADING.fullmatch(lines[0])
    title = clean(m.group(2)) if m else ""
    return (len(m.group(1)), title) if m and title else None


def code(block: str) -> str | None:
    """The code of a fenced code block (between its fence lines), or None for any other block."""
    if not block.startswith(FENCE):
        return None
    m = _CODE.fullmatch(block)
    return None if m is None else m.group(1) or ""


def parse(text: str) -> list[Block]:
    """The blocks of *text* (see :func:`blocks`), each read as a heading, code or text."""
    out: list[Block] = []
    for block in blocks(text):
        body = code(block)
        if body is not None:
            out.append(Block(block, code=body))
            continue
        found = heading(block)
        out.append(Block(block) if found is None else Block(block, level=found[0], title=found[1]))
    return out


def headings(text: str) -> list[tuple[int, str]]:
    """The (level, text) headings of *text* in order."""
    return [(b.level, b.title) for b in parse(text) if b.level]


@dataclass(frozen=True, slots=True)
class Unit:
    """One sentence (or table row) of rendered text."""

    text: str
    #: the line (block, list item, table row) it comes from
    line: int


def sentences(line: str) -> list[str]:
    """The sentences of one cleaned line; an abbreviation or an initial ends none."""
    out: list[str] = []
    start = 0
    for m in _SENTENCE_END.finditer(line):
        before = line[start : m.start()].rsplit(None, 1)
        last = before[-1].lstrip("([\"'").lower() if before else ""
        # an abbreviation or an initial ("e.g. Foo", "J. Smith") does not end a sentence
        if last in _ABBREVIATIONS or (len(last) == 1 and last.isalpha()):
            continue
        out.append(line[start : m.end()].strip())
        start = m.end()
    rest = line[start:].strip()
    if rest:
        out.append(rest)
    return out


def units(text: str) -> tuple[list[Unit], list[str], list[str]]:
    """Split rendered text into sentence units, heading texts and (cleaned, non-empty) code blocks."""
    found: list[Unit] = []
    titles: list[str] = []
    code_blocks: list[str] = []
    n = 0
    for block in parse(text):
        if block.code is not None:
            code_blocks.append(clean_code(block.code))
            continue
        if block.level:
            n += 1
            titles.append(block.title)
            continue
        for raw in block.text.splitlines():
            line = raw.strip()
            if not line:
                continue
            n += 1
            line = clean(unmarked(line))
            if not line:
                continue
            if line.startswith("|"):
                found.append(Unit(line, n))
            else:
                found.extend(Unit(s, n) for s in sentences(line))
    return found, titles, [c for c in code_blocks if c]


def merge_code(code: Sequence[str], code_blocks: Sequence[str]) -> list[str]:
    """Code spans (cleaned) plus the fenced blocks of the text that they do not hold yet."""
    spans = [c for c in (clean_code(s) for s in code) if c]
    have = Counter(spans)
    for block in code_blocks:
        if have[block] > 0:
            have[block] -= 1
        else:
            spans.append(block)
    return spans


__all__ = [
    "FENCE",
    "Block",
    "Unit",
    "blocks",
    "clean",
    "clean_code",
    "code",
    "heading",
    "headings",
    "merge_code",
    "parse",
    "sentences",
    "units",
    "unmarked",
]
