"""Several workers share one run of a site: scrapy-redis holds the frontier, Redis the rendezvous."""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import os
import socket
import time
from dataclasses import asdict
from datetime import datetime
from typing import TYPE_CHECKING, Any, Self

from scrapy.exceptions import NotConfigured

from recrawler import signals as recrawler_signals
from recrawler.exceptions import ConfigurationError
from recrawler.scheduler import wake
from recrawler.state import Run

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Request
    from scrapy.settings import BaseSettings


logger = logging.getLogger(__name__)


def _scrapy_redis(module: str, name: str) -> type:
    """scrapy-redis's class *name* from *module* (the workers extra), or one line saying to install it."""
    try:
        return getattr(importlib.import_module(f"scrapy_redis.{module}"), name)  # type: ignore[no-any-return]
    except ImportError as exc:  # pragma: no cover - the extra is missing
        msg = "RECRAWLER_WORKERS_ENABLED: scrapy-redis is not installed (pip install 'recrawler[workers]')"
        raise ConfigurationError(msg) from exc


class PageKeyDupeFilter(_scrapy_redis("dupefilter", "RFPDupeFilter")):  # type: ignore[misc]  # scrapy-redis ships no type hints
    """scrapy-redis's shared seen-set, keyed by recrawler's page-key request fingerprint, so URL
    variants of one page are fetched (and classified) once per run across every worker."""

    fingerprinter: Any = None

    @classmethod
    def from_spider(cls, spider: Any) -> Self:
        """As scrapy-redis builds it, with the crawler's request fingerprinter."""
        dupefilter: Self = super().from_spider(spider)
        dupefilter.fingerprinter = spider.crawler.request_fingerprinter
        return dupefilter

    def request_fingerprint(self, request: Request) -> str:
        """The page key's fingerprint (hex)."""
        if self.fingerprinter is None:
            return str(super().request_fingerprint(request))
        return str(self.fingerprinter.fingerprint(request).hex())


class SharedScheduler(_scrapy_redis("scheduler", "Scheduler")):  # type: ignore[misc]  # scrapy-redis ships no type hints
    """scrapy-redis's scheduler (the frontier the workers of a run share, with
    ``RECRAWLER_WORKERS_ENABLED``), which queues the checks of stored pages the run did not reach
    (``recrawler.signals.pages_to_check``) as FrontierScheduler does."""

    crawler: Crawler | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """scrapy-redis's scheduler, listening for the checks."""
        scheduler: Self = super().from_crawler(crawler)
        scheduler.crawler = crawler
        crawler.signals.connect(scheduler.pages_to_check, signal=recrawler_signals.pages_to_check)
        return scheduler

    def pages_to_check(self, requests: list[Request]) -> None:
        """Queue the checks (an empty batch: none left); the engine looks again now."""
        for request in requests:
            self.enqueue_request(request)
        wake(self.crawler)


def frontier_keys(settings: BaseSettings, spider: str) -> tuple[str, str]:
    """The scrapy-redis queue and seen-set keys of *spider* (what a new run clears)."""
    queue = settings.get("SCHEDULER_QUEUE_KEY") or "%(spider)s:requests"
    seen = settings.get("SCHEDULER_DUPEFILTER_KEY") or "%(spider)s:dupefilter"
    return queue % {"spider": spider}, seen % {"spider": spider}


def _run_to_json(run: Run) -> str:
    data = asdict(run)
    data["started_at"] = run.started_at.isoformat()
    return json.dumps(data)


def _run_from_json(text: str) -> Run:
    data = json.loads(text)
    data["started_at"] = datetime.fromisoformat(data["started_at"])
    return Run(**data)


