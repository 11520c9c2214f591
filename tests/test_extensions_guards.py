"""RemovalLimits and RunGuards: the limits the closing guards judge by, checked when the crawl is built."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from scrapy.utils.test import get_crawler

from recrawler import default_settings
from recrawler.exceptions import ConfigurationError
from recrawler.extensions.guards import RemovalLimits
from recrawler.extensions.reconcile import Reconciler
from recrawler.spiders.docs import DocsSpider

if TYPE_CHECKING:
    from pathlib import Path

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
    assert ext.guards.limits is ext.limits


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
