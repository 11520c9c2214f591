"""The closing guards, declared: small checks over a run's counters, each a finding or nothing.

A guard only judges (Spidermon's ``BaseStatMonitor`` shape: a check declared over the numbers, the
actions apart); the Reconciler gathers the facts, evaluates the declared guards and then acts:
reconciles, holds or publishes, and decides the run's exit code from the findings.

- :data:`OUTAGE_GUARDS`: reasons not to trust what the run did not see (nothing is removed).
- :data:`HOLD_GUARDS`: changes or removals that hold the run for a person.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Self

from recrawler import outcome
from recrawler.exceptions import ConfigurationError
from recrawler.outcome import (
    EXIT_BUSY,
    EXIT_GUARD,
    EXIT_HELD,
    EXIT_STATE,
    EXIT_WORKER_LOST,
    HOLD_MASS_REMOVAL,
    HOLD_SAME_CONTENT,
    HOLD_SPIKE,
    OUTAGE_ROBOTS,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from scrapy.settings import BaseSettings

    from recrawler.counters import RunCounters
    from recrawler.state import RemovalPlan

#: a sitemap spider's listing: its sitemaps, or the links of a site crawled from start URLs
LISTING_SITEMAP, LISTING_LINKS = "sitemap", "links"


@dataclass(frozen=True, slots=True, kw_only=True)
class RemovalLimits:
    """When a page is gone, when a run's absence evidence is not trusted, and how much removal
    or change holds a run. A bad value is a ``ConfigurationError`` naming its setting.

    Settings: ``RECRAWLER_GONE_AFTER_MISSES``, ``RECRAWLER_GONE_STATUSES``, ``RECRAWLER_MAX_ERROR_RATIO``,
    ``RECRAWLER_MAX_REMOVE_RATIO``, ``RECRAWLER_MAX_REMOVE_MIN``, ``RECRAWLER_LISTING_MIN_RATIO``,
    ``RECRAWLER_CHANGE_ALERT_RATIO``, ``RECRAWLER_CHANGE_ALERT_MIN``.
    """

    gone_after: int = 2
    gone_statuses: tuple[int, ...] = (410,)
    max_error_ratio: float = 0.2
    max_remove_ratio: float = 0.1
    max_remove_min: int = 3
    listing_min_ratio: float = 0.5
    alert_ratio: float = 0.5
    alert_min: int = 10

    def __post_init__(self) -> None:
        for name, value, ok in (
            ("RECRAWLER_GONE_AFTER_MISSES", self.gone_after, self.gone_after >= 1),
            ("RECRAWLER_MAX_ERROR_RATIO", self.max_error_ratio, 0 <= self.max_error_ratio <= 1),
            ("RECRAWLER_MAX_REMOVE_RATIO", self.max_remove_ratio, 0 <= self.max_remove_ratio <= 1),
            ("RECRAWLER_MAX_REMOVE_MIN", self.max_remove_min, self.max_remove_min >= 0),
            ("RECRAWLER_LISTING_MIN_RATIO", self.listing_min_ratio, 0 <= self.listing_min_ratio <= 1),
            ("RECRAWLER_CHANGE_ALERT_RATIO", self.alert_ratio, 0 <= self.alert_ratio <= 1),
        ):
            if not ok:
                raise ConfigurationError(f"{name}: bad value {value!r}")

    @classmethod
    def from_settings(cls, s: BaseSettings) -> Self:
        """The limits a crawl's settings give."""
        return cls(
            gone_after=s.getint("RECRAWLER_GONE_AFTER_MISSES"),
            gone_statuses=tuple(int(x) for x in s.getlist("RECRAWLER_GONE_STATUSES")),
            max_error_ratio=s.getfloat("RECRAWLER_MAX_ERROR_RATIO"),
            max_remove_ratio=s.getfloat("RECRAWLER_MAX_REMOVE_RATIO"),
            max_remove_min=s.getint("RECRAWLER_MAX_REMOVE_MIN"),
            listing_min_ratio=s.getfloat("RECRAWLER_LISTING_MIN_RATIO"),
            alert_ratio=s.getfloat("RECRAWLER_CHANGE_ALERT_RATIO"),
            alert_min=s.getint("RECRAWLER_CHANGE_ALERT_MIN"),
        )


