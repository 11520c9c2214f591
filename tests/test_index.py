"""The knowledge base over a changing local site: chunk swaps, embedding only what is new,
whole-run publication, the spike hold, quarantine and gone, dry runs and crash safety."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.kb.reader import open_kb
from tests import docsite, shell, statedb
from tests.embedserver import EmbedServer, Reply

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

REPO = Path(__file__).resolve().parent.parent
T0 = 1_760_000_000.0


def sections_page(title: str, n: int, *, word: str = "alpha", extra: str = "") -> str:
    """A page whose main content has n h2 sections (one chunk each)."""
    return docsite.page(
        title,
        [
            (f"Section {i}", [f"Section {i} of {title} explains the {word} setting in detail. {extra}"])
            for i in range(n)
        ],
    )


def chunk_texts(crawls: Crawls) -> list[tuple[str, int, str]]:
    with open_kb(crawls.db_uri, embedder="hashing") as kb:
        return [(c.url, c.chunk_index, c.text) for c in kb.chunks()]


def search_urls(crawls: Crawls, query: str, k: int = 3) -> list[str]:
    # cosine above 0.2: vector mode (a fused score ranks, it does not measure similarity), the
    # floor these short pages' questions need (the hashing embedder's own, 0.40, is for real pages)
    with open_kb(crawls.db_uri, min_similarity=0.2) as kb:
        return [h.url for h in kb.search(query, k=k, mode="vector")]


@pytest.fixture
def embed_server() -> Iterator[EmbedServer]:
    with EmbedServer(dim=16) as server:
        yield server


def embedded_inputs(server: EmbedServer) -> list[str]:
    return [text for r in server.requests for text in r.body["input"]]


def remote(server: EmbedServer) -> dict[str, Any]:
    return {"RECRAWLER_EMBEDDER": "openai:test-model", "RECRAWLER_EMBEDDER_BASE_URL": server.url}


@deferred_f_from_coro_f
async def test_chunk_swap_leaves_exactly_the_new_version(site: Site, crawls: Crawls) -> None:
    site.write("a.html", sections_page("A", 10), mtime=T0)
    site.write("b.html", sections_page("B", 2), mtime=T0)
    sitemap = site.write_sitemap(["a.html", "b.html"])
    r1 = await crawls.crawl(sitemap)
    assert r1.report["index"]["state"] == "published"
    chunks = chunk_texts(crawls)
    assert [i for url, i, _ in chunks if "/a.html" in url] == list(range(10))

    # 10 sections become 7: exactly 7 chunks remain, no stale one
    site.write("a.html", sections_page("A", 7, word="beta"), mtime=T0 + 10)
    r2 = await crawls.crawl(sitemap)
    assert r2.report["index"]["chunks_added"] == 7
    after = chunk_texts(crawls)
    a_chunks = [(i, t) for url, i, t in after if "/a.html" in url]
    assert [i for i, _ in a_chunks] == list(range(7))
    assert all("beta" in t and "alpha" not in t for _, t in a_chunks)
    assert [c for c in after if "/b.html" in c[0]] == [c for c in chunks if "/b.html" in c[0]]
    # retired rows were garbage-collected once the run published
    rows = statedb.value(crawls.db_path, "SELECT COUNT(*) FROM chunks")
    assert rows == 9


@deferred_f_from_coro_f
async def test_only_new_chunk_texts_are_embedded(
    site: Site, crawls: Crawls, embed_server: EmbedServer
) -> None:
    for name in ("a", "b", "c"):
        site.write(f"{name}.html", sections_page(name.upper(), 4), mtime=T0)
    sitemap = site.write_sitemap(["a.html", "b.html", "c.html"])
    await crawls.crawl(sitemap, **remote(embed_server))
    first = embedded_inputs(embed_server)
    assert len(first) == len(set(first)) == 12

    # one sentence of one section changes: exactly that chunk's text is embedded
    embed_server.requests.clear()
    site.write(
        "b.html",
        sections_page("B", 4).replace("Section 2 of B explains", "Section 2 of B now explains"),
        mtime=T0 + 5,
    )
    r2 = await crawls.crawl(sitemap, **remote(embed_server))
    sent = embedded_inputs(embed_server)
    new_texts = [t for url, _, t in chunk_texts(crawls) if "/b.html" in url and "now explains" in t]
    assert sent == new_texts
    assert r2.report["index"]["texts_embedded"] == 1
    assert r2.report["index"]["embed_cache_hits"] == 3  # the other three chunks of b.html

    # the page moves back to its earlier version: nothing is embedded
    embed_server.requests.clear()
    site.write("b.html", sections_page("B", 4), mtime=T0 + 9)
    r3 = await crawls.crawl(sitemap, **remote(embed_server))
    assert r3.counts["changed"] == 1
    assert embedded_inputs(embed_server) == []


@deferred_f_from_coro_f
async def test_search_follows_the_published_version(site: Site, crawls: Crawls) -> None:
    site.write(
        "cfg.html",
        docsite.page("Config", [("Retries", ["Set max_retries to retry failed uploads."])]),
        mtime=T0,
    )
    site.write(
        "faq.html", docsite.page("FAQ", [("Offline", ["Changes are queued while offline."])]), mtime=T0
    )
    sitemap = site.write_sitemap(["cfg.html", "faq.html"])
    await crawls.crawl(sitemap)
    assert search_urls(crawls, "max_retries failed uploads")[0].endswith("cfg.html#retries")

    site.write(
        "cfg.html",
        docsite.page("Config", [("Retries", ["Set retry_limit to retry failed transfers."])]),
        mtime=T0 + 5,
    )
    await crawls.crawl(sitemap)
    assert search_urls(crawls, "retry_limit transfers")[0].endswith("cfg.html#retries")
    assert search_urls(crawls, "max_retries") == []
    # the CLI reads the same published run
    out = await shell.acli_out("search", "retry_limit transfers", "--db", crawls.db_uri, "-k", "1", "--json")
    assert '"heading": "Config > Retries"' in out


@deferred_f_from_coro_f
async def test_spike_holds_the_run_until_approved(
    site: Site, crawls: Crawls, embed_server: EmbedServer
) -> None:
    pages = [f"p{i}.html" for i in range(12)]
    for p in pages:
        site.write(p, sections_page(p, 2), mtime=T0)
    sitemap = site.write_sitemap(pages)
    r1 = await crawls.crawl(sitemap, **remote(embed_server))
    assert r1.report["index"]["state"] == "published"  # a first run is never held

    # a template change rewrites 11 of 12 pages: the run is held, nothing is paid for
    embed_server.requests.clear()
    for p in pages[:11]:
        site.write(p, sections_page(p, 2, extra="Rendered by the new template."), mtime=T0 + 5)
    r2 = await crawls.crawl(sitemap, **remote(embed_server))
    assert r2.report["index"]["state"] == "held"
    assert r2.report["alert"]
    assert r2.stats["recrawler/run/held"] == 1
    assert embedded_inputs(embed_server) == []
    assert not any("new template" in t for _, _, t in chunk_texts(crawls))

    # approve: embeds exactly the held run's new texts and publishes it
    out = await shell.acli_out("runs", "approve", str(r2.report["run_id"]), "--db", crawls.db_uri)
    assert "approved and published" in out
    assert len(embedded_inputs(embed_server)) == 22
    assert sum("new template" in t for _, _, t in chunk_texts(crawls)) == 22


@deferred_f_from_coro_f
async def test_discarded_run_is_checked_again(site: Site, crawls: Crawls) -> None:
    pages = [f"p{i}.html" for i in range(12)]
    for p in pages:
        site.write(p, sections_page(p, 1), mtime=T0)
    sitemap = site.write_sitemap(pages)
    await crawls.crawl(sitemap)
    before = chunk_texts(crawls)
    for p in pages:
        site.write(p, sections_page(p, 1, extra="Template noise."), mtime=T0 + 5)
    r2 = await crawls.crawl(sitemap)
    assert r2.report["index"]["state"] == "held"
    out = await shell.acli_out("runs", "discard", str(r2.report["run_id"]), "--db", crawls.db_uri)
    assert "12 pages back as published (checked again next run)" in out
    assert chunk_texts(crawls) == before
    # the next run sees the pages as changed again (and, still a spike, holds again)
    r3 = await crawls.crawl(sitemap, RECRAWLER_CHANGE_ALERT_RATIO=1.0)
    assert r3.counts["changed"] == 12
    assert r3.report["index"]["state"] == "published"
    assert all("Template noise" in t for _, _, t in chunk_texts(crawls))


@deferred_f_from_coro_f
async def test_quarantine_hides_and_restore_reuses_embeddings(
    site: Site, crawls: Crawls, embed_server: EmbedServer
) -> None:
    site.write("a.html", sections_page("A", 3), mtime=T0)
    site.write("b.html", sections_page("B", 2), mtime=T0)
    sitemap = site.write_sitemap(["a.html", "b.html"])
    await crawls.crawl(sitemap, **remote(embed_server))
    site.remove("b.html")
    r2 = await crawls.crawl(sitemap, **remote(embed_server))
    assert r2.counts["quarantined"] == 1
    assert [u for u, _, _ in chunk_texts(crawls) if "/b.html" in u] == []

    embed_server.requests.clear()
    site.write("b.html", sections_page("B", 2), mtime=T0)
    r3 = await crawls.crawl(sitemap, **remote(embed_server))
    assert r3.counts["restored"] == 1
    assert len([u for u, _, _ in chunk_texts(crawls) if "/b.html" in u]) == 2
    assert embedded_inputs(embed_server) == []  # restored without re-embedding

    # gone: chunks are deleted; their embeddings stay in the cache (vectors, no text)
    site.remove("b.html", gone=True)
    r4 = await crawls.crawl(sitemap, **remote(embed_server))
    assert r4.counts["gone"] == 1
    assert statedb.value(crawls.db_path, "SELECT COUNT(*) FROM chunks WHERE key LIKE '%/b.html'") == 0
    assert statedb.value(crawls.db_path, "SELECT COUNT(*) FROM embeddings") == 5

    # back with the content it had: restored, re-chunked, nothing embedded
    site.write("b.html", sections_page("B", 2), mtime=T0)
    r5 = await crawls.crawl(sitemap, **remote(embed_server))
    assert (r5.counts["new"], r5.counts["restored"]) == (0, 1)
    assert len([u for u, _, _ in chunk_texts(crawls) if "/b.html" in u]) == 2
    assert embedded_inputs(embed_server) == []


@deferred_f_from_coro_f
async def test_dry_run_writes_nothing(site: Site, crawls: Crawls) -> None:
    site.write("a.html", sections_page("A", 3), mtime=T0)
    sitemap = site.write_sitemap(["a.html"])
    await crawls.crawl(sitemap)
    digest = hashlib.sha256(crawls.db_path.read_bytes()).hexdigest()
    site.write("a.html", sections_page("A", 4, word="gamma"), mtime=T0 + 5)
    site.write("new.html", sections_page("N", 2), mtime=T0)
    site.write_sitemap(["a.html", "new.html"])
    events_before = crawls.events_path.read_text()
    r2 = await crawls.crawl(sitemap, RECRAWLER_DRY_RUN=True)
    assert r2.counts["changed"] == 1
    assert r2.counts["new"] == 1
    index = r2.report["index"]
    assert (index["state"], index["would_publish"], index["would_delete"], index["would_embed"]) == (
        "dry_run", 6, 3, 6,
    )  # fmt: skip
    assert hashlib.sha256(crawls.db_path.read_bytes()).hexdigest() == digest
    assert crawls.events_path.read_text() == events_before
    # the real run afterwards still finds the change
    r3 = await crawls.crawl(sitemap)
    assert r3.counts["changed"] == 1


@deferred_f_from_coro_f
async def test_page_mode_publishes_as_pages_commit(
    site: Site, crawls: Crawls, embed_server: EmbedServer
) -> None:
    site.write("a.html", sections_page("A", 2), mtime=T0)
    sitemap = site.write_sitemap(["a.html"])
    r1 = await crawls.crawl(sitemap, RECRAWLER_PUBLISH="page", **remote(embed_server))
    assert r1.report["index"]["state"] == "published"
    assert r1.stats["recrawler/embed/texts"] == 2
    assert len(chunk_texts(crawls)) == 2


def test_sigkill_during_embedding_keeps_the_published_run(
    site: Site, tmp_path: Path, embed_server: EmbedServer
) -> None:
    site.write("cfg.html", docsite.page("Config", [("Retries", ["Set max_retries for uploads."])]), mtime=T0)
    sitemap = site.write_sitemap(["cfg.html"])
    db = tmp_path / "kb.db"
    base = shell.scrapy_crawl_argv(
        sitemap, f"RECRAWLER_DB_URI=sqlite:///{db}", "RECRAWLER_EMBEDDER=openai:test-model",
        f"RECRAWLER_EMBEDDER_BASE_URL={embed_server.url}", "LOG_LEVEL=WARNING",
    )  # fmt: skip
    shell.run_in_checkout(base, check=True)
    with open_kb(f"sqlite:///{db}", embedder="hashing") as kb:
        assert "max_retries" in next(kb.chunks()).text

    # the edit is crawled, then the embedding call hangs: kill the crawl there
    site.write(
        "cfg.html", docsite.page("Config", [("Retries", ["Set retry_limit for uploads."])]), mtime=T0 + 5
    )
    embed_server.requests.clear()
    embed_server.requested.clear()
    embed_server.script(Reply(delay_secs=60))
    proc = subprocess.Popen(base, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert embed_server.requested.wait(60), "the crawl never reached the embedding step"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    with open_kb(f"sqlite:///{db}", embedder="hashing") as kb:
        texts = [c.text for c in kb.chunks()]
    assert len(texts) == 1
    assert "max_retries" in texts[0]  # the previous published run still answers

    # the next run completes the work: the page is unchanged now, its staged chunks get published
    embed_server.script()
    shell.run_in_checkout(base, check=True)
    with open_kb(f"sqlite:///{db}", embedder="hashing") as kb:
        texts = [c.text for c in kb.chunks()]
    assert len(texts) == 1
    assert "retry_limit" in texts[0]
