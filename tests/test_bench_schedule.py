"""The schedule benchmark runs, uses recrawler's scheduling code, and its figures hold together."""

from __future__ import annotations

import random

from benchmarks.bench_schedule import Strategy, main, make_site, simulate


def test_small_run_prints_every_strategy(capsys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert main(["--pages", "120", "--days", "8", "--json", str(tmp_path / "schedule.json")]) == 0
    out = capsys.readouterr().out
    assert "full daily recrawl" in out
    assert "target:" in out


def test_full_recrawl_misses_nothing_and_skip_with_honest_lastmod_neither() -> None:
    site = make_site(150, 10, random.Random(3))
    full = simulate(site, Strategy("full", mode="all"), 10, 3)
    skip = simulate(site, Strategy("skip", lastmod_mode="skip"), 10, 3)
    assert full.requests == 150 * 11
    assert full.missed == 0
    assert skip.missed == 0
    assert skip.requests < full.requests
