"""Page-level bounds: a misbehaving page is an error or is cleaned, never corrupt knowledge-base text."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.cli import terminal_safe
from recrawler.extract import ContentExtractor, ExtractionError, clean_text, looks_binary
from tests import docsite, shell, statedb

if TYPE_CHECKING:
    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0
# C0/C1 controls but tab and newline
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# an ELF executable's start: header, NUL padding, a string table (served as text/html it once made 97 chunks)
ELF = (
    b"\x7fELF\x02\x01\x01\x00" + b"\x00" * 8 + b"\x02\x00>\x00\x01\x00\x00\x00\x40\x10\x40\x00"
    + bytes(range(256)) * 4
    + b"GLIBC_2.34\x00__libc_start_main\x00puts\x00Hello from a binary\x00" * 40
)  # fmt: skip


def nested(depth: int, inner: str = "Deep words.") -> str:
    return "<div>" * depth + f"<p>{inner}</p>" + "</div>" * depth


def page(title: str, text: str, extra: str = "") -> str:
    return docsite.page(title, [("Overview", [text])], extra_main=extra)


# --- unit: the extractor ----------------------------------------------------------------------


def test_nesting_past_the_parser_limit_is_too_deep() -> None:
    html = f"<html><body><main><p>Before.</p>{nested(3000)}<p>After.</p></main></body></html>"
    with pytest.raises(ExtractionError) as info:
        ContentExtractor().extract(html.encode(), "utf-8")
    assert info.value.reason == "too_deep"
    # str input goes through the same check
    with pytest.raises(ExtractionError):
        ContentExtractor().extract(html)


def test_deep_nesting_within_the_limit_is_read_whole() -> None:
    html = f"<html><body><main><p>Before.</p>{nested(1500)}<p>After.</p></main></body></html>"
    text = ContentExtractor().extract(html.encode(), "utf-8").text
    assert text.startswith("Before.")
    assert "Deep words." in text
    assert text.endswith("After.")


def test_main_is_lenient_about_a_page_too_deep() -> None:
    # callers that only compare trees (learning volatile regions, calibrate) get "no content"
    html = f"<html><body><main>{nested(3000)}</main></body></html>"
    assert ContentExtractor().main(html.encode(), "utf-8") == ("", None)


@pytest.mark.parametrize(
    "body",
    [
        ELF,
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x01\x00",
        b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + bytes(range(1, 200)),
        bytes(range(1, 32)) * 20,  # control bytes, but no NUL
    ],
    ids=["elf", "png", "gzip", "controls"],
)
def test_binary_bodies_look_binary(body: bytes) -> None:
    assert looks_binary(body, "utf-8")


@pytest.mark.parametrize(
    ("body", "encoding"),
    [
        (page("T", "Plain text.").encode(), "utf-8"),
        (page("T", "Colour \x1b[31mred\x1b[0m in a terminal capture.").encode(), "utf-8"),
        (page("T", "Ünïcödé text.").encode("utf-16"), "utf-16"),
        (page("T", "Ünïcödé text.").encode("utf-16-le"), "utf-16-le"),
        (page("T", "Latin \xe9t\xe9 text.").encode("cp1252"), "cp1252"),
        (b"", "utf-8"),
    ],
    ids=["utf-8", "ansi-escapes", "utf-16", "utf-16-le", "cp1252", "empty"],
)
def test_text_bodies_do_not_look_binary(body: bytes, encoding: str) -> None:
    assert not looks_binary(body, encoding)


def test_clean_text_drops_escape_sequences_and_controls() -> None:
    assert clean_text("a\x1b]0;pwned\x07b") == "ab"
    assert clean_text("a\x1b]8;;https://x\x1b\\link\x1b]8;;\x1b\\b") == "alinkb"
    assert clean_text("\x1b[31mred\x1b[0m \x9b1mbold") == "red bold"
    assert clean_text("bell\x07 nul\x00 del\x7f c1\x85x") == "bell nul del c1\nx"
    assert clean_text("keep\ttab\nand lines\r\nCRLF\rCR") == "keep\ttab\nand lines\nCRLF\nCR"
    # an OSC that never ends does not swallow the rest of the page
    assert clean_text("a\x1b]0;" + "x" * 1000) == "a0;" + "x" * 1000
    assert clean_text("untouched text") == "untouched text"


def test_extracted_fields_carry_no_control_characters() -> None:
    html = (
        "<html><head><title>Title \x1b]0;pwned\x07here &#27;[2J</title></head><body><main>"
        "<h1 id='h\x1b[1m'>Head\x1b[31ming\x1b[0m</h1>"
        "<p>Some \x1b[31mred\x1b[0m text &#x1b;[1m and a bell\x07 &#x9b;x \x00.</p>"
        "<pre><code>ls \x1b[1m-l\x1b[0m\r\n\tdone</code></pre>"
        "<p>Inline <code>x\x07y</code> and a <a href='/x\x1b'>li\x1b[4mnk</a>.</p>"
        "<table><tr><td>cell\x1b[7m</td></tr></table>"
        "</main></body></html>"
    )
    content = ContentExtractor().extract(html.encode(), "utf-8")
    fields: list[str] = [content.title, content.text, *content.code]
    for level_text_anchor in content.headings:
        fields.extend(str(part) for part in level_text_anchor if part is not None)
    for href_text in content.links:
        fields.extend(href_text)
    assert [f for f in fields if CONTROL.search(f)] == []
    assert content.title == "Title here"
    assert content.headings == ((1, "Heading", "h"),)
    assert "Some red text and a bell" in content.text
    assert "```\nls -l\n\tdone\n```" in content.text
    assert content.links == (("/x", "link"),)


def test_terminal_safe_shows_controls_as_escapes() -> None:
    assert terminal_safe("a\x1b[2Jb\x07c\r\x9bd\te\nf") == "a\\x1b[2Jb\\x07c\\x0d\\x9bd\te\nf"


# --- crawls -----------------------------------------------------------------------------------


def stored(crawls: Crawls) -> dict[str, Any]:
    pages = dict(statedb.rows(crawls.db_path, "SELECT url, content_hash FROM pages"))
    chunks = sorted(
        statedb.rows(crawls.db_path, "SELECT url, chunk_index, text FROM chunks WHERE retired_run IS NULL")
    )
    return {"pages": pages, "chunks": chunks}


@deferred_f_from_coro_f
async def test_too_deep_and_binary_pages_are_errors_and_leave_stored_state(
    site: Site, crawls: Crawls
) -> None:
    site.write("deep.html", page("Deep", "Readable words."), mtime=T0)
    site.write("bin.html", page("Bin", "A download page."), mtime=T0)
    site.write("ok.html", page("Ok", "Fine words."), mtime=T0)
    sitemap = site.write_sitemap(["deep.html", "bin.html", "ok.html"])
    r1 = await crawls.crawl(sitemap)
    assert r1.counts["new"] == 3
    before = stored(crawls)

    # the parser would stop at its depth limit and keep only "Readable words."; a binary is served as HTML
    site.write("deep.html", page("Deep", "Readable words.", nested(3000)), mtime=T0 + 5)
    site.write("bin.html", ELF, mtime=T0 + 5, content_type="text/html")
    site.write("elf.html", ELF, mtime=T0, content_type="text/html; charset=utf-8")
    sitemap = site.write_sitemap(["deep.html", "bin.html", "ok.html", "elf.html"])
    r2 = await crawls.crawl(sitemap)

    assert r2.actions() == {"deep.html": "error", "bin.html": "error", "elf.html": "error"}
    assert {e["reason"] for e in r2.events if e["url"].endswith("deep.html")} == {"too_deep"}
    assert {e["reason"] for e in r2.events if e["url"].endswith(("bin.html", "elf.html"))} == {"not_html"}
    assert r2.stats["recrawler/page/error/too_deep"] == 1
    assert r2.stats["recrawler/page/error/not_html"] == 2
    assert r2.counts["errors"] == 3
    assert r2.counts["unchanged"] == 1
    assert "recrawler/page/changed" not in r2.stats
    assert "recrawler/page/new" not in r2.stats
    # stored state and the knowledge base are as run 1 left them
    assert stored(crawls) == before


@deferred_f_from_coro_f
async def test_utf16_and_utf32_pages_are_read_not_lost_as_empty(site: Site, crawls: Crawls) -> None:
    """A byte order mark names the encoding (Scrapy calls it utf-16-le, a name libxml2 lacks):
    such a page once came out as empty content, an error every run, never in the knowledge base."""
    for name, codec in (
        ("sixteen.html", "utf-16"),
        ("thirtytwo.html", "utf-32"),
        ("eight.html", "utf-8-sig"),
    ):
        site.write(name, page(name, f"Stra\u00dfe caf\u00e9, read as {codec}.").encode(codec), mtime=T0)
    r1 = await crawls.crawl(site.write_sitemap(["sixteen.html", "thirtytwo.html", "eight.html"]))
    assert r1.counts["new"] == 3
    assert r1.counts["errors"] == 0
    texts = "\n".join(text for _, _, text in stored(crawls)["chunks"])
    for codec in ("utf-16", "utf-32", "utf-8-sig"):
        assert f"Stra\u00dfe caf\u00e9, read as {codec}." in texts


def no_controls(text: str) -> bool:
    return CONTROL.search(text) is None


def hostile(version: str) -> str:
    return docsite.page(
        "Evil \x1b]0;pwned\x07title \x1b[31m",
        [
            (
                "Install \x1b[1mnow\x1b[0m",
                [
                    f"Run the \x1b[31minstaller\x1b[0m version {version} \x1b]0;pwned\x07 today\x07.",
                    "Then press <a href='/next'>next \x1b[2J</a> &#27;[2J to go on.",
                ],
                "make \x1b[32minstall\x1b[0m\x08",
            )
        ],
    )


@deferred_f_from_coro_f
async def test_control_characters_never_reach_stored_text_or_the_terminal(site: Site, crawls: Crawls) -> None:
    site.write("evil.html", hostile("1"), mtime=T0)
    sitemap = site.write_sitemap(["evil.html"])
    await crawls.crawl(sitemap)
    site.write("evil.html", hostile("2"), mtime=T0 + 5)
    r2 = await crawls.crawl(sitemap)
    assert r2.actions() == {"evil.html": "changed"}

    dirty = [(t, c, v) for t, c, v in statedb.text_values(crawls.db_path) if not no_controls(v)]
    assert dirty == []
    assert all(no_controls(json.dumps(e, ensure_ascii=False)) for e in r2.events)

    chunks = [
        json.loads(line)
        for line in (await shell.acli_out("chunks", "--db", crawls.db_uri, "--json")).splitlines()
    ]
    assert chunks
    assert all(no_controls(str(value)) for chunk in chunks for value in chunk.values())
    assert "Run the installer version 2 today." in " ".join(c["text"] for c in chunks)
    for argv in (
        ("chunks", "--db", crawls.db_uri),
        ("search", "installer version", "--db", crawls.db_uri),
        ("pages", "--db", crawls.db_uri),
        ("diff", site.url("evil.html"), "--db", crawls.db_uri),
        ("runs", "--db", crawls.db_uri),
    ):
        out = await shell.acli_out(*argv)
        assert out
        assert no_controls(out), argv


@deferred_f_from_coro_f
async def test_cli_escapes_control_characters_held_in_the_database(site: Site, crawls: Crawls) -> None:
    # a database written by an earlier version, or by another tool: the terminal is still safe
    site.write("a.html", page("A", "Version one words."), mtime=T0)
    sitemap = site.write_sitemap(["a.html"])
    await crawls.crawl(sitemap)
    site.write("a.html", page("A", "Version two words."), mtime=T0 + 5)
    await crawls.crawl(sitemap)
    evil = "\x1b]0;pwned\x07\x1b[2J\r"
    with statedb.editing(crawls.db_path) as conn:
        conn.execute("UPDATE pages SET url = url || ?, title = ?", (evil, evil))
        conn.execute(
            "UPDATE chunks SET text = text || ?, heading = heading || ?, url = url || ?", (evil,) * 3
        )
        conn.execute("UPDATE page_changes SET diff = diff || ?, url = url || ?", (evil, evil))
        conn.execute("UPDATE runs SET site = site || ?", (evil,))

    for argv in (
        ("chunks", "--db", crawls.db_uri),
        ("search", "version two words", "--db", crawls.db_uri),
        ("pages", "--db", crawls.db_uri),
        ("diff", site.url("a.html"), "--db", crawls.db_uri),
        ("runs", "--db", crawls.db_uri),
    ):
        out = await shell.acli_out(*argv)
        assert "\\x1b]0;pwned\\x07\\x1b[2J\\x0d" in out, argv
        assert no_controls(out), argv
    # --json output escapes them too (JSON's own \u001b)
    out = await shell.acli_out("chunks", "--db", crawls.db_uri, "--json")
    assert no_controls(out)
    assert evil in json.loads(out.splitlines()[0])["text"]
