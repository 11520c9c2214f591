"""SQLiteStateStore, schema 4: revisit state, unseen-and-due pages, trust records, deltafetch keys."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.intervals import Revisit
from tests.state_sqlite import SITE, T0, opened, query, rec

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

    from recrawler.state import Run
    from recrawler.state.sqlite import SQLiteStateStore

NOW = T0 + timedelta(days=10)


async def seeded(store: SQLiteStateStore, names: list[str]) -> Run:
    run = await store.runs.begin_run("docs", SITE, T0, lease_secs=0)
    for name in names:
        await store.pages.record(run, rec(name, content_hash=f"h-{name}"), [])
    return await store.runs.begin_run("docs", SITE, NOW, lease_secs=0)


@deferred_f_from_coro_f
async def test_unseen_takes_only_due_pages_and_never_listed_ones(tmp_path: Path) -> None:
    async with opened(tmp_path / "s.db") as store:
        run = await seeded(store, ["due", "later", "skipped", "never", "audited", "quar"])
        later = Revisit(last_check_at=T0, next_check_at=NOW + timedelta(days=1), interval=86400.0)
        for name in ("later", "skipped", "audited", "quar"):
            await store.schedule.record_revisit(f"{SITE}/{name}", later)
        await store.schedule.record_revisit(
            f"{SITE}/due", Revisit(last_check_at=T0, next_check_at=NOW - timedelta(seconds=1), interval=1.0)
        )
        await store.schedule.mark_listed(run, [(f"{SITE}/skipped", "lastmod")])
        await store.flush()
        conn_sql = "UPDATE pages SET {} WHERE key = ?"
        store.conn.execute(conn_sql.format("status = 'quarantined'"), (f"{SITE}/quar",))
        store.conn.execute(conn_sql.format("audit_run = ?"), (run.id, f"{SITE}/audited"))
        due = await store.pages.unseen(run, 100, due_at=NOW)
        assert [k for k, _, _ in due] == [f"{SITE}/{n}" for n in ("audited", "due", "never", "quar")]
        # without a clock (RECRAWLER_SCHEDULE=all) every unseen page counts, listed ones never
        run2 = await store.runs.begin_run("docs", SITE, NOW, lease_secs=0)
        await store.schedule.mark_listed(run2, [(f"{SITE}/skipped", "deltafetch")])
        assert len(await store.pages.unseen(run2, 100)) == 5


@deferred_f_from_coro_f
async def test_revisit_roundtrip_and_found_via_is_kept_from_the_first_finding(tmp_path: Path) -> None:
    async with opened(tmp_path / "s.db") as store:
        await seeded(store, ["a"])
        key = f"{SITE}/a"
        assert await store.schedule.revisit(key) == Revisit()
        rev = Revisit(
            last_check_at=NOW,
            next_check_at=NOW + timedelta(hours=5),
            interval=18000.0,
            checks=3.5,
            changes=1.25,
            checked_secs=9000.0,
            rate=1e-5,
        )
        await store.schedule.record_revisit(key, rev, found_via="link", found_from="https://x/index")
        await store.schedule.record_revisit(key, rev, found_via="feed", found_from="https://x/feed")
        assert await store.schedule.revisit(key) == rev
        before, after = await store.schedule.update_revisit(
            key, lambda prev: Revisit(checks=(prev.checks if prev else 0) + 1)
        )
        assert (before, after.checks) == (rev, 4.5)
        await store.schedule.record_revisit(key, rev)
        assert await store.schedule.revisit(f"{SITE}/nope") is None
        scheduled = await store.schedule.scheduled([key, f"{SITE}/nope"])
        assert list(scheduled) == [key]
        assert scheduled[key].revisit == rev
    assert query(tmp_path / "s.db", "SELECT found_via, found_from FROM pages") == [
        ("link", "https://x/index")
    ]


@deferred_f_from_coro_f
async def test_trust_records_switch_a_signal_off_and_reset(tmp_path: Path) -> None:
    async with opened(tmp_path / "s.db") as store:
        kwargs = {"url": "https://x/a", "at": NOW, "distrust_after": 2}
        first = await store.host_trust.record_trust("x", "etag", lied=False, **kwargs)  # type: ignore[arg-type]
        assert (first.checks, first.lies, first.trusted) == (1, 0, True)
        await store.host_trust.record_trust("x", "etag", lied=True, **kwargs)  # type: ignore[arg-type]
        off = await store.host_trust.record_trust("x", "etag", lied=True, **kwargs)  # type: ignore[arg-type]
        assert (off.checks, off.lies, off.trusted, off.last_lie_url) == (3, 2, False, "https://x/a")
        assert off.last_lie_at == NOW
        assert await store.host_trust.reset_trust("x", "lastmod") == 0
        assert await store.host_trust.reset_trust("x") == 1
        (again,) = await store.host_trust.trust()
        assert (again.checks, again.lies, again.trusted) == (3, 0, True)


@deferred_f_from_coro_f
async def test_deltafetch_keys_per_spider_and_reset_by_pattern(tmp_path: Path) -> None:
    async with opened(tmp_path / "s.db") as store:
        for spider, key, url in (
            ("docs", "k1", "https://x/v1.2/a"),
            ("docs", "k2", "https://x/v2/a"),
            ("other", "k1", "https://x/v1.2/a"),
        ):
            await store.host_trust.immutable_add(spider, key, url=url, page_key=None, at=NOW)
        assert await store.host_trust.immutable_seen("docs", ["k1", "k2", "k3"]) == {"k1", "k2"}
        assert await store.host_trust.immutable_reset("docs", r"/v1\.\d+/") == 1
        assert await store.host_trust.immutable_seen("docs", ["k1", "k2"]) == {"k2"}
        assert await store.host_trust.immutable_reset() == 2


@deferred_f_from_coro_f
async def test_audit_sample_is_a_share_or_a_count_of_live_pages(tmp_path: Path) -> None:
    async with opened(tmp_path / "s.db") as store:
        run = await seeded(store, [f"p{i}" for i in range(10)])
        assert len(await store.schedule.audit_sample(run, 0.25)) == 3
        assert len(await store.schedule.audit_sample(run, 4)) == 4
        assert await store.schedule.audit_sample(run, 0) == []
        await store.host_trust.immutable_add("docs", "k", url="https://x", page_key=f"{SITE}/p0", at=NOW)
        sample = await store.schedule.audit_sample(run, 100)
        assert len(sample) == 9
        assert f"{SITE}/p0" not in sample


@deferred_f_from_coro_f
async def test_a_lower_numbered_migration_from_another_branch_is_applied_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import recrawler.state.sqlite.versions as sqlite_module

    db = tmp_path / "s.db"
    async with opened(db):
        pass
    applied = [v for (v,) in query(db, "SELECT version FROM schema_version ORDER BY version")]
    real = sqlite_module._migrations()
    numbers = {n for n, _ in real}
    missing = (
        min(n for n in range(1, max(numbers) + 1) if n not in numbers)
        if len(numbers) < max(numbers)
        else None
    )
    if missing is None:
        # the branch that brings the gap is merged: nothing to fill
        assert applied == sorted(numbers)
        return
    extra = (missing, "CREATE TABLE from_other_branch (x INTEGER)")
    monkeypatch.setattr(sqlite_module, "_migrations", lambda: sorted([*real, extra]))
    async with opened(db):
        pass
    assert query(db, "SELECT name FROM sqlite_master WHERE name = 'from_other_branch'") == [
        ("from_other_branch",)
    ]
    assert sorted(v for (v,) in query(db, "SELECT version FROM schema_version")) == sorted(
        [*applied, missing]
    )


def test_schedule_times_compare_as_text() -> None:
    from recrawler.state.sqlite import _at

    early = datetime(2026, 1, 1, 0, 0, 0, tzinfo=UTC)
    late = early + timedelta(microseconds=1)
    assert _at(early) is not None
    assert _at(early) < _at(late)  # type: ignore[operator]
    assert _at(early) == "2026-01-01T00:00:00.000000+00:00"
