"""Simulated weeks of runs: requests sent, edits missed, how long a deploy takes to be searchable.

    python -m benchmarks.bench_schedule [--pages 2000] [--weeks 4] [--days 30] [--runs-per-day 1]
                                        [--seed 1] [--parts deploys,pages] [--json out.json]

Part A, deploys (``benchmarks/lib/deploy_model.py``): a docs site that changes in deploys (weekly,
5-15% of the pages; hotfixes of 1-3 pages between), runs hourly and daily, with and without
honest sitemap lastmods, decided by recrawler's own code (``SchedulePolicy``, ``DeployWatch``,
``audit_count``). Part B, pages changing on their own: every page changes as a Poisson process at
a known rate (a few hourly, some daily or weekly, most rarely), ``--runs-per-day`` runs a day;
each strategy decides per run which pages to request, using recrawler's own scheduling code:
``SchedulePolicy.decide`` (what ScheduleMiddleware calls for each listed page),
``SchedulePolicy.after_check`` (what it stores after each check), ``audit_count`` (the audit
sample's size) and ``lastmod_claims_unchanged`` (the audit's lastmod evidence). The server is
simulated in-process: a request sees the page's current version; a lastmod is the time of its
latest change (or never updated, for the lying sitemap).

A change at time t is *missed* when the page is not checked within a day after t. Requests count
every HTTP request: a conditional request answered 304 is one, and an audited page whose 304 is
fetched again without validators costs two. *Worst staleness* is the longest any page went
unverified (between two verifications, a check or a trusted lastmod vouching for it, or from the
last to the end of the month): the bound ``RECRAWLER_MAX_INTERVAL_SECS`` sets (24 h by default;
30 days before), whatever the schedule.
"""

from __future__ import annotations

import argparse
import bisect
import math
import random
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

if not __package__:  # run as a script: python benchmarks/bench_schedule.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.lib.deploy_model import DeployResult, deploy_cases, deploy_targets, make_deploy_site
from benchmarks.lib.results import add_json_option, write_json
from recrawler import default_settings
from recrawler.intervals import Revisit, SchedulePolicy, audit_count

DAY = 86400.0
T0 = datetime(2026, 3, 1, 6, 0, tzinfo=UTC)
#: (share of pages, changes per day, or a (low, high) range drawn log-uniformly)
CLASSES: tuple[tuple[str, float, float | tuple[float, float]], ...] = (
    ("hourly", 0.02, 24.0),
    ("daily", 0.08, 1.0),
    ("weekly", 0.15, 1 / 7),
    ("rarely", 0.75, (1 / 365, 1 / 30)),
)


@dataclass
class Page:
    url: str
    kind: str
    rate: float
    #: change times, in days from T0 (sorted)
    changes: list[float]

    def version(self, day: float) -> int:
        """How many changes happened up to *day*."""
        return bisect.bisect_right(self.changes, day)

    def lastmod(self, day: float) -> str:
        """The honest lastmod at *day*: the latest change, or a date long before the month."""
        n = self.version(day)
        moment = T0 + timedelta(days=self.changes[n - 1]) if n else T0 - timedelta(days=400)
        return moment.isoformat()


def pick_class(pick: float) -> tuple[str, float | tuple[float, float]]:
    """The change class a uniform draw in [0, 1) falls in."""
    acc = 0.0
    for kind, share, rate in CLASSES:
        acc += share
        if pick < acc:
            return kind, rate
    return CLASSES[-1][0], CLASSES[-1][2]


def make_site(pages: int, days: int, rng: random.Random) -> list[Page]:
    site = []
    for i in range(pages):
        kind, rate = pick_class(rng.random())
        per_day = (
            math.exp(rng.uniform(math.log(rate[0]), math.log(rate[1]))) if isinstance(rate, tuple) else rate
        )
        changes, t = [], 0.0
        while True:
            t += rng.expovariate(per_day)
            if t >= days + 1:
                break
            changes.append(t)
        site.append(Page(f"https://docs.example.com/{kind}/p{i:05d}.html", kind, per_day, changes))
    return site


