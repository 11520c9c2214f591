"""The Runtime and its counters: decisions read the run's own counts; stats only mirror them."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from scrapy import signals
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.counters import RunCounters
from recrawler.exceptions import ConfigurationError
from recrawler.gctuning import GcTuning
from recrawler.runtime import Runtime
from recrawler.spiders.docs import DocsSpider
from tests import docsite, statedb
from tests.conftest import make_crawler

if TYPE_CHECKING:
    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

DUMMY = "scrapy.statscollectors.DummyStatsCollector"
T0 = 1_760_000_000.0
REPO = Path(__file__).resolve().parents[1]
#: the end-to-end files: every test in them crawls a real local site into a real database
#: end-to-end scenarios whose outcomes are the decisions stats once fed: classification and
#: publication, audits, noise, the listing, redirects and removal
END_TO_END = [
    "tests/test_crawl.py",
    "tests/test_index.py",
    "tests/test_audit.py",
    "tests/test_noise_furniture_crawl.py",
    "tests/test_trust_listing.py",
    "tests/test_trust_redirects.py",
    "tests/test_trust_removal.py",
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


@deferred_f_from_coro_f
async def test_a_run_leaves_what_was_loaded_to_the_collector_and_gives_it_back(
    site: Site, crawls: Crawls
) -> None:
    """Observed: a first run of 2,000 pages spent 2.2 s of its interpreter lock in Python's
    garbage collector, 1.2 s of it in ten full collections that each walked the 110,000 objects
    Scrapy, lxml and the modules had loaded before the crawl began."""
    names = [f"p{i}.html" for i in range(3)]
    for i, name in enumerate(names):
        site.write(name, docsite.page(f"P{i}", [("Intro", [f"Text {i}."])]), mtime=T0)
    sitemap = site.write_sitemap(names)
    before = gc.get_threshold()
    assert gc.get_freeze_count() == 0
    seen: list[tuple[int, tuple[int, int, int]]] = []

    def scraped() -> None:
        seen.append((gc.get_freeze_count(), gc.get_threshold()))

    for threshold in (10_000, 0):
        seen.clear()
        crawler = make_crawler(DocsSpider, crawls.settings(RECRAWLER_GC_THRESHOLD=threshold))
        crawler.signals.connect(scraped, signal=signals.item_scraped)
        await crawler.crawl_async(sitemap_url=sitemap)
        assert len(seen) == 3
        if threshold:
            # while the run crawls: what existed before it is frozen, young collections are rarer
            assert all(frozen > 10_000 for frozen, _ in seen)
            assert {t for _, t in seen} == {(10_000, *before[1:])}
        else:
            assert seen == [(0, before)] * 3
        # the run gives the collector back as it found it
        assert gc.get_freeze_count() == 0
        assert gc.get_threshold() == before


def test_a_bad_gc_threshold_is_one_line() -> None:
    with pytest.raises(ConfigurationError, match=r"^RECRAWLER_GC_THRESHOLD: bad value -1$"):
        GcTuning(-1)
    tuning = GcTuning(0)
    tuning.start()
    assert not tuning.active


@pytest.mark.timeout(900)
def test_the_end_to_end_suite_passes_under_the_dummy_stats_collector() -> None:
    """Nothing decides from stats: every end-to-end scenario gives the same results without them."""
    env = {**os.environ, "RECRAWLER_TEST_STATS_CLASS": DUMMY}
    result = subprocess.run(
        # one process: this test already runs beside the suite's other workers
        [sys.executable, "-m", "pytest", "-q", "-x", "-n", "0", *END_TO_END],
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


#: the packages of the components Scrapy builds from the settings (never held by the Runtime)
_COMPONENTS = (
    "recrawler.spidermiddlewares",
    "recrawler.downloadermiddlewares",
    "recrawler.pipelines",
    "recrawler.extensions",
)


@deferred_f_from_coro_f
async def test_no_component_registers_itself_on_the_runtime(site: Site, crawls: Crawls) -> None:
    """ListingMiddleware and ScheduleMiddleware set themselves on the Runtime (``runtime.listing``,
    ``runtime.revisits``) for the Reconciler and the commit step to find: the commit step's
    revisits are its own collaborator now, built with it, and the sitemap files wait in the
    scheduler."""
    names = [f"p{i}.html" for i in range(60)]
    for name in names:
        site.write(name, docsite.page(name, [("Overview", [f"What {name} does."])]))
    sitemap = site.write_sitemap(names)
    crawler = make_crawler(DocsSpider, crawls.settings())
    await crawler.crawl_async(sitemap_url=sitemap)
    runtime = crawler.get_extension(Runtime)
    assert runtime is not None
    held = {name: type(v).__module__ for name, v in vars(runtime).items() if v is not None}
    assert [name for name, module in held.items() if module.startswith(_COMPONENTS)] == []
    # each page's next check was written with it
    due = statedb.rows(crawls.db_path, "SELECT COUNT(*) FROM pages WHERE next_check_at IS NOT NULL")
    assert due == [(60,)]
