"""A published knowledge base written through the store's own roles (no crawl): pages of chunks,
embedded with the hashing embedder and published as one run."""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from scrapy.settings import Settings

from recrawler import default_settings
from recrawler.kb.chunking import Chunk
from recrawler.kb.embedders import HashingEmbedder
from recrawler.kb.publish import embed_missing
from recrawler.state import PageRecord, store_from_uri

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

SITE = "docs.example.com"
T0 = datetime(2026, 3, 1, 6, 0, 0, tzinfo=UTC)
HOLDER = f"{socket.gethostname()} pid {os.getpid()}"


def page_record(name: str, site: str = SITE, first_seen: datetime = T0) -> PageRecord:
    return PageRecord(
        key=f"{site}/{name}",
        site=site,
        url=f"https://{site}/{name}",
        content_hash=f"h-{name}",
        first_seen=first_seen,
        title=name.title(),
    )


async def fill(uri: str, pages: Mapping[str, Sequence[str]], *, site: str = SITE) -> int:
    """Write *pages* (name -> chunk texts) as one published run of *site*; its run id."""
    settings = Settings()
    settings.setmodule(default_settings)
    store = store_from_uri(uri, settings)
    await store.open()
    try:
        now = datetime.now(UTC)
        run = await store.runs.begin_run("docs", site, now, holder=HOLDER, lease_secs=0)
        for name, texts in pages.items():
            stored = await store.pages.get(f"{site}/{name}")
            rec = page_record(name, site, stored.first_seen if stored is not None else now)
            chunks = [
                Chunk(
                    key=rec.key,
                    url=f"{rec.url}#s{i}",
                    chunk_index=i,
                    heading=f"{rec.title} > Section {i}",
                    text=text,
                    chunk_hash=hashlib.sha256(text.encode()).hexdigest(),
                )
                for i, text in enumerate(texts)
            ]
            await store.pages.record(run, rec, [], chunks=chunks)
        await embed_missing(store.kb, HashingEmbedder())
        await store.kb.publish(run.id, now)
        await store.search_index.index_vectors(HashingEmbedder().id)
        return run.id
    finally:
        await store.close()


def fill_sync(uri: str, pages: Mapping[str, Sequence[str]], *, site: str = SITE) -> int:
    """:func:`fill` from a test that is not a coroutine (a loop of its own, in a thread: the
    reactor's loop may be running in this one)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, fill(uri, pages, site=site)).result()