@dataclass
class Strategy:
    name: str
    mode: str = "adaptive"
    lastmod_mode: str = "ignore"
    max_secs: float = default_settings.RECRAWLER_MAX_INTERVAL_SECS
    audit: float = 0.0
    lying_lastmod: bool = False


@dataclass
class Result:
    name: str
    requests: int = 0
    checks: int = 0
    changes: int = 0
    missed: int = 0
    missed_by_kind: dict[str, int] = field(default_factory=dict)
    lastmod_switched_off_on_day: float | None = None
    #: the longest any page went unverified, in days
    worst_stale_days: float = 0.0


def simulate(site: list[Page], strategy: Strategy, days: int, seed: int, runs_per_day: int = 1) -> Result:
    rng = random.Random(seed)
    result = Result(strategy.name)
    state: dict[str, Revisit] = {}
    seen: dict[str, int] = {}
    checked_on: dict[str, list[float]] = {p.url: [] for p in site}
    #: when each page was verified: checked, or vouched for by a trusted lastmod
    verified_on: dict[str, list[float]] = {p.url: [] for p in site}
    lastmod_trusted = True
    #: lastmod claims the audit found true (hint mode trusts them once there are enough)
    honest = 0
    for run in range(days * runs_per_day + 1):
        day = run / runs_per_day
        policy = SchedulePolicy(
            now=T0 + timedelta(days=day),
            mode=strategy.mode,
            lastmod_mode=strategy.lastmod_mode,
            max_secs=strategy.max_secs,
        )
        live = [p for p in site if p.url in state]
        sample = set()
        if strategy.audit and live:
            # the audit's share is per bound: runs closer together draw a part of it each
            n = audit_count(strategy.audit, len(live), part=DAY / runs_per_day / strategy.max_secs)
            sample = {p.url for p in rng.sample(live, n)}
        for page in site:
            prev = state.get(page.url)
            # a lying sitemap keeps the lastmod it had on the first day
            lastmod = page.lastmod(0 if strategy.lying_lastmod else day)
            decision = policy.decide(
                prev,
                url=page.url,
                status="live" if prev is not None else None,
                lastmod=lastmod,
                audit=page.url in sample,
                lastmod_trusted=lastmod_trusted,
                lastmod_honest=honest >= default_settings.RECRAWLER_AUDIT_TRUST_AFTER,
            )
            if not decision.due:
                if decision.verified:
                    verified_on[page.url].append(day)
                continue
            verified_on[page.url].append(day)
            version = page.version(day)
            changed = prev is not None and version != seen[page.url]
            result.requests += 1
            if page.url in sample and not changed:
                # the audit does not believe a 304: it fetches the page again without validators
                result.requests += 1
            result.checks += 1
            checked_on[page.url].append(day)
            claims = (
                prev is not None
                and strategy.lastmod_mode != "ignore"
                and lastmod_trusted
                and policy.lastmod_claims_unchanged(lastmod, prev.last_check_at)
            )
            if claims and changed:
                # the lastmod claimed "unchanged" for content that changed: switched off (one lie)
                lastmod_trusted = False
                result.lastmod_switched_off_on_day = day
            elif claims:
                honest += 1
            state[page.url] = policy.after_check(prev, url=page.url, changed=changed, new=prev is None)
            seen[page.url] = version
    for page in site:
        days_checked = checked_on[page.url]
        days_verified = verified_on[page.url]
        gaps = [b - a for a, b in pairwise(days_verified)]
        if days_verified:
            gaps.append(days - days_verified[-1])
        result.worst_stale_days = max([result.worst_stale_days, *gaps])
        for t in page.changes:
            if t + 1 > days:
                # its day to be caught in ends after the simulated ones
                continue
            result.changes += 1
            # caught when some check falls in (t, t + 1 day]
            i = bisect.bisect_right(days_checked, t)
            if i == len(days_checked) or days_checked[i] > t + 1:
                result.missed += 1
                result.missed_by_kind[page.kind] = result.missed_by_kind.get(page.kind, 0) + 1
    return result


