"""SQLiteStateStore: records, group commits, and the outbox."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.events import JsonLinesSink
from recrawler.exceptions import StateStoreError
from recrawler.state.sqlite import SQLiteStateStore
from tests.state_sqlite import EVENT_KEYS, SITE, T0, event, lines, opened, pages, query, rec
from tests.waiting import until

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from recrawler.state import Event
    from recrawler.state.sql.dialect import Work


# --- records ---------------------------------------------------------------------------------


@deferred_f_from_coro_f
async def test_record_get_round_trip(db: Path) -> None:
    page = rec(
        "guide/intro",
        etag='W/"abc"',
        last_modified="Thu, 01 Jan 2026 00:00:00 GMT",
        lastmod="2026-01-01T10:00:00+02:00",
        content_hash="0" * 64,
        fuzzy_hash="T1ABC",
        title="Intro \u00e9",
        status="quarantined",
        misses=1,
        last_checked=T0 + timedelta(minutes=1),
        last_changed=T0 - timedelta(days=3),
    )
    async with opened(db) as store:
        assert await store.pages.get(page.key) is None
        run = await store.runs.begin_run("docs", SITE, T0, lease_secs=0)
        await store.pages.record(run, page, [])
        got = await store.pages.get(page.key)
    assert got == dataclasses.replace(page, last_seen_run=run.id)
    assert got is not None
    assert got.first_seen.tzinfo is not None
    assert got.last_checked is not None
    assert got.last_checked.utcoffset() == timedelta(0)


@deferred_f_from_coro_f
async def test_record_updates_in_place_but_keeps_first_seen(db: Path) -> None:
    async with opened(db) as store:
        run = await store.runs.begin_run("docs", SITE, T0, lease_secs=0)
        await store.pages.record(run, rec("a", content_hash="h1", etag='"1"'), [])
        later = dataclasses.replace(rec("a", content_hash="h2"), first_seen=T0 + timedelta(days=1))
        await store.pages.record(run, later, [])
        got = await store.pages.get(f"{SITE}/a")
    assert got is not None
    assert (got.content_hash, got.etag, got.first_seen) == ("h2", None, T0)
    assert query(db, "SELECT COUNT(*) FROM pages") == [(1,)]


@deferred_f_from_coro_f
async def test_group_commit(db: Path) -> None:
    async with opened(db, batch_size=3, commit_secs=3600) as store:
        run = await store.runs.begin_run("docs", SITE, T0, lease_secs=0)
        await store.pages.record(run, rec("a"), [])
        await store.pages.record(run, rec("b"), [])
        assert pages(db) == {}
        # the store itself reads its own pending writes
        assert await store.pages.get(f"{SITE}/b") is not None
        await store.pages.record(run, rec("c"), [])
        assert set(pages(db)) == {f"{SITE}/a", f"{SITE}/b", f"{SITE}/c"}
        await store.pages.record(run, rec("d"), [])
        assert f"{SITE}/d" not in pages(db)
        await store.flush()
        assert f"{SITE}/d" in pages(db)


@deferred_f_from_coro_f
async def test_close_commits_pending_writes(db: Path) -> None:
    async with opened(db, batch_size=100, commit_secs=3600) as store:
        run = await store.runs.begin_run("docs", SITE, T0, lease_secs=0)
        await store.pages.record(run, rec("a"), [])
        assert pages(db) == {}
    assert pages(db) == {f"{SITE}/a": ("live", 0)}


@deferred_f_from_coro_f
async def test_commit_secs_bounds_the_wait_of_a_lone_write(db: Path) -> None:
    async with opened(db, batch_size=100, commit_secs=0.05) as store:
        run = await store.runs.begin_run("docs", SITE, T0, lease_secs=0)
        await store.pages.record(run, rec("a"), [])
        # committed by the timer alone (nothing else is written or flushed)
        await asyncio.to_thread(until, lambda: pages(db), "the lone write committed", timeout=1.0)
        assert pages(db) == {f"{SITE}/a": ("live", 0)}


# --- outbox ----------------------------------------------------------------------------------


@deferred_f_from_coro_f
async def test_events_are_delivered_after_commit(db: Path, events_path: Path) -> None:
    sink = JsonLinesSink(str(events_path))
    async with opened(db, batch_size=3, commit_secs=3600, sink=sink) as store:
        # each page published as it commits: its events go out with the commit
        run = await store.runs.begin_run("docs", SITE, T0, lease_secs=0, publish_each_page=True)
        a, b = rec("a", content_hash="ha"), rec("b", content_hash="hb")
        await store.pages.record(run, a, [event(run, a)])
        await store.pages.record(run, b, [event(run, b), event(run, b, "restored")])
        assert lines(events_path) == []
        await store.pages.record(run, rec("c"), [])
        delivered = lines(events_path)
        assert [(e["key"], e["action"]) for e in delivered] == [
            (a.key, "new"), (b.key, "new"), (b.key, "restored"),
        ]  # fmt: skip
        for e in delivered:
            assert set(e) >= EVENT_KEYS
            assert e["run_id"] == run.id
            assert e["status"] == "live"
            assert datetime.fromisoformat(e["at"]) == T0
        assert delivered[0]["content_hash"] == "ha"
        assert delivered[0]["url"] == "https://example.com/a"
        # delivered events stay in the log, marked
        assert query(db, "SELECT COUNT(*), SUM(delivered) FROM outbox") == [(3, 3)]
        d = rec("d", content_hash=None)
        await store.pages.record(run, d, [event(run, d)])
        assert len(lines(events_path)) == 3
        await store.flush()
    assert lines(events_path)[3]["key"] == d.key
    assert lines(events_path)[3]["content_hash"] is None  # kept as null, not dropped


@deferred_f_from_coro_f
async def test_no_sink_keeps_the_log_and_nothing_waits(db: Path) -> None:
    """RECRAWLER_EVENTS_URI=None: events are still logged (``recrawler changes`` reads them), marked
    delivered, so nothing waits for a sink configured later."""
    async with opened(db, batch_size=1) as store:
        run = await store.runs.begin_run("docs", SITE, T0, lease_secs=0)
        a = rec("a", content_hash="h")
        await store.pages.record(run, a, [event(run, a)])
        await store.pages.record_miss(await store.runs.begin_run("docs", SITE, T0, lease_secs=0), a.key, 410)
        assert await store.pending_events() == 0
    assert query(db, "SELECT key, action, delivered FROM outbox") == [(a.key, "new", 1)]
    assert pages(db) == {a.key: ("live", 0)}


class FailingSink(JsonLinesSink):
    """A sink whose disk is full."""

    def deliver(self, lines: Sequence[str]) -> None:
        raise OSError(28, "No space left on device")


@deferred_f_from_coro_f
async def test_sink_failure_keeps_events_in_the_outbox(db: Path, events_path: Path) -> None:
    store = SQLiteStateStore(str(db), batch_size=1, sink=FailingSink(str(events_path)))
    await store.open()
    try:
        run = await store.runs.begin_run("docs", SITE, T0, lease_secs=0)
        a = rec("a")
        await store.pages.record(run, a, [event(run, a)])  # a failed delivery does not fail the page
    finally:
        await store.close()
    # the page committed; its event waits in the outbox for the next delivery
    assert pages(db) == {f"{SITE}/a": ("live", 0)}
    assert len(query(db, "SELECT payload FROM outbox")) == 1


class FailingOutboxStore(SQLiteStateStore):
    """Fails a page write after its page row was written, inside the page's savepoint."""

    fail = False

    def _outbox(self, events: Sequence[Event]) -> Work[None]:
        yield from super()._outbox(events)
        if self.fail:
            raise sqlite3.IntegrityError("injected failure")


