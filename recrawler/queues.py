"""The run's frontier queue: where a run's page requests wait, behind FrontierScheduler.

One small class, chosen by ``RECRAWLER_QUEUE_CLASS`` (scrapy-redis's ``SCHEDULER_QUEUE_CLASS``
shape): the scheduler pushes and pops serialised requests, and the components that ask whether the
run's frontier holds a page (ScheduleMiddleware) or claim one outside it (PageRedirectMiddleware)
build their own instance over the same storage. The calls are awaited off the reactor.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Self

from scrapy import Request

from recrawler.exceptions import ConfigurationError, StateStoreError
from recrawler.redact import redact_url
from recrawler.runtime import runtime_of
from recrawler.shared_run import redis_keys, redis_prefix

if TYPE_CHECKING:
    from collections.abc import Sequence

    from scrapy.crawler import Crawler

    from recrawler.state import Frontier, PageRecord, Run

#: the default queue: the run's database
DATABASE_QUEUE = "recrawler.queues.DatabaseQueue"
#: the queue the workers of a shared run use (RECRAWLER_WORKERS_ENABLED)
REDIS_QUEUE = "recrawler.queues.RedisQueue"

#: a priority's weight in a Redis score (a queued request's arrival counter stays below it)
_PRIORITY_WEIGHT = 2**32


class FrontierQueue:
    """A run's page requests, held once per page key and run, taken highest priority first (then
    oldest). Rows are ``(page key, priority, serialised request)``."""

    #: whether ``pop`` reads each request's stored page record with it (else None: not read)
    records = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """The queue of the crawl's run."""
        raise NotImplementedError

    async def push(
        self, run: Run, rows: Sequence[tuple[str, int, bytes]], *, listed: bool = False
    ) -> tuple[int, int]:
        """Queue *rows* (*listed*: a listing named them); a key the run queued or claimed already
        is ignored. How many were new, and how many pages no listing had named this run before."""
        raise NotImplementedError

    async def pop(self, run: Run, limit: int) -> list[tuple[bytes, PageRecord | None]]:
        """Take up to *limit* queued requests (each with its page's stored record if ``records``)."""
        raise NotImplementedError

    async def has(self, run: Run, keys: Sequence[str]) -> set[str]:
        """Those of *keys* the run queued (or claimed)."""
        raise NotImplementedError

    async def claim(self, run: Run, key: str) -> bool:
        """Mark page *key* as fetched outside the queue; False if the run queued it already."""
        raise NotImplementedError


class DatabaseQueue(FrontierQueue):
    """In the run's database, SQLite or PostgreSQL as ``RECRAWLER_DB_URI`` says (its ``frontier``
    table, through the store's connection): a fed request comes with its page's stored record."""

    records = True

    def __init__(self, frontier: Frontier) -> None:
        self.frontier = frontier

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Over the crawl's store's frontier role."""
        return cls(runtime_of(crawler).store.frontier)

    async def push(
        self, run: Run, rows: Sequence[tuple[str, int, bytes]], *, listed: bool = False
    ) -> tuple[int, int]:
        """Queue *rows* in the ``frontier`` table."""
        if listed:
            return await self.frontier.frontier_add_listed(run, rows)
        return await self.frontier.frontier_add(run, rows), 0

    async def pop(self, run: Run, limit: int) -> list[tuple[bytes, PageRecord | None]]:
        """Take the next rows, with their pages' records (one wait for the store)."""
        return await self.frontier.frontier_next(run, limit)

    async def has(self, run: Run, keys: Sequence[str]) -> set[str]:
        """Those of *keys* in the ``frontier`` table."""
        return await self.frontier.frontier_has(run, keys)

    async def claim(self, run: Run, key: str) -> bool:
        """A fetched row for *key* (False: one was queued)."""
        return await self.frontier.frontier_claim(run, key)


