"""Main-content extraction, the content fingerprint and PageBuilder on real Scrapy responses."""

from __future__ import annotations

import hashlib
import unicodedata
from typing import TYPE_CHECKING

import pytest
from scrapy import Request
from scrapy.http import HtmlResponse, Response, TextResponse
from scrapy.settings import Settings

from recrawler import default_settings
from recrawler.detect.hashing import content_hash
from recrawler.exceptions import ConfigurationError
from recrawler.extract import Content, ContentExtractor
from recrawler.spiders import PageBuilder
from recrawler.urls import KeyMaker
from tests import docsite

if TYPE_CHECKING:
    from lxml.html import HtmlElement


def text(html: str | bytes, **kwargs: list[str]) -> str:
    return ContentExtractor(**kwargs).extract(html).text


def doc(body: str, head: str = "<title>T</title>") -> str:
    return f"<!DOCTYPE html><html><head>{head}</head><body>{body}</body></html>"


# --- main content ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            '<article>A</article><div role="main">R</div><div id="content">C</div><main>M</main>',
            "M",
        ),
        ('<div role="main">R</div><div id="content">C</div><article>A</article>', "A"),
        ('<div id="content">C</div><div role="main">R</div><p>body</p>', "R"),
        ('<p>body</p><div id="content">C</div>', "C"),
        ("<p>just the body</p>", "just the body"),
    ],
)
def test_main_content_priority(body: str, expected: str) -> None:
    assert text(doc(body)) == expected


def test_first_main_wins() -> None:
    assert text(doc("<main>one</main><main>two</main>")) == "one"


def test_custom_selectors() -> None:
    html = doc('<main>M</main><div class="doc-body">D</div>')
    assert text(html, selectors=[".doc-body", "main"]) == "D"
    # no candidate at all: empty text, not the whole page
    assert text(html, selectors=[".absent"]) == ""


@pytest.mark.parametrize(
    "chrome",
    [
        "<script>var tracking = 1;</script>",
        "<style>p { color: red }</style>",
        "<nav><a href='/'>Home</a></nav>",
        "<header><a class='logo' href='/'>Logo</a></header>",
        "<footer>(c) 2026</footer>",
        "<aside>Related articles</aside>",
        "<form><label>Search</label><input name='q'></form>",
        "<noscript>enable js</noscript>",
        "<div hidden>secret</div>",
    ],
)
def test_chrome_is_dropped(chrome: str) -> None:
    assert text(doc(f"<main><p>Before.</p>{chrome}<p>After.</p></main>")) == "Before.\n\nAfter."


def test_noise_keeps_the_tail_text() -> None:
    assert text(doc("<main><p>a <script>x()</script>b</p></main>")) == "a b"


def test_chrome_around_main_never_leaks_in() -> None:
    html = docsite.page("Guide", [("Intro", ["Hello."])])
    assert text(html) == "# Guide\n\n## Intro\n\nHello."


def test_chrome_of_a_body_only_page_is_dropped() -> None:
    html = doc(
        "<header><a href='/'>Logo</a><nav>Menu</nav></header>"
        "<h1>Title</h1><p>Text.</p><aside>Ad</aside><footer>Foot</footer>"
    )
    assert text(html) == "# Title\n\nText."


def test_article_header_with_heading_is_kept() -> None:
    html = doc(
        "<main><article><header><h1>Install</h1><p>Updated today</p></header><p>Run it.</p></article></main>"
    )
    assert text(html) == "# Install\n\nUpdated today\n\nRun it."


def test_several_headers_without_heading_are_all_dropped() -> None:
    html = doc("<main>" + "".join(f"<header><p>h{i}</p></header>" for i in range(4)) + "<p>x</p></main>")
    assert text(html) == "x"


