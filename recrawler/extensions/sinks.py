"""After a run publishes, mirror the published knowledge base into LangChain vector stores."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Self

from scrapy.exceptions import NotConfigured

from recrawler import signals as recrawler_signals
from recrawler.exceptions import ConfigurationError, RecrawlerError
from recrawler.state import RUN_PUBLISHED

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from recrawler.state import Run

logger = logging.getLogger(__name__)


class VectorStoreSinks:
    """Syncs each configured LangChain ``VectorStore`` with the published knowledge base when a run
    publishes (:class:`recrawler.kb.sync.VectorStoreSync`: stable ids, deletes, resumable).

    Settings: ``RECRAWLER_VECTORSTORE_SINKS`` (``{name: "module.factory"}``, a callable returning
    the store; empty: the extension is off), ``RECRAWLER_DB_URI``. Signals: ``run_finished``.
    A sink that fails is logged at ERROR and synced again after the next published run (or by
    ``recrawler sync``); the run's outcome does not change.
    """

    def __init__(self, uri: str, sinks: dict[str, str]) -> None:
        self.uri = uri
        self.sinks = dict(sinks)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        sinks = crawler.settings.getdict("RECRAWLER_VECTORSTORE_SINKS")
        if not sinks or not crawler.settings.getbool("RECRAWLER_INDEX_ENABLED"):
            # silently, as configured (a message would make Scrapy log a WARNING every run)
            raise NotConfigured
        for name, path in sinks.items():
            if not isinstance(path, str) or not path:
                raise ConfigurationError(
                    f"RECRAWLER_VECTORSTORE_SINKS[{name!r}]: {path!r} is not an import path"
                )
        ext = cls(crawler.settings["RECRAWLER_DB_URI"], sinks)
        crawler.signals.connect(ext.run_finished, signal=recrawler_signals.run_finished)
        return ext

    async def run_finished(self, run: Run, report: dict[str, Any]) -> None:
        if report.get("index", {}).get("state") != RUN_PUBLISHED:
            return
        for name, path in self.sinks.items():
            setting = f"RECRAWLER_VECTORSTORE_SINKS[{name!r}]"
            try:
                counts = await asyncio.to_thread(sync_sink, self.uri, name, path, setting=setting)
            except RecrawlerError as exc:
                # one line (a store that is down is the sink's trouble, not the run's): the next
                # published run, or `recrawler sync`, takes it up where the ledger says
                logger.error("run %(run)d: vector-store sink failed: %(exc)s", {"run": run.id, "exc": exc})
                continue
            logger.info(
                "run %(run)d: vector-store sink %(name)s: %(added)d added, %(deleted)d deleted",
                {"run": run.id, "name": name, **counts},
            )


def sync_sink(uri: str, name: str, path: str, *, setting: str = "--store") -> dict[str, int]:
    """Build the store *path* names (``module:factory`` or ``module.factory``) and sync it with the
    published knowledge base at *uri*; a store that fails is one ``SinkError`` line."""
    from recrawler.kb.sync import VectorStoreSync, build_store

    store = build_store(path, name, name=setting)
    try:
        return VectorStoreSync(uri, store, name=name).sync()
    finally:
        # stores keep clients and pools open; a sink's store lives for one sync
        for owner in (store, getattr(store, "client", None)):
            close = getattr(owner, "close", None)
            if callable(close):
                close()
        engine = getattr(store, "_engine", None)
        if engine is not None and callable(getattr(engine, "dispose", None)):
            engine.dispose()
