"""Docs with several versions and languages side by side: each page's version and language (from
the page, or from a URL pattern) is stored with it and its chunks; search (CLI, Python, LangChain)
and the changes feed return one slice; a default version a bot sees; a version the site stops
serving leaves through the removal path; texts both versions share are embedded once."""

from __future__ import annotations

import html
import json
import sys
from typing import TYPE_CHECKING, Any

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.cli import main as cli_main
from recrawler.exceptions import ConfigurationError
from recrawler.extract import ContentExtractor
from recrawler.facets import FacetPattern, html_facets
from recrawler.kb.reader import open_kb
from tests import docsite, statedb
from tests.embedserver import EmbedServer

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0
VERSIONS, LANGS, TOPICS = ("v1", "v2"), ("en", "fr"), 12
#: topics whose text is the same in both versions (per language)
SHARED = 9
WORDS = {
    "en": "Topic {i} explains how widget {i} retries its uploads after a timeout.",
    "fr": "Le sujet {i} explique comment le widget {i} relance ses envois apres un delai.",
}
CHANGED = {"en": "In {v}, widget {i} retries {n} times.", "fr": "En {v}, le widget {i} relance {n} fois."}
QUERY = {"en": "widget retries uploads", "fr": "widget relance envois"}


def versioned_page(lang: str, version: str, i: int, *, meta: bool = True) -> str:
    text = WORDS[lang].format(i=i)
    if i >= SHARED:
        text += " " + CHANGED[lang].format(v=version, i=i, n=3 if version == "v1" else 5)
    body = docsite.page(f"Topic {i}", [("Overview", [html.escape(text)])])
    body = body.replace('<html lang="en">', f'<html lang="{lang}">')
    if meta:
        body = body.replace(
            '<meta charset="utf-8">',
            f'<meta charset="utf-8">\n<meta name="docsearch:version" content="{version}">',
        )
    return body


def write_site(site: Site, versions: tuple[str, ...] = VERSIONS, *, meta: bool = True) -> str:
    paths = []
    for version in versions:
        for lang in LANGS:
            for i in range(TOPICS):
                path = f"{lang}/{version}/topic{i}.html"
                site.write(path, versioned_page(lang, version, i, meta=meta), mtime=T0)
                paths.append(path)
    return site.write_sitemap(paths)


def slices(urls: list[str], site: Site) -> set[tuple[str, str]]:
    """(lang, version) of each URL."""
    return {tuple(u.removeprefix(site.base_url).split("/")[:2]) for u in urls}  # type: ignore[misc]


def cli_urls(capsys: Any, *argv: str) -> list[str]:
    capsys.readouterr()
    assert cli_main(list(argv)) == 0
    return [json.loads(line)["url"] for line in capsys.readouterr().out.splitlines() if line.strip()]