def test_configured_noise_selectors() -> None:
    html = doc(
        '<main><p>Keep.</p><div class="ad">Buy!</div><p id="feedback">Helpful?</p>'
        '<span data-noise="1">n</span></main>'
    )
    noise = [".ad", "#feedback", "[data-noise]"]
    assert text(html, noise_selectors=noise) == "Keep."
    assert "Buy!" in text(html)


def test_noise_selector_matching_main_itself_keeps_main() -> None:
    assert text(doc('<main class="x"><p>Kept.</p></main>'), noise_selectors=[".x"]) == "Kept."


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


# --- configuration --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "setting"),
    [
        ({"selectors": ["main", "div[["]}, "RECRAWLER_CONTENT_SELECTORS"),
        ({"noise_selectors": [".ok", "a:nth-child("]}, "RECRAWLER_CONTENT_NOISE_SELECTORS"),
        ({"selectors": []}, "RECRAWLER_CONTENT_SELECTORS"),
    ],
)
def test_bad_selector_is_a_configuration_error(kwargs: dict[str, list[str]], setting: str) -> None:
    with pytest.raises(ConfigurationError, match=setting):
        ContentExtractor(**kwargs)


def test_bad_selector_error_names_the_selector() -> None:
    with pytest.raises(ConfigurationError, match=r"div\[\["):
        ContentExtractor(["div[["])


# --- hostile input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"   \n\t ",
        "",
        b"<!-- only a comment -->",
        b"<html></html>",
        b"<html><head></head></html>",
    ],
)
def test_empty_documents_give_empty_text(body: bytes | str) -> None:
    assert ContentExtractor().extract(body) == Content(title="", text="")


@pytest.mark.parametrize("encoding", ["x-no-such-encoding", "utf-42"])
def test_unknown_encoding_gives_empty_text(encoding: str) -> None:
    assert ContentExtractor().extract(doc("<main>x</main>").encode(), encoding).text == ""


def test_broken_bytes_do_not_raise() -> None:
    body = b"<html><body><main><p>ok \xff\xfe\x80 still ok</p></main></body></html>"
    result = ContentExtractor().extract(body, "utf-8").text
    assert result.startswith("ok ")
    assert result.endswith(" still ok")


