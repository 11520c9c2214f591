"""Page-level bounds: a misbehaving page is an error or is cleaned, never corrupt knowledge-base text."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.extract import ContentExtractor, ExtractionError, looks_binary
from tests import docsite

if TYPE_CHECKING:
    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0
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


# --- crawls -----------------------------------------------------------------------------------


def stored(crawls: Crawls) -> dict[str, Any]:
    conn = sqlite3.connect(crawls.db_path)
    try:
        pages = dict(conn.execute("SELECT url, content_hash FROM pages"))
        chunks = sorted(conn.execute("SELECT url, chunk_index, text FROM chunks WHERE retired_run IS NULL"))
    finally:
        conn.close()
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
