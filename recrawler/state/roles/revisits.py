"""The roles that decide what a run asks the site: revisit state, the frontier of discovered
pages, and which of a host's signals still count."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from datetime import datetime

    from recrawler.intervals import Revisit
    from recrawler.state.records import (
        ListedEntry,
        PageRecord,
        Run,
        ScheduledPage,
        SiteBuild,
        SitemapFile,
        TrustRecord,
    )

__all__ = ["Frontier", "Schedule", "Trust"]


class Schedule(Protocol):
    """When each page is due, what a run's listing decided, its audit sample and probes, and
    each site's build (deploy detection).

    Guarantees: revisit state is written after the page's own write, never before, and stamps the
    page verified by a request; a run's audit sample is drawn once among the site's live,
    non-immutable pages; a page the listing skipped is taken for a deploy's check once.
    """

    async def scheduled(self, keys: Sequence[str]) -> dict[str, ScheduledPage]:
        """The schedule's view of the stored pages among *keys*, in one round trip."""

    async def mark_listed(
        self,
        run: Run,
        decided: Sequence[tuple[str, str | None]],
        *,
        vouched: Sequence[tuple[str, str]] = (),
        at: datetime | None = None,
    ) -> None:
        """Note that this run's listing decided (key, skipping layer or None) pairs (not unseen),
        and that a trusted signal verified the *vouched* (key, ``lastmod`` or ``feed``) pages *at*."""

    async def take_skipped(
        self, run: Run, *, before: datetime, limit: int
    ) -> list[tuple[str, str, str | None, str]]:
        """Up to *limit* pages of the run's site its listing skipped and no request checked since
        *before*: (key, url, lastmod, skipping layer), each taken once (its skip undone)."""

    async def probe_sample(
        self, run: Run, n: int, homes: Sequence[str] = ()
    ) -> list[tuple[str, str, str | None]]:
        """The run's *n* probes among the site's live pages (neither immutable nor audited this
        run): the first of the *homes* keys it keeps, then pages drawn at random: (key, url, lastmod)."""

    async def mark_solo(self, keys: Sequence[str], *, solo: bool) -> None:
        """Note whether these pages' changes come on their own (no sample of a deploy)."""

    async def site_build(self, site: str) -> SiteBuild | None:
        """The site's build as last stored (fingerprint, noise, last deploy), or None."""

    async def record_site_build(self, build: SiteBuild, at: datetime) -> None:
        """Store the site's build."""

    async def live_pages(self, site: str) -> int:
        """How many pages of *site* are live or quarantined."""

    async def revisit(self, key: str) -> Revisit | None:
        """A page's revisit state, or None."""

    async def record_revisit(
        self, key: str, revisit: Revisit, *, found_via: str | None = None, found_from: str | None = None
    ) -> None:
        """Store a page's revisit state after a check (after its page write, never before)."""

    async def update_revisit(
        self,
        key: str,
        update: Callable[[Revisit | None], Revisit],
        *,
        found_via: str | None = None,
        found_from: str | None = None,
    ) -> tuple[Revisit | None, Revisit]:
        """Replace a page's revisit state by ``update(state)`` in one round trip; (before, after)."""

    async def audit_sample(
        self, run: Run, sample: float, *, now: datetime | None = None, bound_secs: float | None = None
    ) -> list[str]:
        """Draw the run's random self-audit sample (a share, else a count; with *now* and
        *bound_secs* a share below 1 is per bound since the site's last verification); return keys."""


class Frontier(Protocol):
    """What sitemap files listed (asked conditionally next run) and a run's page requests on disk.

    Guarantees: a file's validators are stored only with its complete listing, so a 304 always
    has the listing it stands for; a run's frontier holds a page key once, its requests come out
    by priority then arrival, each once, and a later run never sees an earlier run's rows.
    """

    async def sitemap_file(self, url: str) -> SitemapFile | None:
        """The sitemap file as last read (validators, page count), or None."""

    async def add_listing(self, run: Run, sitemap: str, entries: Sequence[ListedEntry]) -> tuple[int, int]:
        """Store entries of *sitemap* read this run (a batch; the file's read goes on); (entries
        the file did not list when last read, entries whose lastmod moved): (0, 0) for a file
        never read to its end before."""

    async def listing_read(self, run: Run, file: SitemapFile, at: datetime) -> int:
        """The read of *file* is complete: store its validators, drop entries it no longer lists
        (returns how many)."""

    async def listing(self, sitemap: str, *, after: int, limit: int) -> list[ListedEntry]:
        """Up to *limit* stored entries of *sitemap* in the file's order, after position *after*."""

    async def frontier_add(self, run: Run, requests: Sequence[tuple[str, int, bytes]]) -> int:
        """Queue (key, priority, serialised request) rows; a key already queued this run is
        ignored. Returns how many were new."""

    async def frontier_add_listed(
        self, run: Run, requests: Sequence[tuple[str, int, bytes]]
    ) -> tuple[int, int]:
        """Queue rows a listing named; (how many were new, how many pages no listing had named
        this run before: new ones and those a link or a redirect queued first)."""

    async def frontier_has(self, run: Run, keys: Sequence[str]) -> set[str]:
        """Those of *keys* this run's frontier holds (its listing named them)."""

    async def frontier_claim(self, run: Run, key: str) -> bool:
        """Mark page *key* as fetched this run outside the frontier (a redirect reached it); False
        when the frontier already holds it (it is fetched from there)."""

    async def frontier_next(self, run: Run, limit: int) -> list[tuple[bytes, PageRecord | None]]:
        """Take up to *limit* queued requests of the run (highest priority first, then oldest),
        each with its page's stored record (None: none), in one round trip."""


class Trust(Protocol):
    """How far each host's signals are trusted, and immutable (deltafetch) pages.

    Guarantees: counters only grow until reset; a signal is switched off once its lies reach the
    threshold and stays off until ``reset_trust``; immutable keys are per spider.
    """

    async def trust(self) -> list[TrustRecord]:
        """Every host's trust records."""

    async def record_trust(
        self, host: str, signal: str, *, lied: bool, url: str, at: datetime, distrust_after: int
    ) -> TrustRecord:
        """Count one audited claim; the signal is switched off after *distrust_after* lies."""

    async def reset_trust(self, host: str | None = None, signal: str | None = None) -> int:
        """Trust signals again; return how many records were reset."""

    async def immutable_seen(self, spider: str, keys: Sequence[str]) -> set[str]:
        """Those deltafetch *keys* that *spider* already fetched."""

    async def immutable_add(
        self, spider: str, key: str, *, url: str, page_key: str | None, at: datetime
    ) -> None:
        """Remember a fetched deltafetch key."""

    async def immutable_reset(self, spider: str | None = None, pattern: str | None = None) -> int:
        """Forget deltafetch keys (of *spider*, whose URL matches *pattern*); return how many."""
