"""The readers' contract for how current the knowledge base is and what waits for a decision,
on every backend (SQLite and PostgreSQL): :meth:`Readers.freshness` and :meth:`Readers.iter_held_runs`."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.intervals import Revisit
from recrawler.kb.reader import open_kb
from recrawler.state import GONE, QUARANTINED, RevisitUpdate, Run
from recrawler.state.records import SETTLE_APPLY, SETTLE_KEEP
from recrawler.urls import page_key
from tests.state_contract import HOLDER, SITE, T0, BackendMixin, chunks, ev, rec

if TYPE_CHECKING:
    from pathlib import Path

    from scrapy.settings import Settings

    from recrawler.state import StateStore
    from recrawler.state.sql.check import Finding

OTHER = "other.example.org"
DAY = 86400.0


def found(via: str) -> RevisitUpdate:
    """A page write noting how the page was first found."""
    return RevisitUpdate(update=lambda before: before or Revisit(), found_via=via)


async def listing_run(
    store: StateStore, at_day: int, listed: list[str], *, reasons: tuple[str, ...] = (), finish: bool = True
) -> Run:
    """A run of SITE at T0 + *at_day* days whose listing named *listed* (stored pages only)."""
    at = T0 + timedelta(days=at_day)
    run = await store.runs.begin_run("docs", SITE, at, holder=HOLDER, lease_secs=0)
    await store.schedule.mark_listed(run, [(f"{SITE}/{name}", None) for name in listed])
    if finish:
        await store.runs.finish_run(
            run, reason="finished", at=at, report={"counts": {}}, reasons=reasons, listed=len(listed)
        )
    await store.flush()
    return run


class FreshnessContract(BackendMixin):
    @deferred_f_from_coro_f
    async def test_live_pages_verified_within_the_bound_and_the_oldest(
        self, uri: str, settings: Settings
    ) -> None:
        now = T0 + timedelta(days=10)
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            # checked 0.5, 1, 2 and 9 days before now; a gone and a quarantined page are no live page
            for name, days in (("fresh", 0.5), ("edge", 1.0), ("two", 2.0), ("old", 9.0), ("older", 9.0)):
                await store.pages.record(run, rec(name, last_checked=now - timedelta(days=days)), [])
            await store.pages.record(run, rec("left", status=GONE, last_checked=now - timedelta(days=30)), [])
            await store.pages.record(run, rec("away", status=QUARANTINED, last_checked=T0), [])
            await store.pages.record(run, rec("never", last_checked=None), [])
            other = await store.runs.begin_run("docs", OTHER, T0, holder=HOLDER, lease_secs=0)
            page = replace(rec("x", last_checked=now - timedelta(days=20)), key=f"{OTHER}/x", site=OTHER)
            await store.pages.record(other, replace(page, url=f"https://{OTHER}/x"), [])
            await store.flush()

            f = store.readers.freshness(SITE, bound_secs=DAY, now=now)
            assert (f.site, f.now, f.bound_secs) == (SITE, now, DAY)
            # "edge" was checked exactly one bound ago: within it; a page never checked is not
            assert (f.live, f.verified, f.stale) == (6, 2, 4)
            assert f.share == pytest.approx(2 / 6)
            assert f.oldest_checked == now - timedelta(days=9)
            assert f.oldest_url == f"https://{SITE}/old"  # the first by key of a tie
            assert (f.delisted, f.delisted_urls, f.listing_run) == (0, (), None)

            week = store.readers.freshness(SITE, bound_secs=7 * DAY, now=now)
            assert (week.verified, week.stale) == (3, 3)
            every = store.readers.freshness(None, bound_secs=DAY, now=now)
            assert (every.live, every.verified) == (7, 2)
            assert every.oldest_checked == now - timedelta(days=20)
            empty = store.readers.freshness("nowhere.example", bound_secs=DAY, now=now)
            assert (empty.live, empty.share, empty.oldest_checked, empty.oldest_url) == (0, None, None, None)

    @deferred_f_from_coro_f
    async def test_live_pages_missing_from_the_last_complete_listing(
        self, uri: str, settings: Settings
    ) -> None:
        async with self.opened(uri, settings) as store:
            run0 = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            for name in ("a", "b", "c", "d", "e"):
                await store.pages.record(run0, rec(name, last_checked=T0), [])
            # "linked" was found by a link: no listing ever named it, so none can drop it
            await store.pages.record(run0, rec("linked", last_checked=T0), [], revisit=found("link"))
            # "fresh" was stored from the sitemap by run0, which had no row of it to mark
            await store.pages.record(
                run0, rec("fresh", last_checked=T0, changed_run=run0.id), [], revisit=found("sitemap")
            )
            await store.runs.finish_run(run0, reason="finished", at=T0, report={"counts": {}}, listed=7)
            await store.flush()
            now = T0 + timedelta(days=5)

            run1 = await listing_run(store, 1, ["a", "b", "c", "d", "e", "fresh"])
            f = store.readers.freshness(SITE, bound_secs=DAY, now=now)
            assert (f.delisted, f.listing_run) == (0, run1.id)

            # run2's listing is complete and names neither d nor e nor fresh: delisted, still live
            run2 = await listing_run(store, 2, ["a", "b", "c"])
            f = store.readers.freshness(SITE, bound_secs=DAY, now=now)
            assert (f.delisted, f.listing_run) == (3, run2.id)
            assert f.delisted_urls == tuple(f"https://{SITE}/{n}" for n in ("d", "e", "fresh"))

            # a run whose listing failed, was cut short, shrank or did not finish is no reference
            for why in ("sitemap_failed", "sitemap_incomplete", "listing_shrunk", "not_finished"):
                await listing_run(store, 3, ["a"], reasons=(why, "error_ratio"))
            # nor is a run still running, or one whose listing read nothing (no sitemap)
            running = await listing_run(store, 4, ["a"], finish=False)
            assert store.readers.freshness(SITE, bound_secs=DAY, now=now).listing_run == run2.id
            await store.runs.finish_run(running, reason="finished", at=T0, report={"counts": {}}, listed=None)
            f = store.readers.freshness(SITE, bound_secs=DAY, now=now)
            assert (f.delisted, f.listing_run) == (3, run2.id)

            # a hold is no listing failure: the held run's complete listing is the reference
            held = await listing_run(store, 5, ["a", "b", "c", "d"], reasons=("mass_removal",))
            f = store.readers.freshness(SITE, bound_secs=DAY, now=now)
            assert (f.delisted, f.listing_run) == (2, held.id)
            # a page the listing dropped that then left the knowledge base is no longer counted
            run6 = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            await store.pages.record(run6, rec("e", status=GONE, last_checked=T0), [])
            await store.flush()
            f = store.readers.freshness(None, bound_secs=DAY, now=now)
            assert (f.delisted, f.delisted_urls, f.listing_run) == (1, (f"https://{SITE}/fresh",), None)


class HeldRunsContract(BackendMixin):
    @deferred_f_from_coro_f
    async def test_runs_that_wait_for_a_decision_with_their_reasons(
        self, uri: str, settings: Settings
    ) -> None:
        async with self.opened(uri, settings) as store:
            run1 = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            for name in ("a", "b", "c"):
                await store.pages.record(run1, rec(name, last_checked=T0), [])
            await store.decisions.publish_run(run1, at=T0, gone_after=2, gone_statuses=[410])
            await store.runs.finish_run(run1, reason="finished", at=T0, report={"counts": {}})
            assert list(store.readers.iter_held_runs()) == []

            # run 2's removals wait (a mass removal): the rest of it is published
            run2 = await store.runs.begin_run(
                "docs", SITE, T0 + timedelta(hours=1), holder=HOLDER, lease_secs=0
            )
            for name in ("a", "b"):
                await store.pages.record_miss(run2, f"{SITE}/{name}", 404)
            await store.decisions.settle_misses(run2, SETTLE_KEEP)
            await store.decisions.publish_run(run2, at=T0, gone_after=2, gone_statuses=[410])
            alert = "mass_removal: 2 of 3 live pages would leave the knowledge base"
            report = {"counts": {}, "held": ["mass_removal"], "alert": alert}
            finished = T0 + timedelta(hours=2)
            await store.runs.finish_run(
                run2, reason="finished", at=finished, report=report, reasons=["error_ratio", "mass_removal"]
            )
            await store.flush()

            (held,) = store.readers.iter_held_runs()
            assert (held.id, held.site, held.started_at, held.finished_at) == (
                run2.id,
                SITE,
                T0 + timedelta(hours=1),
                finished,
            )
            assert (held.holds, held.alert, held.reasons) == (
                ("mass_removal",),
                alert,
                ("error_ratio", "mass_removal"),
            )
            assert (held.staged_removals, held.state) == (2, "published")
            assert [r.id for r in store.readers.iter_held_runs(SITE)] == [run2.id]
            assert list(store.readers.iter_held_runs(OTHER)) == []

            # decided: nothing waits any more
            await store.decisions.discard(run2.id)
            await store.flush()
            assert list(store.readers.iter_held_runs()) == []

            # a run held whole (a change spike) of another site
            run3 = await store.runs.begin_run(
                "docs", OTHER, T0 + timedelta(hours=3), holder=HOLDER, lease_secs=0
            )
            await store.decisions.hold_run(run3)
            spike = {"counts": {}, "held": ["change_spike"], "alert": "change_spike: 3 of 3 pages"}
            await store.runs.finish_run(
                run3, reason="finished", at=finished, report=spike, reasons=["change_spike"]
            )
            await store.flush()
            (whole,) = store.readers.iter_held_runs()
            assert (whole.id, whole.site, whole.holds, whole.state) == (
                run3.id,
                OTHER,
                ("change_spike",),
                "held",
            )
            assert list(store.readers.iter_held_runs(SITE)) == []
            await store.decisions.discard(run3.id)
            await store.flush()
            assert list(store.readers.iter_held_runs()) == []


class RunPagesContract(BackendMixin):
    @deferred_f_from_coro_f
    async def test_a_runs_pages_are_shown_as_the_run_ended(self, uri: str, settings: Settings) -> None:
        t = [T0 + timedelta(minutes=m) for m in range(20)]
        async with self.opened(uri, settings) as store:

            async def publish(run: Run, at: datetime) -> None:
                await store.decisions.settle_misses(run, SETTLE_APPLY)
                await store.decisions.publish_run(run, at=at, gone_after=2, gone_statuses=[410])

            run1 = await store.runs.begin_run("docs", SITE, t[0], holder=HOLDER, lease_secs=0)
            for name in ("a", "b", "c", "d"):
                await store.pages.record(run1, rec(name, first_seen=t[0], last_checked=t[0]), [])
            await publish(run1, t[0])
            await store.runs.finish_run(run1, reason="finished", at=t[1], report={"counts": {"new": 4}})
            # run 2 quarantines a (a 404) and makes b gone (a 410)
            run2 = await store.runs.begin_run("docs", SITE, t[2], holder=HOLDER, lease_secs=0)
            await store.pages.record_miss(run2, f"{SITE}/a", 404)
            await store.pages.record_miss(run2, f"{SITE}/b", 410)
            await publish(run2, t[3])
            await store.runs.finish_run(
                run2, reason="finished", at=t[4], report={"counts": {"quarantined": 1}}
            )
            # run 3 makes a gone (its second 404)
            run3 = await store.runs.begin_run("docs", SITE, t[5], holder=HOLDER, lease_secs=0)
            await store.pages.record_miss(run3, f"{SITE}/a", 404)
            await publish(run3, t[6])
            await store.runs.finish_run(run3, reason="finished", at=t[7], report={"counts": {"gone": 1}})
            await store.flush()

            def shown(run: Run) -> list[tuple[str, str, str]]:
                return [
                    (p["url"].rsplit("/", 1)[1], p["event"], p["status"])
                    for p in store.readers.iter_run_pages(run.id)
                ]

            # run 2 still shows a quarantined, as it left it, though run 3 made it gone since
            assert shown(run2) == [("a", QUARANTINED, QUARANTINED), ("b", GONE, GONE)]
            assert shown(run3) == [("a", GONE, GONE)]
            # the pages run 1 made new were live when it ended
            assert shown(run1) == [(n, "new", "live") for n in ("a", "b", "c", "d")]

            # a run's removals wait for a decision; approving them records what they took out
            run4 = await store.runs.begin_run("docs", SITE, t[8], holder=HOLDER, lease_secs=0)
            await store.pages.record_miss(run4, f"{SITE}/c", 404)
            await store.decisions.settle_misses(run4, SETTLE_KEEP)
            await store.decisions.publish_run(run4, at=t[9], gone_after=2, gone_statuses=[410])
            await store.runs.finish_run(run4, reason="finished", at=t[10], report={"counts": {}})
            await store.flush()
            assert [(p["event"], p["status"]) for p in store.readers.iter_run_pages(run4.id)] == [
                ("held", "live")
            ]
            decided = await store.decisions.decision(run4.id)
            await store.decisions.release_kept(decided)
            await store.decisions.publish_run(decided, at=t[11], gone_after=2, gone_statuses=[410])
            await store.flush()
            assert shown(run4) == [("c", QUARANTINED, QUARANTINED)]
            # a run still running is shown from the pages as they are now
            run5 = await store.runs.begin_run("docs", SITE, t[12], holder=HOLDER, lease_secs=0)
            await store.pages.record(run5, rec("e", first_seen=t[13], last_checked=t[13]), [])
            await store.flush()
            assert shown(run5) == [("e", "new", "live")]


class EventsContract(BackendMixin):
    @deferred_f_from_coro_f
    async def test_events_are_read_from_the_outbox_whatever_the_events_uri(
        self, uri: str, settings: Settings
    ) -> None:
        settings.set("RECRAWLER_EVENTS_URI", None)
        t = [T0 + timedelta(minutes=m) for m in range(20)]
        async with self.opened(uri, settings) as store:
            run1 = await store.runs.begin_run("docs", SITE, t[0], holder=HOLDER, lease_secs=0)
            for name in ("a", "b", "c"):
                page = rec(name, title=name.upper(), first_seen=t[1], last_checked=t[1])
                await store.pages.record(run1, page, [replace(ev(run1, page), at=t[1])])
            await store.decisions.publish_run(run1, at=t[2], gone_after=2, gone_statuses=[410])
            await store.runs.finish_run(run1, reason="finished", at=t[2], report={"counts": {}})
            run2 = await store.runs.begin_run("docs", SITE, t[3], holder=HOLDER, lease_secs=0)
            b = rec("b", title="B2", content_hash="h-b2", last_checked=t[4])
            await store.pages.record(run2, b, [replace(ev(run2, b, "changed"), at=t[4])])
            await store.pages.record_miss(run2, f"{SITE}/c", 410)
            await store.decisions.settle_misses(run2, SETTLE_APPLY)
            await store.decisions.publish_run(run2, at=t[5], gone_after=2, gone_statuses=[410])
            await store.runs.finish_run(run2, reason="finished", at=t[6], report={"counts": {}})
            # a held run's events are no events (yet)
            run3 = await store.runs.begin_run("docs", SITE, t[7], holder=HOLDER, lease_secs=0)
            d = rec("d", first_seen=t[8], last_checked=t[8])
            await store.pages.record(run3, d, [replace(ev(run3, d), at=t[8])])
            await store.decisions.hold_run(run3)
            await store.runs.finish_run(run3, reason="finished", at=t[9], report={"counts": {}})
            await store.flush()

            def listed(**kw: Any) -> list[tuple[int, str, str]]:
                return [
                    (e["run_id"], e["action"], e["url"].rsplit("/", 1)[1])
                    for e in store.readers.iter_events(**kw)
                ]

            assert listed() == [
                (run1.id, "new", "a"),
                (run1.id, "new", "b"),
                (run1.id, "new", "c"),
                (run2.id, "changed", "b"),
                (run2.id, "gone", "c"),
            ]
            assert listed(run_id=run2.id) == [(run2.id, "changed", "b"), (run2.id, "gone", "c")]
            assert listed(since=t[4]) == listed(run_id=run2.id)
            assert listed(site=OTHER) == []
            # approved, the held run's events are events
            decided = await store.decisions.decision(run3.id)
            await store.decisions.publish_run(decided, at=t[10], gone_after=2, gone_statuses=[410])
            await store.flush()
            assert listed(run_id=run3.id) == [(run3.id, "new", "d")]


class CheckContract(BackendMixin):
    @deferred_f_from_coro_f
    async def test_a_page_stored_off_the_site_of_its_run_is_found_and_taken_out(
        self, uri: str, settings: Settings
    ) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            mine = rec("a")
            # a page of another host that a spider of SITE followed, and the same host's page
            # stored by a run of its own site: only the first is off its run's site
            stray = replace(rec("x"), key=f"{OTHER}/x", site=OTHER, url=f"https://{OTHER}/x")
            # a page of the other host the site's own listing names (allowed_hosts): the site's call
            listed = replace(rec("l"), key=f"{OTHER}/l", site=OTHER, url=f"https://{OTHER}/l")
            await store.pages.record(run, mine, [], chunks=chunks(mine, "a1"))
            await store.pages.record(run, stray, [], chunks=chunks(stray, "x1", "x2"))
            await store.pages.record(run, listed, [], chunks=chunks(listed, "l1"), revisit=found("sitemap"))
            await store.flush()
            await store.kb.publish(run.id, T0)
            other = await store.runs.begin_run("docs", OTHER, T0, holder=HOLDER, lease_secs=0)
            theirs = replace(rec("y"), key=f"{OTHER}/y", site=OTHER, url=f"https://{OTHER}/y")
            await store.pages.record(other, theirs, [], chunks=chunks(theirs, "y1"))
            await store.flush()
            await store.kb.publish(other.id, T0)

            def offsite() -> list[Finding]:
                # (the helper's chunk hashes are made up: those checks have findings of their own)
                return [
                    f for f in store.readers.check_sync(page_key, lease_secs=60) if f.check == "offsite_page"
                ]

            assert [(f.key, f.detail) for f in offsite()] == [
                (f"{OTHER}/x", f"on {OTHER}, stored by run {run.id} of {SITE}")
            ]
            assert await store.readers.repair(offsite()) == {"offsite_page": 1}
            assert offsite() == []
            with open_kb(uri, embedder="hashing") as kb:
                assert sorted(c.text for c in kb.chunks()) == ["a1", "l1", "y1"]


class ReadersFreshnessContract(
    FreshnessContract, HeldRunsContract, RunPagesContract, EventsContract, CheckContract
):
    """What a backend's test class inherits."""


class TestSQLiteReaders(ReadersFreshnessContract):
    @pytest.fixture
    def uri(self, tmp_path: Path) -> str:
        return f"sqlite:///{tmp_path / 'state.db'}"


@pytest.mark.postgres
class TestPostgreSQLReaders(ReadersFreshnessContract):
    @pytest.fixture
    def uri(self, postgres_uri: str) -> str:
        return postgres_uri
