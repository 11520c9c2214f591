"""WorkerActivity and a worker's part in a shared run, as the Runtime wires them."""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

import pytest
from scrapy import signals
from scrapy.utils.defer import deferred_f_from_coro_f
from scrapy.utils.test import get_crawler

from recrawler import default_settings, membership, outcome
from recrawler import signals as recrawler_signals
from recrawler.counters import RunCounters
from recrawler.membership import WorkerActivity
from recrawler.runtime import Runtime
from recrawler.shared_run import SharedRun
from recrawler.spiders.docs import DocsSpider
from recrawler.state import store_from_uri, utcnow

if TYPE_CHECKING:
    from pathlib import Path

DEFAULTS = {k: getattr(default_settings, k) for k in dir(default_settings) if k.startswith("RECRAWLER_")}


def test_a_workers_activity_keeps_listening_once_the_runtime_is_built(tmp_path: Path) -> None:
    """Scrapy's signals keep a weak reference to a handler's object: a joining worker whose idle
    handler was collected closed as soon as it went idle, before the leader's pages came."""
    pytest.importorskip("scrapy_redis")
    settings = {
        **DEFAULTS,
        "RECRAWLER_DB_URI": f"sqlite:///{tmp_path / 'db'}",
        "RECRAWLER_WORKERS_ENABLED": True,
        # never connected: the run has not begun, so the idle handler asks Redis nothing
        "REDIS_URL": "redis://127.0.0.1:1/0",
    }
    crawler = get_crawler(DocsSpider, settings)
    runtime = Runtime.from_crawler(crawler)
    gc.collect()
    answered = [receiver for receiver, _ in crawler.signals.send_catch_log(signals.spider_idle)]
    assert [type(getattr(r, "__self__", None)) for r in answered] == [WorkerActivity]
    assert answered[0].__self__.shared is runtime.workers  # type: ignore[attr-defined]  # a bound method


class LeaderGone(SharedRun):
    """A worker's view of a run whose leader stopped beating (no Redis: nothing else is asked)."""

    def __init__(self) -> None:
        super().__init__(
            None, "recrawler:docs:test", queue_prefix="recrawler:docs:test:frontier", wait_secs=1, ttl_secs=1
        )
        self.left: list[dict[str, int | float]] = []

    def leave(self, counts: dict[str, int | float]) -> None:
        self.left.append(counts)

    def leader_alive(self) -> bool:
        return False


@deferred_f_from_coro_f
async def test_a_worker_whose_leader_is_gone_reports_the_cause(tmp_path: Path) -> None:
    """A worker set the run's exit code on the Runtime itself: it reports the cause now, and the
    Reconciler decides the exit code."""
    crawler = get_crawler(DocsSpider, {**DEFAULTS, "RECRAWLER_DB_URI": f"sqlite:///{tmp_path / 'db'}"})
    store = store_from_uri(f"sqlite:///{tmp_path / 'db'}", crawler.settings)
    reported: list[tuple[str, int]] = []

    def run_failed(cause: str, exit_code: int) -> None:
        reported.append((cause, exit_code))

    crawler.signals.connect(run_failed, signal=recrawler_signals.run_failed)
    await store.open()
    try:
        run = await store.runs.begin_run("docs", "docs.example.com", utcnow(), holder="test", lease_secs=60)
        counters = RunCounters(crawler.stats)
        counters.inc("recrawler/page/new", 3)
        workers = LeaderGone()
        await membership.leave(crawler, workers, store, counters, run)
    finally:
        await store.close()
    assert reported == [(membership.LEADER_LOST, outcome.EXIT_WORKER_LOST)]
    assert workers.left[0]["recrawler/page/new"] == 3
