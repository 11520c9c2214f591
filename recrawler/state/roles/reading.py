"""The roles that keep and read what was published: chunks and vectors, page history and
diffs, and the read-only views the CLI and reports use."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from datetime import datetime

    from recrawler.state.records import (
        FieldsRow,
        Freshness,
        HeldRun,
        PageRecord,
        Run,
        ScheduledPage,
        SiteBuild,
        TrustRecord,
    )
    from recrawler.state.sql.check import Finding

__all__ = ["History", "KnowledgeBase", "Readers"]


class KnowledgeBase(Protocol):
    """The knowledge base's write side: embeddings, holding and publishing runs.

    Guarantees: search sees exactly the chunks of live pages as of the last published run (never
    half of a run); embeddings are a cache keyed by (embedder, text hash), never paid twice;
    ``discard`` undoes a held run's chunk changes.
    """

    async def missing_embeddings(
        self, embedder: str, limit: int, *, include_run: int | None = None, after: str = ""
    ) -> list[tuple[str, str]]:
        """Up to *limit* (text hash, text) of current, not-held chunks with no embedding."""

    async def count_missing(self, embedder: str) -> int:
        """How many distinct current chunk texts (held runs aside) have no embedding."""

    async def missing_for(self, embedder: str, hashes: Sequence[str]) -> list[str]:
        """Those of *hashes* that have no embedding for *embedder*, in the given order."""

    async def store_embeddings(self, rows: Sequence[tuple[str, str, bytes]]) -> None:
        """Add (embedder, text hash, vector) rows to the embedding cache, committed."""

    async def run_index_counts(self, run_id: int, embedder: str) -> dict[str, int]:
        """Chunks a run added and retired, and how many of its distinct texts are embedded."""

    async def set_run_state(self, run_id: int, state: str) -> None:
        """Set a run's state (``RUN_*``)."""

    async def publish(self, run_id: int, at: datetime) -> dict[str, int]:
        """Make a run visible to search in one statement; garbage-collect what no one can see."""

    async def run_info(self, run_id: int) -> dict[str, Any] | None:
        """A run's row, or None."""


class History(Protocol):
    """Change detection's memory: field records, learned regions and boilerplate block pairs.

    Guarantees: block statistics follow each page's field record in the page's transaction;
    re-deciding boilerplate re-hashes the pages it moves, so the next run compares like with like.
    Folding and re-deciding apply the store's
    :class:`~recrawler.state.roles.blocks.BlockModel` (StateStoreError without one).
    """

    async def get_fields(self, key: str) -> FieldsRow | None:
        """The page's field-level record, or None."""

    async def load_regions(self) -> dict[str, list[str]]:
        """Every site's learned volatile regions."""

    async def add_regions(
        self, site: str, selectors: Sequence[str], *, source: str, learned_from: str, at: datetime
    ) -> int:
        """Learn volatile regions for a site; returns how many are new."""

    async def load_boilerplate(self, site: str) -> frozenset[tuple[int, int]]:
        """The site's boilerplate block pairs: (previous block, block), a page edge as ``EDGE``."""

    async def fold_block_stats(self) -> int:
        """Fold the block-set changes page writes left into the sites' block and block-pair
        counters (before boilerplate is re-decided); returns how many page writes were folded."""

    async def update_boilerplate(
        self, site: str, *, enter_share: float, exit_share: float, min_pages: int
    ) -> dict[str, int]:
        """Fold pending block deltas, re-decide a site's boilerplate block pairs and re-hash the pages
        they move."""

    async def take_back_boilerplate_changes(self, run: Run, site: str) -> list[str]:
        """Call unchanged the pages whose only change this run is now boilerplate."""


