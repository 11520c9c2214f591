"""PoliteRetryMiddleware: a host that asks for less (429, 503, Retry-After) is slowed down to what it
asked; what a failed answer is; bad settings are one line. (Spacing under a 429 storm:
test_trust_outages; a site down: test_trust_interrupts.)"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import TYPE_CHECKING

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f
from scrapy.utils.test import get_crawler

from recrawler.downloadermiddlewares.retry import PoliteRetryMiddleware, failed_answer, retry_after
from recrawler.exceptions import ConfigurationError
from recrawler.spiders.docs import DocsSpider
from tests import docsite

if TYPE_CHECKING:
    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0
NOW = 1_800_000_000.0


def http_date(at: float) -> bytes:
    return format_datetime(datetime.fromtimestamp(at, UTC), usegmt=True).encode()


def write_pages(site: Site, n: int) -> list[str]:
    paths = [f"page-{i}.html" for i in range(n)]
    for i, path in enumerate(paths):
        site.write(path, docsite.widget_page(i), mtime=T0)
    return paths


@pytest.mark.parametrize(
    ("value", "secs"),
    [
        (None, None),
        (b"", None),
        (b"7", 7.0),
        (b" 120 ", 120.0),
        (http_date(NOW + 30), 30.0),
        # a date already past asks for no wait at all
        (http_date(NOW - 3600), 0.0),
        (b"soon", None),
        (b"-5", None),
    ],
)
def test_retry_after_reads_seconds_or_an_http_date(value: bytes | None, secs: float | None) -> None:
    assert retry_after(value, now=NOW) == secs


@pytest.mark.parametrize(
    ("status", "failed"), [(200, False), (404, False), (429, True), (500, True), (503, True)]
)
def test_a_failed_answer_is_a_server_error_or_too_many_requests(status: int, failed: bool) -> None:
    assert failed_answer(status) is failed


@pytest.mark.parametrize(
    ("name", "value"), [("RECRAWLER_RETRY_AFTER_MAX_SECS", -1), ("RECRAWLER_OUTAGE_SECS", -2)]
)
def test_a_bad_setting_is_one_line_naming_it(name: str, value: float) -> None:
    crawler = get_crawler(
        DocsSpider, {"RECRAWLER_RETRY_AFTER_MAX_SECS": 60, "RECRAWLER_OUTAGE_SECS": 60, name: value}
    )
    with pytest.raises(ConfigurationError) as info:
        PoliteRetryMiddleware.from_crawler(crawler)
    assert str(info.value) == f"{name}: bad value {float(value)!r}"


@deferred_f_from_coro_f
async def test_a_503_with_retry_after_slows_the_host_down_and_the_page_is_retried(
    site: Site, crawls: Crawls, caplog: pytest.LogCaptureFixture
) -> None:
    paths = write_pages(site, 30)
    site.options("page-0.html", status=503, status_times=1, headers={"Retry-After": "2"})
    with caplog.at_level(logging.WARNING, logger="recrawler.downloadermiddlewares.retry"):
        r = await crawls.crawl(site.write_sitemap(paths), RETRY_TIMES=2)
    assert (r.counts["new"], r.counts["errors"]) == (30, 0)
    # the host's download slot was slowed to what it asked for, said once
    slowed = [m.getMessage() for m in caplog.records if "slowing down" in m.getMessage()]
    assert slowed == ["127.0.0.1 answered 503 (Retry-After: 2 s): slowing down to one request every 2.0 s"]
    # asked twice (its 503, its retry); the other pages once each
    assert [e["status"] for e in site.requests() if e["path"] == "page-0.html"] == [503, 200]
    assert len([e for e in site.requests() if e["path"].startswith("page-")]) == 31