#: the longest revisit interval before staleness was bounded (for the "before" rows)
BEFORE_MAX_SECS = 30 * DAY


def strategies() -> list[Strategy]:
    before = {"max_secs": BEFORE_MAX_SECS}
    return [
        Strategy("full recrawl every run", mode="all"),
        Strategy("fixed interval: 1 day", max_secs=DAY),
        Strategy("fixed interval: 7 days", max_secs=7 * DAY),
        Strategy("adaptive, lastmod ignore, before (30 d)", audit=0.01, **before),
        Strategy("adaptive, lastmod ignore (default bound)", audit=0.01),
        Strategy("adaptive, lastmod hint, before (30 d)", lastmod_mode="hint", audit=0.01, **before),
        Strategy("adaptive, lastmod hint (the default)", lastmod_mode="hint", audit=0.01),
        Strategy("adaptive, lastmod skip, before (30 d)", lastmod_mode="skip", audit=0.01, **before),
        Strategy("adaptive, lastmod skip (default bound)", lastmod_mode="skip", audit=0.01),
        Strategy(
            "  same, sitemap lastmod never updated",
            lastmod_mode="skip",
            audit=0.01,
            lying_lastmod=True,
        ),
    ]


def print_deploys(
    out: Any, results: list[DeployResult], pages: int, weeks: int, seed: int
) -> list[tuple[str, bool]]:
    """Part A's table and its targets; returns the targets, (what, met) each."""
    deploys = results[0].deploys
    out.write(
        f"Part A: deploys. {pages} pages, {weeks} weeks, seed {seed}: {deploys} deploys of 5-15% of the "
        "pages, hotfixes of 1-3 pages between; runs hourly and daily (the first is the first crawl)\n\n"
    )
    header = (
        f"{'runs, lastmod: recrawler':<44} {'req/day':>8} {'quiet run':>10} {'quiet day':>10} "
        f"{'deploys in':>11} {'deploy->in':>11} {'hotfix->in':>11} {'missed':>7} {'escal.':>7} {'false':>6}"
    )
    out.write(header + "\n" + "-" * len(header) + "\n")
    for r in results:
        out.write(
            f"{r.name:<44} {r.per_day:>8.1%} {r.quiet_run_max:>10.1%} {r.quiet_day_max:>10.1%} "
            f"{r.deploys_in_next_run:>6}/{r.deploys:<4} {r.deploy_hours_max:>9.1f} h "
            f"{r.hotfix_hours_max:>9.1f} h "
            f"{r.missed:>7} {r.escalations:>7} {r.false_escalations:>6}\n"
        )
    out.write(
        "\nreq/day: requests a day as a share of a full recrawl (one request per page); quiet run / day: the "
        "most a run (a day of runs) asked with nothing to find, the first day left out; deploys in: deploys "
        "whose every edit was checked by the run after them; deploy->in, hotfix->in: the longest from an "
        "edit to its check (searchable once the run publishes); missed: edits not checked within a day; "
        "escal.: runs that checked every page for a deploy, false: of them with nothing to find\n"
    )
    targets = deploy_targets(results)
    for what, met in targets:
        out.write(f"target: {what}: {'met' if met else 'MISSED'}\n")
    return targets