class SharedRun:
    """One run, many workers: the first worker to start leads (takes the site's lease, reads the
    listing, checks unseen pages and does the closing work once, after the last worker); the others
    join its run through Redis, fetch and classify from the shared scrapy-redis frontier, and leave
    their counts for the leader (as of each heartbeat, and when they leave). A worker whose
    leader is gone closes, its writes committed, and the run stays unfinished; a worker that stops
    beating without leaving is lost, and the leader ends the run unfinished too (nothing removed).

    Settings: ``RECRAWLER_WORKERS_ENABLED``, ``RECRAWLER_WORKERS_WAIT_SECS``,
    ``RECRAWLER_WORKERS_TTL_SECS``, ``REDIS_URL`` (scrapy-redis's connection settings).
    """

    #: what a worker's slot in the run says about it
    BUSY, IDLE = "busy", "idle"

    def __init__(
        self, server: Any, prefix: str, *, frontier: tuple[str, str], wait_secs: float, ttl_secs: float
    ) -> None:
        if wait_secs <= 0 or ttl_secs <= 0:
            msg = f"RECRAWLER_WORKERS_WAIT_SECS/_TTL_SECS: bad values {wait_secs!r}, {ttl_secs!r}"
            raise ConfigurationError(msg)
        self.server = server
        self.prefix = prefix
        self.frontier = frontier
        self.wait_secs = wait_secs
        self.ttl_secs = ttl_secs
        self.worker = f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self.leader = False
        #: the run this process works on has begun (led or joined)
        self.joined = False
        self.state = self.BUSY

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SharedRun:
        """From scrapy-redis's connection settings; the keys are per spider and site."""
        s = crawler.settings
        if not s.getbool("RECRAWLER_WORKERS_ENABLED"):
            raise NotConfigured
        from scrapy_redis import connection

        spider = crawler.spider
        name = str(getattr(spider, "name", "") or "recrawler")
        site = getattr(spider, "recrawler_site", None) or name
        return cls(
            connection.from_settings(s),
            f"recrawler:{name}:{site}",
            frontier=frontier_keys(s, name),
            wait_secs=s.getfloat("RECRAWLER_WORKERS_WAIT_SECS"),
            ttl_secs=s.getfloat("RECRAWLER_WORKERS_TTL_SECS"),
        )

    def _key(self, name: str) -> str:
        return f"{self.prefix}:{name}"

    def _ttl(self) -> int:
        return max(1, round(self.ttl_secs))

    # -- joining ---------------------------------------------------------------------------------

    def elect(self) -> bool:
        """Lead the run if no live leader exists (blocking Redis call; see :meth:`start`)."""
        self.leader = bool(self.server.set(self._key("leader"), self.worker, nx=True, ex=self._ttl()))
        return self.leader

    def publish_run(self, run: Run) -> None:
        """Leader: clear the last run's frontier (its seen-set would skip every page) and announce the run."""
        old = self._members()
        pipe = self.server.pipeline()
        pipe.delete(*self.frontier, self._key("workers"), self._key("counts"), self._key("closing"))
        pipe.delete(self._key("members"), self._key("left"), *(self._key(f"counts:{m}") for m in old))
        pipe.set(self._key("run"), _run_to_json(run), ex=self._ttl() * 1000)
        pipe.execute()

    def _members(self) -> list[str]:
        """Every worker that took part in the run (alive, left or lost)."""
        found = self.server.smembers(self._key("members"))
        return sorted(m.decode() if isinstance(m, bytes) else m for m in found)

    async def joined_run(self) -> Run | None:
        """Worker: the leader's run, once it is announced (None after ``RECRAWLER_WORKERS_WAIT_SECS``)."""
        deadline = time.monotonic() + self.wait_secs
        while time.monotonic() < deadline:
            text = await asyncio.to_thread(self.server.get, self._key("run"))
            leader = await asyncio.to_thread(self.server.get, self._key("leader"))
            if text and leader:
                return _run_from_json(text.decode() if isinstance(text, bytes) else text)
            await asyncio.sleep(0.2)
        return None

    def beat(self) -> None:
        """Renew this worker's presence (and the leader's claim)."""
        pipe = self.server.pipeline()
        pipe.hset(self._key("workers"), self.worker, self.state)
        pipe.sadd(self._key("members"), self.worker)
        pipe.set(self._key(f"alive:{self.worker}"), 1, ex=self._ttl())
        if self.leader:
            pipe.set(self._key("leader"), self.worker, ex=self._ttl())
        pipe.execute()

    def set_state(self, state: str) -> None:
        """Mark this worker busy or idle (a change only)."""
        if state != self.state:
            self.state = state
            self.server.hset(self._key("workers"), self.worker, state)

    # -- leaving ---------------------------------------------------------------------------------

    def leader_alive(self) -> bool:
        """True while the run's leader still beats."""
        return bool(self.server.exists(self._key("leader")))

    def closing(self) -> bool:
        """True once the leader has begun the closing work."""
        return bool(self.server.exists(self._key("closing")))

    def others_idle(self) -> bool:
        """True when every other live worker is idle (dead workers do not count)."""
        for worker, state in self.server.hgetall(self._key("workers")).items():
            name = worker.decode() if isinstance(worker, bytes) else worker
            if name == self.worker or not self.server.exists(self._key(f"alive:{name}")):
                continue
            if (state.decode() if isinstance(state, bytes) else state) != self.IDLE:
                return False
        return True

    def frontier_empty(self) -> bool:
        """True when the shared queue holds no request."""
        queue = self.frontier[0]
        kind = self.server.type(queue)
        kind = kind.decode() if isinstance(kind, bytes) else kind
        if kind == "zset":
            return int(self.server.zcard(queue)) == 0
        if kind == "list":
            return int(self.server.llen(queue)) == 0
        return kind == "none"

    def report(self, counts: dict[str, int | float]) -> None:
        """Worker: this worker's counts so far (with each heartbeat): a worker that dies has its
        work up to its last heartbeat counted by the leader."""
        pipe = self.server.pipeline()
        self._report(pipe, counts)
        pipe.execute()

    def _report(self, pipe: Any, counts: dict[str, int | float]) -> None:
        key = self._key(f"counts:{self.worker}")
        pipe.delete(key)
        if counts:
            pipe.hset(key, mapping={k: repr(v) for k, v in counts.items()})
        pipe.expire(key, self._ttl() * 1000)

    def leave(self, counts: dict[str, int | float]) -> None:
        """Worker: hand this worker's counts to the leader and leave the run."""
        pipe = self.server.pipeline()
        self._report(pipe, counts)
        pipe.sadd(self._key("left"), self.worker)
        pipe.hdel(self._key("workers"), self.worker)
        pipe.delete(self._key(f"alive:{self.worker}"))
        pipe.execute()

    def lost(self) -> list[str]:
        """Leader: the workers of the run that stopped beating without leaving it (killed)."""
        left = {m.decode() if isinstance(m, bytes) else m for m in self.server.smembers(self._key("left"))}
        return [
            m
            for m in self._members()
            if m != self.worker and m not in left and not self.server.exists(self._key(f"alive:{m}"))
        ]

    async def wait_for_workers(self) -> None:
        """Leader: announce closing and wait until every live worker has left."""
        await asyncio.to_thread(self.server.set, self._key("closing"), 1, ex=self._ttl() * 100)
        while True:
            live = await asyncio.to_thread(self._live_others)
            if not live:
                return
            await asyncio.to_thread(self.beat)
            await asyncio.sleep(0.2)

    def _live_others(self) -> list[str]:
        names = [w.decode() if isinstance(w, bytes) else w for w in self.server.hkeys(self._key("workers"))]
        return [n for n in names if n != self.worker and self.server.exists(self._key(f"alive:{n}"))]

    def gathered(self) -> dict[str, float]:
        """Leader: the counts every other worker left (a lost one's, as of its last heartbeat)."""
        total: dict[str, float] = {}
        for member in self._members():
            if member == self.worker:
                continue
            for k, v in self.server.hgetall(self._key(f"counts:{member}")).items():
                name = k.decode() if isinstance(k, bytes) else k
                total[name] = total.get(name, 0.0) + float(v)
        return total

    def release(self) -> None:
        """Leader: the run is over; the next run elects a leader again."""
        members = self._members()
        self.server.delete(
            self._key("leader"),
            self._key("run"),
            self._key("workers"),
            self._key("counts"),
            self._key("members"),
            self._key("left"),
            *(self._key(f"counts:{m}") for m in members),
        )


__all__ = ["PageKeyDupeFilter", "SharedRun", "SharedScheduler", "frontier_keys"]