class Readers(Protocol):
    """Synchronous, read-only views for the CLI and reports (a read-only connection each).

    Guarantees: never write, never migrate; a newer-schema database is refused like ``open``;
    iterators stream rows instead of loading a table.
    """

    def noise_report(self) -> dict[str, dict[str, list[dict[str, Any]]]]:
        """What is being ignored, per site (synchronous; for the CLI)."""

    def iter_changes(
        self,
        *,
        key: str | None = None,
        site: str | None = None,
        run_id: int | None = None,
        limit: int | None = None,
        held: bool = False,
    ) -> Iterator[dict[str, Any]]:
        """History rows of published runs, newest first, of one page, site or run (synchronous;
        for the CLI). *held*: the rows of held runs (and those they supersede) instead: what
        waits for a decision."""

    def iter_pages(self, status: str | None = None) -> Iterator[PageRecord]:
        """Yield stored pages ordered by key (synchronous; for the CLI)."""

    def page_state(self, key: str) -> dict[str, Any] | None:
        """A page's stored state as the knowledge base shows it, for the CLI (None: no page *key*):
        ``record`` (its :class:`PageRecord`; a pending page's published state), ``text`` (the text
        it was published with, or last stored with; None when none is kept, as for a gone page),
        ``first_run`` (the run whose window holds its ``first_seen``), ``removed_run`` (the last
        run whose end recorded it quarantined, gone or moved) and ``pending`` (the page waits on
        an unpublished run: ``new`` (no publication holds it yet) or ``changed``; None: it does
        not)."""

    def iter_runs(self) -> Iterator[dict[str, Any]]:
        """Yield runs, newest first (synchronous; for the CLI)."""

    def run_report(self, run_id: int) -> dict[str, Any] | None:
        """A run's row (as :meth:`iter_runs` yields it) with its stored JSON ``report`` and
        ``pages_recorded`` (how many pages its end recorded in ``run_pages``; None: not recorded);
        None if unknown."""

    def iter_run_pages(self, run_id: int) -> Iterator[dict[str, Any]]:
        """Pages a run made new, quarantined, gone or moved, as they stand now, by URL; then the
        removals a held run staged (``event`` ``held``). Each: key, url, title, status, event,
        moved_to (a URL), http_status. A page a later run decided again is listed under that run.
        """

    def iter_schedule(self, site: str | None = None) -> Iterator[ScheduledPage]:
        """Yield the schedule's view of live and quarantined pages, soonest due first (CLI)."""

    def iter_events(
        self, *, site: str | None = None, run_id: int | None = None, since: datetime | None = None
    ) -> Iterator[dict[str, Any]]:
        """The events of runs a publication covers (of *site*, or run *run_id*), at or after
        *since*, oldest first, as the outbox keeps them whatever ``RECRAWLER_EVENTS_URI`` was
        (the documented event fields: ``run_id``, ``action``, ``url``, ``key``, ``at``, ...)."""

    def freshness(self, site: str | None, *, bound_secs: float, now: datetime) -> Freshness:
        """How current the live pages of *site* (None: every site) are at *now*.

        ``live``: live pages; ``verified``: those whose ``verified_at`` (a request, or a trusted
        lastmod or feed entry; ``by_request``, ``by_lastmod``, ``by_feed`` count which) is at least
        ``now - bound_secs`` and, after the site's last detected deploy (``deploy_at``,
        ``deploy_reason``), that a request checked since (``deploy_unchecked``: live pages none did);
        ``oldest_checked`` / ``oldest_url``: the oldest verification of a live page, and that page
        (the first by key of a tie); ``delisted``: live pages listed
        once but not by the site's last complete listing (``listing_run``: the last run that
        finished, was not aborted, read a listing and stored none of ``LISTING_FAILURES`` in its
        reasons), with the first few of their URLs. Pages found only by links or feeds are never
        delisted; a site without a complete listing has none.
        """

    def iter_site_builds(self) -> Iterator[SiteBuild]:
        """Yield each site's build: its fingerprint, noise and last detected deploy (CLI)."""

    def iter_held_runs(self, site: str | None = None) -> Iterator[HeldRun]:
        """Runs waiting for a decision of *site* (None: all), oldest first: held runs (``state``
        held) and runs whose removals wait (kept misses; the rest of the run published), with the
        hold reasons and alert of their report, every stored reason, and the removals they keep."""

    def iter_trust(self) -> Iterator[TrustRecord]:
        """Yield trust records by host and signal (CLI)."""

    def iter_immutable(self) -> Iterator[dict[str, Any]]:
        """Yield stored deltafetch keys (CLI)."""

    def check_sync(
        self,
        key_maker: Callable[[str], str],
        *,
        lease_secs: float,
        refusal: Callable[[str], str | None] | None = None,
    ) -> list[Finding]:
        """Every broken invariant of the database, read-only (``recrawler check``); a run left
        running whose lease has no heartbeat for *lease_secs*, or whose holder process on this
        host is gone, is stale. Keys are checked against *key_maker*'s, URLs against *refusal*
        (why recrawler would never fetch one; None: not checked): the caller's URL rules, which
        the store only applies."""

    async def repair(self, findings: Sequence[Finding]) -> dict[str, int]:
        """Mend what :meth:`check_sync` found, in one transaction; rows touched per check."""
