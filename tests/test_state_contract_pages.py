"""The lifecycle and pages roles' contracts, on every backend (SQLite and PostgreSQL): opening,
committed outcomes, the event outbox, and page writes that land whole or not at all.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.detect.hashing import pack_blocks, unpack_blocks
from recrawler.exceptions import PageWriteError
from recrawler.intervals import Revisit
from recrawler.kb.reader import open_kb
from recrawler.state import (
    GONE,
    Event,
    FieldsRow,
    RevisitUpdate,
    Run,
    StateStore,
)
from recrawler.state.sql.pages import SQLPages
from tests.state_contract import (
    HOLDER,
    SITE,
    T0,
    BackendMixin,
    CopyEveryTypedRowSet,
    ExplodingEvent,
    chunks,
    ev,
    rec,
)

if TYPE_CHECKING:
    from pathlib import Path

    from scrapy.settings import Settings


class LifecycleContract(BackendMixin):
    @deferred_f_from_coro_f
    async def test_open_is_idempotent_and_reopening_keeps_committed_state(
        self, uri: str, settings: Settings
    ) -> None:
        async with self.opened(uri, settings) as store:
            await store.open()
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            await store.pages.record(run, rec("a"), [])
            await store.runs.finish_run(run, reason="finished", at=T0, report={})
        async with self.opened(uri, settings) as store:
            got = await store.pages.get(f"{SITE}/a")
            assert got is not None
            assert got.content_hash == "h-a"

    @deferred_f_from_coro_f
    async def test_outcomes_count_only_what_committed(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings, RECRAWLER_DB_BATCH_SIZE=100) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            await store.pages.record(run, rec("a"), [], outcome=["new"])
            await store.pages.record(run, rec("b"), [], outcome=["new"])
            assert store.outcomes == {}
            await store.flush()
            assert store.outcomes == {"new": 2}
            assert store.lost == {}

    @deferred_f_from_coro_f
    async def test_events_wait_in_the_outbox_until_delivered(
        self, uri: str, settings: Settings, events_path: Path
    ) -> None:
        async with self.opened(uri, settings, RECRAWLER_DB_BATCH_SIZE=100) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            page = rec("a")
            await store.pages.record(run, page, [ev(run, page)])
            assert self.events(events_path) == []
            # a run's events go out once it is published, never before
            await store.deliver()
            assert self.events(events_path) == []
            await store.decisions.publish_run(run, at=T0, gone_after=3, gone_statuses=[410])
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
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, publish_each_page=True)
            assert await store.pending_events() == 0
            for name in ("a", "b"):
                page = rec(name)
                await store.pages.record(run, page, [ev(run, page)])
            assert await store.pending_events() == 2
            await store.deliver()
            assert await store.pending_events() == 0


class PagesContract(BackendMixin):
    @deferred_f_from_coro_f
    async def test_moves_to_a_missing_target_become_misses(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            for name in ("a", "b", "c", "keep"):
                await store.pages.record(run, rec(name), [])
            await store.decisions.publish_run(run, at=T0, gone_after=3, gone_statuses=[410])
            run2 = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            # a, b and c are consolidated into one new page, which then answers "not here"
            await store.pages.record_moves(run2, [f"{SITE}/a", f"{SITE}/b"], f"{SITE}/new", http_status=301)
            await store.pages.record_moves(run2, [f"{SITE}/c"], f"{SITE}/other", http_status=301)
            assert await store.pages.miss_moves(run2, f"{SITE}/new", http_status=404) == 2
            assert await store.pages.miss_moves(run2, f"{SITE}/new", http_status=404) == 0
            result, _ = await store.decisions.publish_run(run2, at=T0, gone_after=3, gone_statuses=[410])
            assert (result.quarantined, result.moved) == (2, 0)
            status = {p.key.rsplit("/", 1)[1]: p.status for p in store.readers.iter_pages()}
            assert status == {"a": "quarantined", "b": "quarantined", "c": "live", "keep": "live"}

    @deferred_f_from_coro_f
    async def test_get_returns_what_record_wrote(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings) as store:
            assert await store.pages.get(f"{SITE}/a") is None
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            page = rec("a", etag='"e"', last_checked=T0 + timedelta(hours=1), found_depth=2, title="A")
            await store.pages.record(run, page, [])
            got = await store.pages.get(page.key)
            assert got == replace(page, last_seen_run=run.id)
            assert got.first_seen.tzinfo is not None

    @deferred_f_from_coro_f
    async def test_a_page_write_commits_whole_or_not_at_all(
        self, uri: str, settings: Settings, events_path: Path
    ) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, publish_each_page=True)
            page = rec("a")
            await store.pages.record(run, page, [ev(run, page)], chunks=chunks(page, "one"), outcome=["new"])
            changed = rec("a", content_hash="h2")
            bad = ExplodingEvent(**{f: getattr(ev(run, changed, "changed"), f) for f in Event.__slots__})
            with pytest.raises(RuntimeError, match="injected"):
                await store.pages.record(
                    run, changed, [bad], chunks=chunks(changed, "two"), outcome=["changed"]
                )
            await store.deliver()
            got = await store.pages.get(page.key)
            assert got is not None
            assert (got.content_hash, got.chunks) == ("h-a", 1)
            assert store.outcomes == {"new": 1}
            assert [e["action"] for e in self.events(events_path)] == ["new"]
            await store.kb.publish(run.id, T0)
        with open_kb(uri, embedder="hashing") as kb:
            assert [c.text for c in kb.chunks()] == ["one"]

    @deferred_f_from_coro_f
    async def test_record_miss_stages_only_stored_live_pages(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            await store.pages.record(run, rec("a"), [])
            await store.pages.record(run, rec("g", status=GONE), [])
            assert await store.pages.record_miss(run, f"{SITE}/a", 404) == "staged"
            assert await store.pages.record_miss(run, f"{SITE}/g", 410) == "tombstone"
            assert await store.pages.record_miss(run, f"{SITE}/nope", 404) == "unknown"

    @deferred_f_from_coro_f
    async def test_unseen_hands_each_page_out_once_and_never_a_listed_one(
        self, uri: str, settings: Settings
    ) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            for name in ("a", "b", "c", "d"):
                await store.pages.record(run, rec(name), [])
            run2 = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            await store.pages.record(run2, rec("a"), [])
            await store.schedule.mark_listed(run2, [(f"{SITE}/b", "lastmod")])
            first = await store.pages.unseen(run2, 1)
            rest = await store.pages.unseen(run2, 10)
            assert [k for k, _, _ in first + rest] == [f"{SITE}/c", f"{SITE}/d"]
            assert await store.pages.unseen(run2, 10) == []

    @deferred_f_from_coro_f
    async def test_the_frontier_feeds_each_request_with_its_pages_stored_record(
        self, uri: str, settings: Settings
    ) -> None:
        """A fed batch comes with the stored record of each of its pages (None: none stored), by
        priority then arrival, each once: the scheduler waits for the store once a batch."""
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            stored = {name: rec(name, etag=f'"{name}"') for name in ("a", "b", "c")}
            for page in stored.values():
                await store.pages.record(run, page, [])
            queued = [("a", 0), ("new", 0), ("b", 5), ("c", 0)]
            added = await store.frontier.frontier_add(
                run, [(f"{SITE}/{n}", prio, n.encode()) for n, prio in queued]
            )
            assert added == 4
            first = await store.frontier.frontier_next(run, 3)
            assert [(blob, r.etag if r else None) for blob, r in first] == [
                (b"b", '"b"'),
                (b"a", '"a"'),
                (b"new", None),
            ]
            assert [
                (blob, r.key if r else None) for blob, r in await store.frontier.frontier_next(run, 3)
            ] == [(b"c", f"{SITE}/c")]
            assert await store.frontier.frontier_next(run, 3) == []

    @deferred_f_from_coro_f
    async def test_a_listing_or_a_frontier_batch_that_names_a_page_twice_keeps_it_once(
        self, uri: str, settings: Settings
    ) -> None:
        """A sitemap that lists a URL twice in one batch stores it once, as its last entry says;
        a frontier batch with a key twice queues it once, at its first place (each batch is one
        statement now, where a row may change only once)."""
        from recrawler.state import ListedEntry

        sitemap = f"https://{SITE}/sitemap.xml"
        entries = [
            ListedEntry(url=f"https://{SITE}/p{i}", kind="page", lastmod=(None, "2026-01-02")[i % 2], pos=i)
            for i in range(1, 31)
        ]
        entries.append(ListedEntry(url=f"https://{SITE}/p3", kind="page", lastmod="2026-02-01", pos=31))
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            await store.frontier.add_listing(run, sitemap, entries)
            await store.flush()
            listed = await store.frontier.listing(sitemap, after=0, limit=100)
            assert len(listed) == 30
            assert [e.url.rsplit("/", 1)[-1] for e in listed][-2:] == ["p30", "p3"]
            assert (listed[-1].lastmod, listed[-1].pos, listed[0].lastmod) == ("2026-02-01", 31, "2026-01-02")
            queued = [(f"{SITE}/p{i}", 0, f"p{i}".encode()) for i in range(1, 31)]
            added = await store.frontier.frontier_add(run, [*queued, (f"{SITE}/p3", 9, b"again")])
            assert added == 30
            fed = [blob for blob, _ in await store.frontier.frontier_next(run, 100)]
            assert fed == [f"p{i}".encode() for i in range(1, 31)]

    @deferred_f_from_coro_f
    async def test_a_page_a_link_queued_first_counts_once_as_listed(
        self, uri: str, settings: Settings
    ) -> None:
        """A listing's batch says how many pages no listing had named this run: those new to the
        frontier and those a link (or a redirect) queued first, each page once however many
        listings name it; the pages the links queued are fed once, at their first place."""
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            linked = [(f"{SITE}/p{i}", 0, f"link{i}".encode()) for i in range(0, 300, 3)]
            assert await store.frontier.frontier_add(run, linked) == 100
            assert await store.frontier.frontier_claim(run, f"{SITE}/moved")
            listed = [(f"{SITE}/p{i}", 0, f"p{i}".encode()) for i in range(300)]
            assert await store.frontier.frontier_add_listed(run, listed[:150]) == (100, 150)
            more = [*listed[100:], (f"{SITE}/moved", 0, b"m")]
            assert await store.frontier.frontier_add_listed(run, more) == (100, 151)
            assert await store.frontier.frontier_add_listed(run, listed) == (0, 0)
            fed = [blob for blob, _ in await store.frontier.frontier_next(run, 1000)]
            assert len(fed) == len(set(fed)) == 300
            assert fed[:100] == [blob for _, _, blob in linked]
            assert fed[100:102] == [b"p1", b"p2"]

    @deferred_f_from_coro_f
    async def test_a_sitemap_read_again_says_what_moved(self, uri: str, settings: Settings) -> None:
        """A file read to its end again: entries it did not list, entries whose lastmod moved,
        entries it no longer lists; a file never read to its end moves nothing."""
        from recrawler.state import ListedEntry, SitemapFile

        sitemap = f"https://{SITE}/sitemap.xml"

        def entries(*pages: tuple[str, str | None]) -> list[ListedEntry]:
            return [
                ListedEntry(url=f"https://{SITE}/{name}", kind="page", lastmod=lastmod, pos=i)
                for i, (name, lastmod) in enumerate(pages, 1)
            ]

        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            first = entries(("a", None), ("b", "2026-01-01"), ("c", None))
            assert await store.frontier.add_listing(run, sitemap, first) == (0, 0)
            assert await store.frontier.listing_read(run, SitemapFile(url=sitemap, urls=3), T0) == 0
            run2 = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            again = entries(("a", None), ("b", "2026-02-01"), ("d", None), ("e", "2026-01-05"))
            assert await store.frontier.add_listing(run2, sitemap, again[:2]) == (0, 1)
            assert await store.frontier.add_listing(run2, sitemap, again[2:]) == (2, 0)
            assert await store.frontier.listing_read(run2, SitemapFile(url=sitemap, urls=4), T0) == 1
            run3 = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            assert await store.frontier.add_listing(run3, sitemap, again) == (0, 0)
            assert await store.frontier.listing_read(run3, SitemapFile(url=sitemap, urls=4), T0) == 0

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
            return store.pages.record(
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
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, publish_each_page=True)
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
                got = await store.pages.get(f"{SITE}/p{i}")
                if i == 13:
                    assert got is None
                    continue
                assert got is not None
                assert (got.title, got.chunks) == (f"Page {i} again", 3)
                fields = await store.history.get_fields(got.key)
                assert fields is not None
                assert (fields.text, unpack_blocks(fields.blocks)) == (
                    f"page {i} text 0 v2 page {i} text 1 v2 page {i} text 2 v2",
                    [7, 1000 + i, 2000 + i],
                )
                assert (await store.schedule.scheduled([got.key]))[got.key].revisit.checks == 2
            counts = await store.kb.run_index_counts(run.id, "e1")
            assert (counts["chunks_added"], counts["chunks_retired"]) == (39 * 6, 39 * 3)
            assert sorted(e["key"] for e in self.events(events_path)) == sorted(
                [f"{SITE}/p{i}" for i in range(40) if i != 13] * 2
            )
            assert await store.history.fold_block_stats() == 78
            await store.history.update_boilerplate(SITE, enter_share=0.9, exit_share=0.5, min_pages=3)
            report = store.readers.noise_report()[SITE]["boilerplate"]
            assert {b["block"]: (b["pages"], b["sample"]) for b in report} == {7: (39, "seven")}

    @deferred_f_from_coro_f
    async def test_a_page_the_database_refuses_fails_alone_among_pages_written_together(
        self, uri: str, settings: Settings
    ) -> None:
        """A value the driver cannot store fails the unit's statements: the unit is undone and its
        pages written one by one, so that page alone fails, with a PageWriteError."""
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            pages = [rec(f"q{i}", title=object() if i == 3 else f"Q{i}") for i in range(12)]  # type: ignore[arg-type]
            done = await asyncio.gather(
                *(
                    store.pages.record(run, page, [], chunks=chunks(page, f"q{i}"), outcome=["new"])
                    for i, page in enumerate(pages)
                ),
                return_exceptions=True,
            )
            assert [i for i, d in enumerate(done) if isinstance(d, BaseException)] == [3]
            assert isinstance(done[3], PageWriteError)
            await store.flush()
            assert store.outcomes == {"new": 11}
            for i, page in enumerate(pages):
                got = await store.pages.get(page.key)
                assert (got is None) if i == 3 else (got is not None and got.chunks == 1)


class TestSQLitePages(LifecycleContract, PagesContract):
    @pytest.fixture
    def uri(self, tmp_path: Path) -> str:
        return f"sqlite:///{tmp_path / 'state.db'}"


@pytest.mark.postgres
class TestPostgreSQLPages(LifecycleContract, PagesContract):
    @pytest.fixture
    def uri(self, postgres_uri: str) -> str:
        # a fresh database per test (tests/postgres.py)
        return postgres_uri


@pytest.mark.postgres
class TestPostgreSQLCopiedPages(CopyEveryTypedRowSet, TestPostgreSQLPages):
    """The same contract with every row set whose types are given copied in."""
