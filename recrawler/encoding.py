"""A body's byte order mark, read the way Python's codecs read it (pure).

w3lib 2.6 follows the WHATWG Encoding Standard, which knows no UTF-32: it reads a UTF-32-LE mark
as a UTF-16-LE one and decodes such a page to garbage. A docs page that carries a UTF-32 mark is
UTF-32 (its bytes say so), so recrawler reads marks itself, the longer ones first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy.http import TextResponse

#: byte order marks, longest first: a UTF-32-LE mark starts with the UTF-16-LE one
_BOMS = (
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\xef\xbb\xbf", "utf-8"),
    (b"\xfe\xff", "utf-16-be"),
    (b"\xff\xfe", "utf-16-le"),
)


def read_bom(body: bytes) -> tuple[str, bytes] | tuple[None, None]:
    """The encoding *body*'s byte order mark names and the mark, or ``(None, None)``."""
    for bom, encoding in _BOMS:
        if body.startswith(bom):
            return encoding, bom
    return None, None


def response_encoding(response: TextResponse) -> str:
    """The encoding a page is read in: its byte order mark's, else the one Scrapy infers
    (``Content-Type``, ``<meta>``, then detection)."""
    return read_bom(response.body)[0] or response.encoding


__all__ = ["read_bom", "response_encoding"]
