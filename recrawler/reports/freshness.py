"""The freshness panel's words: how current the knowledge base is, from a :class:`Freshness` (pure)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from datetime import datetime

    from recrawler.state import Freshness

__all__ = ["STORED", "ago", "duration", "freshness_as_stored", "freshness_view"]

#: what a run's report keeps of the freshness view (``freshness``): its report shows it as it was
STORED = (
    "site",
    "live",
    "verified",
    "stale",
    "share",
    "percent",
    "bound",
    "oldest",
    "oldest_ago",
    "oldest_late",
    "oldest_url",
    "delisted",
    "delisted_urls",
    "listing_run",
    "by",
    "deploy_at",
    "deploy_reason",
    "deploy_unchecked",
    "current",
)


def duration(secs: float) -> str:
    """A span in the largest unit it fills: ``24 h``, ``30 days``, ``90 min``, ``45 s``."""
    for unit, size in (("days", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if secs >= size * (2 if unit == "days" else 1):
            value = secs / size
            return f"{value:.0f} {unit}" if value == round(value) or value >= 10 else f"{value:.1f} {unit}"
    return f"{secs:.0f} s"


def ago(then: datetime | None, now: datetime) -> str:
    """``3 h ago``, ``2 days ago``; ``never`` for None."""
    if then is None:
        return "never"
    secs = max((now - then).total_seconds(), 0.0)
    return "just now" if secs < 60 else f"{duration(secs)} ago"


def _percent(share: float | None) -> str:
    if share is None:
        return "-"
    # a share short of every page never rounds to 100%
    return f"{share * 100:.0f}%" if share in (0.0, 1.0) else f"{min(share * 100, 99.9):.1f}%"


def freshness_view(f: Freshness) -> dict[str, Any]:
    """What the panel prints: the record's figures with their words (the share as a percentage,
    the bound and the oldest verification's age in the largest unit that fits). A share short of
    every page never rounds to 100%."""
    share = f.share
    percent = _percent(share)
    late = f.oldest_checked is not None and (f.now - f.oldest_checked).total_seconds() > f.bound_secs
    return {
        "site": f.site,
        "live": f.live,
        "verified": f.verified,
        "stale": f.stale,
        "share": share,
        "percent": percent,
        "bound": duration(f.bound_secs),
        "oldest": f.oldest_checked.strftime("%Y-%m-%d %H:%M") if f.oldest_checked else "-",
        "oldest_ago": ago(f.oldest_checked, f.now),
        "oldest_url": f.oldest_url,
        "oldest_late": late,
        "delisted": f.delisted,
        "delisted_urls": list(f.delisted_urls),
        "listing_run": f.listing_run,
        "by": {"request": f.by_request, "lastmod": f.by_lastmod, "feed": f.by_feed},
        "deploy_at": f.deploy_at.strftime("%Y-%m-%d %H:%M") if f.deploy_at else None,
        "deploy_reason": f.deploy_reason,
        "deploy_unchecked": f.deploy_unchecked,
        # never "current" while a detected deploy has pages no request checked since
        "current": f.live > 0 and f.stale == 0 and f.delisted == 0 and f.deploy_unchecked == 0,
    }


def freshness_as_stored(stored: dict[str, Any], at: datetime) -> dict[str, Any]:
    """The panel's view of a run's stored ``freshness``, as it was when the run ended at *at*
    (reports stored before every field was kept: the missing ones from the rest)."""
    from datetime import UTC, datetime

    view = {k: stored.get(k) for k in STORED}
    if view["percent"] is None:
        view["percent"] = _percent(stored.get("share"))
    oldest = stored.get("oldest")
    then = None
    if oldest not in (None, "-"):
        then = datetime.strptime(str(oldest), "%Y-%m-%d %H:%M").replace(tzinfo=UTC)
    if view["oldest_ago"] is None:
        view["oldest_ago"] = ago(then, at)
    if view["oldest_late"] is None:
        bound = float(stored.get("bound_secs") or 0)
        view["oldest_late"] = then is not None and (at - then).total_seconds() > bound
    view["delisted_urls"] = list(view["delisted_urls"] or [])
    for name in ("live", "verified", "stale", "delisted", "deploy_unchecked"):
        view[name] = int(view[name] or 0)
    if view["by"] is None:
        # stored before verification had kinds: every verification was a request
        view["by"] = {"request": view["verified"], "lastmod": 0, "feed": 0}
    view["oldest"] = oldest or "-"
    return view
