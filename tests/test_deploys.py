"""Deploy evidence (pure): which signals fire, when a sample of changed pages is a deploy, and what
a false alarm teaches."""

from __future__ import annotations

from recrawler.deploys import SIGNALS, DeployWatch, ListingMoves, sample_says_deploy
from recrawler.detect.build import BuildFingerprint


def test_listing_moves_say_why_and_vouching_lastmods_move_nothing() -> None:
    assert ListingMoves().reason(lastmods_vouch=False) is None
    assert ListingMoves(added=1, removed=2).reason(lastmods_vouch=True) == "listing moved: 1 added, 2 removed"
    moved = ListingMoves(lastmod=5)
    assert moved.reason(lastmods_vouch=False) == "listing moved: 5 lastmods moved"
    # lastmods that vouch for their pages make the moved ones due themselves; stamps of each read do not count
    assert moved.reason(lastmods_vouch=True) is None
    assert moved.reason(lastmods_vouch=False, lastmod_noise=True) is None
    assert ListingMoves(added=1) + ListingMoves(lastmod=2) == ListingMoves(added=1, lastmod=2)


def test_the_first_signal_is_the_deploy_and_disabled_ones_never_fire() -> None:
    watch = DeployWatch(enabled=frozenset(SIGNALS) - {"sample"})
    assert not watch.detected
    assert watch.fire("sample", "x") is False
    assert watch.fire("listing", "listing moved: 1 added") is True
    assert watch.fire("fingerprint", "later") is False
    assert list(watch.signals()) == ["listing", "fingerprint"]
    assert watch.reason == "listing moved: 1 added"


def test_a_probed_build_is_compared_once_two_pages_are_in() -> None:
    stored = BuildFingerprint({"link:/s.#.css": "/s.aaaaaa.css"}, frozenset({"script:/a.js?v=#"}))
    watch = DeployWatch(stored=stored)
    new = {"link:/s.#.css": "/s.bbbbbb.css", "script:/a.js?v=#": "/a.js?v=1"}
    assert watch.build(new, expected=4) is None  # one page of four: wait for another
    why = watch.build({**new, "script:/a.js?v=#": "/a.js?v=2"}, expected=4)
    assert why is not None
    assert why.startswith("build fingerprint changed: link:/s.#.css")
    assert watch.moved_slots == ["link:/s.#.css"]
    # what the run stores: the new build
    learned = watch.learned(false_alarm=False)
    assert learned is not None
    assert learned.markers == {"link:/s.#.css": "/s.bbbbbb.css"}


def test_a_false_alarm_makes_the_moved_slots_noise() -> None:
    watch = DeployWatch(stored=BuildFingerprint({"meta:build": "run-1"}))
    assert watch.build({"meta:build": "run-2"}, expected=1) is not None
    watch.fire("fingerprint", "build fingerprint changed")
    learned = watch.learned(false_alarm=True)
    assert learned is not None
    assert (learned.markers, learned.noise) == ({}, frozenset({"meta:build"}))


def test_changed_samples_are_a_deploy_beyond_what_pages_changing_alone_explain() -> None:
    watch = DeployWatch()
    # a run minutes after the last: one changed page among six sampled of 198 is a deploy
    assert watch.sampled("k1", "https://d/1", sampled=6, pages=198, solo=False) is not None
    big = DeployWatch()
    # an hourly run of a 2,000-page site samples ~80: one change (a hotfix, a page that changes
    # alone) is not a deploy, two are
    assert big.sampled("k1", "https://d/1", sampled=80, pages=2000, solo=False) is None
    assert big.sampled("k1", "https://d/1", sampled=80, pages=2000, solo=False) is None  # the same page again
    assert big.sampled("k2", "https://d/2", sampled=80, pages=2000, solo=True) is None  # changes alone
    why = big.sampled("k3", "https://d/3", sampled=80, pages=2000, solo=False)
    assert why == "2 of 80 pages checked for no sign of change changed (https://d/3)"
    big.fire("sample", why)
    assert big.sample_keys == ["k1", "k3"]


def test_a_daily_run_that_checks_every_page_calls_a_hotfix_no_deploy() -> None:
    assert not sample_says_deploy(3, 2000, 2000)
    assert sample_says_deploy(100, 2000, 2000)
    assert not sample_says_deploy(0, 5, 100)
