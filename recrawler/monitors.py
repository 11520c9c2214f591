"""Spidermon monitors over a recrawler run's outcome, read from the run report (``recrawler[spidermon]``).

    SPIDERMON_ENABLED = True
    EXTENSIONS = {"spidermon.contrib.scrapy.extensions.Spidermon": 500}
    SPIDERMON_ENGINE_STOP_MONITORS = ["recrawler.monitors.RunOutcomeMonitorSuite"]

List the suite under ``SPIDERMON_ENGINE_STOP_MONITORS``: the run report is built by the
Reconciler's ``spider_closed`` handler, which Spidermon's own ``spider_closed`` handler does not
wait for (Scrapy runs the handlers of one signal concurrently); ``engine_stopped`` comes after it.
A run refused when the spider opens (the site busy, the database unreachable) closes the spider before
the engine starts, and Scrapy sends no ``engine_stopped`` then: the add-on places
:class:`RefusedRunMonitors` whenever ``SPIDERMON_ENABLED`` is on, which runs those suites itself
(:func:`run_engine_stop_monitors`).

One alert per cause: each cause fails one monitor of the suite. A run that did not begin fails
:class:`RunBeganMonitor` alone (the others skip: there is no run to judge); a run held for a mass
removal fails :class:`MassRemovalMonitor`, not :class:`HeldRunMonitor` too; too many failed requests
fail :class:`ErrorRatioMonitor`, not :class:`OutageGuardMonitor` too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self, TypeVar

from recrawler.extras import require

# one line naming the extra when Spidermon is missing (recrawler[spidermon])
require("spidermon", "recrawler.monitors")

from scrapy import signals  # noqa: E402 (after the check above)
from scrapy.exceptions import NotConfigured  # noqa: E402 (after the check above)
from spidermon import Monitor, MonitorSuite  # noqa: E402 (after the check above)
from spidermon import monitors as spidermon_monitors  # noqa: E402 (after the check above)

from recrawler.extensions.reconcile import Reconciler  # noqa: E402 (after the check above)
from recrawler.outcome import HOLD_MASS_REMOVAL  # noqa: E402 (after the check above)

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy.crawler import Crawler

__all__ = [
    "AuditLiesMonitor",
    "ErrorRatioMonitor",
    "HeldRunMonitor",
    "MassRemovalMonitor",
    "OutageGuardMonitor",
    "RefusedRunMonitors",
    "RunBeganMonitor",
    "RunMonitor",
    "RunOutcomeMonitorSuite",
    "run_engine_stop_monitors",
]


_T = TypeVar("_T")


def named(name: str) -> Callable[[_T], _T]:
    """Spidermon's ``monitors.name`` decorator, typed: the name a monitor or check reports under."""
    decorate: Callable[[_T], _T] = spidermon_monitors.name(name)
    return decorate


class RunMonitor(Monitor):  # type: ignore[misc]  # spidermon is untyped
    """Base of the run-outcome monitors: the finished run's report, from the Reconciler.

    Settings: ``RECRAWLER_DB_URI`` (for the commands in messages). Decisions read the run report,
    never the stats.
    """

    @property
    def crawler(self) -> Crawler:
        """The crawler Spidermon monitors."""
        crawler: Crawler = self.data.crawler
        return crawler

    @property
    def failure(self) -> str | None:
        """Why the run did not begin (refused at start: the site busy, the database unreachable), or None."""
        reconciler = self.crawler.get_extension(Reconciler)
        return None if reconciler is None or reconciler.refusal is None else str(reconciler.refusal)

    @property
    def report(self) -> dict[str, Any]:
        """The run report. A run that did not begin skips the monitor (:class:`RunBeganMonitor`
        reports that cause, once); with no report otherwise (the suite runs before the Reconciler
        finished) the monitor fails."""
        reconciler = self.crawler.get_extension(Reconciler)
        if reconciler is not None and reconciler.report is not None:
            return reconciler.report
        failure = self.failure
        if failure is not None:
            self.skipTest(f"the recrawler run did not begin: {failure}")
        raise self.failureException(
            "no recrawler run report: list the suite in SPIDERMON_ENGINE_STOP_MONITORS (the report "
            "is written when the spider closes), and enable recrawler for the spider"
        )

    def commands(self, report: dict[str, Any]) -> str:
        """The approve and discard commands of the report's run."""
        run, db = report["run_id"], report.get("db") or ""
        flag = f" --db {db}" if db else ""
        return f"`recrawler runs approve {run}{flag}` or `recrawler runs discard {run}{flag}`"


@named("recrawler run")
class RunBeganMonitor(RunMonitor):
    """The run began: it was not refused at start (the database unreachable or corrupt: exit 5,
    another run holding the site: exit 6). The other monitors skip such a run."""

    @named("run began")
    def test_run_began(self) -> None:
        """Fails with the reason when the run was refused before it began."""
        failure = self.failure
        if failure is not None:
            self.fail(f"the recrawler run did not begin: {failure}")


#: the guard's reason that ErrorRatioMonitor reports (one alert per cause)
_ERROR_RATIO = "error_ratio"


