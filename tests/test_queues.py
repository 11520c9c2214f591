"""The frontier queue behind FrontierScheduler, chosen by RECRAWLER_QUEUE_CLASS: the run's database
(SQLite or PostgreSQL) or Redis, on a real redis-server."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f
from scrapy.utils.test import get_crawler

from recrawler.exceptions import ConfigurationError
from recrawler.queues import queue_of
from recrawler.spiders.docs import DocsSpider
from tests import statedb
from tests.test_frontier import write_site
from tests.test_workers import redis_url

if TYPE_CHECKING:
    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

__all__ = ["redis_url"]


def _redis_keys(url: str) -> list[str]:
    import redis

    return sorted(k.decode() for k in redis.Redis.from_url(url).keys("recrawler:*"))


@deferred_f_from_coro_f
async def test_a_run_s_page_requests_wait_in_redis(site: Site, crawls: Crawls, redis_url: str) -> None:
    """The frontier was the database's, or scrapy-redis's whole scheduler: it is one queue class
    now, and a setting puts the run's page requests in Redis, past the same scheduler."""
    sitemap = write_site(site, 150, per_file=50)
    settings = {
        "RECRAWLER_QUEUE_CLASS": "recrawler.queues.RedisQueue",
        "REDIS_URL": redis_url,
        "RECRAWLER_FRONTIER_BATCH_SIZE": 20,
    }
    r = await crawls.crawl(sitemap, **settings)
    assert r.stats["recrawler/page/new"] == 150
    assert r.stats["recrawler/frontier/queued"] == 150
    assert r.stats["recrawler/frontier/fed"] == 150
    # nothing of it in the database
    assert statedb.rows(crawls.db_path, "SELECT COUNT(*) FROM frontier") == [(0,)]
    assert [k.rsplit(":", 1)[-1] for k in _redis_keys(redis_url)] == ["keys", "named", "seq"]
    # a second run: the same pages, asked conditionally, each once
    r2 = await crawls.crawl(sitemap, **settings)
    assert r2.stats["recrawler/page/unchanged"] == 150
    assert r2.stats["recrawler/frontier/fed"] == 150


def test_a_bad_queue_class_is_one_line() -> None:
    for value, why in (
        ("recrawler.queues.NoSuchQueue", "RECRAWLER_QUEUE_CLASS: cannot load 'recrawler.queues.NoSuchQueue'"),
        (
            "recrawler.scheduler.FrontierScheduler",
            "RECRAWLER_QUEUE_CLASS: 'recrawler.scheduler.FrontierScheduler' is not",
        ),
    ):
        crawler = get_crawler(DocsSpider, {"RECRAWLER_QUEUE_CLASS": value})
        with pytest.raises(ConfigurationError) as caught:
            queue_of(crawler)
        assert str(caught.value).startswith(why)
