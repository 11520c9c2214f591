"""Byte order marks are read as their bytes say, whatever w3lib's Encoding Standard reading."""

from __future__ import annotations

import pytest
from scrapy.http import HtmlResponse

from recrawler.encoding import read_bom, response_encoding
from recrawler.extract import ContentExtractor

PAGE = "<html><body><main><p>Stra\u00dfe caf\u00e9 \u20ac</p></main></body></html>"


@pytest.mark.parametrize(
    ("codec", "expected"),
    [
        ("utf-32", "utf-32-le"),
        ("utf-32-be", "utf-32-be"),
        ("utf-16", "utf-16-le"),
        ("utf-16-be", "utf-16-be"),
        ("utf-8-sig", "utf-8"),
    ],
)
def test_a_page_is_read_in_the_encoding_its_byte_order_mark_names(codec: str, expected: str) -> None:
    body = PAGE.encode(codec)
    if codec in ("utf-32-be", "utf-16-be"):
        body = "\ufeff".encode(codec) + body
    response = HtmlResponse("http://127.0.0.1/p.html", body=body)
    encoding = response_encoding(response)
    assert encoding == expected
    assert read_bom(body)[0] == expected
    assert ContentExtractor().extract(body, encoding).text == "Stra\u00dfe caf\u00e9 \u20ac"


def test_a_body_without_a_mark_keeps_scrapys_encoding() -> None:
    body = PAGE.encode("latin-1", "replace")
    response = HtmlResponse(
        "http://127.0.0.1/p.html", body=body, headers={"Content-Type": "text/html; charset=iso-8859-1"}
    )
    assert read_bom(body) == (None, None)
    assert response_encoding(response) == response.encoding
