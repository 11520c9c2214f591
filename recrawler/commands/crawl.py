"""``scrapy crawl`` with recrawler's exit codes: a script knows how a run ended without reading logs."""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import TYPE_CHECKING, Any

from scrapy.commands.crawl import Command as ScrapyCrawlCommand
from scrapy.exceptions import UsageError
from twisted.internet.defer import Deferred

from recrawler.exceptions import ConfigurationError, RunRefused, StateStoreError
from recrawler.extensions.reconcile import decided_exit_code
from recrawler.extras import missing_extra
from recrawler.outcome import EXIT_BUSY, EXIT_CONFIG, EXIT_HELD, EXIT_OK, EXIT_STATE
from recrawler.redact import redact_text
from recrawler.runtime import find_runtime

if TYPE_CHECKING:
    import argparse

    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)


def logged_at(settings: BaseSettings, level: int) -> bool:
    """Whether Scrapy's log (``LOG_ENABLED``, ``LOG_LEVEL``) shows a record of *level*."""
    if not settings.getbool("LOG_ENABLED"):
        return False
    threshold = settings.get("LOG_LEVEL")
    if isinstance(threshold, str):
        threshold = logging.getLevelNamesMapping().get(threshold.upper(), logging.DEBUG)
    return level >= int(threshold)


def exit_code_for(exc: BaseException | None) -> int | None:
    """The exit code of a crawl that failed to start with *exc* (None: not one of recrawler's)."""
    if isinstance(exc, ConfigurationError):
        return EXIT_CONFIG
    if isinstance(exc, RunRefused):
        return EXIT_HELD if exc.held else EXIT_BUSY
    if isinstance(exc, StateStoreError):
        return EXIT_STATE
    return None


class Command(ScrapyCrawlCommand):
    """Run a spider; the exit code says how its recrawler run ended. When the log level hides the
    run's summary line (``--loglevel WARNING`` hides an OK run's, ``--nolog`` every one), the
    line is written to stderr instead.

    0 published (or nothing to publish), 1 Scrapy failed (a crash), 2 a configuration error
    (one line, no traceback), 3 held for ``recrawler runs approve``/``discard`` (or a held run
    blocks the site), 4 the outage guard skipped removals (listing failed or incomplete, too many
    errors, the run did not finish), 5 the database failed, 6 another run holds the site.
    """

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        """Crawl, then set ``exitcode`` from the run's outcome."""
        if len(args) != 1:
            raise UsageError("give one spider name" if args else "")
        assert self.crawler_process is not None
        crawler = self._create_crawler(args[0])
        failure: list[BaseException] = []

        def keep(exc: BaseException) -> None:
            failure.append(exc)

        started = self.crawler_process.crawl(crawler, **opts.spargs)
        if isinstance(started, Deferred):

            def errback(f: Any) -> None:
                # said once when the process stops: recrawler's own errors in one line, others with
                # their traceback
                keep(f.value)

            started.addErrback(errback)
        elif isinstance(started, asyncio.Future):

            def done(task: asyncio.Future[Any]) -> None:
                if not task.cancelled() and task.exception() is not None:
                    keep(task.exception())  # type: ignore[arg-type]  # checked just above

            started.add_done_callback(done)
        self.crawler_process.start()
        exc = failure[0] if failure else None
        # a module an extra installs (the project's Spidermon extension, a backend's driver)
        exc = missing_extra(exc) or exc
        code = exit_code_for(exc)
        if code is not None:
            logger.critical("recrawler: %(exc)s", {"exc": " ".join(redact_text(str(exc)).split())})
            self.exitcode = code
            return
        if exc is not None:
            # a crash: kept above (so asyncio does not print it unattributed), said here once
            logger.critical("the crawl failed to start", exc_info=exc)
            self.exitcode = 1
            return
        if self.crawler_process.bootstrap_failed:
            self.exitcode = 1
            return
        runtime = find_runtime(crawler)
        decided = decided_exit_code(crawler)
        self.exitcode = decided if decided is not None else EXIT_OK
        if runtime is not None and runtime.summary is not None:
            level, line = runtime.summary
            if not logged_at(crawler.settings, level):
                # a quiet cron run (--loglevel WARNING, --nolog) still says how it ended
                sys.stderr.write(line + "\n")
