"""Main content rendered as text: headings, lists, tables, code, whitespace, encodings; the content
fingerprint.
"""

from __future__ import annotations

import hashlib
import unicodedata

import pytest

from recrawler.detect.hashing import content_hash
from recrawler.extract import Content, ContentExtractor
from tests.extraction import doc, text

# --- rendering ------------------------------------------------------------------------------


def test_headings() -> None:
    html = doc("<main><h1>One</h1><h2>Two</h2><h3>Three <code>x</code></h3><h6>Six</h6></main>")
    assert text(html) == "# One\n\n## Two\n\n### Three x\n\n###### Six"


def test_lists() -> None:
    html = doc(
        "<main><ul><li>apple</li><li>pear <b>bold</b></li></ul>"
        "<ol><li>first</li><li>second</li><li>third</li></ol></main>"
    )
    assert text(html) == "- apple\n\n- pear bold\n\n1. first\n\n2. second\n\n3. third"


def test_nested_list_prefixes() -> None:
    html = doc("<main><ul><li>outer<ul><li>inner</li></ul></li></ul></main>")
    outer, inner = text(html).split("\n\n")
    assert outer == "- outer"
    assert inner.endswith("- inner")


def test_tables() -> None:
    html = doc(
        "<main><table><thead><tr><th>Name</th><th>Default</th></tr></thead>"
        "<tbody><tr><td>a</td><td>1</td></tr><tr><td>b  c</td><td>\n2\n</td></tr>"
        "<tr><td></td><td></td></tr></tbody></table></main>"
    )
    assert text(html) == "| Name | Default |\n\n| a | 1 |\n\n| b c | 2 |"


def test_pre_is_a_fenced_block_keeping_indentation() -> None:
    code = "def f():\n    if x:\n        return 1   \n\n    return 2\n"
    html = doc(f"<main><p>Code:</p><pre><code>{code}</code></pre><p>Done.</p></main>")
    assert text(html) == ("Code:\n\n```\ndef f():\n    if x:\n        return 1\n\n    return 2\n```\n\nDone.")


def test_empty_pre_is_skipped() -> None:
    assert text(doc("<main><pre>\n\n</pre><p>x</p></main>")) == "x"


def test_blockquote_and_br() -> None:
    html = doc("<main><blockquote><p>quoted</p></blockquote><p>line one<br>line two</p></main>")
    assert text(html) == "> quoted\n\nline one\n\nline two"


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        # a line break or a block inside a cell separates its words, as a browser shows them
        ("8.2.8-1<br>8.2.2-1", "8.2.8-1 8.2.2-1"),
        ("8.2.8-1<br/>8.2.2-1<br>", "8.2.8-1 8.2.2-1"),
        ("<p>8.2.8-1</p><p>8.2.2-1</p>", "8.2.8-1 8.2.2-1"),
        ("<div>v1.2</div><div>3.4</div>", "v1.2 3.4"),
        ("<ul><li>10</li><li>20</li></ul>", "10 20"),
        # inline markup does not: a word split across elements stays one word
        ("<b>8</b>.2.<i>8</i>-1", "8.2.8-1"),
    ],
)
def test_line_breaks_and_blocks_in_table_cells_are_whitespace(cell: str, expected: str) -> None:
    html = doc(f"<main><table><tr><th>Release</th><td>{cell}</td></tr></table></main>")
    assert text(html) == f"| Release | {expected} |"


def test_line_breaks_in_headings_code_and_links_are_whitespace() -> None:
    html = doc(
        "<main><h2 id='s'>Release<br>notes</h2><p>Run <code>make<br>install</code> or "
        "<a href='/x'>see<br>this</a>.</p><pre>one<br>two</pre></main>"
    )
    content = ContentExtractor().extract(html)
    # in running text a line break ends the line, as before
    assert content.text == "## Release notes\n\nRun make\n\ninstall or see\n\nthis.\n\n```\none\ntwo\n```"
    assert content.headings == ((2, "Release notes", "s"),)
    assert content.code == ("make install", "one\ntwo")
    assert content.links == (("/x", "see this"),)


def test_whitespace_is_collapsed() -> None:
    html = doc("<main><p>  lots \t of\n\n   space\u00a0here  </p>\n\n\n<div>\n</div><p>b</p></main>")
    assert text(html) == "lots of space here\n\nb"


def test_inline_markup_and_comments_flow_into_the_block() -> None:
    html = doc("<main><p>a <em>b</em> <!-- note --> c<a href='#'>d</a>e</p></main>")
    assert text(html) == "a b cde"


def test_nfc_normalisation() -> None:
    composed = doc("<main><p>caf\u00e9 na\u00efve</p></main>")
    decomposed = doc("<main><p>cafe\u0301 nai\u0308ve</p></main>")
    assert composed != decomposed
    assert text(composed) == text(decomposed) == "caf\u00e9 na\u00efve"
    assert unicodedata.is_normalized("NFC", text(decomposed))


def test_title() -> None:
    content = ContentExtractor().extract(doc("<main>x</main>", head="<title>  My\n Page </title>"))
    assert content == Content(title="My Page", text="x")


def test_bytes_with_declared_encoding() -> None:
    html = doc("<main><p>\u00e9t\u00e9 \u20ac</p></main>")
    ex = ContentExtractor()
    assert ex.extract(html.encode("cp1252"), "cp1252").text == "\u00e9t\u00e9 \u20ac"
    assert ex.extract(html.encode("utf-8"), "utf-8").text == "\u00e9t\u00e9 \u20ac"


@pytest.mark.parametrize(
    ("body", "encoding"),
    [
        (b"\xff\xfe" + "<main><p>\u00e9t\u00e9 \u20ac</p></main>".encode("utf-16-le"), "utf-16-le"),
        (b"\xfe\xff" + "<main><p>\u00e9t\u00e9 \u20ac</p></main>".encode("utf-16-be"), "utf-16-be"),
        ("<main><p>\u00e9t\u00e9 \u20ac</p></main>".encode("utf-32"), "utf-32-le"),
        (b"\xef\xbb\xbf" + "<main><p>\u00e9t\u00e9 \u20ac</p></main>".encode(), "utf-8"),
        ("<main><p>\u00e9t\u00e9 \u20ac</p></main>".encode("utf-16"), "utf-16"),
    ],
    ids=["utf-16-le-bom", "utf-16-be-bom", "utf-32-bom", "utf-8-bom", "utf-16"],
)
def test_bytes_with_a_byte_order_mark(body: bytes, encoding: str) -> None:
    """The names Scrapy gives a BOM's encoding (Python's: utf-16-le) are not all libxml2's."""
    assert ContentExtractor().extract(body, encoding).text == "\u00e9t\u00e9 \u20ac"


def test_str_with_xml_declaration() -> None:
    html = "<?xml version='1.0' encoding='utf-8'?>" + doc("<main><p>x</p></main>")
    assert text(html) == "x"


# --- fingerprint ----------------------------------------------------------------------------


def test_content_hash_is_sha256_hex_of_utf8_text() -> None:
    assert content_hash("") == hashlib.sha256(b"").hexdigest()
    assert content_hash("caf\u00e9") == hashlib.sha256("caf\u00e9".encode()).hexdigest()
    digest = content_hash("# Title\n\nText")
    assert len(digest) == 64
    assert set(digest) <= set("0123456789abcdef")
    assert content_hash("a") != content_hash("b")