@deferred_f_from_coro_f
async def test_failed_page_write_leaves_earlier_state_and_no_event(db: Path, events_path: Path) -> None:
    store = FailingOutboxStore(str(db), batch_size=3, commit_secs=3600, sink=JsonLinesSink(str(events_path)))
    await store.open()
    try:
        run = await store.runs.begin_run("docs", SITE, T0, lease_secs=0, publish_each_page=True)
        a, b = rec("a", content_hash="h1"), rec("b")
        await store.pages.record(run, a, [event(run, a)])
        await store.pages.record(run, b, [])  # same group transaction, still uncommitted
        store.fail = True
        changed = rec("a", content_hash="h2")
        with pytest.raises(StateStoreError, match="injected failure") as exc_info:
            await store.pages.record(run, changed, [event(run, changed, "changed")])
        assert isinstance(exc_info.value.__cause__, sqlite3.IntegrityError)
        store.fail = False
        got = await store.pages.get(a.key)
        assert got is not None
        assert got.content_hash == "h1"
        await store.flush()
    finally:
        await store.close()
    # the failed page rolled back alone: the rest of its group committed
    assert set(pages(db)) == {a.key, b.key}
    assert query(db, "SELECT content_hash FROM pages WHERE key = ?", (a.key,)) == [("h1",)]
    assert [(e["key"], e["action"]) for e in lines(events_path)] == [(a.key, "new")]


@deferred_f_from_coro_f
async def test_check_constraint_violation_is_a_state_store_error(db: Path, events_path: Path) -> None:
    async with opened(db, batch_size=1, sink=JsonLinesSink(str(events_path))) as store:
        run = await store.runs.begin_run("docs", SITE, T0, lease_secs=0, publish_each_page=True)
        a = rec("a", content_hash="h1")
        await store.pages.record(run, a, [event(run, a)])
        bogus = rec("a", content_hash="h2", status="bogus")
        with pytest.raises(StateStoreError, match="CHECK constraint"):
            await store.pages.record(run, bogus, [event(run, bogus, "changed")])
        got = await store.pages.get(a.key)
        assert got is not None
        assert (got.status, got.content_hash) == ("live", "h1")
        # the store carries on after a failed page
        await store.pages.record(run, rec("b"), [])
    assert set(pages(db)) == {a.key, f"{SITE}/b"}
    assert [e["action"] for e in lines(events_path)] == ["new"]
