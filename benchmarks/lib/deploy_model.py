"""The deploy model of ``bench_schedule``: a docs site that changes in deploys, and recrawler's runs
over it, decided by recrawler's own code (schedule, deploy evidence, audit sample, lastmod trust).

Docs change in deploys: every week a build replaces 5-15% of the pages at once (half of the builds
also change the theme's hashed asset names; three in ten add pages to the sitemap), and now and
then a hotfix edits one to three pages with no other sign. The server answers a conditional
request with a 304 when the page's bytes did not change (a content ETag: the hardest host for the
validators signal, which is left out). A run reads the sitemap, probes the home page and three live
pages first, decides every listed page (``SchedulePolicy.decide``), weighs the evidence
(``DeployWatch``: the listing's moves, the probes' build fingerprint, changes among the pages
checked for no sign of change) and, once a deploy is seen, checks every page not checked since.
"""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from recrawler import default_settings
from recrawler.deploys import SIGNALS, DeployWatch, ListingMoves
from recrawler.detect.build import BuildFingerprint
from recrawler.intervals import Revisit, SchedulePolicy, audit_count

T0 = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)
SITE = "docs.example.com"
#: the default probes, audit sample and honest claims before a host's lastmods vouch
PROBES = default_settings.RECRAWLER_DEPLOY_PROBES
AUDIT = default_settings.RECRAWLER_AUDIT_SAMPLE
TRUST_AFTER = default_settings.RECRAWLER_AUDIT_TRUST_AFTER
#: due reasons of checks made for no sign of change (what ScheduleMiddleware samples)
SAMPLED = ("probe", "audit", "scheduled", "unscheduled")


@dataclass
class Event:
    """A deploy (or a hotfix) at *at* days: the pages it changed, pages it added, a new build."""

    at: float
    changed: list[int]
    hotfix: bool
    added: list[int] = field(default_factory=list)
    build: bool = False


@dataclass
class DeploySite:
    """The site over the simulated weeks: its events, and each page's edit times (days)."""

    pages: int
    days: int
    events: list[Event]
    edits: list[list[float]]
    #: when each page appears in the sitemap (days; 0: from the start)
    born: list[float]

    def version(self, page: int, day: float) -> int:
        return bisect.bisect_right(self.edits[page], day)

    def build(self, day: float) -> int:
        """The build id live at *day* (the theme's assets change with it)."""
        return sum(1 for e in self.events if e.build and e.at <= day)


def make_deploy_site(pages: int, weeks: int, rng: random.Random) -> DeploySite:
    """Weekly deploys of 5-15% of the pages on a random weekday and hour, two hotfixes a week
    on average (1-3 pages each); a deploy adds 1-3 pages with probability 0.3 and changes the
    build's assets with probability 0.5."""
    days = 7 * weeks
    extra = 3 * weeks
    total = pages + extra
    born = [0.0] * pages + [math.inf] * extra
    fresh = iter(range(pages, total))
    events: list[Event] = []
    for week in range(weeks):
        at = 7 * week + rng.uniform(1, 5) + rng.uniform(8, 18) / 24
        changed = rng.sample(range(pages), round(rng.uniform(0.05, 0.15) * pages))
        added = [next(fresh) for _ in range(rng.randint(1, 3))] if rng.random() < 0.3 else []
        events.append(Event(at, changed, False, added, build=rng.random() < 0.5))
    t = 0.5
    while True:
        t += rng.expovariate(2 / 7)
        if t >= days:
            break
        events.append(Event(t, rng.sample(range(pages), rng.randint(1, 3)), True))
    events.sort(key=lambda e: e.at)
    edits: list[list[float]] = [[] for _ in range(total)]
    for e in events:
        for p in e.changed:
            edits[p].append(e.at)
        for p in e.added:
            born[p] = e.at
            edits[p].append(e.at)
    return DeploySite(total, days, events, edits, born)


