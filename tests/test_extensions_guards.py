"""The closing guards: the limits they judge by (checked when the crawl is built), each declared guard's
finding over the run's counters, and the exit code the Reconciler alone decides from the findings."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import pytest
from scrapy import signals
from scrapy.utils.defer import deferred_f_from_coro_f
from scrapy.utils.test import get_crawler

from recrawler import default_settings
from recrawler import signals as recrawler_signals
from recrawler.counters import RunCounters
from recrawler.exceptions import ConfigurationError
from recrawler.extensions.guards import (
    HOLD_GUARDS,
    LISTING_SITEMAP,
    OUTAGE_GUARDS,
    REMOVAL_GUARDS,
    Finding,
    RemovalLimits,
    RunFacts,
    evaluate,
    holds,
    most_severe,
)
from recrawler.extensions.reconcile import Reconciler
from recrawler.spiders.docs import DocsSpider
from recrawler.state import RemovalPlan
from tests import docsite, statedb

if TYPE_CHECKING:
    from pathlib import Path

    from scrapy.crawler import Crawler

    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0
DEFAULTS = {k: getattr(default_settings, k) for k in dir(default_settings) if k.startswith("RECRAWLER_")}


def reconciler(tmp_path: Path, **settings: object) -> Reconciler:
    crawler = get_crawler(
        DocsSpider, {**DEFAULTS, "RECRAWLER_DB_URI": f"sqlite:///{tmp_path / 'db'}", **settings}
    )
    return Reconciler.from_crawler(crawler)


def test_the_reconciler_judges_by_the_limits_its_settings_give(tmp_path: Path) -> None:
    ext = reconciler(
        tmp_path, RECRAWLER_GONE_AFTER_MISSES=3, RECRAWLER_GONE_STATUSES="404,410", RECRAWLER_MAX_REMOVE_MIN=7
    )
    assert ext.limits == RemovalLimits(
        gone_after=3,
        gone_statuses=(404, 410),
        max_error_ratio=default_settings.RECRAWLER_MAX_ERROR_RATIO,
        max_remove_ratio=default_settings.RECRAWLER_MAX_REMOVE_RATIO,
        max_remove_min=7,
        listing_min_ratio=default_settings.RECRAWLER_LISTING_MIN_RATIO,
        alert_ratio=default_settings.RECRAWLER_CHANGE_ALERT_RATIO,
        alert_min=default_settings.RECRAWLER_CHANGE_ALERT_MIN,
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("RECRAWLER_GONE_AFTER_MISSES", 0),
        ("RECRAWLER_VERIFY_BATCH_SIZE", 0),
        ("RECRAWLER_MAX_ERROR_RATIO", 1.5),
        ("RECRAWLER_MAX_REMOVE_RATIO", -0.1),
        ("RECRAWLER_MAX_REMOVE_MIN", -1),
        ("RECRAWLER_LISTING_MIN_RATIO", 2.0),
        ("RECRAWLER_CHANGE_ALERT_RATIO", 1.01),
    ],
)
def test_a_bad_limit_stops_the_crawl_naming_its_setting(tmp_path: Path, name: str, value: object) -> None:
    with pytest.raises(ConfigurationError) as info:
        reconciler(tmp_path, **{name: value})
    assert str(info.value) == f"{name}: bad value {value!r}"


def counters(**values: int) -> RunCounters:
    c = RunCounters()
    for key, value in values.items():
        c.set("recrawler/" + key.replace("__", "/"), value)
    return c


WHOLE_SITEMAP = {"sitemap__fetched": 2, "sitemap__parsed": 2, "sitemap__urls": 300, "sitemap__pages": 300}


@pytest.mark.parametrize(
    ("values", "facts", "found"),
    [
        ({**WHOLE_SITEMAP, "request__count": 300}, {}, []),
        ({**WHOLE_SITEMAP, "request__count": 300}, {"reason": "shutdown"}, [("not_finished", 4)]),
        ({"sitemap__fetched": 2, "sitemap__parsed": 1, "sitemap__urls": 9}, {}, [("sitemap_failed", 4)]),
        ({**WHOLE_SITEMAP, "sitemap__refused": 1}, {}, [("sitemap_incomplete", 4)]),
        ({**WHOLE_SITEMAP, "sitemap__pages": 100}, {"last_listed": 300}, [("listing_shrunk", 4)]),
        ({**WHOLE_SITEMAP, "sitemap__pages": 150}, {"last_listed": 300}, []),
        ({**WHOLE_SITEMAP, "request__count": 100, "request__failed": 21}, {}, [("error_ratio", 4)]),
        ({**WHOLE_SITEMAP, "request__count": 100, "request__failed": 20}, {}, []),
        ({**WHOLE_SITEMAP, "request__count": 20, "robots__forbidden": 280}, {}, [("robots_forbidden", 4)]),
        ({**WHOLE_SITEMAP, "state__error__StateStoreLost": 1}, {}, [("state_error", 5)]),
        (WHOLE_SITEMAP, {"lease_lost": True}, [("lease_lost", 6)]),
        ({**WHOLE_SITEMAP, "workers__lost": 1}, {}, [("worker_lost", 7)]),
        (
            {"sitemap__error": 1, "request__count": 10, "request__failed": 9},
            {"reason": "shutdown"},
            [("not_finished", 4), ("sitemap_failed", 4), ("error_ratio", 4)],
        ),
    ],
)
def test_each_outage_guard_is_a_declared_finding_over_the_run_counters(
    values: dict[str, int], facts: dict[str, Any], found: list[tuple[str, int]]
) -> None:
    run = RunFacts(counters=counters(**values), limits=RemovalLimits(), listing=LISTING_SITEMAP, **facts)
    assert [(f.reason, f.exit_code) for f in evaluate(OUTAGE_GUARDS, run)] == found


def test_a_link_listing_is_judged_by_its_link_budget_and_no_listing_by_nothing() -> None:
    cut = counters(follow__max_links=1, request__count=10)
    assert [
        f.reason
        for f in evaluate(OUTAGE_GUARDS, RunFacts(counters=cut, limits=RemovalLimits(), listing="links"))
    ] == ["sitemap_incomplete"]
    # a spider without a listing: nothing it did not list is evidence of anything
    assert evaluate(OUTAGE_GUARDS, RunFacts(counters=cut, limits=RemovalLimits())) == ()


def test_the_robots_guard_explains_itself_and_the_others_stay_quiet() -> None:
    c = counters(**WHOLE_SITEMAP, request__count=20, robots__forbidden=280)
    (finding,) = evaluate(
        OUTAGE_GUARDS, RunFacts(counters=c, limits=RemovalLimits(), listing=LISTING_SITEMAP)
    )
    assert finding.detail.startswith("robots.txt forbade 280 of 300 page requests")


def test_hold_guards_judge_what_the_site_has_not_published() -> None:
    limits = RemovalLimits(alert_ratio=0.5, alert_min=10)
    plan = RemovalPlan(pages=200, live=200, removals=150, quarantine=150, carried=4)
    pending = {"new": 0, "changed": 150, "published": 200}
    facts = RunFacts(
        counters=counters(),
        limits=limits,
        listing=LISTING_SITEMAP,
        plan=plan,
        pending=pending,
        same_content=(120, "u"),
    )
    found = evaluate(HOLD_GUARDS, facts)
    assert [f.reason for f in found] == ["change_spike", "same_content", "mass_removal", "mass_removal"]
    assert {f.exit_code for f in found} == {3}
    held = holds(found)
    assert list(held) == ["change_spike", "same_content", "mass_removal"]
    # the breaker's finding and the removals an earlier hold left waiting, in one explanation
    assert held["mass_removal"].startswith("150 of 200 live pages would leave the knowledge base")
    assert held["mass_removal"].endswith(
        "; 4 removals wait for a decision since an earlier run held them (approve or discard the latest run)"
    )
    # an outage removes nothing: the breaker has nothing to break (what waits still waits)
    outage = (Finding("error_ratio", 4),)
    trusted_not = dataclasses.replace(facts, outage=outage)
    assert [f.detail[:1] for f in evaluate(REMOVAL_GUARDS, trusted_not)] == ["4"]


def test_page_mode_holding_the_run_is_a_spike_explained_once() -> None:
    facts = RunFacts(counters=counters(run__held=1), limits=RemovalLimits(), pending={"published": 5})
    assert holds(evaluate(HOLD_GUARDS, facts)) == {
        "change_spike": "change spike while pages were being published"
    }


@pytest.mark.parametrize(
    ("codes", "decided"),
    [([], 0), ([4], 4), ([4, 3], 3), ([3, 7], 7), ([7, 6], 6), ([6, 5], 5), ([5, 2], 2), ([2, 1], 1)],
)
def test_the_most_severe_finding_decides_the_exit_code(codes: list[int], decided: int) -> None:
    assert most_severe(codes) == decided
    assert most_severe(reversed(codes)) == decided


def test_only_the_reconciler_decides_the_exit_code_from_the_causes_it_is_told(tmp_path: Path) -> None:
    ext = reconciler(tmp_path)
    assert ext.exit_code is None
    ext.crawler.signals.send_catch_log(recrawler_signals.run_failed, cause="leader_lost", exit_code=7)
    assert ext.exit_code == 7
    ext.crawler.signals.send_catch_log(recrawler_signals.run_failed, cause="held", exit_code=3)
    # a milder cause never lowers it
    assert ext.exit_code == 7
    assert [f.reason for f in ext.failures] == ["leader_lost", "held"]


class ReportsACause:
    """A component that finds a cause the run fails for, mid-crawl, and reports it as any does."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        crawler.signals.connect(self.item_scraped, signal=signals.item_scraped)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ReportsACause:
        return cls(crawler)

    def item_scraped(self) -> None:
        self.crawler.signals.send_catch_log(recrawler_signals.run_failed, cause="worker_lost", exit_code=7)


@deferred_f_from_coro_f
async def test_a_cause_reported_mid_crawl_decides_the_runs_exit_code(site: Site, crawls: Crawls) -> None:
    names = [f"p{i}.html" for i in range(120)]
    for i, name in enumerate(names):
        site.write(
            name, docsite.page(f"P{i}", [("Intro", [f"Page {i} says one thing."])]), mtime=1_760_000_000
        )
    r = await crawls.crawl(site.write_sitemap(names), EXTENSIONS={f"{__name__}.ReportsACause": 0})
    # the run itself went well: only the reported cause fails it
    assert r.counts["new"] == 120
    assert r.report["reconcile"]["skipped"] == []
    assert r.exit_code == 7
    assert r.report["outcome"]["exit_code"] == 7
    assert r.report["outcome"]["reasons"] == ["worker_lost"]
    assert statedb.value(crawls.db_path, "SELECT exit_code FROM runs") == 7
