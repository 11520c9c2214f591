"""The knowledge base as a LangChain retriever, over real recrawls (recrawler.integrations.langchain)."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import TYPE_CHECKING

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

pytest.importorskip("langchain_core")

from langchain_core.documents import Document

from recrawler.cli import main as cli_main
from recrawler.integrations.langchain import RecrawlerRetriever
from tests import docsite

if TYPE_CHECKING:
    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0


def page(title: str, retries: str) -> str:
    return docsite.page(
        title,
        [
            ("Install", [f"Install {title} with pip."]),
            ("Config", ["Settings live in acme.toml."]),
            ("Retries", [retries]),
        ],
    )


@deferred_f_from_coro_f
async def test_retriever_reads_the_published_run_only(site: Site, crawls: Crawls) -> None:
    site.write("upload.html", page("Upload", "Set retry_limit to retry failed uploads."), mtime=T0)
    for name in ("a", "b"):
        site.write(f"{name}.html", page(name.upper(), f"Nothing about {name} here."), mtime=T0)
    sitemap = site.write_sitemap(["upload.html", "a.html", "b.html"])
    r1 = await crawls.crawl(sitemap)
    assert r1.report["index"]["state"] == "published"

    retriever = RecrawlerRetriever(uri=crawls.db_uri, k=2)
    try:
        docs = await asyncio.to_thread(retriever.invoke, "retry_limit failed uploads")
        # the one chunk with the words: the pages about something else do not pad the answer
        assert len(docs) == 1
        best = docs[0]
        assert isinstance(best, Document)
        assert best.page_content.endswith("Set retry_limit to retry failed uploads.")
        assert best.metadata["url"] == site.url("upload.html") + "#retries"
        assert best.metadata["heading"].endswith("Retries")
        assert best.metadata["title"].startswith("Upload")
        checked = datetime.fromisoformat(best.metadata["last_checked"])
        assert checked.utcoffset() is not None
        assert best.metadata["last_changed"] is not None
        keyed = RecrawlerRetriever(uri=crawls.db_uri, embedder_options={"api_key": "sk-test"})
        assert "sk-test" not in repr(keyed)

        # run 2 rewrites the page and is held (a spike): the bot keeps reading run 1
        site.write("upload.html", page("Upload", "Set max_attempts to retry failed uploads."), mtime=T0 + 5)
        r2 = await crawls.crawl(sitemap, RECRAWLER_CHANGE_ALERT_MIN=1, RECRAWLER_CHANGE_ALERT_RATIO=0.1)
        assert r2.report["index"]["state"] == "held"
        docs = await asyncio.to_thread(retriever.invoke, "failed uploads")
        assert any("retry_limit" in d.page_content for d in docs)
        assert not any("max_attempts" in d.page_content for d in docs)

        # approved, the same retriever sees the new text on its next query
        argv = ["runs", "approve", str(r2.report["run_id"]), "--db", crawls.db_uri]
        assert await asyncio.to_thread(cli_main, argv) == 0
        docs = await asyncio.to_thread(retriever.invoke, "failed uploads max_attempts")
        assert "max_attempts" in docs[0].page_content
        assert docs[0].metadata["last_changed"] > best.metadata["last_changed"]

        # cosine scores (vector mode): none of the chunks is that close to the question
        strict = RecrawlerRetriever(uri=crawls.db_uri, k=3, score_threshold=0.99, mode="vector")
        assert await asyncio.to_thread(strict.invoke, "failed uploads") == []
        strict.close()
    finally:
        retriever.close()
