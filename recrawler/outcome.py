"""How a run ends: exit codes, hold reasons, and the rules that decide them (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from recrawler.state import RemovalPlan

#: exit codes of ``scrapy crawl`` / ``recrawler crawl`` (1 stays Scrapy's own: a crash)
EXIT_OK, EXIT_CONFIG, EXIT_HELD, EXIT_GUARD, EXIT_STATE, EXIT_BUSY = 0, 2, 3, 4, 5, 6
#: a crash: an error recrawler does not name (its traceback is in the log)
EXIT_CRASH = 1
#: an outage reason: robots.txt forbade more than RECRAWLER_MAX_ERROR_RATIO of the page requests
OUTAGE_ROBOTS = "robots_forbidden"
#: a worker of the run (or its leader) died mid-run: the run is unfinished
EXIT_WORKER_LOST = 7
#: hold reasons: the run waits for ``recrawler runs approve`` / ``discard``
HOLD_MASS_REMOVAL, HOLD_SPIKE, HOLD_SAME_CONTENT = "mass_removal", "change_spike", "same_content"


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdicts:
    """A run's committed verdicts: a page counts once its write is durable."""

    new: int = 0
    changed: int = 0
    unchanged: int = 0
    #: unchanged by a 304 answer (a page an audit fetched again after its 304 is unchanged by hash)
    unchanged_by_304: int = 0
    unchanged_by_hash: int = 0
    unchanged_by_fuzzy: int = 0
    restored: int = 0
    moved_in: int = 0
    #: page writes a failed commit lost (a full disk): errors, never verdicts
    write_failed: int = 0

    @classmethod
    def from_outcomes(
        cls, outcomes: Mapping[str, int], lost: Mapping[str, int], taken_back: int = 0
    ) -> Verdicts:
        """From the store's committed outcome labels; *taken_back* changed pages became unchanged."""
        return cls(
            new=outcomes.get("new", 0),
            changed=outcomes.get("changed", 0) - taken_back,
            unchanged=outcomes.get("unchanged", 0) + taken_back,
            unchanged_by_304=outcomes.get("unchanged/not_modified", 0),
            unchanged_by_hash=outcomes.get("unchanged/hash", 0),
            unchanged_by_fuzzy=outcomes.get("unchanged/fuzzy", 0),
            restored=outcomes.get("restored", 0),
            moved_in=outcomes.get("new/moved_in", 0),
            write_failed=sum(lost.get(s, 0) for s in ("new", "changed", "unchanged")),
        )

    @property
    def checked(self) -> int:
        """Pages with a committed verdict."""
        return self.new + self.changed + self.unchanged


def spike_figures(v: Verdicts, *, skipped: int, backfill: bool) -> tuple[int, int]:
    """``(new_or_changed, judged)`` for the spike rule.

    Pages a redirect moved in do not count, nor new pages after a run that failed to store them
    (the knowledge base catching up); pages a cheap layer skipped are judged unchanged.
    """
    new = 0 if backfill else v.new - v.moved_in
    return max(new, 0) + v.changed, v.checked + skipped


def is_spike(*, prior_pages: int, new_changed: int, judged: int, ratio: float, minimum: int) -> bool:
    """True when a run's new+changed pages look like a template change, not a docs sprint.

    A first run into an empty knowledge base is never a spike: everything is new by nature.
    """
    return bool(prior_pages) and new_changed >= minimum and judged > 0 and new_changed / judged > ratio


def mass_removal(plan: RemovalPlan, *, ratio: float, minimum: int, listing: bool = True) -> str | None:
    """Why removing what the run would remove needs an operator (None: it is within bounds).

    With a *listing* (a sitemap the outage guard found healthy), a page the listing no longer
    names that answers 404/410 is confirmed by two signals: a release that drops a section
    delists it and its pages answer 404. Only removals the listing contradicts (it still names the
    page: a broken deploy) count against ``RECRAWLER_MAX_REMOVE_RATIO``.
    """
    allowed = max(ratio * plan.live, minimum)
    confirmed = plan.delisted if listing else 0
    doubtful = plan.removals - confirmed
    if doubtful <= allowed:
        return None
    named = " while the listing still names them" if listing else ""
    return (
        f"{doubtful} of {plan.live} live pages would leave the knowledge base{named} "
        f"({plan.quarantine} quarantined, {plan.gone} gone, {plan.moved} moved in all; "
        f"RECRAWLER_MAX_REMOVE_RATIO={ratio})"
    )


