"""SQLiteStateStore: misses, reconciliation, and its readers."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.events import JsonLinesSink
from recrawler.state.records import SETTLE_APPLY, SETTLE_DROP
from recrawler.state.sqlite import SQLiteStateStore
from tests.state_sqlite import SITE, T0, lines, opened, pages, query, rec

if TYPE_CHECKING:
    from pathlib import Path

    from recrawler.state import Run


# --- misses and reconciliation -------------------------------------------------------------


async def seed(store: SQLiteStateStore, *names: str, site: str = SITE) -> Run:
    run = await store.runs.begin_run("docs", site, T0, lease_secs=0)
    for name in names:
        await store.pages.record(run, rec(name, site=site, content_hash=f"h-{name}"), [])
    await store.flush()
    return run


async def reconcile(store: SQLiteStateStore, run: Run, *, apply: bool = True) -> Any:
    """What a run's end does: its misses settled, applied as it is published (or dropped)."""
    settled = await store.decisions.settle_misses(run, SETTLE_APPLY if apply else SETTLE_DROP)
    result, _ = await store.decisions.publish_run(
        run, at=T0 + timedelta(hours=1), gone_after=2, gone_statuses=[410]
    )
    return (
        result if apply else dataclasses.replace(result, applied=False, skipped_misses=settled.skipped_misses)
    )


@deferred_f_from_coro_f
async def test_record_miss_outcomes(db: Path) -> None:
    async with opened(db) as store:
        await seed(store, "live", "quarantined", "gone")
        await store.pages.record(
            await store.runs.begin_run("docs", SITE, T0, lease_secs=0),
            rec("quarantined", status="quarantined"),
            [],
        )
        await store.pages.record(
            await store.runs.begin_run("docs", SITE, T0, lease_secs=0), rec("gone", status="gone"), []
        )
        run = await store.runs.begin_run("docs", SITE, T0, lease_secs=0)
        assert await store.pages.record_miss(run, f"{SITE}/live", 404) == "staged"
        assert await store.pages.record_miss(run, f"{SITE}/quarantined", 404) == "staged"
        assert await store.pages.record_miss(run, f"{SITE}/gone", 404) == "tombstone"
        assert await store.pages.record_miss(run, f"{SITE}/never-stored", 404) == "unknown"
        await store.flush()
    staged = query(db, "SELECT key, http_status FROM run_misses WHERE run_id = ?", (run.id,))
    assert sorted(staged) == [(f"{SITE}/live", 404), (f"{SITE}/quarantined", 404)]


@deferred_f_from_coro_f
async def test_reconcile_quarantines_then_marks_gone(db: Path, events_path: Path) -> None:
    a, b, c = f"{SITE}/a", f"{SITE}/b", f"{SITE}/c"
    async with opened(db, sink=JsonLinesSink(str(events_path))) as store:
        await seed(store, "a", "b", "c")

        run2 = await store.runs.begin_run("docs", SITE, T0, lease_secs=0)
        assert await store.pages.record_miss(run2, a, 404) == "staged"
        assert await store.pages.record_miss(run2, b, 410) == "staged"
        result = await reconcile(store, run2)
        assert (result.applied, result.quarantined, result.gone) == (True, 1, {"http_410": 1})
        assert pages(db) == {a: ("quarantined", 1), b: ("gone", 1), c: ("live", 0)}

        run3 = await store.runs.begin_run("docs", SITE, T0, lease_secs=0)
        assert await store.pages.record_miss(run3, a, 404) == "staged"
        assert await store.pages.record_miss(run3, b, 410) == "tombstone"
        result = await reconcile(store, run3)
        assert (result.quarantined, result.gone) == (0, {"http_404": 1})
        assert pages(db) == {a: ("gone", 2), b: ("gone", 1), c: ("live", 0)}
        got = await store.pages.get(a)
        assert got is not None
        assert got.last_checked == T0 + timedelta(hours=1)
    events = [(e["run_id"], e["key"], e["action"], e["reason"]) for e in lines(events_path)]
    assert events == [
        (run2.id, a, "quarantined", "http_404"),
        (run2.id, b, "gone", "http_410"),
        (run3.id, a, "gone", "http_404"),
    ]
    assert {e["content_hash"] for e in lines(events_path)} == {"h-a", "h-b"}


@deferred_f_from_coro_f
async def test_a_page_seen_again_in_the_same_run_lifts_its_miss(db: Path) -> None:
    async with opened(db) as store:
        await seed(store, "a")
        run = await store.runs.begin_run("docs", SITE, T0, lease_secs=0)
        assert await store.pages.record_miss(run, f"{SITE}/a", 410) == "staged"
        await store.pages.record(run, rec("a", content_hash="h-a"), [])
        result = await reconcile(store, run)
        assert (result.quarantined, result.gone) == (0, {})
    assert pages(db) == {f"{SITE}/a": ("live", 0)}


@deferred_f_from_coro_f
async def test_reconcile_without_apply_changes_nothing(db: Path, events_path: Path) -> None:
    async with opened(db, sink=JsonLinesSink(str(events_path))) as store:
        await seed(store, "a", "b", "c")
        before = pages(db)
        run = await store.runs.begin_run("docs", SITE, T0, lease_secs=0)
        await store.pages.record_miss(run, f"{SITE}/a", 404)
        await store.pages.record_miss(run, f"{SITE}/b", 410)
        result = await reconcile(store, run, apply=False)
        assert (result.applied, result.skipped_misses) == (False, 2)
        assert (result.quarantined, result.gone) == (0, {})
        assert pages(db) == before
        # the staged misses are dropped, not kept for a later reconcile
        assert query(db, "SELECT COUNT(*) FROM run_misses") == [(0,)]
        again = await reconcile(store, run)
        assert (again.quarantined, again.gone) == (0, {})
    assert pages(db) == before
    assert lines(events_path) == []


