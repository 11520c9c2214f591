"""The Runtime and its counters: decisions read the run's own counts; stats only mirror them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.counters import RunCounters
from tests import docsite

if TYPE_CHECKING:
    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

DUMMY = "scrapy.statscollectors.DummyStatsCollector"
T0 = 1_760_000_000.0
REPO = Path(__file__).resolve().parents[1]
#: the end-to-end files: every test in them crawls a real local site into a real database
END_TO_END = [
    "tests/test_crawl.py",
    "tests/test_crawl_schedule.py",
    "tests/test_index.py",
    "tests/test_audit.py",
    "tests/test_detect.py",
    "tests/test_noise_furniture.py",
    "tests/test_trust_listing.py",
    "tests/test_trust_redirects.py",
    "tests/test_trust_removal.py",
    "tests/test_trust_pages.py",
]


class _Stats(MemoryStatsCollector):
    """A real collector without a crawler: what the mirror writes, and nothing else."""

    def __init__(self) -> None:
        self._stats: dict[str, object] = {}


def test_counters_mirror_every_write_and_answer_from_their_own_values() -> None:
    stats = _Stats()
    c = RunCounters(stats)  # type: ignore[arg-type]  # a collector built without a crawler
    c.inc("recrawler/page/new")
    c.inc("recrawler/page/new", 2)
    c.inc("recrawler/state/error/StateStoreError")
    c.inc("recrawler/state/error/StateStoreUnavailable", 2)
    c.inc("recrawler/page/missing/http_404", 4)
    c.set("recrawler/reconcile/elapsed_seconds", 0.5)
    assert c["recrawler/page/new"] == 3
    assert c["recrawler/page/changed"] == 0
    assert c.total("recrawler/state/error") == 3
    assert c.family("recrawler/page") == {"missing/http_404": 4, "new": 3}
    assert c.total("recrawler/page") == 3  # direct members only: no nested family counted twice
    assert stats.get_stats() == c.as_dict()
    # the stats are a mirror: changing them changes no answer
    stats.set_value("recrawler/page/new", 1000)
    assert c["recrawler/page/new"] == 3


def test_counters_work_without_a_stats_collector() -> None:
    c = RunCounters(None)
    c.inc("recrawler/sitemap/urls", 7)
    assert c["recrawler/sitemap/urls"] == 7
    assert "recrawler/sitemap/urls" in c


@deferred_f_from_coro_f
async def test_a_removed_page_is_reconciled_under_the_dummy_stats_collector(
    site: Site, crawls: Crawls
) -> None:
    """Observed: with DummyStatsCollector every run skipped reconciliation as `sitemap_failed`,
    reported `crawled: 0`, and a removed page stayed live through three more runs."""
    names = [f"p{i}.html" for i in range(30)]
    for i, name in enumerate(names):
        site.write(name, docsite.page(f"P{i}", [("Intro", [f"Text {i}."])]), mtime=T0)
    sitemap = site.write_sitemap(names)
    first = await crawls.crawl(sitemap, STATS_CLASS=DUMMY)
    assert first.counts["crawled"] == first.counts["new"] == 30
    assert first.report["reconcile"]["skipped"] == []
    assert first.stats["recrawler/sitemap/urls"] == 30  # the run's own counters

    site.remove("p0.html", gone=True)
    second = await crawls.crawl(sitemap, STATS_CLASS=DUMMY)
    assert second.report["reconcile"] == {"applied": True, "skipped": []}
    assert (second.counts["crawled"], second.counts["gone"], second.counts["unchanged"]) == (30, 1, 29)
    assert second.exit_code == 0
    # 304s download no body: the quiet week costs a small share of the first run's bytes
    assert 0 < second.counts["bytes_received"] < first.counts["bytes_received"] / 3
    assert [e["action"] for e in second.events] == ["gone"]


@pytest.mark.timeout(900)
def test_the_end_to_end_suite_passes_under_the_dummy_stats_collector() -> None:
    """Nothing decides from stats: every end-to-end scenario gives the same results without them."""
    env = {**os.environ, "RECRAWLER_TEST_STATS_CLASS": DUMMY}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", *END_TO_END],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    tail = result.stdout[-3000:]
    assert result.returncode == 0, tail
    assert " passed" in tail
    assert " failed" not in tail