class RedisQueue(FrontierQueue):
    """In Redis (``REDIS_URL``, scrapy-redis's setting): a sorted set of the run's requests and a
    set of the page keys it holds, kept ``RECRAWLER_QUEUE_TTL_SECS`` after the last push. Fed
    requests come without their pages' records (ConditionalRequestMiddleware reads them)."""

    def __init__(self, server: Any, prefix: str, *, ttl_secs: int) -> None:
        self.server = server
        self.prefix = prefix
        self.ttl_secs = ttl_secs

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """A client of ``REDIS_URL``; the keys are per spider, site and run."""
        import redis

        s = crawler.settings
        url = s.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
        ttl = s.getint("RECRAWLER_QUEUE_TTL_SECS")
        if ttl < 1:
            raise ConfigurationError(f"RECRAWLER_QUEUE_TTL_SECS: must be at least 1, got {ttl!r}")
        return cls(redis.Redis.from_url(url), f"{redis_prefix(crawler)}:frontier", ttl_secs=ttl)

    def _keys(self, run: Run) -> tuple[str, str, str]:
        return redis_keys(self.prefix, run.id)

    async def _call(self, func: Any, *args: Any) -> Any:
        import redis

        try:
            return await asyncio.to_thread(func, *args)
        except redis.RedisError as exc:
            raise StateStoreError(f"redis frontier: {exc}") from exc

    async def push(
        self, run: Run, rows: Sequence[tuple[str, int, bytes]], *, listed: bool = False
    ) -> tuple[int, int]:
        """Queue the rows whose keys are new to the run."""
        added, named = await self._call(self._push, run, list(rows), listed)
        return int(added), int(named)

    def _push(self, run: Run, rows: list[tuple[str, int, bytes]], listed: bool) -> tuple[int, int]:
        queue, keys, seq = self._keys(run)
        named = 0
        if listed:
            pipe = self.server.pipeline()
            for key, _, _ in rows:
                pipe.sadd(f"{self.prefix}:{run.id}:named", key)
            named = sum(1 for added in pipe.execute() if added)
            self.server.expire(f"{self.prefix}:{run.id}:named", self.ttl_secs)
        pipe = self.server.pipeline()
        for key, _, _ in rows:
            pipe.sadd(keys, key)
        fresh = [row for row, added in zip(rows, pipe.execute(), strict=True) if added]
        if not fresh:
            return 0, named
        last = int(self.server.incrby(seq, len(fresh)))
        first = last - len(fresh) + 1
        pipe = self.server.pipeline()
        pipe.zadd(
            queue,
            {blob: -priority * _PRIORITY_WEIGHT + first + n for n, (_, priority, blob) in enumerate(fresh)},
        )
        for name in (queue, keys, seq):
            pipe.expire(name, self.ttl_secs)
        pipe.execute()
        return len(fresh), named

    async def pop(self, run: Run, limit: int) -> list[tuple[bytes, PageRecord | None]]:
        """Take the lowest scores: the highest priority, then the oldest."""
        taken = await self._call(self.server.zpopmin, self._keys(run)[0], limit)
        return [(bytes(blob), None) for blob, _ in taken]

    async def has(self, run: Run, keys: Sequence[str]) -> set[str]:
        """Those of *keys* the run holds."""
        if not keys:
            return set()
        found = await self._call(self.server.smismember, self._keys(run)[1], list(keys))
        return {k for k, there in zip(keys, found, strict=True) if there}

    async def claim(self, run: Run, key: str) -> bool:
        """*key* added to the run's keys (False: held already)."""
        return bool(await self._call(self.server.sadd, self._keys(run)[1], key))


def _callback_name(spider: Any, func: Any) -> str | None:
    """The name of *spider*'s method *func* is bound to, when it is bound under its own name
    (then it is the name ``Request.to_dict`` finds); else None."""
    if getattr(func, "__self__", None) is not spider or not hasattr(func, "__func__"):
        return None
    found = getattr(spider, func.__name__, None)
    return func.__name__ if getattr(found, "__func__", None) is func.__func__ else None


def request_dict(request: Request, spider: Any) -> dict[str, Any]:
    """``request.to_dict(spider=spider)``, which for a callback bound to the spider searches
    every member of the spider (``inspect.getmembers``), for every request: a callback (or
    errback) that is the spider's method of its own name is named at once, and the rest of the
    dict is made as ``to_dict`` makes it. Anything else goes to ``to_dict`` itself."""
    names: list[str | None] = []
    for func in (request.callback, request.errback):
        if func is None or isinstance(func, str):
            names.append(func)
            continue
        name = _callback_name(spider, func)
        if name is None:
            return _stored(request.to_dict(spider=spider))
        names.append(name)
    d: dict[str, Any] = {
        "url": request.url,
        "callback": names[0],
        "errback": names[1],
        "headers": dict(request.headers),
    }
    for attr in request.attributes:
        d.setdefault(attr, getattr(request, attr))
    if type(request) is not Request:
        d["_class"] = request.__module__ + "." + request.__class__.__name__
    return _stored(d)


def _stored(d: dict[str, Any]) -> dict[str, Any]:
    """*d* as the frontier stores it: a Referer's credentials (the ``?token=`` of the sitemap that
    listed the page) are masked, never written to the database."""
    headers = d.get("headers") or {}
    for name in (b"Referer", "Referer"):
        values = headers.get(name)
        if values:
            headers[name] = [
                redact_url(v.decode("latin-1")).encode("latin-1") if isinstance(v, bytes) else redact_url(v)
                for v in values
            ]
    return d


def queue_of(crawler: Crawler) -> FrontierQueue:
    """The crawl's frontier queue, as ``RECRAWLER_QUEUE_CLASS`` names it."""
    from scrapy.utils.misc import load_object

    path = crawler.settings.get("RECRAWLER_QUEUE_CLASS") or DATABASE_QUEUE
    try:
        cls = load_object(path) if isinstance(path, str) else path
    except (ImportError, ValueError, NameError, AttributeError) as exc:
        raise ConfigurationError(f"RECRAWLER_QUEUE_CLASS: cannot load {path!r} ({exc})") from exc
    if not (isinstance(cls, type) and issubclass(cls, FrontierQueue)):
        raise ConfigurationError(f"RECRAWLER_QUEUE_CLASS: {path!r} is not a recrawler.queues.FrontierQueue")
    return cls.from_crawler(crawler)


__all__ = [
    "DATABASE_QUEUE",
    "REDIS_QUEUE",
    "DatabaseQueue",
    "FrontierQueue",
    "RedisQueue",
    "queue_of",
    "request_dict",
]