@named("recrawler outage guard")
class OutageGuardMonitor(RunMonitor):
    """The outage guard did not have to keep missing pages (the listing or the site failed). Too
    many failed requests are :class:`ErrorRatioMonitor`'s to report."""

    @named("removals were not skipped")
    def test_removals_not_skipped(self) -> None:
        """Fails when the run's absence evidence was not trusted (``reconcile.skipped``), for any
        reason but ``error_ratio``."""
        report = self.report
        skipped = [why for why in (report.get("reconcile") or {}).get("skipped") or [] if why != _ERROR_RATIO]
        if skipped:
            held = report["counts"].get("missing_held", 0)
            self.fail(
                f"outage guard: nothing quarantined or gone ({', '.join(skipped)}); {held} missing pages kept"
            )


@named("recrawler held run")
class HeldRunMonitor(RunMonitor):
    """The run was not held for an operator (a change spike, the same text on many pages); a mass
    removal is :class:`MassRemovalMonitor`'s to report."""

    @named("run was not held")
    def test_not_held(self) -> None:
        """Fails when the run waits for ``recrawler runs approve`` or ``discard`` for a reason
        other than a mass removal."""
        report = self.report
        held = [why for why in report.get("held") or [] if why != HOLD_MASS_REMOVAL]
        if held:
            self.fail(
                f"run {report['run_id']} held ({', '.join(held)}): {report.get('alert')}. "
                f"Then {self.commands(report)}"
            )


@named("recrawler mass removal")
class MassRemovalMonitor(RunMonitor):
    """The run would not remove more than ``RECRAWLER_MAX_REMOVE_RATIO`` of the site's pages."""

    @named("no mass removal")
    def test_no_mass_removal(self) -> None:
        """Fails when the mass-removal breaker held the run."""
        report = self.report
        if HOLD_MASS_REMOVAL in (report.get("held") or []):
            self.fail(f"run {report['run_id']}: {report.get('alert')}. Then {self.commands(report)}")


@named("recrawler error ratio")
class ErrorRatioMonitor(RunMonitor):
    """Page errors stayed within ``RECRAWLER_MAX_ERROR_RATIO`` of the pages the run checked, and the
    guard did not find too many failed requests."""

    @named("error ratio within bounds")
    def test_error_ratio(self) -> None:
        """Fails above ``RECRAWLER_MAX_ERROR_RATIO`` (errors / crawled) or on the guard's ``error_ratio``."""
        report = self.report
        limit = self.crawler.settings.getfloat("RECRAWLER_MAX_ERROR_RATIO")
        counts = report["counts"]
        errors, crawled = counts.get("errors", 0), counts.get("crawled", 0)
        ratio = errors / crawled if crawled else 0.0
        guarded = _ERROR_RATIO in ((report.get("reconcile") or {}).get("skipped") or [])
        # one failure for one cause: the pages' errors and the guard's failed requests together
        held = "; the outage guard removed nothing" if guarded else ""
        if ratio > limit:
            self.fail(f"{errors} of {crawled} pages failed (> RECRAWLER_MAX_ERROR_RATIO={limit}){held}")
        if guarded:
            self.fail(f"too many failed requests (> RECRAWLER_MAX_ERROR_RATIO={limit}){held}")


@named("recrawler audit")
class AuditLiesMonitor(RunMonitor):
    """The self-audit caught no host's lastmod, ETag or Last-Modified lying about a change."""

    @named("no lies found")
    def test_no_lies(self) -> None:
        """Fails when an audited page had changed although its signals said it had not."""
        report = self.report
        lies = (report.get("audit") or {}).get("lies") or []
        found = report["counts"].get("lies", 0) or len(lies)
        if found:
            self.fail(f"the audit found {found} lies: {lies[:5]}")


class RunOutcomeMonitorSuite(MonitorSuite):  # type: ignore[misc]  # spidermon is untyped
    """Every run-outcome monitor; subclass it to add ``monitors_failed_actions`` (Slack, e-mail, ...)."""

    monitors = [  # noqa: RUF012 (Spidermon's class attribute)
        RunBeganMonitor,
        OutageGuardMonitor,
        HeldRunMonitor,
        MassRemovalMonitor,
        ErrorRatioMonitor,
        AuditLiesMonitor,
    ]


def run_engine_stop_monitors(crawler: Crawler) -> bool:
    """Run Spidermon's ``SPIDERMON_ENGINE_STOP_MONITORS`` now (a run refused at start, whose
    engine never started, never sends ``engine_stopped``); False without Spidermon's extension."""
    from spidermon.contrib.scrapy.extensions import Spidermon

    ext = crawler.get_extension(Spidermon)
    if ext is None:
        return False
    ext.engine_stopped()
    return True


class RefusedRunMonitors:
    """Extension: a run refused when the spider opened never starts the engine, so Scrapy sends no
    ``engine_stopped``; Spidermon's engine-stop monitors run at ``spider_closed`` instead.

    Placed by the add-on when ``SPIDERMON_ENABLED`` is on and Spidermon is installed.
    Settings: ``SPIDERMON_ENABLED``. Signals: listens to ``spider_closed``.
    """

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        if not crawler.settings.getbool("SPIDERMON_ENABLED"):
            raise NotConfigured
        monitors = cls(crawler)
        crawler.signals.connect(monitors.spider_closed, signal=signals.spider_closed)
        return monitors

    def spider_closed(self) -> None:
        """Run the engine-stop monitors when the run was refused (the Reconciler holds why)."""
        reconciler = self.crawler.get_extension(Reconciler)
        if reconciler is None or reconciler.refusal is None:
            return
        run_engine_stop_monitors(self.crawler)