def waiting_removals(plan: RemovalPlan) -> str | None:
    """Why removals an earlier hold kept still hold the run (None: none wait). Only a person's
    decision (or the page's own answer) settles them: never a later run's bound."""
    if not plan.carried:
        return None
    return (
        f"{plan.carried} removals wait for a decision since an earlier run held them "
        "(approve or discard the latest run)"
    )


def sitemap_failure(family: Mapping[str, int | float]) -> str | None:
    """Why a sitemap listing is not evidence (None: it is); *family* is the ``recrawler/sitemap`` counts."""
    parsed, fetched = int(family.get("parsed", 0)), int(family.get("fetched", 0))
    if family.get("error") or parsed == 0 or parsed < fetched or not family.get("urls"):
        return "sitemap_failed"
    if family.get("refused"):
        # a bound cut the listing short: what lies beyond it was never listed
        return "sitemap_incomplete"
    return None


def link_listing_failure(family: Mapping[str, int | float], follow: Mapping[str, int | float]) -> str | None:
    """Why a listing made of the site's links is not evidence (None: it is); *family* is the
    ``recrawler/sitemap`` counts (a failed look for a sitemap), *follow* the ``recrawler/follow``
    ones (the link budget ran out: what lies beyond it was never reached)."""
    if family.get("error"):
        return "sitemap_failed"
    if follow.get("max_links"):
        return "sitemap_incomplete"
    return None


def outage_reasons(
    *,
    reason: str,
    sitemap: str | None,
    listed: int | None,
    last_listed: int | None,
    listing_min_ratio: float,
    requests: int,
    failed: int,
    max_error_ratio: float,
    state_errors: int,
    robots_forbidden: int = 0,
) -> list[str]:
    """Reasons not to trust a run's absence evidence (empty: trust it)."""
    why = []
    if reason != "finished":
        why.append("not_finished")
    if sitemap:
        why.append(sitemap)
    if not sitemap and listed is not None and last_listed and listed < listing_min_ratio * last_listed:
        # the listing lost most of its entries since the last run: a broken sitemap, not proof
        why.append("listing_shrunk")
    if requests and failed / requests > max_error_ratio:
        why.append("error_ratio")
    if robots_forbidden and robots_forbidden / (requests + robots_forbidden) > max_error_ratio:
        # robots.txt forbade most of the listing (a staging one, deployed): the run checked nothing
        why.append(OUTAGE_ROBOTS)
    if state_errors:
        why.append("state_error")
    return why


def exit_code(
    *,
    state_errors: bool,
    lease_lost: bool,
    held: bool,
    skipped: bool,
    worker_lost: bool = False,
    unpublished: bool = False,
) -> int:
    """The exit code of a run that ran (see ``EXIT_*``); a run left unpublished (the embedder
    failed: a 401, a server down) is no success: its work waits for the next run."""
    if state_errors:
        return EXIT_STATE
    if lease_lost:
        return EXIT_BUSY
    if worker_lost:
        return EXIT_WORKER_LOST
    if held:
        return EXIT_HELD
    if skipped or unpublished:
        return EXIT_GUARD
    return EXIT_OK


__all__ = [
    "EXIT_BUSY",
    "EXIT_CONFIG",
    "EXIT_GUARD",
    "EXIT_HELD",
    "EXIT_OK",
    "EXIT_STATE",
    "EXIT_WORKER_LOST",
    "HOLD_MASS_REMOVAL",
    "HOLD_SAME_CONTENT",
    "HOLD_SPIKE",
    "OUTAGE_ROBOTS",
    "Verdicts",
    "exit_code",
    "is_spike",
    "link_listing_failure",
    "mass_removal",
    "outage_reasons",
    "sitemap_failure",
    "spike_figures",
    "waiting_removals",
]