@pytest.fixture
def embed_server() -> Iterator[EmbedServer]:
    with EmbedServer(dim=16) as server:
        yield server


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A Scrapy project (scrapy.cfg and a settings module) with the given settings, as the working
    directory: what ``open_kb()`` and the retriever read when given no URI."""
    for name in ("SCRAPY_SETTINGS_MODULE", "SCRAPY_PROJECT", "RECRAWLER_DB_URI"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setattr(sys, "path", list(sys.path))
    root = tmp_path / "project"
    root.mkdir()
    module = f"versionsproj_{tmp_path.name.replace('-', '_')}"

    def write(**settings: Any) -> Path:
        # a command run earlier in the test named this checkout's settings module
        monkeypatch.delenv("SCRAPY_SETTINGS_MODULE", raising=False)
        (root / f"{module}.py").write_text("".join(f"{k} = {v!r}\n" for k, v in settings.items()))
        (root / "scrapy.cfg").write_text(f"[settings]\ndefault = {module}\n")
        monkeypatch.chdir(root)
        monkeypatch.delitem(sys.modules, module, raising=False)
        return root

    return write


# --- where a page's version and language come from -------------------------------------------------


def test_a_page_names_its_version_and_language() -> None:
    extractor = ContentExtractor()
    url = "https://d.example.com/fr/2.0/a.html"
    doc = (
        '<html lang="en"><head><meta name="docsearch:version" content="2.0,latest">'
        '<link rel="alternate" hreflang="en" href="/en/2.0/a.html">'
        '<link rel="alternate" hreflang="fr-FR" href="a.html"></head>'
        "<body><main><p>x</p></main></body></html>"
    )
    assert html_facets(extractor.parse(doc), url) == ("2.0", "fr-fr")
    content = extractor.extract(doc, url=url)
    assert (content.version, content.lang) == ("2.0", "fr-fr")
    # DocSearch's language first; else <html lang>
    doc2 = (
        '<html lang="de_DE"><head><meta name="DocSearch:language" content="ja"></head><body>y</body></html>'
    )
    assert html_facets(extractor.parse(doc2), url) == (None, "ja")
    assert html_facets(extractor.parse("<html lang='pt_BR'><body>z</body></html>"), url) == (None, "pt-br")
    assert html_facets(extractor.parse("<html lang='x-default'><body>z</body></html>"), url) == (None, None)


def test_a_url_pattern_names_them_too() -> None:
    pattern = FacetPattern.from_setting(r"/(?P<lang>[a-z]{2})/(?P<version>[^/]+)/")
    assert pattern is not None
    assert pattern.of("https://d.example.com/en/stable/api.html") == ("stable", "en")
    assert pattern.of("https://d.example.com/blog/post.html") == (None, None)
    assert FacetPattern.from_setting(None) is None
    with pytest.raises(ConfigurationError, match=r"RECRAWLER_VERSION_PATTERN: .* names no group"):
        FacetPattern.from_setting(r"/v\d+/")
    with pytest.raises(ConfigurationError, match="RECRAWLER_VERSION_PATTERN: bad pattern"):
        FacetPattern.from_setting("/(?P<version>/")


def test_a_bad_pattern_stops_the_command_in_one_line(capsys: Any, tmp_path: Path) -> None:
    code = cli_main(
        ["-s", "RECRAWLER_VERSION_PATTERN=/v\\d+/", "pages", "--db", f"sqlite:///{tmp_path / 'x.db'}"]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "RECRAWLER_VERSION_PATTERN" in err
    assert err.count("\n") == 1


# --- two versions, two languages ---------------------------------------------------------------------


@pytest.mark.timeout(300)
@deferred_f_from_coro_f
async def test_two_versions_and_two_languages(
    site: Site, crawls: Crawls, embed_server: EmbedServer, capsys: Any, project: Any
) -> None:
    sitemap = write_site(site)
    embedder = {"RECRAWLER_EMBEDDER": "openai:test-model", "RECRAWLER_EMBEDDER_BASE_URL": embed_server.url}
    r1 = await crawls.crawl(sitemap, **embedder)
    assert r1.exit_code == 0, r1.report.get("outcome")
    n_pages = len(VERSIONS) * len(LANGS) * TOPICS
    assert r1.counts["new"] == n_pages
    db = crawls.db_path
    # stored with each page and each of its chunks
    stored = statedb.rows(db, "SELECT url, version, lang FROM pages")
    assert all(u.removeprefix(site.base_url).split("/")[:2] == [lang, v] for u, v, lang in stored)
    chunks = statedb.rows(
        db, "SELECT c.version, c.lang, p.version, p.lang FROM chunks c JOIN pages p USING (key)"
    )
    assert chunks
    assert all(c[:2] == c[2:] for c in chunks)
    # the texts both versions share are embedded once: one embedding per distinct chunk text
    sent = [t for r in embed_server.requests for t in (r.body or {}).get("input", [])]
    distinct = statedb.value(db, "SELECT COUNT(DISTINCT chunk_hash) FROM chunks")
    assert len(sent) == len(set(sent)) == distinct < len(chunks)
    # one chunk a page; the 9 shared topics of each language are one text in both versions
    assert (len(chunks), distinct, len(sent)) == (n_pages, n_pages - SHARED * len(LANGS), 30)

    uri = crawls.db_uri
    base = ["--db", uri, "--base-url", embed_server.url, "--json", "-k", "40"]
    # the CLI: one version and one language
    for lang in LANGS:
        for version in VERSIONS:
            found = cli_urls(capsys, "search", QUERY[lang], *base, "--version", version, "--lang", lang)
            assert found
            assert slices(found, site) == {(lang, version)}
    assert slices(cli_urls(capsys, "search", QUERY["fr"], *base, "--lang", "fr"), site) == {
        ("fr", "v1"),
        ("fr", "v2"),
    }
    # the default version a bot sees, and every version when asked
    default = ["-s", "RECRAWLER_SEARCH_DEFAULT_VERSION=v2"]
    assert {v for _, v in slices(cli_urls(capsys, *default, "search", QUERY["en"], *base), site)} == {"v2"}
    everything = cli_urls(capsys, *default, "search", QUERY["en"], *base, "--version", "*")
    assert {v for _, v in slices(everything, site)} == {"v1", "v2"}

    # Python
    with open_kb(uri, default_version="v2", base_url=embed_server.url) as kb:
        hits = kb.search(QUERY["en"], k=40)
        assert {(h.chunk.lang, h.chunk.version) for h in hits} >= {("en", "v2")}
        assert {h.chunk.version for h in hits} == {"v2"}
        assert slices([h.url for h in kb.search(QUERY["en"], k=40, version="v1", lang="en")], site) == {
            ("en", "v1")
        }
        assert {h.chunk.version for h in kb.search(QUERY["en"], k=40, version="*")} == {"v1", "v2"}
        # and the changes feed
        batch = kb.changes(0, version="v1", lang="fr", limit=1000)
        assert len(batch.changes) == TOPICS
        assert slices([c.url for c in batch.changes], site) == {("fr", "v1")}
    # the project's setting reaches open_kb() and the retriever when they are given no URI
    project(
        RECRAWLER_DB_URI=uri,
        RECRAWLER_SEARCH_DEFAULT_VERSION="v1",
        RECRAWLER_EMBEDDER_BASE_URL=embed_server.url,
    )
    with open_kb(base_url=embed_server.url) as kb:
        assert {h.chunk.version for h in kb.search(QUERY["en"], k=40)} == {"v1"}
    pytest.importorskip("langchain_core")
    from recrawler.integrations.langchain import RecrawlerRetriever

    retriever = RecrawlerRetriever(k=40, embedder_options={"base_url": embed_server.url})
    try:
        assert {d.metadata["version"] for d in retriever.invoke(QUERY["en"])} == {"v1"}
    finally:
        retriever.close()
    retriever = RecrawlerRetriever(
        uri=uri, k=40, version="v2", lang="fr", embedder_options={"base_url": embed_server.url}
    )
    try:
        docs = retriever.invoke(QUERY["fr"])
        assert docs
        assert {(d.metadata["lang"], d.metadata["version"]) for d in docs} == {("fr", "v2")}
    finally:
        retriever.close()
    retriever = RecrawlerRetriever(
        uri=uri, k=40, default_version="v2", embedder_options={"base_url": embed_server.url}
    )
    try:
        assert {d.metadata["version"] for d in retriever.invoke(QUERY["en"])} == {"v2"}
    finally:
        retriever.close()

    # the site stops serving v1: its pages leave through the removal path, within its bounds
    for lang in LANGS:
        for i in range(TOPICS):
            site.remove(f"{lang}/v1/topic{i}.html")
    site.write_sitemap([f"{lang}/v2/topic{i}.html" for lang in LANGS for i in range(TOPICS)])
    r2 = await crawls.crawl(sitemap, **embedder)
    assert r2.exit_code == 0, r2.report.get("outcome")
    assert r2.counts["quarantined"] == n_pages // 2
    assert cli_urls(capsys, "search", QUERY["en"], *base, "--version", "v1") == []
    # (the project here names v1 the default: every version is asked for)
    left = cli_urls(capsys, "search", QUERY["en"], *base, "--version", "*")
    assert {v for _, v in slices(left, site)} == {"v2"}
    r3 = await crawls.crawl(sitemap, **embedder)
    assert r3.counts["gone"] == n_pages // 2


@deferred_f_from_coro_f
async def test_a_url_pattern_labels_stored_pages_without_fetching_them_again(
    site: Site, crawls: Crawls, capsys: Any
) -> None:
    """The pages say nothing of their version; a pattern set after a first crawl names it from the
    URL, on the pages' 304s: their chunks are relabelled, not fetched or embedded again."""
    sitemap = write_site(site, meta=False)
    await crawls.crawl(sitemap)
    assert statedb.rows(crawls.db_path, "SELECT DISTINCT version FROM chunks") == [(None,)]
    pattern = r"/(?P<lang>[a-z]{2})/(?P<version>v\d+)/"
    r2 = await crawls.crawl(sitemap, RECRAWLER_VERSION_PATTERN=pattern)
    assert r2.counts["not_modified"] == len(VERSIONS) * len(LANGS) * TOPICS
    assert r2.counts["changed"] == 0
    assert sorted(statedb.rows(crawls.db_path, "SELECT DISTINCT version, lang FROM chunks")) == [
        ("v1", "en"),
        ("v1", "fr"),
        ("v2", "en"),
        ("v2", "fr"),
    ]
    found = cli_urls(
        capsys, "search", QUERY["en"], "--db", crawls.db_uri, "--json", "--version", "v2", "--lang", "en"
    )
    assert found
    assert slices(found, site) == {("en", "v2")}
    # a bad --lang is one line
    capsys.readouterr()
    assert cli_main(["search", "x", "--db", crawls.db_uri, "--lang", "not a tag"]) == 2
    assert "lang: not a language tag" in capsys.readouterr().err


