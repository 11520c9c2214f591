"""The database behind small roles: each a protocol with documented guarantees and a contract suite.

Every backend implements all of them on one object (:class:`StateStore`); a component types its
store by the roles it uses. The contract tests (``tests/test_state_contract*.py``) hold each
backend to the guarantees written here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections import Counter
    from collections.abc import Callable, Iterator, Sequence
    from datetime import datetime

    from recrawler.schedule import Revisit
    from recrawler.state.records import (
        ChangeRow,
        Chunk,
        Event,
        FieldsRow,
        Freshness,
        HeldRun,
        ListedEntry,
        PageRecord,
        ReconcileResult,
        RemovalPlan,
        RevisitUpdate,
        Run,
        ScheduledPage,
        SitemapFile,
        TrustRecord,
    )
    from recrawler.state.sql.check import Finding

__all__ = [
    "Decisions",
    "Frontier",
    "History",
    "KnowledgeBase",
    "Lifecycle",
    "Pages",
    "Readers",
    "Runs",
    "Schedule",
    "StateStore",
    "Trust",
]


class Lifecycle(Protocol):
    """Opening, committing and closing a store; every role shares one connection (or pool).

    Guarantees: ``open`` refuses a newer-schema, corrupt or foreign database with one
    ``SchemaVersionError`` line and leaves it untouched; nothing is durable until ``flush()``, a
    group commit or ``close()``; :attr:`outcomes` counts only what committed and :attr:`lost`
    what a failed commit rolled back.
    """

    uri: str
    #: outcome labels of page writes that committed this session, and of those a failed commit lost
    outcomes: Counter[str]
    lost: Counter[str]

    async def open(self) -> None:
        """Connect and migrate; idempotent. Raises StateStoreError subclasses."""

    def open_sync(self) -> None:
        """Blocking open, used once at startup so a bad database stops the crawl before it begins."""

    async def close(self) -> None:
        """Commit what is pending, deliver events, disconnect."""

    async def flush(self) -> None:
        """Commit pending page writes now and deliver their events."""

    async def deliver(self) -> None:
        """Commit and deliver every committed event now (sinks that are not ``immediate`` too)."""

    async def pending_events(self) -> int:
        """How many committed events wait in the outbox (undelivered, or their delivery failed)."""


class Pages(Protocol):
    """A page's stored state, written as the crawl reaches it.

    Guarantees: each write is atomic (the page row, its chunks, field record, history row and
    outbox events land together or not at all); a write lifts the page's staged miss; ``unseen``
    hands each page out at most once per run and never one the run's listing decided.
    """

    async def get(self, key: str) -> PageRecord | None:
        """Return the stored record of *key*, or None."""

    async def record(
        self,
        run: Run,
        rec: PageRecord,
        events: Sequence[Event],
        *,
        chunks: Sequence[Chunk] | None = None,
        restore: bool = False,
        revert: bool = False,
        embeddings: Sequence[tuple[str, str, bytes]] = (),
        fields: FieldsRow | None = None,
        change: ChangeRow | None = None,
        outcome: Sequence[str] = (),
        revisit: RevisitUpdate | None = None,
    ) -> Revisit | None:
        """Write a page's new state, events, knowledge-base rows, fields, history and (with
        *revisit*) next revisit state in one transaction; return its revisit state before (None
        without *revisit*). Its *outcome* labels count in :attr:`outcomes` once it is durable (in
        :attr:`lost` when its commit fails)."""

    async def record_error(self, run: Run, key: str | None, events: Sequence[Event]) -> None:
        """Note that a page was reached with an error: state untouched, events written."""

    async def record_miss(self, run: Run, key: str, http_status: int) -> str:
        """Stage a 404/410 answer of a stored page: ``staged``, ``tombstone`` or ``unknown``."""

    async def record_moves(self, run: Run, keys: Sequence[str], target: str, *, http_status: int) -> int:
        """Stage a permanent redirect of stored pages *keys* to page *target* (applied when the
        run reconciles, if *target* is live by then)."""

    async def unseen(
        self, run: Run, limit: int, *, due_at: datetime | None = None, delisted: bool = False
    ) -> list[tuple[str, str, int]]:
        """Return up to *limit* (key, url, link depth) of the run's site not reached yet, marking them.

        Pages this run's listing decided are not unseen; with *due_at*, only pages due by then
        (and quarantined or audited ones, pages whose change or removal waits for a decision, and
        with *delisted* pages an earlier listing named) are.
        """

    def unseen_sync(
        self, run: Run, limit: int, *, due_at: datetime | None = None, delisted: bool = False
    ) -> list[tuple[str, str, int]]:
        """Blocking :meth:`unseen`, for the CLI and tests: never on the reactor (it would wait for
        locks the store's own open transaction holds)."""


class Runs(Protocol):
    """Runs, the one-run-per-site lease, and a run's staged removals.

    Guarantees: a live lease (beating within its window, holder alive) refuses a second run; a
    lapsed one is taken over and its run marked aborted (its staged misses dropped); a held run of
    the site never refuses a later one; ``finish_run`` releases the lease.
    """

    async def begin_run(
        self,
        spider: str,
        site: str | None,
        started_at: datetime,
        *,
        embedder: str | None = None,
        publish_each_page: bool = False,
        holder: str = "",
        lease_secs: float = 60.0,
    ) -> Run:
        """Take the site's lease and start a run (published at once when each page publishes
        itself). Raises RunRefused while another live run holds the lease."""

    def begin_run_sync(
        self,
        spider: str,
        site: str | None,
        started_at: datetime,
        *,
        embedder: str | None = None,
        publish_each_page: bool = False,
        holder: str = "",
        lease_secs: float = 60.0,
    ) -> Run:
        """Blocking :meth:`begin_run`, used once before the crawl's first request."""

    async def heartbeat(self, run: Run) -> bool:
        """Renew the run's lease; False when another run took it over."""

    async def finish_run(
        self,
        run: Run,
        *,
        reason: str,
        at: datetime,
        report: dict[str, Any],
        reasons: Sequence[str] = (),
        listed: int | None = None,
        exit_code: int | None = None,
    ) -> None:
        """Record how the run ended and release the site's lease."""


class Decisions(Protocol):
    """What a run's end may remove, what waits for an operator, publishing and discarding.

    Guarantees: a run's staged misses and moves apply only in the transaction that publishes it
    (a run killed on the way applies nothing); misses kept for a decision are carried from run to
    run until approved, discarded, or settled by the page's own answer; publishing a run covers
    every unpublished run of its site before it and takes their pending pages as published;
    discarding a held run puts every pending page of its site back as the knowledge base shows
    it, so history, events and page metadata read as if the discarded runs never ran.
    """

    async def carry_misses(self, run: Run) -> int:
        """Misses earlier runs kept for a decision join this run's (its own answers settle them)."""

    async def removal_plan(self, run: Run, *, gone_after: int, gone_statuses: Sequence[int]) -> RemovalPlan:
        """What applying the run's staged misses and moves would do; nothing is changed."""

    async def settle_misses(self, run: Run, action: str) -> ReconcileResult:
        """``apply`` (with the run's publication), ``keep`` (for a decision) or ``drop`` the run's
        own misses (its moves, and misses kept before, stay)."""

    async def publish_run(
        self,
        run: Run,
        *,
        at: datetime,
        gone_after: int,
        gone_statuses: Sequence[int],
        exit_code: int | None = None,
    ) -> tuple[ReconcileResult, dict[str, int]]:
        """Apply the run's misses and moves, publish it (and the site's unpublished runs before
        it) and garbage-collect, in one transaction; record what it took out (``run_pages``) and,
        with *exit_code*, the exit code it now stands at (an approved held run)."""

    async def supersede(self, run: Run) -> None:
        """Held runs of the site before *run* hand their decision to it."""

    async def hold_run(self, run: Run) -> None:
        """Hold the run for a decision (held runs before it hand theirs to it)."""

    async def decision(self, run_id: int) -> Run:
        """The run a decision names (held, or published with removals waiting); StateStoreError
        otherwise, naming the run that carries it."""

    async def release_kept(self, run: Run) -> int:
        """The misses kept for the run's decision apply with its publication (``runs approve``)."""

    async def discard(self, run_id: int) -> dict[str, int]:
        """Drop what waits for the run's decision (see the class docstring)."""

    async def pending_changes(self, site: str | None) -> dict[str, int]:
        """The site's pending ``new`` and ``changed`` pages and its ``published`` ones."""

    async def largest_same_content(self, run: Run) -> tuple[int, str] | None:
        """The largest group of the site's pending pages that now say the same thing."""


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

    async def index_vectors(self, embedder: str) -> int:
        """Write the search index's blocks of cached vectors that are full and not written yet
        (committed; SQLite only, 0 elsewhere); return how many blocks were written."""


class History(Protocol):
    """Change detection's memory: field records, learned regions and boilerplate block pairs.

    Guarantees: block statistics follow each page's field record in the page's transaction;
    re-deciding boilerplate re-hashes the pages it moves, so the next run compares like with like.
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


class Schedule(Protocol):
    """When each page is due, what a run's listing decided, and its audit sample.

    Guarantees: revisit state is written after the page's own write, never before; a run's
    audit sample is drawn once among the site's live, non-immutable pages.
    """

    async def scheduled(self, keys: Sequence[str]) -> dict[str, ScheduledPage]:
        """The schedule's view of the stored pages among *keys*, in one round trip."""

    async def mark_listed(self, run: Run, decided: Sequence[tuple[str, str | None]]) -> None:
        """Note that this run's listing decided (key, skipping layer or None) pairs (not unseen)."""

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

    async def audit_sample(self, run: Run, sample: float) -> list[str]:
        """Draw the run's random self-audit sample (a share below 1, else a count); return keys."""


class Frontier(Protocol):
    """What sitemap files listed (asked conditionally next run) and a run's page requests on disk.

    Guarantees: a file's validators are stored only with its complete listing, so a 304 always
    has the listing it stands for; a run's frontier holds a page key once, its requests come out
    by priority then arrival, each once, and a later run never sees an earlier run's rows.
    """

    async def sitemap_file(self, url: str) -> SitemapFile | None:
        """The sitemap file as last read (validators, page count), or None."""

    async def add_listing(self, run: Run, sitemap: str, entries: Sequence[ListedEntry]) -> None:
        """Store entries of *sitemap* read this run (a batch; the file's read goes on)."""

    async def listing_read(self, run: Run, file: SitemapFile, at: datetime) -> None:
        """The read of *file* is complete: store its validators, drop entries it no longer lists."""

    async def listing(self, sitemap: str, *, after: int, limit: int) -> list[ListedEntry]:
        """Up to *limit* stored entries of *sitemap* in the file's order, after position *after*."""

    async def frontier_add(self, run: Run, requests: Sequence[tuple[str, int, bytes]]) -> int:
        """Queue (key, priority, serialised request) rows; a key already queued this run is
        ignored. Returns how many were new."""

    async def frontier_has(self, run: Run, keys: Sequence[str]) -> set[str]:
        """Those of *keys* this run's frontier holds (its listing named them)."""

    async def frontier_claim(self, run: Run, key: str) -> bool:
        """Mark page *key* as fetched this run outside the frontier (a redirect reached it); False
        when the frontier already holds it (it is fetched from there)."""

    async def records(self, keys: Sequence[str]) -> dict[str, PageRecord]:
        """The stored records of the pages among *keys*, in one round trip (a fed batch's)."""

    async def frontier_next(self, run: Run, limit: int) -> list[bytes]:
        """Take up to *limit* queued requests of the run: highest priority first, then oldest."""


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
    ) -> Iterator[dict[str, Any]]:
        """History rows, newest first, of one page, site or run (synchronous; for the CLI)."""

    def iter_pages(self, status: str | None = None) -> Iterator[PageRecord]:
        """Yield stored pages ordered by key (synchronous; for the CLI)."""

    def page_state(self, key: str) -> dict[str, Any] | None:
        """A page's stored state, for the CLI (None: no page *key*): ``record`` (its
        :class:`PageRecord`), ``text`` (the text last stored for it; None when none is kept, as for
        a gone page), ``first_run`` (the run whose window holds its ``first_seen``) and
        ``removed_run`` (the last run whose end recorded it quarantined, gone or moved)."""

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

        ``live``: live pages; ``verified``: those whose ``last_checked`` is at least
        ``now - bound_secs``; ``oldest_checked`` / ``oldest_url``: the smallest ``last_checked`` of
        a live page, and that page (the first by key of a tie); ``delisted``: live pages listed
        once but not by the site's last complete listing (``listing_run``: the last run that
        finished, was not aborted, read a listing and stored none of ``LISTING_FAILURES`` in its
        reasons), with the first few of their URLs. Pages found only by links or feeds are never
        delisted; a site without a complete listing has none.
        """

    def iter_held_runs(self, site: str | None = None) -> Iterator[HeldRun]:
        """Runs waiting for a decision of *site* (None: all), oldest first: held runs (``state``
        held) and runs whose removals wait (kept misses; the rest of the run published), with the
        hold reasons and alert of their report, every stored reason, and the removals they keep."""

    def iter_trust(self) -> Iterator[TrustRecord]:
        """Yield trust records by host and signal (CLI)."""

    def iter_immutable(self) -> Iterator[dict[str, Any]]:
        """Yield stored deltafetch keys (CLI)."""

    def check_sync(self, key_maker: Callable[[str], str], *, lease_secs: float) -> list[Finding]:
        """Every broken invariant of the database, read-only (``recrawler check``); a run left
        running whose lease has no heartbeat for *lease_secs*, or whose holder process on this
        host is gone, is stale."""

    async def repair(self, findings: Sequence[Finding]) -> dict[str, int]:
        """Mend what :meth:`check_sync` found, in one transaction; rows touched per check."""


class StateStore(
    Lifecycle, Pages, Runs, Decisions, KnowledgeBase, History, Schedule, Frontier, Trust, Readers, Protocol
):
    """Every role on one object: what ``RECRAWLER_STATE_BACKENDS`` classes implement.

    All methods are coroutines except the ``*_sync`` forms and the readers. Stores are never
    recreated or migrated downwards.
    """
