"""Page-level bounds: a misbehaving page is an error or is cleaned, never corrupt knowledge-base text."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler import extract
from recrawler.cli import terminal_safe
from recrawler.detect import noise
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


# --- words glued by markup ---------------------------------------------------------------------

N_DOCS = 270
N_WRAPS = 30


def wrap_page(i: int, bump: int = 0) -> str:
    """A package table as mesonbuild's wrapdb lists it: a cell's versions one per line (``<br>``)."""
    rows = "".join(
        f"<tr><td>lib{i}-{r}</td><td>2024072{r}.0-{3 + (bump if r == 0 else 0)}<br>20230802.{r}-2<br>"
        f"20230125.1-5</td><td><p>pkg{r}</p><p>dep{r}</p></td></tr>"
        for r in range(8)
    )
    table = f"<table><tr><th>Project</th><th>Versions</th><th>Provides</th></tr>{rows}</table>"
    return docsite.page(f"Wraps {i}", [("Projects", [f"The wraps of group {i}."])], extra_main=table)


def build_wrap_site(site: Site, mtime: float = T0, **options: Any) -> str:
    for i in range(N_DOCS):
        site.write(f"docs/{i}.html", page(f"Doc {i}", f"Doc {i} explains step {i}."), mtime=mtime, **options)
    for i in range(N_WRAPS):
        site.write(f"wraps/{i}.html", wrap_page(i), mtime=mtime, **options)
    return site.write_sitemap(
        [*(f"docs/{i}.html" for i in range(N_DOCS)), *(f"wraps/{i}.html" for i in range(N_WRAPS))]
    )


@deferred_f_from_coro_f
async def test_line_breaks_in_table_cells_never_invent_numbers(site: Site, crawls: Crawls) -> None:
    """``20240722.0-3<br>20230802.1-2`` once read "20240722.0-320230802.1-2": a version bump in the
    cell was then reported as the number 320230802.1 becoming 420230802.1."""
    sitemap = build_wrap_site(site)
    r1 = await crawls.crawl(sitemap)
    assert r1.counts["new"] == N_DOCS + N_WRAPS

    site.write("wraps/7.html", wrap_page(7, bump=1), mtime=T0 + 60)
    r2 = await crawls.crawl(sitemap)
    assert r2.actions() == {"wraps/7.html": "changed"}
    critical = statedb.rows(crawls.db_path, "SELECT critical FROM page_changes WHERE verdict = 'changed'")
    assert [json.loads(c) for (c,) in critical] == [["number: '3' -> '4'"]]
    out = await shell.acli_out("diff", site.url("wraps/7.html"), "--db", crawls.db_uri)
    assert "+| lib7-0 | 20240720.0-4 20230802.0-2 20230125.1-5 | pkg0 dep0 |" in out
    assert "420230802" not in out
    # what the bot reads: the versions apart, as the page shows them
    chunks = " ".join(text for _, _, text in stored(crawls)["chunks"])
    assert "| lib7-0 | 20240720.0-4 20230802.0-2 20230125.1-5 | pkg0 dep0 |" in chunks
    assert "| lib8-0 | 20240720.0-3 20230802.0-2 20230125.1-5 | pkg0 dep0 |" in chunks


@deferred_f_from_coro_f
async def test_the_run_after_an_upgrade_that_spaces_glued_words_changes_nothing(
    site: Site, crawls: Crawls, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pages stored by a version that glued words (the text format before 2): their text moves in
    whitespace only, so the next run re-baselines them, indexes the new text, and announces nothing."""
    sitemap = build_wrap_site(site)
    # the version before: cells read with their words glued, the format it wrote its noise keys with
    monkeypatch.setattr(extract, "_words", extract._text)
    monkeypatch.setattr(noise, "TEXT_FORMAT", 1)
    r1 = await crawls.crawl(sitemap, RECRAWLER_CPU_PROCESSES=0)
    assert r1.counts["new"] == N_DOCS + N_WRAPS
    assert "20240720.0-320230802.0-2" in " ".join(text for _, _, text in stored(crawls)["chunks"])
    monkeypatch.undo()

    # a deploy after the upgrade: every page answers 200 with the bytes it had (new validators)
    build_wrap_site(site, mtime=T0 + 3600, no304=True)
    r2 = await crawls.crawl(sitemap)
    assert r2.counts["unchanged"] == N_DOCS + N_WRAPS
    assert (r2.counts["new"], r2.counts["changed"], r2.counts["errors"]) == (0, 0, 0)
    assert r2.stats["recrawler/page/unchanged/rebaseline"] == N_WRAPS
    assert r2.actions() == {}
    assert r2.exit_code == 0
    chunks = " ".join(text for _, _, text in stored(crawls)["chunks"])
    assert "| lib7-0 | 20240720.0-3 20230802.0-2 20230125.1-5 | pkg0 dep0 |" in chunks
    assert "320230802" not in chunks

    # and from then on, a real edit is a change with its own numbers
    site.write("wraps/7.html", wrap_page(7, bump=1), mtime=T0 + 7200)
    r3 = await crawls.crawl(sitemap)
    assert r3.actions() == {"wraps/7.html": "changed"}
    assert r3.counts["unchanged"] == N_DOCS + N_WRAPS - 1