def print_pages(out: Any, results: list[Result], args: argparse.Namespace) -> None:
    """Part B's table and its target."""
    per_day = args.runs_per_day
    full, daily = results[0], results[1]
    default = next(r for r in results if r.name == "adaptive, lastmod hint (the default)")
    out.write(
        f"\nPart B: pages changing on their own. {args.days * per_day + 1} runs, {per_day} a day "
        f"(the first is the first crawl), over {args.pages} pages, seed {args.seed}\n\n"
    )
    header = (
        f"{'strategy':<42} {'requests':>9} {'of full':>8} {'changes':>8} {'missed':>7} {'missed %':>9} "
        f"{'worst stale':>12}"
    )
    out.write(header + "\n" + "-" * len(header) + "\n")
    for r in results:
        share = r.requests / full.requests if full.requests else 0.0
        missed = r.missed / r.changes if r.changes else 0.0
        out.write(
            f"{r.name:<42} {r.requests:>9} {share:>8.1%} {r.changes:>8} {r.missed:>7} {missed:>9.1%} "
            f"{r.worst_stale_days:>10.2f} d\n"
        )
    out.write("\n")
    for r in results:
        if r.missed_by_kind:
            by_kind = ", ".join(f"{k} {n}" for k, n in sorted(r.missed_by_kind.items()))
            out.write(f"missed by class, {r.name.strip()}: {by_kind}\n")
        if r.lastmod_switched_off_on_day is not None:
            day = r.lastmod_switched_off_on_day
            out.write(f"{r.name.strip()}: lastmod caught lying and switched off on day {day:g}\n")
    bound = default_settings.RECRAWLER_MAX_INTERVAL_SECS / DAY
    ok_stale = default.worst_stale_days <= bound + 1 / per_day + 1e-9
    ok_missed = default.missed <= daily.missed
    out.write(
        f"\ntarget: {default.name}: worst staleness {default.worst_stale_days:.2f} d (within the "
        f"{bound:g} d bound and one run period: {'met' if ok_stale else 'MISSED'}); {default.missed} "
        f"changes missed vs {daily.missed} for a fixed daily interval (no more: "
        f"{'met' if ok_missed else 'MISSED'}); {default.requests / full.requests:.1%} of the full "
        "recrawl's requests\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_schedule", description=__doc__)
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--weeks", type=int, default=4, help="part A: weeks of deploys")
    parser.add_argument("--days", type=int, default=30, help="part B: days")
    parser.add_argument(
        "--runs-per-day", type=int, default=1, help="part B: runs a day (cron every 24 h / N)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--parts", default="deploys,pages", help="deploys (part A), pages (part B)")
    add_json_option(parser, "bench_schedule")
    args = parser.parse_args(argv)
    parts = {x.strip() for x in args.parts.split(",") if x.strip()}
    if not parts or parts - {"deploys", "pages"}:
        parser.error(f"--parts: deploys, pages or both, not {args.parts!r}")

    out = sys.stdout
    started = time.monotonic()
    data: dict[str, Any] = {"pages": args.pages, "seed": args.seed}
    if "deploys" in parts:
        deploy_site = make_deploy_site(args.pages, args.weeks, random.Random(args.seed))
        deploys = deploy_cases(deploy_site, args.seed)
        targets = print_deploys(out, deploys, args.pages, args.weeks, args.seed)
        data["deploys"] = {
            "weeks": args.weeks,
            "results": [{**r.__dict__, "per_day": r.per_day} for r in deploys],
            "targets": [{"target": what, "met": met} for what, met in targets],
        }
    if "pages" in parts:
        site = make_site(args.pages, args.days, random.Random(args.seed))
        kinds = {kind: sum(1 for p in site if p.kind == kind) for kind, *_ in CLASSES}
        sys.stderr.write(f"site: {args.pages} pages ({', '.join(f'{n} {k}' for k, n in kinds.items())})\n")
        results = [
            simulate(site, strategy, args.days, args.seed, args.runs_per_day) for strategy in strategies()
        ]
        print_pages(out, results, args)
        data.update(days=args.days, runs_per_day=args.runs_per_day, results=[r.__dict__ for r in results])
    out.write(f"simulated in {time.monotonic() - started:.1f} s\n")
    write_json(args.json, data, newline=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
