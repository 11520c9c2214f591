"""The run report's parts the Reconciler writes: counts, deploy, freshness, schedule and audit."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from recrawler.auditor import Auditor
from recrawler.deploys import SIGNALS
from recrawler.intervals import SchedulePolicy
from recrawler.reports import summary
from recrawler.reports.freshness import STORED, freshness_view
from recrawler.runtime import component_of

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

    from recrawler.counters import RunCounters
    from recrawler.outcome import Verdicts
    from recrawler.runtime import Runtime
    from recrawler.state import ReconcileResult, Run

logger = logging.getLogger(__name__)


async def freshness(rt: Runtime, run: Run, settings: BaseSettings) -> dict[str, Any]:
    """How current the published knowledge base is now (what the HTML report shows later)."""
    bound = settings.getfloat("RECRAWLER_MAX_INTERVAL_SECS")
    fresh = await asyncio.to_thread(
        rt.store.readers.freshness,
        run.site,
        bound_secs=bound,
        now=component_of(rt.crawler, SchedulePolicy).now,
    )
    view = freshness_view(fresh)
    return {k: view[k] for k in STORED} | {"bound_secs": bound}


def deploy_counts(c: RunCounters) -> dict[str, Any]:
    """The report's ``deploy`` as the run's counters say it (the reason is the store's)."""
    detected = bool(c["recrawler/deploy/detected"])
    return {
        "detected": detected,
        "signals": [s for s in SIGNALS if c[f"recrawler/deploy/detected/{s}"]],
        "reason": None,
        "checking": c["recrawler/deploy/pages"] if detected else 0,
    }


async def deploy(rt: Runtime, run: Run) -> dict[str, Any]:
    """The report's ``deploy``: whether this run detected one, by which signals, why, and how
    many pages it checks for it."""
    found = deploy_counts(rt.counters)
    if found["detected"] and run.site is not None:
        build = await rt.store.schedule.site_build(run.site)
        if build is not None and build.deploy_run == run.id:
            found["reason"] = build.deploy_reason
        found["line"] = summary.deploy_line(found)
    return found


def build(
    rt: Runtime,
    settings: BaseSettings,
    run: Run,
    reason: str,
    verdicts: Verdicts,
    result: ReconcileResult | None,
    skipped: list[str],
    hold: dict[str, str],
    deploy: dict[str, Any],
) -> dict[str, Any]:
    """The run report (its counts mirrored to the counters); a host that ignores validators is
    said at WARNING."""
    c = rt.counters
    counts = summary.counts(c, verdicts, result)
    summary.mirror(c, verdicts, result, counts["crawled"])
    no_304 = summary.hosts_without_304(c, settings.getint("RECRAWLER_CONDITIONAL_NO_304_AFTER"))
    for host in no_304:
        logger.warning(
            "host %(host)s: %(n)d conditional requests answered in full with the validators sent "
            "and none with a 304: it ignores validators, so the content hash decides",
            {"host": host, "n": c[f"recrawler/conditional/ignored/{host}"]},
        )
    policy = component_of(rt.crawler, SchedulePolicy)
    return summary.build(
        run,
        reason,
        counts=counts,
        result=result,
        skipped=skipped,
        hold=hold,
        hosts_without_304=no_304,
        db_uri=rt.store.uri,
        schedule={
            "mode": policy.mode,
            "lastmod_mode": policy.lastmod_mode,
            "now": policy.now.isoformat(),
            "due": c.family("recrawler/schedule/due"),
        },
        audit=component_of(rt.crawler, Auditor).report(),
        deploy=deploy,
    )


__all__ = ["build", "deploy", "deploy_counts", "freshness"]