@pytest.mark.parametrize(
    "body",
    [b"\x00\x00\x00\x00", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", b"\x1f\x8b\x08\x00\xff\xfe"],
)
def test_binary_garbage_does_not_raise_and_never_yields_nul(body: bytes) -> None:
    assert "\x00" not in ContentExtractor().extract(body).text


def test_huge_page() -> None:
    para = "<p>" + "word " * 200 + "</p>\n"
    paras = 5_000_000 // len(para) + 1
    html = doc("<main><h1>Big</h1>" + para * paras + "<p>The end.</p></main>").encode()
    assert len(html) > 5_000_000
    result = ContentExtractor().extract(html).text
    assert result.startswith("# Big\n\nword word")
    assert result.endswith("\n\nThe end.")
    assert result.count("\n\n") == paras + 1


def test_huge_text_node() -> None:
    html = doc("<main><pre>" + "x" * 5_000_000 + "</pre><p>tail</p></main>").encode()
    result = ContentExtractor().extract(html).text
    assert len(result) == 5_000_000 + len("```\n\n```\n\ntail")
    assert result.endswith("tail")


def test_deeply_nested_markup_is_not_truncated() -> None:
    # e.g. a generator that never closes a <span>: 300 open elements, one per line
    lines = "".join(f"<span>line {i}\n" for i in range(300))
    result = text(doc(f"<main><h1>T</h1>{lines}</main>"))
    assert "line 299" in result


def test_huge_inline_script_before_main() -> None:
    script = "<script>" + "var a = 1;" * 1_100_000 + "</script>"
    assert text(doc("<main><p>Real content.</p></main>", head=f"<title>T</title>{script}")) == (
        "Real content."
    )


# --- fingerprint ----------------------------------------------------------------------------


def test_content_hash_is_sha256_hex_of_utf8_text() -> None:
    assert content_hash("") == hashlib.sha256(b"").hexdigest()
    assert content_hash("caf\u00e9") == hashlib.sha256("caf\u00e9".encode()).hexdigest()
    digest = content_hash("# Title\n\nText")
    assert len(digest) == 64
    assert set(digest) <= set("0123456789abcdef")
    assert content_hash("a") != content_hash("b")


# --- PageBuilder ----------------------------------------------------------------------------

URL = "https://www.example.com/docs/intro/?utm_source=news#top"
KEY = "example.com/docs/intro"
ETAG = 'W/"5f3c-abc"'
LAST_MODIFIED = "Thu, 01 Jan 2026 00:00:00 GMT"


class CountingExtractor(ContentExtractor):
    """Counts parses, to prove that a 304 is never parsed."""

    def __init__(self) -> None:
        super().__init__()
        self.parsed = 0

    def parse(self, body: bytes | str, encoding: str | None = None) -> HtmlElement | None:
        self.parsed += 1
        return super().parse(body, encoding)


@pytest.fixture
def extractor() -> CountingExtractor:
    return CountingExtractor()


@pytest.fixture
def builder(extractor: CountingExtractor) -> PageBuilder:
    return PageBuilder(extractor, KeyMaker())


def html_response(
    body: str | bytes, status: int = 200, url: str = URL, **headers: str | bytes
) -> HtmlResponse:
    """An HtmlResponse tied to its request; header names are given with ``_`` for ``-``."""
    named = {"Content-Type": "text/html; charset=utf-8"}
    named.update({k.replace("_", "-"): v for k, v in headers.items()})
    raw = body.encode() if isinstance(body, str) else body
    return HtmlResponse(url, status=status, headers=named, body=raw, request=Request(url))


PAGE = docsite.page("Intro", [("Install", ["Run <code>pip install x</code>."], "pip install x")])


def test_200_html_page(builder: PageBuilder) -> None:
    page = builder.page(html_response(PAGE, ETag=ETAG, Last_Modified=LAST_MODIFIED), lastmod="2026-01-01")
    # stored and cited without the tracking parameters (and the fragment) its key drops
    assert (page.url, page.key, page.http_status) == ("https://www.example.com/docs/intro/", KEY, 200)
    assert page.title == "Intro | Example Docs"
    assert page.text == "# Intro\n\n## Install\n\nRun pip install x.\n\n```\npip install x\n```"
    assert page.content_hash == content_hash(page.text)
    assert (page.etag, page.last_modified, page.lastmod) == (ETAG, LAST_MODIFIED, "2026-01-01")
    assert page.error is None
    assert page.status is None


def test_validators_are_copied_byte_for_byte(builder: PageBuilder) -> None:
    etag = b'W/"\xe9t\xe9 \\x"'
    page = builder.page(html_response(PAGE, ETag=etag, Last_Modified=b"Thu,  1 Jan 2026 0:0:0 GMT"))
    assert page.etag is not None
    assert page.etag.encode("latin-1") == etag
    assert page.last_modified == "Thu,  1 Jan 2026 0:0:0 GMT"


def test_no_validators(builder: PageBuilder) -> None:
    page = builder.page(html_response(PAGE))
    assert page.etag is None
    assert page.last_modified is None


def test_304_is_not_parsed(builder: PageBuilder, extractor: CountingExtractor) -> None:
    page = builder.page(html_response(b"", status=304, ETag=ETAG))
    assert extractor.parsed == 0
    assert (page.http_status, page.key, page.etag) == (304, KEY, ETAG)
    assert page.text is None
    assert page.content_hash is None
    assert page.title is None
    assert page.error is None
    builder.page(html_response(PAGE))
    assert extractor.parsed == 1


def test_recrawler_key_meta_and_redirects_decide_the_key(builder: PageBuilder) -> None:
    request = Request("https://example.com/new", meta={"recrawler_key": "example.com/custom"})
    response = HtmlResponse("https://example.com/new", body=PAGE.encode(), request=request)
    assert builder.page(response).key == "example.com/custom"
    request = Request("https://example.com/new", meta={"redirect_urls": ["https://example.com/old/"]})
    response = HtmlResponse("https://example.com/new", body=PAGE.encode(), request=request)
    page = builder.page(response)
    assert (page.key, page.url) == ("example.com/old", "https://example.com/new")


@pytest.mark.parametrize(
    "response",
    [
        Response(
            URL,
            headers={"Content-Type": "application/pdf"},
            body=b"%PDF-1.7\n%\xe2\xe3",
            request=Request(URL),
        ),
        Response(URL, body=b"\x89PNG\r\n\x1a\n\x00\x00", request=Request(URL)),
        html_response(b"%PDF-1.7\n<p>looks like html</p>", Content_Type="application/pdf"),
        TextResponse(URL, headers={"Content-Type": "text/plain"}, body=b"<p>x</p>", request=Request(URL)),
    ],
    ids=["pdf", "binary", "html-class-pdf-type", "text-plain"],
)
def test_non_html_is_an_error(builder: PageBuilder, extractor: CountingExtractor, response: Response) -> None:
    page = builder.page(response)
    assert page.error == "not_html"
    assert page.text is None
    assert page.content_hash is None
    assert extractor.parsed == 0


def test_xhtml_is_html(builder: PageBuilder) -> None:
    page = builder.page(html_response(PAGE, Content_Type="application/xhtml+xml; charset=utf-8"))
    assert page.error is None
    assert page.text is not None


@pytest.mark.parametrize(
    "body",
    [
        "<html><body><main>  \n </main><p>outside</p></body></html>",
        "<html><body><main><nav>Menu</nav><script>x()</script></main></body></html>",
        "",
    ],
)
def test_empty_main_content_is_an_error(builder: PageBuilder, body: str) -> None:
    page = builder.page(html_response(body, ETag=ETAG))
    assert page.error == "empty_content"
    assert page.text is None
    assert page.content_hash is None
    assert page.etag == ETAG  # validators are still reported


def test_chrome_only_changes_keep_the_hash(builder: PageBuilder) -> None:
    sections = [("Overview", ["Stable text."], "tool --run")]
    base = builder.page(html_response(docsite.page("A", sections)))
    noisy = docsite.page("A", sections, chrome_noise=True)
    noisy = (
        noisy.replace("{{NOW}}", "2026-05-01")
        .replace("{{TOKEN}}", "abc")
        .replace("{{WIDGET}}", "<div><h3>Related</h3></div>")
    )
    noisy = noisy.replace("<title>A", "<title>Renamed A").replace(
        "<head>", '<head><meta name="build" content="42"><script>var v = 2;</script>'
    )
    other = builder.page(html_response(noisy))
    assert base.content_hash is not None
    assert other.content_hash == base.content_hash
    assert other.title != base.title
    edited = builder.page(html_response(docsite.page("A", [("Overview", ["New text."], "tool --run")])))
    assert edited.content_hash != base.content_hash


def test_from_settings_reads_the_content_settings() -> None:
    settings = Settings()
    settings.setmodule(default_settings, priority="default")
    settings.set("RECRAWLER_CONTENT_NOISE_SELECTORS", [".ad"])
    settings.set("RECRAWLER_URL_KEEP_PARAMS", ["v"])
    pb = PageBuilder.from_settings(settings)
    page = pb.page(
        html_response('<main><p>x</p><p class="ad">ad</p></main>', url="https://example.com/a?v=2&b=1")
    )
    assert (page.text, page.key) == ("x", "example.com/a?v=2")
    settings.set("RECRAWLER_CONTENT_SELECTORS", ["main", ">>"])
    with pytest.raises(ConfigurationError, match="RECRAWLER_CONTENT_SELECTORS"):
        PageBuilder.from_settings(settings)