@dataclass(frozen=True, slots=True)
class Finding:
    """What a guard found: its *reason* (a report's ``skipped`` or ``held`` entry), the *exit_code*
    it asks for, and a *detail* to say (the hold's explanation; empty: nothing to add)."""

    reason: str
    exit_code: int
    detail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFacts:
    """What the guards judge, gathered by the Reconciler: the run's counters (never stats), how it
    ended, and, for the holds, what the store says is pending."""

    counters: RunCounters
    limits: RemovalLimits
    #: the spider's close reason
    reason: str = "finished"
    #: ``LISTING_SITEMAP``, ``LISTING_LINKS``, or None (not a sitemap spider: no listing to judge)
    listing: str | None = None
    #: how many pages the last accepted listing named
    last_listed: int | None = None
    lease_lost: bool = False
    backfill: bool = False
    #: the run's pages that moved in from another key (not new)
    moved_in: int = 0
    #: what applying the run's misses would do (None: not planned yet)
    plan: RemovalPlan | None = None
    #: the site's pending ``new``/``changed`` and ``published`` pages
    pending: dict[str, int] = dataclasses.field(default_factory=dict)
    #: the largest group of pending pages saying the same thing (size, a sample URL)
    same_content: tuple[int, str] | None = None
    #: the outage guard's findings (a hold guard trusts removals only without them)
    outage: tuple[Finding, ...] = ()

    @property
    def sitemap_failure(self) -> str | None:
        """Why the run's listing cannot be trusted (None: it can, or there is no listing)."""
        c = self.counters
        if self.listing == LISTING_LINKS:
            return outcome.link_listing_failure(c.family("recrawler/sitemap"), c.family("recrawler/follow"))
        if self.listing == LISTING_SITEMAP:
            return outcome.sitemap_failure(c.family("recrawler/sitemap"))
        return None

    @property
    def listed(self) -> int | None:
        """How many pages this run's listing named (None: no listing)."""
        if self.listing is None:
            return None
        c = self.counters
        # distinct page keys (the schedule, the frontier and deltafetch count each once); entries, else
        return c["recrawler/sitemap/pages"] or c["recrawler/sitemap/urls"]

    @property
    def state_errors(self) -> int:
        """The run's state-store errors so far."""
        return self.counters.total("recrawler/state/error")

    @property
    def listing_whole(self) -> bool:
        """The listing is evidence and not shrunk: its silence about a page is news."""
        listed, last = self.listed, self.last_listed
        return (
            self.sitemap_failure is None
            and listed is not None
            and not (last and listed < self.limits.listing_min_ratio * last)
        )


class Guard:
    """A declared check: its ``reason`` and ``exit_code``, and :meth:`check` saying whether it fires
    (a detail string: fires; None: passes). Subclasses declare, they never act."""

    reason: ClassVar[str]
    exit_code: ClassVar[int] = EXIT_GUARD

    def check(self, facts: RunFacts) -> str | None:
        """The detail when the guard fires (``""``: fires, nothing to add), None when it passes."""
        raise NotImplementedError

    def evaluate(self, facts: RunFacts) -> Finding | None:
        """The guard's finding over *facts*, or None."""
        detail = self.check(facts)
        return None if detail is None else Finding(self.reason, self.exit_code, detail)


class RatioGuard(Guard):
    """Fires when ``counter / (of + counter)`` (or ``counter / of`` when ``share_of_all`` is off)
    exceeds the limit named ``limit`` (a ``RemovalLimits`` field)."""

    counter: ClassVar[str]
    of: ClassVar[str]
    limit: ClassVar[str]
    share_of_all: ClassVar[bool] = False

    def check(self, facts: RunFacts) -> str | None:
        n, of = facts.counters[self.counter], facts.counters[self.of]
        whole = of + n if self.share_of_all else of
        bound = float(getattr(facts.limits, self.limit))
        return "" if n and whole and n / whole > bound else None