# --- the migration: schema 17 on both backends -------------------------------------------------------


def test_a_sqlite_schema_16_database_moves_to_versions(tmp_path: Path) -> None:
    """Pages and chunks stored before schema 17 have no version or language: in every slice."""
    from tests.kbfill import fill_sync

    db = tmp_path / "state.db"
    uri = f"sqlite:///{db}"
    fill_sync(uri, {"errors": ["E4711 means the upload was too large."]})
    with statedb.editing(db) as conn:
        # the database as schema 16 left it
        for table in ("pages", "chunks"):
            conn.execute(f"ALTER TABLE {table} DROP COLUMN version")
            conn.execute(f"ALTER TABLE {table} DROP COLUMN lang")
        conn.execute("DELETE FROM schema_version WHERE version = 17")
    fill_sync(uri, {"cli": ["recrawler --dry-run crawls and writes nothing."]})
    assert statedb.value(db, "SELECT COUNT(*) FROM schema_version WHERE version = 17") == 1
    assert statedb.rows(db, "SELECT DISTINCT version, lang FROM chunks") == [(None, None)]
    with open_kb(uri) as kb:
        assert [h.chunk.key for h in kb.search("E4711", k=1, version="2.0", lang="fr")] == [
            "docs.example.com/errors"
        ]


@pytest.mark.postgres
def test_a_postgres_schema_16_database_moves_to_versions(postgres_uri: str) -> None:
    import psycopg

    from tests.kbfill import fill_sync

    fill_sync(postgres_uri, {"errors": ["E4711 means the upload was too large."]})
    with psycopg.connect(postgres_uri, autocommit=True) as conn:
        conn.execute("ALTER TABLE pages DROP COLUMN version, DROP COLUMN lang")
        conn.execute("ALTER TABLE chunks DROP COLUMN version, DROP COLUMN lang")
        conn.execute("DELETE FROM schema_version WHERE version = 17")
    fill_sync(postgres_uri, {"cli": ["recrawler --dry-run crawls and writes nothing."]})
    with psycopg.connect(postgres_uri) as conn:
        assert conn.execute("SELECT COUNT(*) FROM schema_version WHERE version = 17").fetchone() == (1,)
        assert conn.execute("SELECT DISTINCT version, lang FROM chunks").fetchall() == [(None, None)]
    with open_kb(postgres_uri) as kb:
        assert [h.chunk.key for h in kb.search("E4711", k=1, version="2.0", lang="fr")] == [
            "docs.example.com/errors"
        ]
