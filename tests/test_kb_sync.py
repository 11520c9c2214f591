"""The vector-store sink (recrawler.kb.sync) against real stores: Chroma and Qdrant in process,
PGVector on the test PostgreSQL. The store holds exactly the published chunks after every sync,
after changes, and after a sync killed half way and run again."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

pytest.importorskip("langchain_core")

from recrawler.cli import main as cli_main
from recrawler.kb.reader import open_kb
from recrawler.kb.sync import VectorStoreSync, chunk_id
from tests import docsite, statedb, stores
from tests.waiting import until

if TYPE_CHECKING:
    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

PROJECT = Path(__file__).resolve().parent.parent
T0 = 1_760_000_000.0
STORES = ["chroma", "qdrant", pytest.param("pgvector", marks=pytest.mark.postgres)]


def page(i: int, version: int = 1) -> str:
    return docsite.page(
        f"Guide {i}",
        [
            ("Install", [f"Install component {i} with pip (release {version})."]),
            ("Usage", [f"Call <code>run_{i}()</code> to start component {i}."]),
            ("Limits", [f"Component {i} handles {i * 10} requests a second."]),
        ],
    )


@pytest.fixture
def store_env(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    name = request.param
    monkeypatch.setenv("RECRAWLER_TEST_STORE_DIR", str(tmp_path / "stores"))
    if name == "pgvector":
        monkeypatch.setenv("RECRAWLER_TEST_STORE_PG", request.getfixturevalue("postgres_uri"))
    return str(name)


def published(uri: str) -> dict[str, str]:
    with open_kb(uri, embedder="hashing") as kb:
        return {chunk_id(c): c.text for c in kb.chunks()}


def sync(uri: str, name: str) -> dict[str, int]:
    store = getattr(stores, name)()
    try:
        return VectorStoreSync(uri, store, name=name, batch_size=16).sync()
    finally:
        stores.close(name, store)


def held(uri: str, name: str) -> dict[str, str]:
    store = getattr(stores, name)()
    try:
        return stores.contents(name, store)
    finally:
        stores.close(name, store)


@pytest.mark.parametrize("store_env", STORES, indirect=True)
@deferred_f_from_coro_f
async def test_the_store_mirrors_the_published_knowledge_base(
    site: Site, crawls: Crawls, store_env: str
) -> None:
    paths = [f"guide{i:03d}.html" for i in range(60)]
    for i, path in enumerate(paths):
        site.write(path, page(i), mtime=T0)
    sitemap = site.write_sitemap(paths)
    await crawls.crawl(sitemap)
    first = await asyncio.to_thread(sync, crawls.db_uri, store_env)
    assert first == {"added": 180, "deleted": 0, "kept": 0}
    assert await asyncio.to_thread(held, crawls.db_uri, store_env) == published(crawls.db_uri)
    # idempotent: nothing to do the second time
    assert await asyncio.to_thread(sync, crawls.db_uri, store_env) == {"added": 0, "deleted": 0, "kept": 180}

    # 3 pages edited (one section each), 2 gone: their old chunks leave, the new ones come in
    for i in range(3):
        site.write(paths[i], page(i, version=2), mtime=T0 + 10)
    for path in paths[50:52]:
        site.remove(path, gone=True)
    await crawls.crawl(site.write_sitemap(paths[:50] + paths[52:]))
    second = await asyncio.to_thread(sync, crawls.db_uri, store_env)
    assert second == {"added": 3, "deleted": 9, "kept": 171}
    assert await asyncio.to_thread(held, crawls.db_uri, store_env) == published(crawls.db_uri)


@pytest.mark.parametrize("store_env", STORES, indirect=True)
@deferred_f_from_coro_f
async def test_a_sync_killed_half_way_resumes_without_duplicates_or_orphans(
    site: Site, crawls: Crawls, store_env: str
) -> None:
    paths = [f"guide{i:03d}.html" for i in range(60)]
    for i, path in enumerate(paths):
        site.write(path, page(i), mtime=T0)
    sitemap = site.write_sitemap(paths)
    await crawls.crawl(sitemap)
    await asyncio.to_thread(sync, crawls.db_uri, store_env)
    # a new version of half the pages: the next sync deletes and adds, and is killed during it
    for i in range(30):
        site.write(paths[i], page(i, version=2), mtime=T0 + 10)
    await crawls.crawl(sitemap, RECRAWLER_CHANGE_ALERT_RATIO=0.9)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT), os.environ.get("PYTHONPATH")])),
    }
    cmd = [sys.executable, "-m", "recrawler.cli", "sync", "--store", f"tests.stores.slow_{store_env}"]
    proc = subprocess.Popen([*cmd, "--name", store_env, "--db", crawls.db_uri], env=env, cwd=crawls.tmp_path)
    try:

        def half_way() -> bool:
            pending = statedb.value(crawls.db_path, "SELECT COUNT(*) FROM sink_chunks WHERE state = 0")
            added = statedb.value(
                crawls.db_path,
                f"SELECT COUNT(*) FROM sink_chunks WHERE state = 1 AND key IN ({','.join('?' * 30)})",
                [f"{site.url(p).split('://', 1)[1]}" for p in paths[:30]],
            )
            return bool(added >= 16 and pending) or proc.poll() is not None

        # killed once it has added some of the new chunks, and before it is done
        await asyncio.to_thread(until, half_way, "the sync half way", timeout=60)
        assert proc.poll() is None, "the sync ended before it could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    want = published(crawls.db_uri)
    assert await asyncio.to_thread(held, crawls.db_uri, store_env) != want
    # run again, to the end (from the CLI, as cron would)
    argv = ["sync", "--store", f"tests.stores.{store_env}", "--name", store_env, "--db", crawls.db_uri]
    assert await asyncio.to_thread(cli_main, argv) == 0
    assert await asyncio.to_thread(held, crawls.db_uri, store_env) == want


@pytest.mark.parametrize("store_env", ["chroma"], indirect=True)
@deferred_f_from_coro_f
async def test_a_published_run_syncs_the_configured_stores(
    site: Site, crawls: Crawls, store_env: str
) -> None:
    paths = [f"guide{i:03d}.html" for i in range(40)]
    for i, path in enumerate(paths):
        site.write(path, page(i), mtime=T0)
    sitemap = site.write_sitemap(paths)
    sinks = {"RECRAWLER_VECTORSTORE_SINKS": {"chroma": "tests.stores.chroma"}}
    r1 = await crawls.crawl(sitemap, **sinks)
    assert r1.report["index"]["state"] == "published"
    assert await asyncio.to_thread(held, crawls.db_uri, "chroma") == published(crawls.db_uri)
    # a held run syncs nothing: the store keeps the published version
    for i in range(30):
        site.write(paths[i], page(i, version=2), mtime=T0 + 10)
    before = await asyncio.to_thread(held, crawls.db_uri, "chroma")
    r2 = await crawls.crawl(sitemap, RECRAWLER_CHANGE_ALERT_RATIO=0.1, **sinks)
    assert r2.report["index"]["state"] == "held"
    assert await asyncio.to_thread(held, crawls.db_uri, "chroma") == before == published(crawls.db_uri)
