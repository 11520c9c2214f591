"""PDFs a docs site links: read like pages (text, outline headings, chunks, fingerprint, 304s),
with their running headers, footers, page numbers and generation dates out of the verdict, and
a broken, locked, huge or endless PDF one counted error."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import pytest
from scrapy import Request
from scrapy.http import HtmlResponse, Response
from scrapy.settings import Settings
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler import default_settings
from recrawler.detect.noise import SiteNoise, fingerprint
from recrawler.detect.tokens import Normalizer
from recrawler.documents import pdf_limits, sniff
from recrawler.exceptions import ConfigurationError
from recrawler.extract import ContentExtractor, ExtractionError
from recrawler.kb.reader import open_kb
from recrawler.pdf import PdfLimits, read_pdf
from recrawler.spiders import PageBuilder
from recrawler.urls import KeyMaker
from tests import docsite, pdfs, statedb

if TYPE_CHECKING:
    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0
URL = "https://docs.example.com/manuals/agent.pdf"
MANUAL = pdfs.manual("Acme Agent", pdfs.chapters("Upload"))
NOISE = SiteNoise.build("docs.example.com", Normalizer())


def edited(name: str = "Upload", title: str = "Acme Agent") -> bytes:
    """The manual with one word of one paragraph changed ("retries" -> "attempts")."""
    content = pdfs.chapters(name)
    chapter, sections = content[1]
    heading, paragraphs, code = sections[2]
    first = paragraphs[0].replace("It retries a failed part", "It attempts a failed part", 1)
    content[1] = (chapter, [*sections[:2], (heading, [first, *paragraphs[1:]], code), *sections[3:]])
    return pdfs.manual(title, content)


# --- reading one PDF ------------------------------------------------------------------------


def test_outline_entries_become_headings_anchored_at_their_page() -> None:
    content = read_pdf(MANUAL)
    assert content.title == "Acme Agent"
    assert content.headings[:3] == (
        (1, "Chapter 1: Upload 1", "page=2"),
        (2, "1.1 Configuring Upload part 1.1", "page=2"),
        (2, "1.2 Configuring Upload part 1.2", "page=2"),
    )
    assert len(content.headings) == 4 + 4 * 5
    assert content.text.startswith(
        "Acme Agent\n\nGenerated on 2026-11-02 09:15 UTC\n\n# Chapter 1: Upload 1\n\n"
    )
    assert "## 1.1 Configuring Upload part 1.1\n\nThe Upload part 1.1 step 1 runs after" in content.text
    # monospace lines are code blocks, and code
    assert "```\nacme upload --part 1.1 --retries 3\nacme status\n```" in content.text
    assert content.code[0] == "acme upload --part 1.1 --retries 3\nacme status"


def test_running_header_footer_and_page_numbers_are_not_text() -> None:
    text = read_pdf(MANUAL).text
    assert "User manual" not in text  # the running header, on every page
    assert "Page " not in text  # "Page 7" in every footer
    # the generation date: once, on the title page (a volatile token), never per page
    assert text.count("Generated on") == 1


def test_without_an_outline_the_text_is_all_there() -> None:
    content = read_pdf(pdfs.manual("Acme Agent", pdfs.chapters("Upload"), outline=False))
    assert content.headings == ()
    assert content.text.count("Chapter ") == 4
    assert "1.3 Configuring Upload part 1.3" in content.text


def test_a_regenerated_manual_fingerprints_the_same_and_a_one_word_edit_does_not() -> None:
    again = pdfs.manual("Acme Agent", pdfs.chapters("Upload"), generated="2026-12-03 17:40 UTC")
    assert again != MANUAL
    base = fingerprint(read_pdf(MANUAL).text, NOISE).content_hash
    assert fingerprint(read_pdf(again).text, NOISE).content_hash == base
    assert fingerprint(read_pdf(edited()).text, NOISE).content_hash != base


@pytest.mark.parametrize(
    ("body", "limits", "reason"),
    [
        (MANUAL[: len(MANUAL) // 2], PdfLimits(), "pdf_unreadable"),
        (b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<<>>", PdfLimits(), "pdf_unreadable"),
        (pdfs.encrypted("Internal runbook"), PdfLimits(), "pdf_encrypted"),
        (MANUAL, PdfLimits(max_pages=5), "pdf_too_long"),
        (pdfs.manual("Long", pdfs.chapters("Long", 20)), PdfLimits(timeout_secs=0.05), "pdf_timeout"),
    ],
    ids=["truncated", "garbage", "encrypted", "too-long", "timeout"],
)
def test_a_pdf_that_cannot_be_read_is_one_error(body: bytes, limits: PdfLimits, reason: str) -> None:
    started = time.monotonic()
    with pytest.raises(ExtractionError) as info:
        read_pdf(body, limits)
    assert info.value.reason == reason
    assert time.monotonic() - started < 30


def test_a_decompression_bomb_is_bounded() -> None:
    # 100 MB of drawing operators in a 150 KB file: pypdf stops inflating at its limit, and
    # what it read draws no text (an empty_content error for the page)
    started = time.monotonic()
    assert read_pdf(pdfs.bomb(), PdfLimits(timeout_secs=20)).text == ""
    assert time.monotonic() - started < 30


def test_settings_are_checked() -> None:
    settings = Settings({k: getattr(default_settings, k) for k in dir(default_settings) if k.isupper()})
    assert pdf_limits(settings) == PdfLimits(max_pages=2000, timeout_secs=60.0)
    settings.set("RECRAWLER_PDF_ENABLED", False)
    assert pdf_limits(settings) is None
    settings.set("RECRAWLER_PDF_ENABLED", True)
    settings.set("RECRAWLER_PDF_MAX_PAGES", 0)
    with pytest.raises(ConfigurationError, match="RECRAWLER_PDF_MAX_PAGES"):
        pdf_limits(settings)


# --- PageBuilder: a PDF response is a Page ----------------------------------------------------


@pytest.mark.parametrize(
    "content_type", [b"application/pdf", b"application/octet-stream", b"application/pdf; qs=0.9", b""]
)
def test_a_pdf_response_is_a_page(content_type: bytes) -> None:
    builder = PageBuilder(ContentExtractor(), KeyMaker(), pdf=PdfLimits())
    headers = {"Content-Type": content_type, "ETag": '"m1"'} if content_type else {"ETag": '"m1"'}
    page = builder.page(Response(URL, headers=headers, body=MANUAL, request=Request(URL)))
    assert page.error is None
    assert (page.document, page.title, page.etag) == ("pdf", "Acme Agent", '"m1"')
    assert page.text == read_pdf(MANUAL).text
    assert page.headings[0] == (1, "Chapter 1: Upload 1", "page=2")
    # a body served as a PDF that is none is an error of its own; PDFs switched off: not_html
    broken = HtmlResponse(
        URL, headers={"Content-Type": "application/pdf"}, body=b"<p>x</p>", request=Request(URL)
    )
    assert builder.page(broken).error == "pdf_unreadable"
    off = PageBuilder(ContentExtractor(), KeyMaker())
    assert off.page(Response(URL, headers=headers, body=MANUAL, request=Request(URL))).error == "not_html"


@pytest.mark.parametrize(
    ("body", "sniffed"),
    [
        (MANUAL, "pdf"),
        (b"\r\n  %PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj", "pdf"),
        (b"PK\x03\x04\x14\x00\x06\x00word/document.xml", "binary"),
        (b"%!PS-Adobe-3.0\n%%Title: manual\n/Helvetica findfont", "binary"),
        (b"{\\rtf1\\ansi\\deff0 {\\fonttbl}", "binary"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary"),
        (docsite.page("PDF headers", [("Magic", ["A PDF starts with %PDF-1.7."])]).encode(), None),
        (b"<p>%PDF-1.7 is how a PDF starts</p>", None),
        (b"", None),
    ],
    ids=["manual", "pdf-after-blanks", "docx", "postscript", "rtf", "png", "about-pdf", "inline", "empty"],
)
def test_a_body_is_sniffed_by_its_first_bytes(body: bytes, sniffed: str | None) -> None:
    assert sniff(body) == sniffed


@pytest.mark.parametrize("pdf", [PdfLimits(), None], ids=["pdf-on", "pdf-off"])
def test_a_pdf_or_an_archive_served_as_html_is_never_read_as_html(pdf: PdfLimits | None) -> None:
    builder = PageBuilder(ContentExtractor(), KeyMaker(), pdf=pdf)
    headers = {"Content-Type": "text/html; charset=utf-8"}
    as_html = builder.page(HtmlResponse(URL, headers=headers, body=MANUAL, request=Request(URL)))
    if pdf is None:
        assert (as_html.error, as_html.text) == ("not_html", None)
    else:
        assert (as_html.error, as_html.document, as_html.title) == (None, "pdf", "Acme Agent")
        assert "%PDF" not in (as_html.text or "")
    docx = b"PK\x03\x04\x14\x00\x06\x00" + b"word/document.xml <w:t>Hello</w:t> " * 50
    zipped = builder.page(HtmlResponse(URL, headers=headers, body=docx, request=Request(URL)))
    assert zipped.error == "not_html"


# --- a docs site with manuals, recrawled ------------------------------------------------------

N_PAGES = 150
MANUALS = [
    f"manuals/{name}.pdf" for name in ("agent", "server", "cli", "sdk", "admin", "api", "sync", "backup")
]


def build_site(site: Site) -> str:
    for i in range(N_PAGES):
        page = docsite.page(f"Guide {i}", [("Overview", [f"Guide {i} explains step {i} of the setup."])])
        site.write(f"guide/{i}.html", page, mtime=T0)
    for path in MANUALS:
        name = path.split("/")[1].removesuffix(".pdf").title()
        site.write(path, pdfs.manual(f"Acme {name}", pdfs.chapters(name)), mtime=T0)
    # the same manual, from a server that says only "bytes"
    site.write("download/agent-manual", MANUAL, mtime=T0, content_type="application/octet-stream")
    site.write("manuals/broken.pdf", MANUAL[: len(MANUAL) // 3], mtime=T0)
    site.write("manuals/internal.pdf", pdfs.encrypted("Internal runbook"), mtime=T0)
    site.write("manuals/everything.pdf", pdfs.manual("Everything", pdfs.chapters("All", 20)), mtime=T0)
    site.write("manuals/archive.pdf", pdfs.manual("Archive", pdfs.chapters("Old", 60, 8)), mtime=T0)
    listed = [
        *(f"guide/{i}.html" for i in range(N_PAGES)),
        *MANUALS,
        "download/agent-manual",
        "manuals/broken.pdf",
        "manuals/internal.pdf",
        "manuals/everything.pdf",
        "manuals/archive.pdf",
    ]
    return site.write_sitemap(listed)


def pdf_chunks(crawls: Crawls, path: str) -> list[tuple[str, str]]:
    with open_kb(crawls.db_uri, embedder="hashing") as kb:
        return [
            (c.url.split("/", 4)[-1], c.heading) for c in kb.chunks() if c.url.split("#")[0].endswith(path)
        ]


@deferred_f_from_coro_f
async def test_a_site_with_manuals_is_recrawled(site: Site, crawls: Crawls) -> None:
    sitemap = build_site(site)
    # a 41-page manual is over this run's page limit, a 250 KB one over its download limit: one
    # error each, the rest of the run goes on
    limits = {"RECRAWLER_PDF_MAX_PAGES": 30, "DOWNLOAD_MAXSIZE": 100_000}

    r1 = await crawls.crawl(sitemap, **limits)
    pdf_count = len(MANUALS) + 4
    assert {k: r1.counts[k] for k in ("crawled", "new", "changed", "unchanged", "errors")} == {
        "crawled": N_PAGES + pdf_count + 1,
        "new": N_PAGES + len(MANUALS) + 1,
        "changed": 0,
        "unchanged": 0,
        "errors": 4,
    }
    assert r1.stats["recrawler/document/pdf"] == pdf_count
    assert {k: v for k, v in r1.stats.items() if k.startswith("recrawler/page/error/")} == {
        "recrawler/page/error/pdf_unreadable": 1,
        "recrawler/page/error/pdf_encrypted": 1,
        "recrawler/page/error/pdf_too_long": 1,
        "recrawler/page/error/DownloadCancelledError": 1,
    }
    assert r1.exit_code == 0
    # chunked like a page: the title page, then a chunk per section, each cited at its page
    chunks = pdf_chunks(crawls, "manuals/agent.pdf")
    assert len(chunks) == 1 + 4 * 5
    assert chunks[0] == ("manuals/agent.pdf", "")
    assert chunks[1] == (
        "manuals/agent.pdf#page=2",
        "Chapter 1: Agent 1 > 1.1 Configuring Agent part 1.1",
    )
    with open_kb(crawls.db_uri) as kb:
        hit = kb.search("Agent part 3.4 step", k=1)[0]
    assert hit.url.split("#")[0] == site.url("manuals/agent.pdf")
    assert hit.url.split("#")[1].startswith("page=")

    # the agent manual gets a one-word edit; the server manual is regenerated (new date, new
    # bytes, a new ETag); nothing else moves
    site.write("manuals/agent.pdf", edited("Agent", "Acme Agent"), mtime=T0 + 86400)
    regenerated = pdfs.manual("Acme Server", pdfs.chapters("Server"), generated="2026-12-03 17:40 UTC")
    site.write("manuals/server.pdf", regenerated, mtime=T0 + 86400)
    site.clear_requests()
    r2 = await crawls.crawl(sitemap, **limits)
    assert {k: r2.counts[k] for k in ("new", "changed", "unchanged", "errors")} == {
        "new": 0,
        "changed": 1,
        "unchanged": N_PAGES + len(MANUALS),
        "errors": 4,
    }
    errors = {f"manuals/{name}.pdf": "error" for name in ("broken", "internal", "everything", "archive")}
    assert r2.actions() == {"manuals/agent.pdf": "changed", **errors}
    # validators as for HTML: every unchanged file answered 304, the regenerated one by its hash
    assert r2.stats["recrawler/page/unchanged/hash"] == 1
    assert r2.stats["recrawler/conditional/not_modified"] == N_PAGES + len(MANUALS) - 2 + 1
    pdf_requests = [r for r in site.requests() if r["path"].startswith("manuals/") and r["status"] == 304]
    assert len(pdf_requests) == len(MANUALS) - 2
    diff = statedb.value(
        crawls.db_path, "SELECT diff FROM page_changes WHERE key LIKE ? ORDER BY id DESC", ("%agent.pdf",)
    )
    assert "-The Agent part 2.3 step 3 runs after the agent has read acme.toml. It retries" in diff
    assert "+The Agent part 2.3 step 3 runs after the agent has read acme.toml. It attempts" in diff
    assert json.dumps(r2.report["counts"])  # the report is written as for any run


@deferred_f_from_coro_f
async def test_a_pdf_served_as_html_is_read_as_a_pdf_never_as_its_syntax(site: Site, crawls: Crawls) -> None:
    """A server that calls every file text/html: the body says PDF (``%PDF-``), and the body wins.
    It was once indexed as chunks of raw PDF syntax (``%PDF-1.3 ... xref``)."""
    for i in range(N_PAGES):
        page = docsite.page(f"Guide {i}", [("Overview", [f"Guide {i} explains step {i} of the setup."])])
        site.write(f"guide/{i}.html", page, mtime=T0)
    mislabelled = {
        "manuals/agent.pdf": "text/html",
        "manuals/server": "text/html; charset=utf-8",
        "files/cli.html": "text/html; charset=iso-8859-1",
    }
    for path, ctype in mislabelled.items():
        name = path.split("/")[1].split(".")[0].title()
        site.write(path, pdfs.manual(f"Acme {name}", pdfs.chapters(name)), mtime=T0, content_type=ctype)
    listed = [*(f"guide/{i}.html" for i in range(N_PAGES)), *mislabelled]
    sitemap = site.write_sitemap(listed)

    r1 = await crawls.crawl(sitemap)
    assert (r1.counts["new"], r1.counts["errors"]) == (N_PAGES + 3, 0)
    assert r1.stats["recrawler/document/pdf"] == 3
    texts = statedb.rows(crawls.db_path, "SELECT text FROM chunks WHERE retired_run IS NULL")
    assert not [t for (t,) in texts if "%PDF" in t or "endobj" in t or "xref" in t]
    assert pdf_chunks(crawls, "manuals/server")[1] == (
        "manuals/server#page=2",
        "Chapter 1: Server 1 > 1.1 Configuring Server part 1.1",
    )
    with open_kb(crawls.db_uri) as kb:
        hit = kb.search("Cli part 2.3 step", k=1)[0]
    assert hit.url.startswith(site.url("files/cli.html#page="))

    # PDFs switched off: the same bodies are counted errors, never HTML, and stored state stays
    stored = statedb.rows(crawls.db_path, "SELECT key, content_hash FROM pages ORDER BY key")
    for path, ctype in mislabelled.items():
        name = path.split("/")[1].split(".")[0].title()
        body = pdfs.manual(f"Acme {name}", pdfs.chapters(name), generated="2026-12-01 08:00 UTC")
        site.write(path, body, mtime=T0 + 60, content_type=ctype)
    r2 = await crawls.crawl(sitemap, RECRAWLER_PDF_ENABLED=False)
    assert r2.actions() == dict.fromkeys(mislabelled, "error")
    assert r2.stats["recrawler/page/error/not_html"] == 3
    assert (r2.counts["unchanged"], r2.counts["changed"], r2.counts["errors"]) == (N_PAGES, 0, 3)
    assert statedb.rows(crawls.db_path, "SELECT key, content_hash FROM pages ORDER BY key") == stored
    texts = statedb.rows(crawls.db_path, "SELECT text FROM chunks WHERE retired_run IS NULL")
    assert not [t for (t,) in texts if "%PDF" in t or "endobj" in t]
