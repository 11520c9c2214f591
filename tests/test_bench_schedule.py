"""The schedule benchmark runs, uses recrawler's scheduling code, and its figures hold together."""

from __future__ import annotations

import random

from benchmarks.bench_schedule import Strategy, main, make_site, simulate


def test_small_run_prints_every_strategy(capsys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert main(["--pages", "120", "--days", "8", "--json", str(tmp_path / "schedule.json")]) == 0
    out = capsys.readouterr().out
    assert "full recrawl every run" in out
    assert "target:" in out
    assert "(within the 1 d bound and one run period: met)" in out


def test_the_default_bound_caps_staleness_where_a_month_long_interval_did_not() -> None:
    site = make_site(300, 20, random.Random(5))
    default = simulate(site, Strategy("default", lastmod_mode="hint"), 20, 5, runs_per_day=4)
    before = simulate(site, Strategy("before", lastmod_mode="hint", max_secs=30 * 86400.0), 20, 5, 4)
    assert default.worst_stale_days <= 1.0
    assert before.worst_stale_days > 5
    assert default.missed == 0
    # below the bound the schedule thins the work: far fewer requests than a full pass each run
    full = simulate(site, Strategy("full", mode="all"), 20, 5, runs_per_day=4)
    assert default.requests < 0.5 * full.requests


def test_full_recrawl_misses_nothing_and_skip_with_honest_lastmod_neither() -> None:
    site = make_site(150, 10, random.Random(3))
    full = simulate(site, Strategy("full", mode="all"), 10, 3)
    skip = simulate(site, Strategy("skip", lastmod_mode="skip", max_secs=30 * 86400.0), 10, 3)
    assert full.requests == 150 * 11
    assert full.missed == 0
    assert skip.missed == 0
    assert skip.requests < full.requests
