"""The schedule and trust roles' contracts, on every backend (SQLite and PostgreSQL): revisit
state, due order, audit samples, trust counters and immutable keys.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.exceptions import PageWriteError
from recrawler.intervals import Revisit
from recrawler.state import (
    GONE,
    LIVE,
    RevisitUpdate,
    SiteBuild,
)
from tests.state_contract import HOLDER, SITE, T0, BackendMixin, rec

if TYPE_CHECKING:
    from pathlib import Path

    from scrapy.settings import Settings


class ScheduleContract(BackendMixin):
    @deferred_f_from_coro_f
    async def test_revisit_state_round_trips_and_update_is_one_step(
        self, uri: str, settings: Settings
    ) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            await store.pages.record(run, rec("a"), [])
            assert await store.schedule.revisit(f"{SITE}/nope") is None
            first = Revisit(
                last_check_at=T0, next_check_at=T0 + timedelta(days=1), interval=86400.0, checks=1
            )
            await store.schedule.record_revisit(f"{SITE}/a", first, found_via="sitemap")
            assert await store.schedule.revisit(f"{SITE}/a") == first
            before, after = await store.schedule.update_revisit(
                f"{SITE}/a", lambda r: replace(r or first, checks=2)
            )
            assert (before, after.checks) == (first, 2)
            got = await store.schedule.scheduled([f"{SITE}/a", f"{SITE}/nope"])
            assert list(got) == [f"{SITE}/a"]
            assert got[f"{SITE}/a"].revisit == after

    @deferred_f_from_coro_f
    async def test_a_pages_next_revisit_is_written_with_the_page(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            seen: list[Revisit | None] = []

            def update(before: Revisit | None) -> Revisit:
                seen.append(before)
                assert before is not None  # the page row is written first
                return replace(before, last_check_at=T0, checks=before.checks + 1)

            first = await store.pages.record(
                run, rec("a"), [], revisit=RevisitUpdate(update=update, found_via="feed")
            )
            assert first is not None
            assert (first.checks, first.last_check_at) == (0, None)  # a new page: no checks yet
            assert (await store.schedule.scheduled([f"{SITE}/a"]))[f"{SITE}/a"].revisit.checks == 1
            before = await store.pages.record(
                run, rec("a", title="Again"), [], revisit=RevisitUpdate(update=update)
            )
            assert before is not None
            assert (before.checks, before.last_check_at) == (1, T0)
            assert len(seen) == 2
            # a write without one leaves the page's revisit state alone
            assert await store.pages.record(run, rec("a", title="Third"), []) is None
            assert (await store.schedule.scheduled([f"{SITE}/a"]))[f"{SITE}/a"].revisit.checks == 2

    @deferred_f_from_coro_f
    async def test_due_order_and_due_filter(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            due = {"late": 3, "soon": 1, "mid": 2}
            for name, days in due.items():
                await store.pages.record(run, rec(name), [])
                nxt = T0 + timedelta(days=days)
                await store.schedule.record_revisit(
                    f"{SITE}/{name}", Revisit(last_check_at=T0, next_check_at=nxt)
                )
            await store.pages.record(run, rec("never"), [])
            await store.flush()
            order = [p.key.rsplit("/", 1)[1] for p in store.readers.iter_schedule(SITE)]
            assert order == ["never", "soon", "mid", "late"]  # never scheduled: due now
            run2 = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER, lease_secs=0)
            picked = await store.pages.unseen(run2, 10, due_at=T0 + timedelta(days=2))
            assert [k.rsplit("/", 1)[1] for k, _, _ in picked] == ["mid", "never", "soon"]

    @deferred_f_from_coro_f
    async def test_audit_sample_draws_among_live_pages_of_the_site(
        self, uri: str, settings: Settings
    ) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            for i in range(6):
                await store.pages.record(run, rec(f"p{i}", status=GONE if i == 5 else LIVE), [])
            sample = await store.schedule.audit_sample(run, 3)
            assert len(sample) == 3
            assert set(sample) <= {f"{SITE}/p{i}" for i in range(5)}
            assert len(await store.schedule.audit_sample(run, 0.5)) in (2, 3)

    @deferred_f_from_coro_f
    async def test_probes_are_the_home_page_then_live_pages_drawn_at_random(
        self, uri: str, settings: Settings
    ) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            for i in range(6):
                await store.pages.record(
                    run, rec(f"p{i}", status=GONE if i == 5 else LIVE, lastmod="2026-01-01"), []
                )
            await store.pages.record(run, rec("index.html"), [])
            await store.flush()
            probes = await store.schedule.probe_sample(run, 3, [f"{SITE}/nope", f"{SITE}/index.html"])
            assert probes[0] == (f"{SITE}/index.html", f"https://{SITE}/index.html", None)
            assert len({k for k, _, _ in probes}) == 3
            assert {k for k, _, _ in probes[1:]} <= {f"{SITE}/p{i}" for i in range(5)}
            assert all(lastmod == "2026-01-01" for _, _, lastmod in probes[1:])
            assert len(await store.schedule.probe_sample(run, 20)) == 6
            assert await store.schedule.probe_sample(run, 0, [f"{SITE}/index.html"]) == []

    @deferred_f_from_coro_f
    async def test_a_deploy_takes_back_each_skipped_page_once(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            for name in ("a", "b", "c", "d"):
                await store.pages.record(run, rec(name), [])
                await store.schedule.record_revisit(f"{SITE}/{name}", Revisit(last_check_at=T0))
            # d was checked after the deploy (a probe): not taken back
            await store.schedule.record_revisit(f"{SITE}/d", Revisit(last_check_at=T0 + timedelta(hours=2)))
            await store.schedule.mark_listed(
                run,
                [
                    (f"{SITE}/a", "schedule"),
                    (f"{SITE}/b", "lastmod"),
                    (f"{SITE}/c", None),
                    (f"{SITE}/d", "schedule"),
                ],
                vouched=[(f"{SITE}/b", "lastmod")],
                at=T0 + timedelta(hours=1),
            )
            deploy = T0 + timedelta(hours=1)
            first = await store.schedule.take_skipped(run, before=deploy, limit=1)
            second = await store.schedule.take_skipped(run, before=deploy, limit=10)
            taken = [(k.rsplit("/", 1)[1], layer) for k, _, _, layer in [*first, *second]]
            assert sorted(taken) == [("a", "schedule"), ("b", "lastmod")]
            assert (len(first), await store.schedule.take_skipped(run, before=deploy, limit=10)) == (1, [])
            got = await store.schedule.scheduled([f"{SITE}/b", f"{SITE}/a"])
            assert (got[f"{SITE}/b"].verified_by, got[f"{SITE}/b"].verified_at) == ("lastmod", deploy)
            assert got[f"{SITE}/a"].verified_by == "request"

    @deferred_f_from_coro_f
    async def test_a_sites_build_round_trips(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings) as store:
            run = await store.runs.begin_run("docs", SITE, T0, holder=HOLDER)
            assert await store.schedule.site_build(SITE) is None
            build = SiteBuild(
                site=SITE,
                fingerprint={"meta:generator": "Sphinx 7.2"},
                noise=("link:/a.css?v=#",),
                deploy_at=T0,
                deploy_run=run.id,
                deploy_reason="listing moved: 1 added",
            )
            await store.schedule.record_site_build(build, T0)
            assert await store.schedule.site_build(SITE) == build
            quiet = replace(build, lastmod_noise=True, deploy_at=None, deploy_run=None, deploy_reason=None)
            await store.schedule.record_site_build(quiet, T0)
            assert await store.schedule.site_build(SITE) == quiet
            await store.flush()
            assert list(store.readers.iter_site_builds()) == [quiet]
            await store.pages.record(run, rec("a"), [])
            await store.pages.record(run, rec("b", status=GONE), [])
            await store.schedule.mark_solo([f"{SITE}/a"], solo=True)
            assert (await store.schedule.scheduled([f"{SITE}/a"]))[f"{SITE}/a"].solo is True
            assert await store.schedule.live_pages(SITE) == 1


class TrustContract(BackendMixin):
    @deferred_f_from_coro_f
    async def test_trust_counters_switch_a_liar_off_until_reset(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings) as store:
            kw: dict[str, Any] = {"url": "https://h/x", "at": T0, "distrust_after": 2}
            first = await store.host_trust.record_trust("h", "etag", lied=False, **kw)
            assert (first.checks, first.lies, first.trusted) == (1, 0, True)
            await store.host_trust.record_trust("h", "etag", lied=True, **kw)
            off = await store.host_trust.record_trust("h", "etag", lied=True, **kw)
            assert (off.checks, off.lies, off.trusted, off.last_lie_url) == (3, 2, False, "https://h/x")
            still = await store.host_trust.record_trust("h", "etag", lied=False, **kw)
            assert not still.trusted
            await store.host_trust.record_trust("h", "lastmod", lied=False, **kw)
            await store.flush()
            assert [(t.signal, t.trusted) for t in await store.host_trust.trust()] == [
                ("etag", False),
                ("lastmod", True),
            ]
            assert [t.signal for t in store.readers.iter_trust()] == ["etag", "lastmod"]
            assert await store.host_trust.reset_trust("h", "etag") == 1
            assert all(t.trusted and t.lies == 0 for t in await store.host_trust.trust())

    @deferred_f_from_coro_f
    async def test_claims_made_together_are_each_counted_in_one_write(
        self, uri: str, settings: Settings
    ) -> None:
        """A forced recheck's claims arrive at once: each is counted, the lies switch the signal
        off, and every claim of one signal gets the record their write left."""
        async with self.opened(uri, settings) as store:
            kw: dict[str, Any] = {"at": T0, "distrust_after": 3}
            lastmod = [
                store.host_trust.record_trust(
                    "h", "lastmod", lied=i in (100, 200, 250), url=f"https://h/{i}", **kw
                )
                for i in range(300)
            ]
            etag = [
                store.host_trust.record_trust("h", "etag", lied=False, url="https://h/e", **kw)
                for _ in range(50)
            ]
            got = await asyncio.gather(*lastmod, *etag)
            assert {(r.signal, r.checks, r.lies, r.trusted, r.last_lie_url) for r in got} == {
                ("lastmod", 300, 3, False, "https://h/250"),
                ("etag", 50, 0, True, None),
            }
            later = await store.host_trust.record_trust("h", "lastmod", lied=False, url="https://h/x", **kw)
            assert (later.checks, later.lies, later.trusted) == (301, 3, False)
            await store.flush()
            assert [(t.signal, t.checks) for t in await store.host_trust.trust()] == [
                ("etag", 50),
                ("lastmod", 301),
            ]

    @deferred_f_from_coro_f
    async def test_a_claim_the_database_refuses_fails_alone_among_claims_made_together(
        self, uri: str, settings: Settings
    ) -> None:
        async with self.opened(uri, settings) as store:
            kw: dict[str, Any] = {"at": T0, "distrust_after": 5}
            got = await asyncio.gather(
                *(
                    store.host_trust.record_trust(
                        "h", "etag", lied=i == 7, url=object() if i == 7 else "u", **kw
                    )  # type: ignore[arg-type]
                    for i in range(20)
                ),
                return_exceptions=True,
            )
            assert [i for i, r in enumerate(got) if isinstance(r, BaseException)] == [7]
            assert isinstance(got[7], PageWriteError)
            await store.flush()
            assert [(t.checks, t.lies, t.trusted) for t in await store.host_trust.trust()] == [(19, 0, True)]

    @deferred_f_from_coro_f
    async def test_immutable_keys_are_per_spider(self, uri: str, settings: Settings) -> None:
        async with self.opened(uri, settings) as store:
            await store.host_trust.immutable_add("docs", "k1", url="https://x/a", page_key=None, at=T0)
            await store.host_trust.immutable_add("docs", "k2", url="https://x/b", page_key=None, at=T0)
            await store.host_trust.immutable_add("other", "k1", url="https://x/a", page_key=None, at=T0)
            assert await store.host_trust.immutable_seen("docs", ["k1", "k2", "k3"]) == {"k1", "k2"}
            assert await store.host_trust.immutable_reset("docs", pattern=r"/b$") == 1
            assert await store.host_trust.immutable_seen("docs", ["k1", "k2"]) == {"k1"}
            await store.flush()
            assert [(r["spider"], r["key"]) for r in store.readers.iter_immutable()] == [
                ("docs", "k1"),
                ("other", "k1"),
            ]


class TestSQLiteScheduleTrust(ScheduleContract, TrustContract):
    @pytest.fixture
    def uri(self, tmp_path: Path) -> str:
        return f"sqlite:///{tmp_path / 'state.db'}"


@pytest.mark.postgres
class TestPostgreSQLScheduleTrust(ScheduleContract, TrustContract):
    @pytest.fixture
    def uri(self, postgres_uri: str) -> str:
        # a fresh database per test (tests/postgres.py)
        return postgres_uri
