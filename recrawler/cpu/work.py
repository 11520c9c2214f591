"""CpuWork: where a run's per-page CPU work runs (threads, worker processes) and the collector's tuning."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from recrawler.cpu.pool import CpuPool
from recrawler.exceptions import ConfigurationError
from recrawler.gctuning import GcTuning

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy.settings import BaseSettings

_T = TypeVar("_T")
_P = ParamSpec("_P")


class CpuWork:
    """The run's CPU threads (``RECRAWLER_CPU_THREADS``; 0: on the reactor), its worker processes
    (``RECRAWLER_CPU_PROCESSES``, :class:`~recrawler.cpu.CpuPool`) and the garbage collector's
    settings for the run (``RECRAWLER_GC_THRESHOLD``): started when the spider opens, before the
    run's own threads, and stopped on every way out."""

    def __init__(
        self, threads: int = 0, pool: CpuPool | None = None, gc_tuning: GcTuning | None = None
    ) -> None:
        if threads < 0:
            raise ConfigurationError(f"RECRAWLER_CPU_THREADS: bad value {threads!r}")
        self.threads = threads
        self.pool = pool or CpuPool(0, selectors=[], noise_selectors=[], chunking=None)
        self.gc_tuning = gc_tuning or GcTuning(0)
        self._executor: ThreadPoolExecutor | None = None

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> CpuWork:
        """From ``RECRAWLER_CPU_*`` and ``RECRAWLER_GC_THRESHOLD``."""
        return cls(
            settings.getint("RECRAWLER_CPU_THREADS"),
            CpuPool.from_settings(settings),
            GcTuning(settings.getint("RECRAWLER_GC_THRESHOLD")),
        )

    def start(self) -> None:
        """Freeze the collector's generation, then fork the workers (they inherit it, and their
        pages of memory stay shared with this process)."""
        self.gc_tuning.start()
        self.pool.start()

    async def offload(self, func: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """Run pure per-page CPU work on the CPU threads, or inline.

        lxml's parser and hashlib release the GIL while they work, so the reactor keeps
        downloading meanwhile; the functions given must not touch the reactor or the store.
        """
        if not self.threads:
            return func(*args, **kwargs)
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="recrawler-cpu")
        return await asyncio.wrap_future(self._executor.submit(func, *args, **kwargs))

    def stop(self) -> None:
        """Stop the threads and workers, and give the collector back its settings."""
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None
        self.pool.shutdown()
        self.gc_tuning.stop()


__all__ = ["CpuWork"]
