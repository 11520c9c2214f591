"""The runs and readers roles' contracts, on every backend (SQLite and PostgreSQL): leases,
reconciliation of misses, moves, and what a run reports it decided.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.exceptions import RunRefused, StateStoreError
from recrawler.state import (
    GONE,
    LIVE,
    MOVED,
    QUARANTINED,
    RUN_ABORTED,
    ChangeRow,
)
from recrawler.state.records import SETTLE_APPLY, SETTLE_DROP, SETTLE_KEEP, SETTLE_KEEP_LISTED
from tests.state_contract import HOLDER, SITE, T0, BackendMixin, rec

if TYPE_CHECKING:
    from pathlib import Path

    from scrapy.settings import Settings


class RunsContract(BackendMixin):
    @deferred_f_from_coro_f
    async def test_a_live_lease_refuses_a_second_run(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=60)
            with pytest.raises(RunRefused, match="one run at a time"):
                await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=60)
            # another site is another lease
            await store.runs.begin_run("docs", "other.example.com", T0, holder=HOLDER, lease_secs=60)
            assert await store.runs.heartbeat(run)

    @deferred_f_from_coro_f
    async def test_a_lapsed_lease_is_taken_over_and_its_run_aborted(
        self, uri: str, settings: Settings
    ) -> None:
        async with self.opened(uri, settings) as store:
            old = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            await store.pages.record(old, rec("a"), [])
            await store.pages.record_miss(old, f"{SITE}/a", 404)
            new = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            assert new.id > old.id
            assert new.backfill
            info = await store.kb.run_info(old.id)
            assert info is not None
            assert info["state"] == RUN_ABORTED
            assert not await store.runs.heartbeat(old)
            assert await store.runs.heartbeat(new)
            # the aborted run's staged miss was dropped with it
            assert (await store.decisions.removal_plan(new, gone_after=3, gone_statuses=[410])).removals == 0

    @deferred_f_from_coro_f
    async def test_finish_run_releases_the_lease(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=60)
            await store.runs.finish_run(
                run, reason="finished", at=T0, report={"counts": {"new": 0}}, listed=5
            )
            nxt = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=60)
            assert nxt.last_listed == 5

    @deferred_f_from_coro_f
    async def test_a_rejected_listing_is_never_the_baseline(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=60)
            await store.runs.finish_run(run, reason="finished", at=T0, report={"counts": {}}, listed=300)
            for why in ("listing_shrunk", "sitemap_failed", "not_finished"):
                run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=60)
                assert run.last_listed == 300
                await store.runs.finish_run(
                    run, reason="finished", at=T0, report={"counts": {}}, reasons=[why], listed=30
                )
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=60)
            assert run.last_listed == 300
            # an accepted listing (an outage elsewhere in the run) is one
            await store.runs.finish_run(
                run, reason="finished", at=T0, report={"counts": {}}, reasons=["error_ratio"], listed=280
            )
            assert (
                await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=60)
            ).last_listed == 280

    @deferred_f_from_coro_f
    async def test_a_run_finished_aborted_releases_the_lease_and_reads_aborted(
        self, uri: str, settings: Settings
    ) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=60)
            await store.pages.record(run, rec("a"), [])
            report = {"counts": {"new": 1}}
            await store.runs.finish_run(
                run,
                reason="shutdown",
                at=T0,
                report=report,
                reasons=["not_finished"],
                exit_code=4,
                aborted=True,
            )
            info = await store.kb.run_info(run.id)
            assert info is not None
            assert info["state"] == RUN_ABORTED
            assert info["finished_at"] is not None
            # the lease is free at once: the next run needs no takeover, and starts as a backfill
            nxt = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=60)
            assert nxt.backfill

    @deferred_f_from_coro_f
    async def test_reconcile_quarantines_and_removes_in_one_set_operation(
        self, uri: str, settings: Settings, events_path: Path
    ) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            for name in ("keep", "q", "g410", "g3"):
                await store.pages.record(run, rec(name, misses=2 if name == "g3" else 0), [])
            run2 = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            assert (run2.prior_pages, run2.prior_live) == (4, 4)
            for name, code in (("q", 404), ("g410", 410), ("g3", 404)):
                await store.pages.record_miss(run2, f"{SITE}/{name}", code)
            plan = await store.decisions.removal_plan(run2, gone_after=3, gone_statuses=[410])
            assert (plan.quarantine, plan.gone, plan.removals) == (1, 2, 3)
            assert (await store.pages.get(f"{SITE}/q")).status == LIVE  # type: ignore[union-attr]
            await store.decisions.settle_misses(run2, SETTLE_APPLY)
            assert (await store.pages.get(f"{SITE}/q")).status == LIVE  # type: ignore[union-attr]
            # applied in the transaction that publishes the run
            result, _ = await store.decisions.publish_run(run2, at=T0, gone_after=3, gone_statuses=[410])
            assert (result.applied, result.quarantined, result.gone) == (
                True, 1, {"http_410": 1, "http_404": 1}
            )  # fmt: skip
            status = {p.key.rsplit("/", 1)[1]: p.status for p in store.readers.iter_pages()}
            assert status == {"keep": LIVE, "q": QUARANTINED, "g410": GONE, "g3": GONE}
            await store.deliver()
            assert sorted(e["action"] for e in self.events(events_path)) == [GONE, GONE, QUARANTINED]

    @deferred_f_from_coro_f
    async def test_reconcile_without_apply_drops_or_keeps_the_misses(
        self, uri: str, settings: Settings
    ) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            await store.pages.record(run, rec("a"), [])
            await store.pages.record_miss(run, f"{SITE}/a", 410)
            kept = await store.decisions.settle_misses(run, SETTLE_KEEP)
            assert (kept.kept, kept.skipped_misses) == (True, 1)
            await store.decisions.hold_run(run)
            # what `recrawler runs approve` does: the kept misses apply with the publication
            decided = await store.decisions.decision(run.id)
            assert await store.decisions.release_kept(decided) == 1
            held, _ = await store.decisions.publish_run(decided, at=T0, gone_after=3, gone_statuses=[410])
            assert held.gone == {"http_410": 1}
            run2 = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            await store.pages.record(run2, rec("b"), [])
            await store.pages.record_miss(run2, f"{SITE}/b", 410)
            dropped = await store.decisions.settle_misses(run2, SETTLE_DROP)
            assert (dropped.applied, dropped.skipped_misses) == (False, 1)
            result, _ = await store.decisions.publish_run(run2, at=T0, gone_after=3, gone_statuses=[410])
            assert (result.gone, result.quarantined) == ({}, 0)
            assert (await store.pages.get(f"{SITE}/b")).status == LIVE  # type: ignore[union-attr]

    @deferred_f_from_coro_f
    async def test_a_miss_lands_after_the_page_writes_queued_before_it(
        self, uri: str, settings: Settings
    ) -> None:
        """A page write lifts the run's staged miss of the page: a miss staged while a write of
        the page (content read before the miss was known) waits in the queue lands after it, and
        stays staged. Writes of other pages queued at the same time are not waited for."""
        async with self.opened(uri, settings, RECRAWLER_DB_BATCH_SIZE=100) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            for name in ("a", "b"):
                await store.pages.record(run, rec(name), [])
            await store.flush()
            run2 = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            writes = [
                asyncio.ensure_future(store.pages.record(run2, rec(n, content_hash="h2"), [])) for n in "ab"
            ]
            await asyncio.sleep(0)  # both writes are queued, none written yet
            assert await store.pages.record_miss(run2, f"{SITE}/a", 404) == "staged"
            await asyncio.gather(*writes)
            kept = await store.decisions.settle_misses(run2, SETTLE_KEEP)
            assert (kept.kept, kept.skipped_misses) == (True, 1)

    @deferred_f_from_coro_f
    async def test_kept_misses_are_carried_until_an_answer_or_a_decision_settles_them(
        self, uri: str, settings: Settings
    ) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            for name in ("a", "b", "c"):
                await store.pages.record(run, rec(name), [])
            await store.pages.record_miss(run, f"{SITE}/a", 404)
            await store.pages.record_miss(run, f"{SITE}/b", 404)
            # a's listing no longer names it; b is still listed: only b's removal waits
            await store.schedule.mark_listed(run, [(f"{SITE}/b", None), (f"{SITE}/c", None)])
            plan = await store.decisions.removal_plan(run, gone_after=3, gone_statuses=[410])
            assert (plan.removals, plan.delisted) == (2, 1)
            kept = await store.decisions.settle_misses(run, SETTLE_KEEP_LISTED)
            assert kept.skipped_misses == 1
            result, _ = await store.decisions.publish_run(run, at=T0, gone_after=3, gone_statuses=[410])
            assert result.quarantined == 1
            # a later run that checks nothing carries the kept miss into its own plan...
            run2 = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            assert await store.decisions.carry_misses(run2) == 1
            assert (await store.decisions.removal_plan(run2, gone_after=3, gone_statuses=[410])).carried == 1
            await store.decisions.settle_misses(run2, SETTLE_KEEP)
            await store.decisions.publish_run(run2, at=T0, gone_after=3, gone_statuses=[410])
            with pytest.raises(StateStoreError, match=f"carried to run {run2.id}"):
                await store.decisions.decision(run.id)
            # ...until the page answers again: no decision is left
            run3 = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            await store.pages.record(run3, rec("b"), [])
            await store.flush()
            with pytest.raises(StateStoreError, match="nothing of it waits"):
                await store.decisions.decision(run2.id)
            assert (await store.pages.get(f"{SITE}/b")).status == LIVE  # type: ignore[union-attr]

    @deferred_f_from_coro_f
    async def test_a_kept_miss_stays_kept_whatever_a_later_run_settles(
        self, uri: str, settings: Settings
    ) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            for name in ("a", "b"):
                await store.pages.record(run, rec(name), [])
                await store.pages.record_miss(run, f"{SITE}/{name}", 404)
            await store.decisions.settle_misses(run, SETTLE_KEEP)
            await store.decisions.publish_run(run, at=T0, gone_after=3, gone_statuses=[410])
            # the next run stages a again and does not reach b: both are carried, still kept
            run2 = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            await store.pages.record_miss(run2, f"{SITE}/a", 404)
            await store.decisions.carry_misses(run2)
            plan = await store.decisions.removal_plan(run2, gone_after=3, gone_statuses=[410])
            assert (plan.removals, plan.carried) == (2, 2)
            # within any bound, the run applies its own misses: not the ones kept for a person
            await store.decisions.settle_misses(run2, SETTLE_APPLY)
            result, _ = await store.decisions.publish_run(run2, at=T0, gone_after=3, gone_statuses=[410])
            assert result.quarantined == 0
            assert {p.status for p in store.readers.iter_pages()} == {LIVE}
            decided = await store.decisions.decision(run2.id)
            assert await store.decisions.release_kept(decided) == 2
            result, _ = await store.decisions.publish_run(decided, at=T0, gone_after=3, gone_statuses=[410])
            assert result.quarantined == 2

    @pytest.mark.parametrize("held", [True, False], ids=["held-run", "kept-removals"])
    @deferred_f_from_coro_f
    async def test_one_decision_wins_when_two_are_taken_at_once(
        self, uri: str, settings: Settings, held: bool
    ) -> None:
        """The decision is one conditional update of the run's row: of an approval and a discard
        in two connections at once, one is carried out and the other refused, naming it."""
        decide = {"gone_after": 3, "gone_statuses": [410]}
        async with self.opened(uri, settings) as first, self.opened(uri, settings) as second:
            run = await first.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            for name in ("a", "b"):
                await first.pages.record(run, rec(name), [])
            await first.decisions.publish_run(run, at=T0, **decide)
            run2 = await first.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            await first.pages.record(run2, rec("a", content_hash="h-a2"), [])
            await first.pages.record_miss(run2, f"{SITE}/b", 404)
            await first.decisions.settle_misses(run2, SETTLE_KEEP)
            if held:
                await first.decisions.hold_run(run2)
            else:
                await first.decisions.publish_run(run2, at=T0, **decide)
            await first.flush()
            # both see a decision waiting before either takes it
            decided = await first.decisions.decision(run2.id)
            assert (await second.decisions.decision(run2.id)).id == run2.id
            got = await asyncio.gather(
                first.decisions.approve(decided, at=T0, **decide),
                second.decisions.discard(run2.id),
                return_exceptions=True,
            )
            refused = [r for r in got if isinstance(r, BaseException)]
            assert len(refused) == 1, got
            assert isinstance(refused[0], StateStoreError)
            won = "discarded" if isinstance(got[0], BaseException) else "approved"
            assert f"run {run2.id} was {won} already" in str(refused[0])
            info = await first.kb.run_info(run2.id)
            assert info is not None
            if held:
                assert info["state"] == ("published" if won == "approved" else "discarded")
            b = await first.pages.get(f"{SITE}/b")
            assert b is not None
            assert b.status == (QUARANTINED if won == "approved" else LIVE)
            # and it stays taken: neither decision can be taken again
            for again in (
                first.decisions.discard(run2.id),
                second.decisions.approve(decided, at=T0, **decide),
            ):
                with pytest.raises(StateStoreError, match=f"was {won} already"):
                    await again

    @deferred_f_from_coro_f
    async def test_a_page_moves_only_onto_a_live_page(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            for name in ("old", "old2", "new"):
                await store.pages.record(run, rec(name), [])
            assert await store.pages.record_moves(run, [f"{SITE}/old"], f"{SITE}/new", http_status=301) == 1
            assert (
                await store.pages.record_moves(run, [f"{SITE}/old2"], f"{SITE}/nowhere", http_status=301) == 1
            )
            result, _ = await store.decisions.publish_run(run, at=T0, gone_after=3, gone_statuses=[410])
            assert result.moved == 1
            old = await store.pages.get(f"{SITE}/old")
            assert old is not None
            assert (old.status, old.moved_to) == (MOVED, f"{SITE}/new")
            assert (await store.pages.get(f"{SITE}/old2")).status == LIVE  # type: ignore[union-attr]


class ReadersContract(BackendMixin):
    @deferred_f_from_coro_f
    async def test_readers_see_committed_rows_in_their_order(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            for name in ("b", "a", "c"):
                await store.pages.record(run, rec(name, status=GONE if name == "c" else LIVE), [])
            await store.runs.finish_run(run, reason="finished", at=T0, report={"counts": {"new": 3}})
            run2 = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            await store.flush()
            assert [p.key for p in store.readers.iter_pages()] == [f"{SITE}/a", f"{SITE}/b", f"{SITE}/c"]
            assert [p.key for p in store.readers.iter_pages(GONE)] == [f"{SITE}/c"]
            runs = list(store.readers.iter_runs())
            assert [r["id"] for r in runs] == [run2.id, run.id]
            assert runs[1]["counts"] == {"new": 3}

    @deferred_f_from_coro_f
    async def test_run_report_and_the_pages_a_run_decided(self, uri: str, settings: Settings) -> None:
        t = [T0 + timedelta(minutes=m) for m in range(8)]
        async with self.opened(uri, settings) as store:
            run1 = await store.runs.begin_run("docs", SITE, t[0], holder=HOLDER, lease_secs=0)
            for name in ("a", "b"):
                await store.pages.record(run1, rec(name, first_seen=t[0], last_checked=t[0]), [])
            await store.runs.finish_run(
                run1, reason="finished", at=t[1], report={"counts": {"new": 2}, "x": 1}
            )
            run2 = await store.runs.begin_run("docs", SITE, t[2], holder=HOLDER, lease_secs=0)
            await store.pages.record(run2, rec("c", first_seen=t[3], last_checked=t[3]), [])
            b = rec("b", content_hash="h-b2", last_checked=t[3])
            change = ChangeRow(
                key=b.key, url=b.url, at=t[3], verdict="changed", old_hash="h-b", new_hash="h-b2",
                changed_fields=["text"], critical=["number: '8 MB' -> '16 MB'"], diff="-8 MB\n+16 MB",
            )  # fmt: skip
            await store.pages.record(run2, b, [], change=change)
            assert await store.pages.record_miss(run2, f"{SITE}/a", 404) == "staged"
            await store.decisions.publish_run(run2, at=t[4], gone_after=2, gone_statuses=[410])
            await store.runs.finish_run(run2, reason="finished", at=t[5], report={"counts": {"new": 1}})
            await store.flush()
            assert store.readers.run_report(999) is None
            changes = list(store.readers.iter_changes(run_id=run2.id))
            assert [(c["key"], c["critical"]) for c in changes] == [(b.key, ["number: '8 MB' -> '16 MB'"])]
            assert list(store.readers.iter_changes(run_id=run1.id)) == []
            info = store.readers.run_report(run1.id)
            assert info is not None
            assert (info["id"], info["counts"]) == (run1.id, {"new": 2})
            assert info["report"] == {"counts": {"new": 2}, "x": 1}
            assert [(p["url"], p["event"], p["status"]) for p in store.readers.iter_run_pages(run2.id)] == [
                (f"https://{SITE}/a", QUARANTINED, QUARANTINED),
                (f"https://{SITE}/c", "new", LIVE),
            ]
            # a page stays new in the run that first saw it, whatever became of it since
            assert [(p["url"], p["event"]) for p in store.readers.iter_run_pages(run1.id)] == [
                (f"https://{SITE}/a", "new"),
                (f"https://{SITE}/b", "new"),
            ]
            # a held run lists the removals it staged, with their HTTP status
            run3 = await store.runs.begin_run("docs", SITE, t[6], holder=HOLDER, lease_secs=0)
            await store.pages.record_miss(run3, f"{SITE}/b", 410)
            await store.decisions.settle_misses(run3, SETTLE_KEEP)
            await store.decisions.hold_run(run3)
            await store.flush()
            assert [
                (p["url"], p["event"], p["http_status"]) for p in store.readers.iter_run_pages(run3.id)
            ] == [(f"https://{SITE}/b", "held", 410)]


class TestSQLiteRuns(RunsContract, ReadersContract):
    @pytest.fixture
    def uri(self, tmp_path: Path) -> str:
        return f"sqlite:///{tmp_path / 'state.db'}"


@pytest.mark.postgres
class TestPostgreSQLRuns(RunsContract, ReadersContract):
    @pytest.fixture
    def uri(self, postgres_uri: str) -> str:
        # a fresh database per test (tests/postgres.py)
        return postgres_uri
