"""The schedule benchmark runs, uses recrawler's scheduling code, and its figures hold together (and
meet the deploy targets)."""

from __future__ import annotations

import random

from benchmarks.bench_schedule import Strategy, main, make_site, simulate


def test_small_run_prints_every_strategy(capsys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert (
        main(["--pages", "120", "--days", "8", "--weeks", "2", "--json", str(tmp_path / "schedule.json")])
        == 0
    )
    out = capsys.readouterr().out
    assert "full recrawl every run" in out
    assert "hourly, no lastmod: defaults" in out
    assert "target:" in out
    assert "(within the 1 d bound and one run period: met)" in out


def test_the_default_bound_caps_staleness_where_a_month_long_interval_did_not() -> None:
    # no lastmod to vouch for a page: the bound alone keeps it verified
    site = make_site(300, 20, random.Random(5))
    default = simulate(site, Strategy("default", lastmod_mode="ignore"), 20, 5, runs_per_day=4)
    before = simulate(site, Strategy("before", lastmod_mode="ignore", max_secs=30 * 86400.0), 20, 5, 4)
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


def test_deploys_are_in_by_the_next_run_and_quiet_runs_ask_almost_nothing() -> None:
    from benchmarks.lib.deploy_model import deploy_cases, deploy_targets, make_deploy_site

    site = make_deploy_site(400, 2, random.Random(2))
    results = deploy_cases(site, 2)
    assert [what for what, met in deploy_targets(results) if not met] == []
    by = {r.name: r for r in results}
    # the schedule alone (the bound) finds a deploy without lastmods only as each page's time comes
    alone = by["hourly, no lastmod: no deploy signal"]
    assert alone.deploys_in_next_run < alone.deploys
    assert by["hourly, no lastmod: defaults"].false_escalations == 0
    assert by["hourly, honest lastmod: defaults"].quiet_run_max <= 0.02
