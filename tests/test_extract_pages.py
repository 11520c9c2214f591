"""PageBuilder on real Scrapy responses: validators, keys, non-HTML and empty pages, and a hash that
chrome-only changes keep.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from scrapy import Request
from scrapy.http import HtmlResponse, Response, TextResponse
from scrapy.settings import Settings

from recrawler import default_settings
from recrawler.detect.hashing import content_hash
from recrawler.exceptions import ConfigurationError
from recrawler.extract import ContentExtractor
from recrawler.spiders import PageBuilder
from recrawler.urls import KeyMaker
from tests import docsite

if TYPE_CHECKING:
    from lxml.html import HtmlElement


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
