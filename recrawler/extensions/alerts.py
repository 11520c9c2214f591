"""What the closing guards' findings say to the operator: the outage kept, the run held."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from recrawler.extensions.guards import Finding
    from recrawler.state import ReconcileResult

logger = logging.getLogger(__name__)


def say_outage(outage: Sequence[Finding], spider: Any) -> None:
    """Say at ERROR what an outage finding explains (robots.txt forbade the run's requests)."""
    for f in outage:
        if f.detail:
            logger.error(f.detail, extra={"spider": spider})


def say_kept(skipped: Sequence[str], result: ReconcileResult) -> None:
    """Say what the outage guards kept: ERROR when missing pages were kept, else a WARNING."""
    if skipped and result.skipped_misses:
        logger.error(
            "outage guard: %(n)d missing pages were NOT quarantined or marked gone (%(why)s)",
            {"n": result.skipped_misses, "why": ", ".join(skipped)},
        )
    elif skipped:
        logger.warning(
            "outage guard held (%(why)s): nothing quarantined or gone this run",
            {"why": ", ".join(skipped)},
        )
    if "listing_shrunk" in skipped:
        # a rejected listing is never the next run's baseline: the guard holds until it is whole
        logger.warning(
            "the listing is compared with the last accepted one until it is whole again; a site "
            "that really shrank: run once with RECRAWLER_LISTING_MIN_RATIO=0",
        )


def say_held(run_id: int, hold: Mapping[str, str], spider: Any, *, whole: bool) -> None:
    """One ERROR sentence per hold: why, then what waits (the whole run, or only its removals)."""
    if whole:
        then = (
            "nothing of it (nor of earlier unpublished runs) is embedded or published until "
            "`recrawler runs approve %(run)d` or `recrawler runs discard %(run)d`; later runs go "
            "on and carry the decision"
        )
    else:
        then = (
            "the rest of the run is published; these removals wait for `recrawler runs approve "
            "%(run)d` (or `discard %(run)d`), and later runs carry them until a page answers again"
        )
    for why, text in hold.items():
        logger.error(
            "run %(run)d held (%(why)s: %(text)s): " + then,
            {"run": run_id, "why": why, "text": text},
            extra={"spider": spider},
        )


__all__ = ["say_held", "say_kept", "say_outage"]