@dataclass
class DeployResult:
    """One case: requests, quiet runs, and how fast deploys and hotfixes were in."""

    name: str
    runs_per_day: int
    lastmod: bool
    requests: int = 0
    #: the largest share of the pages a run (and a day of runs) asked with nothing to find: no edit
    #: since the last run, none left unseen (the first day, the first crawl's, left out)
    quiet_run_max: float = 0.0
    quiet_day_max: float = 0.0
    #: deploys whose every edit was in by the run after them, of all deploys
    deploys_in_next_run: int = 0
    deploys: int = 0
    #: hours from a deploy (a hotfix) to its last edit checked, at most
    deploy_hours_max: float = 0.0
    hotfix_hours_max: float = 0.0
    #: edits not checked within a day
    missed: int = 0
    edits: int = 0
    #: runs that checked every page for a deploy, and those of them with nothing to find (no edit
    #: the run's checks had not seen yet)
    escalations: int = 0
    false_escalations: int = 0
    days: float = 0.0
    pages: int = 0

    @property
    def per_day(self) -> float:
        """Requests a day, as a share of one request per page (a full recrawl)."""
        return self.requests / self.days / self.pages if self.days and self.pages else 0.0


class _Simulation:
    """recrawler's runs over one site: the state its database keeps from run to run."""

    def __init__(
        self, site: DeploySite, *, runs_per_day: int, lastmod: bool, signals: frozenset[str]
    ) -> None:
        self.site = site
        self.lastmod = lastmod
        self.runs_per_day = runs_per_day
        self.signals = signals
        self.urls = [f"https://{SITE}/docs/p{i:05d}.html" for i in range(site.pages)]
        self.state: dict[int, Revisit] = {}
        self.seen: dict[int, int] = {}
        #: the build each page was last fetched under (a new build changes every page's bytes)
        self.seen_build: dict[int, int] = {}
        self.checked: list[list[float]] = [[] for _ in range(site.pages)]
        self.stored_build: BuildFingerprint | None = None
        self.listed_before: dict[int, str | None] = {}
        self.deploy_at: datetime | None = None
        self.honest_claims = 0
        # this run's
        self.t = 0.0
        self.now = T0
        self.policy = SchedulePolicy(now=T0)
        self.watch = DeployWatch()
        self.build_now = 0
        self.asked = 0
        self.changed_now: set[int] = set()

    def begin(self, t: float) -> None:
        self.t, self.now = t, T0 + timedelta(days=t)
        self.policy = SchedulePolicy(now=self.now)
        if self.deploy_at is not None:
            self.policy.deployed(SITE, self.deploy_at)
        self.watch = DeployWatch(stored=self.stored_build, enabled=self.signals)
        self.build_now = self.site.build(t)
        self.asked = 0
        self.changed_now = set()

    def lastmod_of(self, p: int) -> str | None:
        if not self.lastmod:
            return None
        v = self.site.version(p, self.t)
        return (T0 + timedelta(days=self.site.edits[p][v - 1])).isoformat() if v else "2025-01-01"

    def check(self, p: int) -> tuple[bool, bool]:
        """Request page *p* now: (its text changed since its last check, the answer is a 200: its
        bytes changed, the text or the build's)."""
        prev = self.state.get(p)
        version = self.site.version(p, self.t)
        changed = prev is not None and version != self.seen[p]
        full = prev is None or changed or self.seen_build.get(p) != self.build_now
        self.asked += 1
        policy = self.policy
        if (
            prev is not None
            and self.lastmod
            and policy.lastmod_claims_unchanged(self.lastmod_of(p), prev.last_check_at)
        ):
            self.honest_claims += 1
        self.state[p] = policy.after_check(prev, url=self.urls[p], changed=changed, new=prev is None)
        self.seen[p] = version
        self.seen_build[p] = self.build_now
        self.checked[p].append(self.t)
        if changed:
            self.changed_now.add(p)
        return changed, full

    def detect(self, signal: str, why: str | None) -> None:
        if why is not None and self.watch.fire(signal, why):
            self.deploy_at = self.now
            self.policy.deployed(SITE, self.now)

    def run(self, rng: random.Random) -> bool:
        """One run at the current time; True when there was nothing to find (no edit unseen)."""
        site, t, watch = self.site, self.t, self.watch
        live = [p for p in range(site.pages) if site.born[p] <= t]
        known = [p for p in live if p in self.state]
        honest = self.honest_claims >= TRUST_AFTER
        vouch = self.policy.lastmod_vouches(trusted=True, honest=honest)
        quiet = all(p in self.seen and site.version(p, t) == self.seen[p] for p in live)
        # the audit's share is per bound: an hourly run draws a 24th of it (at least one page)
        n_audit = audit_count(AUDIT, len(known), part=1 / self.runs_per_day)
        audit = set(rng.sample(known, n_audit)) if known else set()
        probes: list[int] = []
        if known and self.signals:
            others = [p for p in known if p not in audit and p != 0]
            probes = ([0] if 0 in self.state else []) + rng.sample(others, min(PROBES - 1, len(others)))
        marker = {"link:/_static/theme.#.css": f"/_static/theme.{self.build_now:06x}.css"}
        # the probes, first: their build and whether they changed
        for p in probes:
            _, full = self.check(p)
            if full:  # a 304 has nothing to read
                self.detect("fingerprint", watch.build(dict(marker), expected=len(probes)))
        if watch.markers:
            self.stored_build = watch.learned(false_alarm=False)
        elif self.stored_build is None and known:
            self.stored_build = BuildFingerprint(dict(marker))
        # the listing: pages added, lastmods moved (a file read again)
        listing = {p: self.lastmod_of(p) for p in live}
        if self.listed_before:
            before = self.listed_before
            moves = ListingMoves(
                added=sum(1 for p in listing if p not in before),
                lastmod=sum(1 for p, m in listing.items() if p in before and m != before[p]),
            )
            self.detect("listing", moves.reason(lastmods_vouch=vouch))
        self.listed_before = listing
        # every listed page decided; the sampled ones' changes weighed
        due: list[tuple[int, str]] = []
        for p in live:
            if p in probes:
                continue
            prev = self.state.get(p)
            decision = self.policy.decide(
                prev,
                url=self.urls[p],
                status="live" if prev is not None else None,
                site=SITE,
                lastmod=self.lastmod_of(p),
                audit=p in audit,
                lastmod_honest=honest,
            )
            if decision.due:
                due.append((p, decision.reason))
        sampled = len(probes) + sum(1 for _, reason in due if reason in SAMPLED)
        for p in probes:
            if p in self.changed_now:
                self.detect(
                    "sample",
                    watch.sampled(str(p), self.urls[p], sampled=sampled, pages=len(known), solo=False),
                )
        for p, reason in due:
            changed, full = self.check(p)
            if p in audit and not full:
                self.asked += 1  # the audit fetches a 304 again in full
            if changed and reason in SAMPLED:
                self.detect(
                    "sample",
                    watch.sampled(str(p), self.urls[p], sampled=sampled, pages=len(known), solo=False),
                )
        if watch.detected:
            # every page not checked since the deploy (those the listing skipped)
            for p in live:
                rev = self.state.get(p)
                if rev is not None and (rev.last_check_at is None or rev.last_check_at < self.now):
                    self.check(p)
        return quiet


