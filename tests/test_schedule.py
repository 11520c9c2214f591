"""Adaptive revisits (pure): the Poisson estimator, intervals within bounds, due decisions."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from recrawler.exceptions import ConfigurationError
from recrawler.intervals import (
    EARLY,
    Decision,
    Revisit,
    SchedulePolicy,
    audit_count,
    change_rate,
    next_revisit,
    parse_audit_sample,
    parse_now,
    phase_secs,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DAY = 86400.0
URL = "https://docs.example.com/a.html"


def policy(now: datetime = T0, **kwargs: object) -> SchedulePolicy:
    return SchedulePolicy(now=now, max_secs=30 * DAY, **kwargs)  # type: ignore[arg-type]


def test_estimator_is_cho_and_garcia_molina() -> None:
    # n = 10 daily checks, X = 4 changes: r = -log((10 - 4 + 0.5) / 10.5) per day
    assert change_rate(10, 4, 10 * DAY) == pytest.approx(-math.log(6.5 / 10.5) / DAY)
    assert change_rate(10, 0, 10 * DAY) == 0
    # every check found a change: finite, growing with n
    assert change_rate(10, 10, 10 * DAY) == pytest.approx(math.log(21) / DAY)
    assert change_rate(0, 0, 0) is None


def test_a_page_comes_due_at_its_own_time_within_its_bound() -> None:
    rev = policy().after_check(None, url=URL, changed=False, new=True)
    assert rev.interval == 30 * DAY
    assert rev.next_check_at is not None
    # the next check is the page's phase: within the bound, never before the early slack
    assert T0 + timedelta(seconds=30 * DAY * EARLY) < rev.next_check_at <= T0 + timedelta(days=30, hours=30)
    assert (rev.next_check_at.timestamp() - phase_secs(URL, 30 * DAY)) % (30 * DAY) == 0
    assert (rev.checks, rev.changes, rev.checked_secs) == (0, 0, 0)


def test_checks_keep_the_phase_and_count_changes_for_the_estimate() -> None:
    rev = next_revisit(None, changed=False, now=T0, url=URL, bound=DAY)
    phase = rev.next_check_at
    assert phase is not None
    now = T0
    for day in range(1, 6):
        now = T0 + timedelta(days=day, minutes=day)
        rev = next_revisit(rev, changed=day % 2 == 0, now=now, url=URL, bound=DAY)
        assert rev.next_check_at is not None
        # the same time of day, whenever the check happened
        assert (rev.next_check_at - phase).total_seconds() % DAY == 0
        assert rev.next_check_at - now <= timedelta(days=1)
    assert (rev.checks, rev.changes) == (5, 2)
    assert rev.rate is not None
    assert rev.rate > 0


def test_pages_come_due_spread_over_the_bound_never_at_once() -> None:
    # 2,400 pages first checked together: hourly runs a day later find about 100 due each
    due_hour = [0] * 24
    for i in range(2400):
        url = f"https://docs.example.com/p{i}.html"
        rev = next_revisit(None, changed=False, now=T0, url=url, bound=DAY)
        for hour in range(1, 25):
            if SchedulePolicy(now=T0 + timedelta(hours=hour)).decide(rev, url=url, status="live").due:
                due_hour[hour - 1] += 1
                break
    assert sum(due_hour) == 2400
    assert max(due_hour) < 160
    assert min(due_hour) > 50


def test_a_second_check_at_the_same_clock_learns_nothing() -> None:
    rev = Revisit(last_check_at=T0, next_check_at=T0 + timedelta(days=8), interval=8 * DAY, checks=3)
    assert next_revisit(rev, changed=False, now=T0, url=URL, bound=DAY) == rev
    assert next_revisit(rev, changed=True, now=T0, url=URL, bound=DAY) == rev


def test_overrides_bound_matching_urls() -> None:
    p = policy(overrides={r"/changelog": 3600, r"/v\d+/": [None, 365 * DAY], r"/old/": [60, 7 * DAY]})
    assert p.bound("https://x/changelog.html") == 3600
    assert p.bound("https://x/v2/a.html") == 365 * DAY
    # [min, max], the form of the per-page schedule: its max is the bound
    assert p.bound("https://x/old/a.html") == 7 * DAY
    assert p.bound(URL) == 30 * DAY
    rev = p.after_check(None, url="https://x/changelog.html", changed=False, new=True)
    assert rev.interval == 3600


@pytest.mark.parametrize(
    ("kwargs", "setting"),
    [
        ({"mode": "sometimes"}, "RECRAWLER_SCHEDULE"),
        ({"lastmod_mode": "trust"}, "RECRAWLER_LASTMOD_MODE"),
        ({"overrides": {"(": 5}}, "RECRAWLER_INTERVAL_OVERRIDES"),
        ({"overrides": {"a": -5}}, "RECRAWLER_INTERVAL_OVERRIDES"),
        ({"overrides": {"a": "soon"}}, "RECRAWLER_INTERVAL_OVERRIDES"),
    ],
)
def test_bad_settings_name_the_setting(kwargs: dict[str, object], setting: str) -> None:
    with pytest.raises(ConfigurationError, match=setting):
        policy(**kwargs)
    with pytest.raises(ConfigurationError, match="RECRAWLER_MAX_INTERVAL_SECS"):
        SchedulePolicy(now=T0, max_secs=0)


def _rev(last: datetime, nxt: datetime) -> Revisit:
    return Revisit(last_check_at=last, next_check_at=nxt, interval=(nxt - last).total_seconds())


NOW = T0 + timedelta(days=10)
NOT_DUE = _rev(NOW - timedelta(days=1), NOW + timedelta(days=3))
DUE = _rev(NOW - timedelta(days=4), NOW - timedelta(hours=1))
OLD = "2025-12-20"  # before the last check
NEWER = (NOW - timedelta(hours=2)).isoformat()  # after the last check


@pytest.mark.parametrize(
    ("mode", "rev", "status", "lastmod", "extra", "expected"),
    [
        ("hint", None, None, None, {}, (True, "new")),
        ("hint", NOT_DUE, "gone", None, {}, (True, "new")),
        ("hint", NOT_DUE, "live", None, {}, (False, "schedule")),
        ("hint", DUE, "live", None, {}, (True, "scheduled")),
        ("hint", NOT_DUE, "quarantined", None, {}, (True, "quarantined")),
        ("hint", NOT_DUE, "live", NEWER, {}, (True, "lastmod")),
        ("hint", NOT_DUE, "live", OLD, {}, (False, "schedule")),
        ("hint", DUE, "live", OLD, {}, (True, "scheduled")),  # hint: not found honest yet
        ("hint", DUE, "live", OLD, {"lastmod_honest": True}, (False, "lastmod")),  # found honest
        ("skip", DUE, "live", OLD, {}, (False, "lastmod")),  # skip trusts "unchanged"
        ("skip", NOT_DUE, "live", NEWER, {}, (True, "lastmod")),
        ("skip", DUE, "live", None, {}, (True, "scheduled")),  # missing: unknown
        ("skip", DUE, "live", "2030-01-01", {}, (True, "scheduled")),  # future: unknown
        ("skip", NOT_DUE, "live", "garbage", {}, (False, "schedule")),
        ("skip", DUE, "live", OLD, {"lastmod_trusted": False}, (True, "scheduled")),
        ("skip", DUE, "live", None, {"feed_updated": NOW - timedelta(days=5)}, (False, "lastmod")),
        ("hint", NOT_DUE, "live", OLD, {"site": "docs.example.com"}, (True, "deploy")),
        ("skip", NOT_DUE, "live", OLD, {"site": "docs.example.com", "audit": True}, (True, "deploy")),
        ("hint", NOT_DUE, "live", OLD, {"site": "other.example.com"}, (False, "schedule")),
        ("ignore", NOT_DUE, "live", NEWER, {}, (False, "schedule")),
        ("hint", NOT_DUE, "live", None, {"audit": True}, (True, "audit")),
        ("skip", NOT_DUE, "live", OLD, {"audit": True}, (True, "audit")),
        ("hint", NOT_DUE, "live", None, {"feed_updated": NOW - timedelta(hours=3)}, (True, "feed")),
        ("hint", NOT_DUE, "live", None, {"feed_updated": NOW - timedelta(days=2)}, (False, "schedule")),
        ("hint", Revisit(), "live", None, {}, (True, "unscheduled")),  # stored before schedules
    ],
)
def test_decide(
    mode: str,
    rev: Revisit | None,
    status: str | None,
    lastmod: str | None,
    extra: dict[str, object],
    expected: tuple[bool, str],
) -> None:
    p = SchedulePolicy(now=NOW, lastmod_mode=mode, max_secs=30 * DAY)
    # a deploy of docs.example.com detected after the last checks of NOT_DUE and DUE
    p.deployed("docs.example.com", NOW - timedelta(minutes=5))
    decision = p.decide(rev, url=URL, status=status, lastmod=lastmod, **extra)  # type: ignore[arg-type]
    assert (decision.due, decision.reason) == expected


def test_a_trusted_lastmod_vouches_for_its_page_past_the_bound() -> None:
    p = SchedulePolicy(now=NOW, lastmod_mode="skip", max_secs=5 * DAY)
    # checked (after OLD) longer ago than the bound, due long since by its own time
    long_ago = _rev(NOW - timedelta(days=9), NOW - timedelta(days=4))
    assert p.decide(long_ago, url=URL, status="live", lastmod=OLD) == Decision(False, "lastmod", "lastmod")
    # a feed entry vouches alike, and says so
    assert p.decide(long_ago, url=URL, status="live", feed_updated=NOW - timedelta(days=30)) == Decision(
        False, "lastmod", "feed"
    )
    # a page checked after the deploy is not asked again for it
    p.deployed("docs.example.com", NOW - timedelta(days=1))
    recent = _rev(NOW - timedelta(hours=1), NOW + timedelta(hours=20))
    assert p.decide(recent, url=URL, status="live", site="docs.example.com").reason == "schedule"


def test_all_checks_every_known_page() -> None:
    p = SchedulePolicy(now=NOW, mode="all", lastmod_mode="skip")
    assert p.decide(NOT_DUE, url=URL, status="live", lastmod=OLD).reason == "all"


def test_now_and_audit_sample_parsing() -> None:
    assert parse_now(None) is None
    assert parse_now("2026-01-02T03:04:05Z") == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert parse_now("2026-01-02") == datetime(2026, 1, 2, tzinfo=UTC)
    assert parse_now("2026-01-02T03:00:00+02:00") == datetime(2026, 1, 2, 1, tzinfo=UTC)
    with pytest.raises(ConfigurationError, match="RECRAWLER_NOW"):
        parse_now("next tuesday")
    assert parse_audit_sample("2%") == 0.02
    assert parse_audit_sample(0.5) == 0.5
    assert parse_audit_sample("20") == 20
    assert isinstance(parse_audit_sample("20"), int)
    assert isinstance(parse_audit_sample("100%"), float)
    assert isinstance(parse_audit_sample("1.0"), float)
    for bad in ("-1", "lots", "200%", "1.5"):
        with pytest.raises(ConfigurationError, match="RECRAWLER_AUDIT_SAMPLE"):
            parse_audit_sample(bad)
    assert audit_count(0.01, 1000) == 10
    assert audit_count(0.01, 6) == 1  # a share rounds up
    assert audit_count(1.0, 6) == 6  # 100%
    assert audit_count(1, 6) == 1  # a count
    assert audit_count(20, 6) == 6
    assert audit_count(0, 100) == 0
    # a share is per bound: a run an hour after the last draws a 24th of it, at least one page
    assert audit_count(0.01, 2000, part=1 / 24) == 1
    assert audit_count(0.01, 20_000, part=1 / 24) == 9
    assert audit_count(0.01, 2000, part=3.0) == 20
    assert audit_count(1.0, 6, part=0.01) == 6  # 100%: every page, every run
    assert audit_count(5, 60, part=0.01) == 5  # a count: per run
