"""WorkerActivity and a worker's part in a shared run, as the Runtime wires them."""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

import pytest
from scrapy import signals
from scrapy.utils.test import get_crawler

from recrawler import default_settings
from recrawler.membership import WorkerActivity
from recrawler.runtime import Runtime
from recrawler.spiders.docs import DocsSpider

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
    assert answered[0].__self__ is runtime.activity  # type: ignore[attr-defined]  # a bound method