def simulate_deploys(
    site: DeploySite,
    *,
    runs_per_day: int,
    lastmod: bool,
    signals: frozenset[str] = frozenset(SIGNALS),
    seed: int = 1,
    name: str = "",
) -> DeployResult:
    """Run recrawler's default schedule over *site*: *runs_per_day* runs a day, with honest
    sitemap lastmods or none, deploy *signals* on (none: the schedule alone)."""
    rng = random.Random(seed)
    sim = _Simulation(site, runs_per_day=runs_per_day, lastmod=lastmod, signals=signals)
    pages = site.pages - 3 * (site.days // 7)
    result = DeployResult(name, runs_per_day, lastmod, days=site.days, pages=pages)
    by_day: dict[int, int] = {}
    busy_days: set[int] = set()
    for run in range(site.days * runs_per_day + 1):
        t = run / runs_per_day
        sim.begin(t)
        quiet = sim.run(rng)
        if sim.watch.detected:
            result.escalations += 1
            result.false_escalations += quiet
        if run:
            result.requests += sim.asked
            day = math.ceil(t - 1e-9) - 1
            by_day[day] = by_day.get(day, 0) + sim.asked
            if not quiet:
                busy_days.add(day)
            elif t > 1:
                live = sum(1 for p in range(site.pages) if site.born[p] <= t)
                result.quiet_run_max = max(result.quiet_run_max, sim.asked / live)
    for day, n in by_day.items():
        if day >= 1 and day not in busy_days:
            result.quiet_day_max = max(result.quiet_day_max, n / pages)
    period = 1 / runs_per_day
    checked = sim.checked
    for e in site.events:
        last = 0.0
        for p in [*e.changed, *e.added]:
            i = (
                bisect.bisect_left(checked[p], e.at)
                if p in e.added
                else bisect.bisect_right(checked[p], e.at)
            )
            last = max(last, checked[p][i] - e.at if i < len(checked[p]) else math.inf)
        if e.hotfix:
            result.hotfix_hours_max = max(result.hotfix_hours_max, last * 24)
        else:
            result.deploys += 1
            result.deploys_in_next_run += last <= period + 1e-9
            result.deploy_hours_max = max(result.deploy_hours_max, last * 24)
    for p in range(site.pages):
        for x in site.edits[p]:
            if x + 1 > site.days:
                continue
            result.edits += 1
            i = bisect.bisect_left(checked[p], x)
            if i == len(checked[p]) or checked[p][i] > x + 1:
                result.missed += 1
    return result


def deploy_cases(site: DeploySite, seed: int) -> list[DeployResult]:
    """Every case of the table: hourly and daily runs, without and with honest lastmods, each
    with recrawler's defaults and with the schedule alone (no deploy signal), and a full recrawl."""
    out = []
    for runs_per_day, when in ((24, "hourly"), (1, "daily")):
        for lastmod in (False, True):
            what = "honest lastmod" if lastmod else "no lastmod"
            out.append(
                simulate_deploys(
                    site,
                    runs_per_day=runs_per_day,
                    lastmod=lastmod,
                    seed=seed,
                    name=f"{when}, {what}: defaults",
                )
            )
            out.append(
                simulate_deploys(
                    site,
                    runs_per_day=runs_per_day,
                    lastmod=lastmod,
                    signals=frozenset(),
                    seed=seed,
                    name=f"{when}, {what}: no deploy signal",
                )
            )
    return out


def deploy_targets(results: list[DeployResult]) -> list[tuple[str, bool]]:
    """The issue's targets, each (what, met) for the defaults' rows."""
    checks = []
    for r in results:
        if not r.name.endswith("defaults"):
            continue
        checks.append((f"{r.name}: every deploy in by the run after it", r.deploys_in_next_run == r.deploys))
        checks.append((f"{r.name}: every hotfix in within 24 h", r.hotfix_hours_max <= 24 + 1e-6))
        if r.lastmod and r.runs_per_day == 24:
            checks.append((f"{r.name}: a quiet run asks at most 2% of the pages", r.quiet_run_max <= 0.02))
        if r.lastmod and r.runs_per_day == 1:
            checks.append((f"{r.name}: a quiet day asks at most 5% of the pages", r.quiet_day_max <= 0.05))
        if not r.lastmod:
            # the bound's one request per page a day, and the probes and the audit sample (a 304 of
            # it fetched again in full) of each run; no run more than twice its share of the day
            per_run = PROBES + 2 * audit_count(AUDIT, r.pages, part=1 / r.runs_per_day)
            limit = 1 + per_run * r.runs_per_day / r.pages
            checks.append(
                (
                    f"{r.name}: a quiet day asks one request per page (the bound), spread over the runs",
                    r.quiet_day_max <= limit + 1e-9
                    and r.quiet_run_max <= 2 * r.quiet_day_max / r.runs_per_day,
                )
            )
    return checks


__all__ = [
    "DeployResult",
    "DeploySite",
    "deploy_cases",
    "deploy_targets",
    "make_deploy_site",
    "simulate_deploys",
]