@deferred_f_from_coro_f
async def test_unseen_returns_each_unreached_page_of_the_site_once(db: Path) -> None:
    async with opened(db) as store:
        await seed(store, "a", "b", "c", "d", "e", "gone")
        await seed(store, "x", site="other.org")
        await store.pages.record(
            await store.runs.begin_run("docs", SITE, T0, lease_secs=0), rec("gone", status="gone"), []
        )
        run = await store.runs.begin_run("docs", SITE, T0, lease_secs=0)
        await store.pages.record(run, rec("a"), [])
        assert await store.pages.record_miss(run, f"{SITE}/b", 404) == "staged"
        first = await store.pages.unseen(run, 2)
        assert first == [(f"{SITE}/c", "https://example.com/c", 0), (f"{SITE}/d", "https://example.com/d", 0)]
        assert await store.pages.unseen(run, 10) == [(f"{SITE}/e", "https://example.com/e", 0)]
        assert await store.pages.unseen(run, 10) == []
        # a new run starts over; the sync form has the same semantics
        run2 = await store.runs.begin_run("docs", SITE, T0, lease_secs=0)
        await store.pages.record(run2, rec("c"), [])
        assert [k for k, _, _ in store.pages.unseen_sync(run2, 10)] == [
            f"{SITE}/a", f"{SITE}/b", f"{SITE}/d", f"{SITE}/e",
        ]  # fmt: skip
        assert store.pages.unseen_sync(run2, 10) == []
        assert await store.pages.unseen(await store.runs.begin_run("docs", None, T0, lease_secs=0), 10) == []


# --- readers ---------------------------------------------------------------------------------


@deferred_f_from_coro_f
async def test_iter_pages_filters_by_status(db: Path) -> None:
    async with opened(db) as store:
        run = await store.runs.begin_run("docs", SITE, T0, lease_secs=0)
        for name, status in [("c", "live"), ("a", "live"), ("q", "quarantined"), ("g", "gone")]:
            await store.pages.record(run, rec(name, status=status), [])
    reader = SQLiteStateStore(str(db))
    assert [p.key for p in reader.readers.iter_pages()] == [f"{SITE}/{n}" for n in "acgq"]
    assert [p.key for p in reader.readers.iter_pages(status="live")] == [f"{SITE}/a", f"{SITE}/c"]
    assert [p.key for p in reader.readers.iter_pages(status="quarantined")] == [f"{SITE}/q"]
    assert [(p.key, p.status) for p in reader.readers.iter_pages(status="gone")] == [(f"{SITE}/g", "gone")]
    assert list(reader.readers.iter_pages(status="nope")) == []


@deferred_f_from_coro_f
async def test_finish_run_counts_are_visible_in_iter_runs(db: Path) -> None:
    counts = {"crawled": 3, "new": 1, "changed": 1, "unchanged": 1, "gone": 0, "errors": 0}
    async with opened(db) as store:
        first = await store.runs.begin_run("docs", SITE, T0, lease_secs=0)
        await store.runs.finish_run(
            first, reason="finished", at=T0 + timedelta(minutes=5), report={"counts": counts}
        )
        second = await store.runs.begin_run("other", None, T0 + timedelta(hours=1), lease_secs=0)
    runs = list(SQLiteStateStore(str(db)).readers.iter_runs())
    assert [r["id"] for r in runs] == [second.id, first.id]
    assert runs[0]["finish_reason"] is None
    assert runs[0]["counts"] is None
    assert runs[0]["site"] is None
    assert runs[1]["counts"] == counts
    assert runs[1]["finish_reason"] == "finished"
    assert runs[1]["spider"] == "docs"
    assert datetime.fromisoformat(runs[1]["finished_at"]) == T0 + timedelta(minutes=5)
    report = json.loads(query(db, "SELECT report FROM runs WHERE id = ?", (first.id,))[0][0])
    assert report == {"counts": counts}


@deferred_f_from_coro_f
async def test_begin_run_counts_prior_pages_of_its_site(db: Path) -> None:
    async with opened(db) as store:
        await seed(store, "a", "b", "g")
        await seed(store, "x", site="other.org")
        await store.pages.record(
            await store.runs.begin_run("docs", SITE, T0, lease_secs=0), rec("g", status="gone"), []
        )
        run = await store.runs.begin_run("docs", SITE, T0, lease_secs=0)
        assert run.prior_pages == 2
        assert (await store.runs.begin_run("docs", "new.org", T0, lease_secs=0)).prior_pages == 0


@pytest.mark.parametrize("folder", ["a#b", "q?x"])
@deferred_f_from_coro_f
async def test_readers_handle_uri_characters_in_the_path(tmp_path: Path, folder: str) -> None:
    path = tmp_path / folder / "state.db"
    path.parent.mkdir()
    async with opened(path) as store:
        run = await store.runs.begin_run("docs", SITE, T0, lease_secs=0)
        await store.pages.record(run, rec("a"), [])
    before = sorted(p.name for p in tmp_path.iterdir())
    try:
        keys = [p.key for p in SQLiteStateStore(str(path)).readers.iter_pages()]
    finally:
        assert sorted(p.name for p in tmp_path.iterdir()) == before  # no stray file created
    assert keys == [f"{SITE}/a"]
