"""Adaptive revisits (pure): the Poisson estimator, intervals within bounds, due decisions."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta

import pytest

from recrawler.exceptions import ConfigurationError
from recrawler.intervals import (
    Bounds,
    Revisit,
    SchedulePolicy,
    audit_count,
    change_rate,
    next_revisit,
    parse_audit_sample,
    parse_now,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DAY = 86400.0
URL = "https://docs.example.com/a.html"


def policy(now: datetime = T0, **kwargs: object) -> SchedulePolicy:
    return SchedulePolicy(now=now, min_secs=3600, max_secs=30 * DAY, **kwargs)  # type: ignore[arg-type]


def test_estimator_is_cho_and_garcia_molina() -> None:
    # n = 10 daily checks, X = 4 changes: r = -log((10 - 4 + 0.5) / 10.5) per day
    assert change_rate(10, 4, 10 * DAY) == pytest.approx(-math.log(6.5 / 10.5) / DAY)
    assert change_rate(10, 0, 10 * DAY) == 0
    # every check found a change: finite, growing with n
    assert change_rate(10, 10, 10 * DAY) == pytest.approx(math.log(21) / DAY)
    assert change_rate(0, 0, 0) is None


def test_new_page_starts_at_the_shortest_interval() -> None:
    rev = policy().after_check(None, url=URL, changed=False, new=True)
    assert rev.interval == 3600
    assert rev.next_check_at == T0 + timedelta(hours=1)
    assert (rev.checks, rev.changes, rev.checked_secs) == (0, 0, 0)


def test_interval_grows_when_unchanged_and_shrinks_when_changed() -> None:
    bounds = Bounds(3600, 30 * DAY)
    rev = next_revisit(None, changed=False, now=T0, bounds=bounds)
    now = T0
    intervals = []
    for _ in range(8):
        now += timedelta(seconds=max(rev.interval or 0, DAY))
        rev = next_revisit(rev, changed=False, now=now, bounds=bounds)
        intervals.append(rev.interval)
    # at most doubling the observed interval each time, up to the bound
    assert intervals == [2 * DAY, 4 * DAY, 8 * DAY, 16 * DAY, 30 * DAY, 30 * DAY, 30 * DAY, 30 * DAY]
    before = rev.interval
    now += timedelta(days=30)
    rev = next_revisit(rev, changed=True, now=now, bounds=bounds)
    assert rev.interval is not None
    assert before is not None
    assert rev.interval < before
    assert rev.rate is not None
    assert rev.rate > 0


def test_a_second_check_at_the_same_clock_learns_nothing() -> None:
    bounds = Bounds(3600, 30 * DAY)
    rev = Revisit(last_check_at=T0, next_check_at=T0 + timedelta(days=8), interval=8 * DAY, checks=3)
    assert next_revisit(rev, changed=False, now=T0, bounds=bounds) == rev
    changed = next_revisit(rev, changed=True, now=T0, bounds=bounds)
    assert changed.checks == 3
    assert changed.next_check_at == T0 + timedelta(hours=1)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_estimates_converge_to_poisson_rates_and_intervals_stay_in_bounds(seed: int) -> None:
    rng = random.Random(seed)
    days = 300
    for per_day in (4.0, 1.0, 0.25):
        changes, t = [], 0.0
        while t < days:
            t += rng.expovariate(per_day)
            changes.append(t)
        rev: Revisit | None = None
        seen = None
        for step in range(days * 4):  # a run every 6 hours
            day = step / 4
            p = SchedulePolicy(now=T0 + timedelta(days=day), min_secs=3600, max_secs=60 * DAY)
            if not p.decide(rev, url=URL, status="live" if rev else None).due:
                continue
            version = sum(1 for c in changes if c <= day)
            rev = p.after_check(rev, url=URL, changed=seen is not None and version != seen, new=seen is None)
            seen = version
            assert rev.interval is not None
            assert 3600 <= rev.interval <= 60 * DAY
        assert rev is not None
        assert rev.rate is not None
        assert 0.5 < rev.rate * DAY / per_day < 2.0, (per_day, rev.rate * DAY)
        # the interval aims at the median time to the next change
        assert rev.interval == pytest.approx(max(3600, math.log(2) / rev.rate), rel=0.6)


def test_overrides_bound_matching_urls() -> None:
    p = policy(overrides={r"/changelog": [60, 3600], r"/v\d+/": [None, 365 * DAY]})
    assert p.bounds("https://x/changelog.html") == Bounds(60, 3600)
    assert p.bounds("https://x/v2/a.html") == Bounds(3600, 365 * DAY)
    assert p.bounds(URL) == Bounds(3600, 30 * DAY)
    rev = p.after_check(None, url="https://x/changelog.html", changed=False, new=True)
    assert rev.interval == 60


@pytest.mark.parametrize(
    ("kwargs", "setting"),
    [
        ({"mode": "sometimes"}, "RECRAWLER_SCHEDULE"),
        ({"lastmod_mode": "trust"}, "RECRAWLER_LASTMOD_MODE"),
        ({"overrides": {"(": [1, 2]}}, "RECRAWLER_INTERVAL_OVERRIDES"),
        ({"overrides": {"a": [5, 1]}}, "RECRAWLER_INTERVAL_OVERRIDES"),
        ({"overrides": {"a": 5}}, "RECRAWLER_INTERVAL_OVERRIDES"),
    ],
)
def test_bad_settings_name_the_setting(kwargs: dict[str, object], setting: str) -> None:
    with pytest.raises(ConfigurationError, match=setting):
        policy(**kwargs)
    with pytest.raises(ConfigurationError, match="RECRAWLER_MIN_INTERVAL_SECS"):
        SchedulePolicy(now=T0, min_secs=10, max_secs=5)


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
        ("hint", DUE, "live", OLD, {}, (True, "scheduled")),  # hint never skips
        ("skip", DUE, "live", OLD, {}, (False, "lastmod")),  # skip trusts "unchanged"
        ("skip", NOT_DUE, "live", NEWER, {}, (True, "lastmod")),
        ("skip", DUE, "live", None, {}, (True, "scheduled")),  # missing: unknown
        ("skip", DUE, "live", "2030-01-01", {}, (True, "scheduled")),  # future: unknown
        ("skip", NOT_DUE, "live", "garbage", {}, (False, "schedule")),
        ("skip", DUE, "live", OLD, {"lastmod_trusted": False}, (True, "scheduled")),
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
    p = SchedulePolicy(now=NOW, lastmod_mode=mode, min_secs=3600, max_secs=30 * DAY)
    decision = p.decide(rev, url=URL, status=status, lastmod=lastmod, **extra)  # type: ignore[arg-type]
    assert (decision.due, decision.reason) == expected


def test_skip_still_checks_at_the_max_interval() -> None:
    p = SchedulePolicy(now=NOW, lastmod_mode="skip", min_secs=3600, max_secs=5 * DAY)
    almost = _rev(NOW - timedelta(days=5) + timedelta(minutes=1), NOW + timedelta(days=1))
    assert p.decide(almost, url=URL, status="live", lastmod=OLD).reason == "lastmod"
    expired = _rev(NOW - timedelta(days=5), NOW + timedelta(days=1))
    assert p.decide(expired, url=URL, status="live", lastmod=OLD).reason == "max_interval"


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
