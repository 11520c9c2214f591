"""The roles a run writes through: its lifecycle and lease, its pages, the runs, and the
decisions that publish, hold or discard a run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections import Counter
    from collections.abc import Callable, Sequence
    from datetime import datetime

    from recrawler.intervals import Revisit
    from recrawler.state.records import (
        ChangeRow,
        Chunk,
        Event,
        FieldsRow,
        PageRecord,
        ReconcileResult,
        RemovalPlan,
        RevisitUpdate,
        Run,
    )
    from recrawler.state.roles.blocks import BlockModel

__all__ = ["Decisions", "Lifecycle", "Pages", "Runs"]


class Lifecycle(Protocol):
    """Opening, committing and closing a store; every role shares one connection (or pool).

    Guarantees: ``open`` refuses a newer-schema, corrupt or foreign database with one
    ``SchemaVersionError`` line and leaves it untouched; nothing is durable until ``flush()``, a
    group commit or ``close()``; :attr:`outcomes` counts only what committed and :attr:`lost`
    what a failed commit rolled back.
    """

    uri: str
    #: the caller's block arithmetic (change detection's) the history role applies to stored
    #: blocks; None: block statistics wait for a store opened with it
    blocks: BlockModel | None
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

    async def miss_moves(self, run: Run, target: str, *, http_status: int) -> int:
        """The run's staged moves to page *target* become misses of their pages, as a 404 of
        theirs would be (the target answered that it is not there); returns how many."""

    async def unseen(
        self,
        run: Run,
        limit: int,
        *,
        due_at: datetime | None = None,
        delisted: bool = False,
        deployed: datetime | None = None,
    ) -> list[tuple[str, str, int]]:
        """Return up to *limit* (key, url, link depth) of the run's site not reached yet, marking them.

        Pages this run's listing decided are not unseen; with *due_at*, only pages due by then
        (and quarantined or audited ones, pages whose change or removal waits for a decision,
        with *delisted* pages an earlier listing named, and with *deployed* pages no request
        checked since then) are.
        """

    def unseen_sync(
        self,
        run: Run,
        limit: int,
        *,
        due_at: datetime | None = None,
        delisted: bool = False,
        deployed: datetime | None = None,
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
        aborted: bool = False,
    ) -> None:
        """Record how the run ended and release the site's lease; *aborted*: it was stopped
        before its closing work (a forced shutdown), so it ends ``aborted``, not ``finished``."""


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
        """Misses earlier runs kept for a decision join this run's, still kept (its own answers
        settle them; a page it staged again keeps the decision)."""

    async def removal_plan(self, run: Run, *, gone_after: int, gone_statuses: Sequence[int]) -> RemovalPlan:
        """What applying the run's staged misses and moves would do; nothing is changed."""

    async def settle_misses(self, run: Run, action: str) -> ReconcileResult:
        """``apply`` (with the run's publication), ``keep`` (for a decision) or ``drop`` the run's
        own misses (its moves stay); misses kept before stay kept whatever the action."""

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

    async def approve(
        self,
        run: Run,
        *,
        at: datetime,
        gone_after: int,
        gone_statuses: Sequence[int],
        exit_code: int | None = None,
    ) -> tuple[ReconcileResult, dict[str, int]]:
        """``runs approve``: take the decision, let the kept misses apply and publish the run, in
        one transaction. The decision is one conditional update of the run's row: of two
        processes deciding at once one wins, the other gets StateStoreError naming what won."""

    async def release_kept(self, run: Run) -> int:
        """The misses kept for the run's decision apply with its publication (``runs approve``)."""

    async def discard(self, run_id: int) -> dict[str, int]:
        """Drop what waits for the run's decision (see the class docstring), taking the decision
        as :meth:`approve` does: of the two started together, one wins."""

    async def pending_changes(self, site: str | None) -> dict[str, int]:
        """The site's pending ``new`` and ``changed`` pages and its ``published`` ones."""

    async def largest_same_content(
        self, run: Run, *, distance: Callable[[str, str], int]
    ) -> tuple[int, str] | None:
        """The largest group of the site's pending pages that now say the same thing: the same
        content hash, or fuzzy hashes close by *distance* (the caller's measure)."""