class NotFinished(Guard):
    """The run did not finish: what it did not reach proves nothing."""

    reason = "not_finished"

    def check(self, facts: RunFacts) -> str | None:
        return "" if facts.reason != "finished" else None


class ListingFailed(Guard):
    """The listing (sitemaps, or a link crawl) failed or was cut short."""

    reason = "sitemap_failed"

    def evaluate(self, facts: RunFacts) -> Finding | None:
        why = facts.sitemap_failure
        return None if why is None else Finding(why, self.exit_code)


class ListingShrunk(Guard):
    """The listing lost most of its entries since the last accepted one: a broken sitemap, not proof."""

    reason = "listing_shrunk"

    def check(self, facts: RunFacts) -> str | None:
        listed, last = facts.listed, facts.last_listed
        if facts.sitemap_failure or listed is None or not last:
            return None
        return "" if listed < facts.limits.listing_min_ratio * last else None


class ErrorRatio(RatioGuard):
    """Too many of the run's requests failed."""

    reason = "error_ratio"
    counter, of, limit = "recrawler/request/failed", "recrawler/request/count", "max_error_ratio"


class RobotsForbidden(RatioGuard):
    """robots.txt forbade most of the listing (a staging one, deployed): the run checked almost nothing."""

    reason = OUTAGE_ROBOTS
    counter, of, limit = "recrawler/robots/forbidden", "recrawler/request/count", "max_error_ratio"
    share_of_all = True

    def check(self, facts: RunFacts) -> str | None:
        if super().check(facts) is None:
            return None
        n = facts.counters[self.counter]
        return (
            f"robots.txt forbade {n} of {n + facts.counters[self.of]} page requests: this run checked "
            "almost nothing (a staging robots.txt deployed?); nothing is removed, exit 4"
        )


class StateErrors(Guard):
    """The state store failed during the run."""

    reason = "state_error"
    exit_code = EXIT_STATE

    def check(self, facts: RunFacts) -> str | None:
        return "" if facts.state_errors else None


class LeaseLost(Guard):
    """Another run took the site's lease."""

    reason = "lease_lost"
    exit_code = EXIT_BUSY

    def check(self, facts: RunFacts) -> str | None:
        return "" if facts.lease_lost else None


class WorkerLost(Guard):
    """A worker of the run died before it handed its pages over."""

    reason = "worker_lost"
    exit_code = EXIT_WORKER_LOST

    def check(self, facts: RunFacts) -> str | None:
        return "" if facts.counters["recrawler/workers/lost"] else None


class ChangeSpike(Guard):
    """Most of what the site has not published is new or changed: a template change or a noisy hash?
    (a first run, nothing published yet, is never a spike). Page mode holds as the spike shows."""

    reason = HOLD_SPIKE
    exit_code = EXIT_HELD

    def check(self, facts: RunFacts) -> str | None:
        pending, limits = facts.pending, facts.limits
        new = 0 if facts.backfill else max(pending.get("new", 0) - facts.moved_in, 0)
        new_changed = new + pending.get("changed", 0)
        judged = pending.get("published", 0) + pending.get("new", 0)
        if outcome.is_spike(
            prior_pages=pending.get("published", 0),
            new_changed=new_changed,
            judged=judged,
            ratio=limits.alert_ratio,
            minimum=limits.alert_min,
        ):
            return (
                f"{new_changed} of {judged} pages new or changed and not published yet "
                f"(> RECRAWLER_CHANGE_ALERT_RATIO={limits.alert_ratio}): a template change or a noisy hash?"
            )
        return None


class SameContent(Guard):
    """Many pending pages changed to the same text at once: a maintenance or error page?"""

    reason = HOLD_SAME_CONTENT
    exit_code = EXIT_HELD

    def check(self, facts: RunFacts) -> str | None:
        group, alert_min = facts.same_content, facts.limits.alert_min
        if not facts.pending.get("published") or group is None or group[0] < alert_min:
            return None
        size, sample = group
        return (
            f"{size} pages changed to the same text and are not published yet "
            f"(RECRAWLER_CHANGE_ALERT_MIN={alert_min}): a maintenance or error page? e.g. {sample}"
        )


