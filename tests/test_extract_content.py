"""Main-content extraction: which element is the main content, what chrome and noise are dropped,
configuration errors, and hostile input.
"""

from __future__ import annotations

import pytest

from recrawler.exceptions import ConfigurationError
from recrawler.extract import Content, ContentExtractor
from tests import docsite
from tests.extraction import doc, text

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
