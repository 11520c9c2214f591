"""Several workers share one run of a site: Redis holds the frontier's queue and the rendezvous."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from dataclasses import asdict
from datetime import datetime
from typing import TYPE_CHECKING, Any

from scrapy.exceptions import NotConfigured

from recrawler.exceptions import ConfigurationError
from recrawler.state import Run

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


logger = logging.getLogger(__name__)


def redis_prefix(crawler: Crawler) -> str:
    """Where the Redis keys of a crawl's spider on its site begin (the rendezvous's; the frontier
    queue's add ``:frontier``, see :func:`redis_keys`)."""
    spider = crawler.spider
    name = str(getattr(spider, "name", "") or "recrawler")
    site = getattr(spider, "recrawler_site", None) or name
    return f"recrawler:{name}:{site}"


def redis_keys(prefix: str, run_id: int) -> tuple[str, str, str]:
    """A run's queue (a sorted set of requests), its page keys and its sequence, in Redis."""
    base = f"{prefix}:{run_id}"
    return f"{base}:queue", f"{base}:keys", f"{base}:seq"


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
        self, server: Any, prefix: str, *, queue_prefix: str, wait_secs: float, ttl_secs: float
    ) -> None:
        if wait_secs <= 0 or ttl_secs <= 0:
            msg = f"RECRAWLER_WORKERS_WAIT_SECS/_TTL_SECS: bad values {wait_secs!r}, {ttl_secs!r}"
            raise ConfigurationError(msg)
        self.server = server
        self.prefix = prefix
        #: the run's frontier queue in Redis (``recrawler.queues.RedisQueue``'s keys)
        self.queue_prefix = queue_prefix
        #: the run the workers share, once led or joined
        self.run_id: int | None = None
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

        prefix = redis_prefix(crawler)
        return cls(
            connection.from_settings(s),
            prefix,
            queue_prefix=f"{prefix}:frontier",
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
        """Leader: announce the run (its frontier's keys are the run's own: none to clear)."""
        self.run_id = run.id
        old = self._members()
        pipe = self.server.pipeline()
        pipe.delete(self._key("workers"), self._key("counts"), self._key("closing"))
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
                run = _run_from_json(text.decode() if isinstance(text, bytes) else text)
                self.run_id = run.id
                return run
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
        """True when the run's shared queue holds no request."""
        if self.run_id is None:
            return True
        return int(self.server.zcard(redis_keys(self.queue_prefix, self.run_id)[0])) == 0

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


__all__ = ["SharedRun", "redis_keys", "redis_prefix"]