class HeldWhilePublishing(Guard):
    """Page mode held the run as soon as the spike showed (``recrawler/run/held``)."""

    reason = HOLD_SPIKE
    exit_code = EXIT_HELD

    def check(self, facts: RunFacts) -> str | None:
        return (
            "change spike while pages were being published" if facts.counters["recrawler/run/held"] else None
        )


class MassRemoval(Guard):
    """The run would remove more of the site than the breaker lets through (trusted runs only: an
    outage removes nothing anyway)."""

    reason = HOLD_MASS_REMOVAL
    exit_code = EXIT_HELD

    def check(self, facts: RunFacts) -> str | None:
        if facts.plan is None or facts.outage:
            return None
        limits = facts.limits
        return outcome.mass_removal(
            facts.plan,
            ratio=limits.max_remove_ratio,
            minimum=limits.max_remove_min,
            listing=facts.listing is not None,
        )


class WaitingRemovals(Guard):
    """Removals an earlier hold kept wait for a person, whatever this run sees."""

    reason = HOLD_MASS_REMOVAL
    exit_code = EXIT_HELD

    def check(self, facts: RunFacts) -> str | None:
        return None if facts.plan is None else outcome.waiting_removals(facts.plan)


#: reasons not to trust the run's absence evidence, in the order a report names them
OUTAGE_GUARDS: tuple[Guard, ...] = (
    NotFinished(),
    ListingFailed(),
    ListingShrunk(),
    ErrorRatio(),
    RobotsForbidden(),
    StateErrors(),
    LeaseLost(),
    WorkerLost(),
)
#: changes that hold the whole run (a template change, a maintenance page)
CHANGE_GUARDS: tuple[Guard, ...] = (ChangeSpike(), SameContent(), HeldWhilePublishing())
#: removals that wait for a person (the rest of the run goes on)
MASS_REMOVAL = MassRemoval()
REMOVAL_GUARDS: tuple[Guard, ...] = (MASS_REMOVAL, WaitingRemovals())
HOLD_GUARDS: tuple[Guard, ...] = CHANGE_GUARDS + REMOVAL_GUARDS
#: judged again when the run's outcome is decided (publishing can meet the database's errors too)
FINAL_GUARDS: tuple[Guard, ...] = (StateErrors(), LeaseLost())


def evaluate(guards: Iterable[Guard], facts: RunFacts) -> tuple[Finding, ...]:
    """The findings of *guards* over *facts*, in their declared order."""
    return tuple(f for g in guards if (f := g.evaluate(facts)) is not None)


def holds(findings: Sequence[Finding]) -> dict[str, str]:
    """Hold findings as a report's ``held`` (reason -> explanation): the explanations of one reason
    joined; a page-mode spike adds nothing to a spike already explained."""
    out: dict[str, str] = {}
    for f in findings:
        if f.reason not in out:
            out[f.reason] = f.detail
        elif f.reason == HOLD_MASS_REMOVAL:
            out[f.reason] = f"{out[f.reason]}; {f.detail}"
    return out


#: exit codes from the most to the least severe (a crash first; 0 last)
SEVERITY: tuple[int, ...] = (
    outcome.EXIT_CRASH,
    outcome.EXIT_CONFIG,
    EXIT_STATE,
    EXIT_BUSY,
    EXIT_WORKER_LOST,
    EXIT_HELD,
    EXIT_GUARD,
    outcome.EXIT_OK,
)


def most_severe(codes: Iterable[int]) -> int:
    """The most severe of *codes* (``EXIT_OK`` when there are none)."""
    rank = {code: i for i, code in enumerate(SEVERITY)}
    return min(codes, key=lambda c: rank.get(c, -1), default=outcome.EXIT_OK)


__all__ = [
    "CHANGE_GUARDS",
    "FINAL_GUARDS",
    "HOLD_GUARDS",
    "LISTING_LINKS",
    "LISTING_SITEMAP",
    "MASS_REMOVAL",
    "OUTAGE_GUARDS",
    "REMOVAL_GUARDS",
    "SEVERITY",
    "Finding",
    "Guard",
    "RatioGuard",
    "RemovalLimits",
    "RunFacts",
    "evaluate",
    "holds",
    "most_severe",
]
