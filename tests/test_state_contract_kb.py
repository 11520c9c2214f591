"""The knowledge base role's contract, on every backend (SQLite and PostgreSQL): publication,
held and discarded runs, reverts, per-site publishing and the embeddings cache.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.kb.embedders import embedder_from_spec, vector_to_blob
from recrawler.kb.reader import open_kb
from recrawler.state import (
    PENDING_CHANGED,
    PENDING_NEW,
    RUN_PUBLISHED,
    PageRecord,
)
from recrawler.state.records import SETTLE_APPLY
from tests.state_contract import HOLDER, SITE, T0, BackendMixin, CopyEveryTypedRowSet, chunks, ev, rec

if TYPE_CHECKING:
    from pathlib import Path

    from scrapy.settings import Settings


class KnowledgeBaseContract(BackendMixin):
    @deferred_f_from_coro_f
    async def test_publish_makes_exactly_the_live_pages_chunks_visible(
        self, uri: str, settings: Settings
    ) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            a, b = rec("a"), rec("b")
            await store.pages.record(run, a, [], chunks=chunks(a, "a1", "a2"))
            await store.pages.record(run, b, [], chunks=chunks(b, "b1"))
            await store.flush()
            with open_kb(uri, embedder="hashing") as kb:
                assert list(kb.chunks()) == []  # nothing published yet
            await store.kb.publish(run.id, T0)
            run2 = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            a2 = rec("a", content_hash="h-a2")
            await store.pages.record(run2, a2, [], chunks=chunks(a2, "a3"))
            await store.pages.record_miss(run2, b.key, 410)
            await store.decisions.settle_misses(run2, SETTLE_APPLY)
            await store.flush()
            with open_kb(uri, embedder="hashing") as kb:
                assert sorted(c.text for c in kb.chunks()) == ["a1", "a2", "b1"]  # run 1 still
            await store.decisions.publish_run(run2, at=T0, gone_after=3, gone_statuses=[410])
            with open_kb(uri, embedder="hashing") as kb:
                assert [c.text for c in kb.chunks()] == ["a3"]
                assert kb.published_run() == run2.id

    @deferred_f_from_coro_f
    async def test_a_held_run_stays_invisible_and_discard_undoes_it(
        self, uri: str, settings: Settings
    ) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            a = rec("a")
            await store.pages.record(run, a, [], chunks=chunks(a, "v1"))
            await store.kb.publish(run.id, T0)
            run2 = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            a2 = rec("a", content_hash="h2", title="A two", pending=PENDING_CHANGED)
            b = rec("b", pending=PENDING_NEW)
            await store.pages.record(run2, a2, [ev(run2, a2, "changed")], chunks=chunks(a2, "v2"))
            await store.pages.record(run2, b, [ev(run2, b)], chunks=chunks(b, "b1"))
            await store.decisions.hold_run(run2)
            run3 = await store.runs.begin_run("docs", "other.example.com", T0, holder=HOLDER)
            await store.kb.publish(run3.id, T0)
            with open_kb(uri, embedder="hashing") as kb:
                assert [c.text for c in kb.chunks()] == ["v1"]
            # readers see the published state: the held page as it was, the new one not at all
            assert [(p.key, p.content_hash, p.title) for p in store.readers.iter_pages()] == [
                (a.key, "h-a", None)
            ]
            assert await store.decisions.discard(run2.id) == {"pages": 2, "chunks_dropped": 2, "misses": 0}
            got = await store.pages.get(a.key)
            assert got is not None
            # as it was published: its next check is due at once
            assert (got.content_hash, got.title, got.pending) == ("h-a", None, None)
            assert await store.pages.get(b.key) is None
            assert await store.pending_events() == 0
            info = await store.kb.run_info(run.id)
            assert info is not None
            assert info["state"] == RUN_PUBLISHED

    @deferred_f_from_coro_f
    async def test_a_page_back_to_its_published_state_is_reverted_alone(
        self, uri: str, settings: Settings
    ) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            a, b = rec("a"), rec("b")
            await store.pages.record(run, a, [], chunks=chunks(a, "v1"))
            await store.pages.record(run, b, [], chunks=chunks(b, "b1"))
            await store.kb.publish(run.id, T0)
            run2 = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            for page, text in ((a, "v2"), (b, "b2")):
                page2 = replace(page, content_hash=f"{page.content_hash}-2", pending=PENDING_CHANGED)
                await store.pages.record(
                    run2, page2, [ev(run2, page2, "changed")], chunks=chunks(page2, text)
                )
            await store.decisions.hold_run(run2)
            assert (await store.decisions.pending_changes(SITE))["changed"] == 2
            got = await store.pages.get(a.key)
            assert got is not None
            assert (got.pending, got.published_hash) == (PENDING_CHANGED, "h-a")
            run3 = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            await store.pages.record(run3, replace(got, content_hash="h-a", pending=None), [], revert=True)
            await store.flush()
            assert (await store.decisions.pending_changes(SITE))["changed"] == 1
            await store.decisions.supersede(run3)
            await store.decisions.publish_run(run3, at=T0, gone_after=3, gone_statuses=[410])
            with open_kb(uri, embedder="hashing") as kb:
                assert sorted(c.text for c in kb.chunks()) == ["b2", "v1"]
            # a's change was never published: it is announced nowhere
            with store.reader() as conn:
                actions = sorted((r[0], r[1]) for r in conn.iter("SELECT key, action FROM outbox"))
            assert actions == [(b.key, "changed")]

    @deferred_f_from_coro_f
    async def test_each_site_publishes_on_its_own(self, uri: str, settings: Settings) -> None:
        other = "other.example.com"
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            a = rec("a")
            await store.pages.record(run, a, [], chunks=chunks(a, "alpha one"))
            await store.kb.publish(run.id, T0)
            run2 = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            a2 = rec("a", content_hash="h2")
            await store.pages.record(run2, a2, [], chunks=chunks(a2, "alpha two"))
            run3 = await store.runs.begin_run("docs", other, T0, holder=HOLDER)
            o = PageRecord(key=f"{other}/o", site=other, url=f"https://{other}/o", first_seen=T0)
            await store.pages.record(run3, o, [], chunks=chunks(o, "omega"))
            # a later run of another site publishes: SITE's running run stays invisible, and the
            # version it replaced stays visible (and stored)
            await store.kb.publish(run3.id, T0)
            embedder = embedder_from_spec("hashing")
            texts = ["alpha one", "alpha two", "omega"]
            vectors = embedder.embed(texts)
            await store.kb.store_embeddings(
                [(embedder.id, f"c-{t}", vector_to_blob(v)) for t, v in zip(texts, vectors, strict=True)]
            )
            with open_kb(uri, embedder=embedder) as kb:
                assert sorted(c.text for c in kb.chunks()) == ["alpha one", "omega"]
                assert [h.text for h in kb.search("alpha", k=5, site=SITE)] == ["alpha one"]
                assert [h.text for h in kb.search("omega", k=5, site=other)] == ["omega"]
                # no padding: another site's chunk that shares nothing with the query is no hit
                assert [h.text for h in kb.search("alpha", k=5, site=other)] == []
                assert sorted(h.text for h in kb.search("alpha omega", k=5)) == ["alpha one", "omega"]
            await store.kb.publish(run2.id, T0)
            with open_kb(uri, embedder="hashing") as kb:
                assert sorted(c.text for c in kb.chunks()) == ["alpha two", "omega"]

    @deferred_f_from_coro_f
    async def test_search_and_changes_return_one_version_and_language(
        self, uri: str, settings: Settings
    ) -> None:
        """A page's version and language go onto its chunks; search (every mode) and changes
        return one slice, a page with neither is in every slice, ``en`` finds ``en-us``, a default
        version applies until ``*`` asks for all, and a page relabelled without new chunks
        (a 304 a URL pattern names) carries its chunks along."""
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            labelled = [
                rec("v1-en", version="v1", lang="en"),
                rec("v2-en", version="v2", lang="en-us"),
                rec("v2-fr", version="v2", lang="fr"),
                rec("plain"),
            ]
            texts = [f"widget retries its uploads, {p.key.rsplit('/', 1)[1]}" for p in labelled]
            for page, text in zip(labelled, texts, strict=True):
                await store.pages.record(run, page, [ev(run, page)], chunks=chunks(page, text))
            await store.kb.publish(run.id, T0)
            embedder = embedder_from_spec("hashing")
            await store.kb.store_embeddings(
                [
                    (embedder.id, f"c-{t}", vector_to_blob(v))
                    for t, v in zip(texts, embedder.embed(texts), strict=True)
                ]
            )
            await store.flush()

            def found(kb: Any, **slice_: Any) -> list[str]:
                return sorted(
                    h.chunk.key.rsplit("/", 1)[1] for h in kb.search("widget retries", k=10, **slice_)
                )

            with open_kb(uri, embedder=embedder) as kb:
                assert found(kb) == ["plain", "v1-en", "v2-en", "v2-fr"]
                for mode in ("hybrid", "keyword", "vector"):
                    assert found(kb, version="v2", mode=mode) == ["plain", "v2-en", "v2-fr"]
                    assert found(kb, version="v2", lang="en", mode=mode) == ["plain", "v2-en"]
                assert found(kb, lang="fr") == ["plain", "v2-fr"]
                assert found(kb, lang="EN_us") == ["plain", "v2-en"]
                hit = kb.search("widget retries", k=10, version="v1", lang="en")[0]
                assert (hit.chunk.version, hit.chunk.lang) in {("v1", "en"), (None, None)}
                batch = kb.changes(0, version="v2", lang="fr")
                assert sorted(c.key.rsplit("/", 1)[1] for c in batch.changes) == ["plain", "v2-fr"]
                assert {c.chunks[0].version for c in batch.changes} == {"v2", None}
            with open_kb(uri, embedder=embedder, default_version="v1") as kb:
                assert found(kb) == ["plain", "v1-en"]
                assert found(kb, version="*") == ["plain", "v1-en", "v2-en", "v2-fr"]
            run2 = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            await store.pages.record(run2, replace(labelled[0], version="v3"), [])
            await store.flush()
            with open_kb(uri, embedder=embedder) as kb:
                assert found(kb, version="v3") == ["plain", "v1-en"]
                assert found(kb, version="v1") == ["plain"]

    @deferred_f_from_coro_f
    async def test_embeddings_are_a_cache_paid_once(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            a = rec("a")
            await store.pages.record(run, a, [], chunks=chunks(a, "x", "y", "x"))
            await store.flush()
            assert await store.kb.count_missing("e1") == 2
            assert await store.kb.missing_embeddings("e1", 10) == [("c-x", "x"), ("c-y", "y")]
            await store.kb.store_embeddings([("e1", "c-x", b"\0" * 8), ("e1", "c-x", b"\1" * 8)])
            assert await store.kb.missing_for("e1", ["c-y", "c-x"]) == ["c-y"]
            assert await store.kb.missing_for("e2", ["c-x"]) == ["c-x"]
            counts = await store.kb.run_index_counts(run.id, "e1")
            assert counts == {"chunks_added": 3, "chunks_retired": 0, "texts_cached": 1}


class TestSQLiteKnowledgeBase(KnowledgeBaseContract):
    @pytest.fixture
    def uri(self, tmp_path: Path) -> str:
        return f"sqlite:///{tmp_path / 'state.db'}"


@pytest.mark.postgres
class TestPostgreSQLKnowledgeBase(KnowledgeBaseContract):
    @pytest.fixture
    def uri(self, postgres_uri: str) -> str:
        # a fresh database per test (tests/postgres.py)
        return postgres_uri


@pytest.mark.postgres
class TestPostgreSQLCopiedKnowledgeBase(CopyEveryTypedRowSet, TestPostgreSQLKnowledgeBase):
    """The same contract with every row set whose types are given copied in."""
