"""Deploy detection, pure (no Scrapy, no database): one run's evidence that a site was deployed.

Docs change in deploys: a build replaces many pages at once, then nothing changes for days. A
run looks for a deploy early and cheaply, and when it finds one it checks every listed page of
the site (conditional requests: unchanged pages cost a 304). The signals, each counted
(``recrawler/deploy/detected/<signal>``):

- ``flag``: the run was told (``recrawler crawl --deployed``, ``-a deployed=1``);
- ``listing``: a sitemap file read again lists pages it did not, or no longer lists some, or moved
  their lastmods (lastmods that vouch for their pages show what changed themselves);
- ``fingerprint``: the build fingerprint of the probed pages (hashed asset names, generator and
  version meta: :mod:`recrawler.detect.build`) is not the stored one;
- ``validators``: a probed page answered in full with new validators that then held (a second
  conditional request got a 304): its file was rewritten, as a deploy rewrites every file;
- ``sample``: pages checked for no sign of change (probes, the audit sample, pages whose time
  within the bound came) changed, more of them than a few pages changing on their own explain.

What changes on every request is never a deploy: fingerprint slots that vary between pages of one
run are noise (and slots whose move proved false: the run that checked every page found nothing);
validators that do not hold are not evidence; a page that changes on its own (its change made a
run check every page, which found nothing else) is no sample of the site.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from recrawler.detect.build import BuildFingerprint

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["ALONE_PAGES", "DEPLOY_SHARE", "SIGNALS", "DeployWatch", "ListingMoves", "sample_says_deploy"]


def sample_says_deploy(changed: int, sampled: int, pages: int) -> bool:
    """Whether *changed* of *sampled* pages checked for no sign of change (of a site of *pages*)
    are a deploy: the binomial likelihood of a deploy of :data:`DEPLOY_SHARE` beats that of
    :data:`ALONE_PAGES` pages changing on their own."""
    if changed <= 0:
        return False
    deploy = DEPLOY_SHARE
    alone = min(ALONE_PAGES / max(pages, 1), deploy / 2)
    sampled = max(sampled, changed)
    ratio = changed * math.log(deploy / alone) + (sampled - changed) * math.log((1 - deploy) / (1 - alone))
    return ratio > 0


#: the deploy signals, in the order a run usually meets them, and what each says in the report
SIGNALS: dict[str, str] = {
    "flag": "deployed (the run was told)",
    "listing": "the listing moved",
    "fingerprint": "the build fingerprint changed",
    "validators": "probed pages were rewritten",
    "sample": "a page checked for no sign of change changed",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ListingMoves:
    """How a sitemap file read again differs from what it listed last time."""

    added: int = 0
    removed: int = 0
    lastmod: int = 0

    def __add__(self, other: ListingMoves) -> ListingMoves:
        return ListingMoves(
            added=self.added + other.added,
            removed=self.removed + other.removed,
            lastmod=self.lastmod + other.lastmod,
        )

    def reason(self, *, lastmods_vouch: bool, lastmod_noise: bool = False) -> str | None:
        """Why these moves are a deploy, or None. Moved lastmods are not, where lastmods vouch for
        their pages (the moved ones are due by their lastmod, the rest are vouched for) or were
        learned to move on every read."""
        parts = []
        if self.added:
            parts.append(f"{self.added} added")
        if self.removed:
            parts.append(f"{self.removed} removed")
        if self.lastmod and not (lastmods_vouch or lastmod_noise):
            parts.append(f"{self.lastmod} lastmods moved")
        if not parts:
            return None
        return "listing moved: " + ", ".join(parts)


#: the smallest deploy the sample is to see at once (a share of the site's pages), and how many
#: pages may change on their own at a time (a hotfix): changes among a run's sampled checks are a
#: deploy when a deploy of that share explains them better than that many pages changing alone
#: (a 2,000-page site checked hourly samples ~80 pages a run: one changed is a hotfix, two a deploy;
#: a run minutes after the last samples a few pages: one changed is a deploy)
DEPLOY_SHARE = 0.05
ALONE_PAGES = 3


@dataclass(slots=True)
class DeployWatch:
    """One run's deploy evidence for one site: which signals fired, why, and what the run learned
    about the site's build. The first signal to fire is the run's deploy; later ones are counted.
    The ``...`` methods weigh one piece of evidence and return why it is a deploy (None: it is
    not); :meth:`fire` records it."""

    #: the site's stored build fingerprint (None: none learned yet)
    stored: BuildFingerprint | None = None
    #: signal -> why, in the order they fired
    fired: dict[str, str] = field(default_factory=dict)
    #: this run's markers of probed (or, before a fingerprint exists, first fetched) pages
    markers: list[dict[str, str]] = field(default_factory=list)
    #: fingerprint slots that moved this run (learned as noise should the deploy prove false)
    moved_slots: list[str] = field(default_factory=list)
    #: keys of sampled pages found changed, and those that made the run escalate
    changed_keys: list[str] = field(default_factory=list)
    sample_keys: list[str] = field(default_factory=list)
    #: signals the settings let escalate (``RECRAWLER_DEPLOY_SIGNALS``)
    enabled: frozenset[str] = frozenset(SIGNALS)

    @property
    def detected(self) -> bool:
        """True once a signal fired."""
        return bool(self.fired)

    @property
    def reason(self) -> str | None:
        """Why the run holds the site deployed (the first signal's words)."""
        return next(iter(self.fired.values()), None)

    def fire(self, signal: str, why: str) -> bool:
        """Record *signal* (once); True when it is the run's deploy (the first to fire)."""
        if signal not in self.enabled or signal in self.fired:
            return False
        first = not self.fired
        self.fired[signal] = why
        if signal == "sample" and first:
            self.sample_keys = list(self.changed_keys)
        return first

    def build(self, markers: dict[str, str], *, expected: int) -> str | None:
        """A probed page answered in full: compare the pages' shared markers with the stored
        fingerprint once two of them (or all *expected*, if fewer) are in."""
        if not markers:
            return None
        self.markers.append(markers)
        if self.stored is None or not self.stored.markers or len(self.markers) < min(2, expected):
            return None
        now = self.current()
        moved = self.stored.moved(now, pages=len(self.markers))
        if not moved:
            return None
        self.moved_slots = moved
        return "build fingerprint changed: " + self.stored.describe(now, moved)

    def current(self) -> BuildFingerprint:
        """This run's fingerprint (its slots that vary between pages learned as noise)."""
        noise = self.stored.noise if self.stored is not None else frozenset()
        return BuildFingerprint.combine(self.markers, noise)

    @staticmethod
    def rewritten(url: str) -> str:
        """A probed page answered in full with new validators, and a second request got a 304."""
        return f"probed pages were rewritten (new validators that hold: {url})"

    def sampled(self, key: str, url: str, *, sampled: int, pages: int, solo: bool) -> str | None:
        """A page checked for no sign of change changed: a deploy once the changed ones among the
        *sampled* checks are more than pages changing on their own explain
        (:func:`sample_says_deploy`); a page known to change alone (*solo*) does not count."""
        if solo or key in self.changed_keys:
            return None
        self.changed_keys.append(key)
        if not sample_says_deploy(len(self.changed_keys), sampled, pages):
            return None
        return f"{len(self.changed_keys)} of {sampled} pages checked for no sign of change changed ({url})"

    def learned(self, *, false_alarm: bool) -> BuildFingerprint | None:
        """The fingerprint to store after the run: the stored one updated with this run's shared
        markers and noise; a deploy by fingerprint that changed nothing makes its slots noise."""
        if not self.markers:
            return self.stored
        now = self.current()
        base = self.stored or BuildFingerprint()
        noise = base.noise | now.noise
        if false_alarm and "fingerprint" in self.fired:
            noise |= frozenset(self.moved_slots)
        markers = {k: v for k, v in {**base.markers, **now.markers}.items() if k not in noise}
        return BuildFingerprint(markers, noise)

    def signals(self) -> Iterable[str]:
        """The signals that fired, in order."""
        return iter(self.fired)
