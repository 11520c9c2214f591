"""The decisions role: what a run's end may remove, what waits for an operator, publishing and discarding.

A run's 404/410 answers and permanent redirects are staged in ``run_misses``. At its end they are
applied in the transaction that publishes the run (:mod:`recrawler.state.sql.removals`; never
before: a run killed on the way applies nothing), dropped (the outage guard), or kept for a
decision (a hold). Kept misses are carried from run to run until ``runs approve`` applies them,
``runs discard`` drops them, or a later run's own answer for the page settles them. A change hold
keeps the run's pages pending (see :mod:`recrawler.state.sql.pending`); publishing covers them,
discarding puts them back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from recrawler.exceptions import StateStoreError
from recrawler.state.records import (
    DECISION_APPROVED,
    DECISION_DISCARDED,
    GONE,
    LIVE,
    QUARANTINED,
    RUN_DISCARDED,
    RUN_HELD,
    RUN_PUBLISHED,
    RUN_SUPERSEDED,
    SETTLE_APPLY,
    SETTLE_DROP,
    SETTLE_KEEP,
    SETTLE_KEEP_LISTED,
    ReconcileResult,
    RemovalPlan,
    Run,
)
from recrawler.state.sql.dialect import count, one, rows
from recrawler.state.sql.pending import discard_pending, pending_counts, publish_pending
from recrawler.state.sql.removals import apply_misses
from recrawler.state.sql.rows import (
    _REPLACED_DISTANCE,
    _SAME_CONTENT_DISTANCE,
    _dt,
    _ts,
    gone_case,
)
from recrawler.state.sql.snapshots import record_run_pages
from recrawler.state.sql.visibility import unpublished_runs

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from datetime import datetime

    from recrawler.state.sql.database import Database
    from recrawler.state.sql.dialect import Dialect, Work

__all__ = ["SQLDecisions"]

APPLY, KEEP, KEEP_LISTED, DROP = SETTLE_APPLY, SETTLE_KEEP, SETTLE_KEEP_LISTED, SETTLE_DROP


class SQLDecisions:
    """The decisions role: removal plans, kept misses, publishing, approving and discarding."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # -- what the run's end would remove ---------------------------------------------------------

    async def carry_misses(self, run: Run) -> int:
        """Misses earlier runs of the site kept for a decision join this run's, still kept: a
        held removal waits for a person (``runs approve`` / ``discard``), whatever later runs
        see. Those of pages this run answered for are gone already (an answer settles them);
        those it staged again give way to its own, which keeps the decision. Returns how many
        were carried."""

        def work() -> Work[int]:
            yield count(
                """UPDATE run_misses SET kept = 1 WHERE run_id = :run AND kept = 0 AND key IN (
                     SELECT o.key FROM run_misses o WHERE o.kept = 1 AND o.run_id < :run)""",
                {"run": run.id},
            )
            yield count(
                """DELETE FROM run_misses WHERE kept = 1 AND run_id < :run AND key IN (
                     SELECT key FROM run_misses WHERE run_id = :run)""",
                {"run": run.id},
            )
            carried: int = yield count(
                """UPDATE run_misses SET run_id = :run WHERE kept = 1 AND run_id < :run
                     AND key IN (SELECT key FROM pages WHERE site IS NOT DISTINCT FROM :site)""",
                {"run": run.id, "site": run.site},
            )
            return carried

        if run.site is None:
            return 0
        return await self.db.transaction(work())

    async def removal_plan(self, run: Run, *, gone_after: int, gone_statuses: Sequence[int]) -> RemovalPlan:
        """What applying the run's staged misses and moves would do (nothing is changed). A removal
        is ``delisted`` when this run's listing did not name the page (its listing's evidence
        agrees with the answer)."""

        gone = gone_case(self.db.dialect)

        def work() -> Work[RemovalPlan]:
            row = yield one(
                f"""SELECT
                      COUNT(*) FILTER (WHERE m.moved_to IS NOT NULL AND t.status = :live) AS moved,
                      COUNT(*) FILTER (WHERE m.moved_to IS NULL AND p.status != :gone
                                       AND {gone}) AS gone,
                      COUNT(*) FILTER (WHERE m.moved_to IS NULL AND p.status = :live
                                       AND NOT {gone}) AS quarantine,
                      COUNT(*) FILTER (WHERE p.status = :live AND (m.moved_to IS NULL
                                       OR t.status = :live)) AS removals,
                      COUNT(*) FILTER (WHERE p.status = :live AND m.moved_to IS NULL
                                       AND p.listed_run IS DISTINCT FROM :run) AS delisted,
                      COUNT(*) FILTER (WHERE m.kept = 1) AS kept
                    FROM run_misses m JOIN pages p ON p.key = m.key
                    LEFT JOIN pages t ON t.key = m.moved_to
                    WHERE m.run_id = :run AND p.status IN (:live, :quarantined)""",
                {
                    "run": run.id,
                    "live": LIVE,
                    "gone": GONE,
                    "quarantined": QUARANTINED,
                    "codes": self.db.dialect.list_param(gone_statuses),
                    "after": gone_after,
                },
            )
            return RemovalPlan(
                pages=run.prior_pages,
                live=run.prior_live,
                removals=int(row["removals"]),
                quarantine=int(row["quarantine"]),
                gone=int(row["gone"]),
                moved=int(row["moved"]),
                delisted=int(row["delisted"]),
                carried=int(row["kept"]),
            )

        return await self.db.run(work(), flush=True)

    async def settle_misses(self, run: Run, action: str) -> ReconcileResult:
        """Decide the run's own staged misses: :data:`APPLY` (they apply when the run publishes),
        :data:`KEEP` (kept for a decision, carried to later runs), :data:`KEEP_LISTED` (those of
        pages this run's listing still names are kept, the rest apply) or :data:`DROP` (they go;
        its moves stay). Misses kept earlier stay kept whatever the action: only a decision
        (or the page's own answer) settles them."""

        def work() -> Work[ReconcileResult]:
            if action == DROP:
                n = yield count(
                    "DELETE FROM run_misses WHERE run_id = ? AND kept = 0 AND moved_to IS NULL", (run.id,)
                )
                return ReconcileResult(applied=False, skipped_misses=n)
            if action in (KEEP, KEEP_LISTED):
                listed = (
                    " AND key IN (SELECT key FROM pages WHERE listed_run = :run)"
                    if action == KEEP_LISTED
                    else ""
                )
                n = yield count(
                    f"UPDATE run_misses SET kept = 1 WHERE run_id = :run{listed}", {"run": run.id}
                )
                return ReconcileResult(applied=False, skipped_misses=n, kept=True)
            return ReconcileResult(applied=False)

        return await self.db.transaction(work())

    # -- publishing ------------------------------------------------------------------------------

    async def publish_run(
        self,
        run: Run,
        *,
        at: datetime,
        gone_after: int,
        gone_statuses: Sequence[int],
        exit_code: int | None = None,
    ) -> tuple[ReconcileResult, dict[str, int]]:
        """In one transaction: apply the run's staged misses and moves (those not kept), make the
        run and every unpublished run of its site before it visible, take their pending pages as
        published, and drop the chunk rows no one can see any more. Returns what the misses did
        and ``{"chunks_deleted": n}``."""
        return await self.db.transaction(self._publish(run, at, gone_after, gone_statuses, exit_code))

    def _publish(
        self,
        run: Run,
        at: datetime,
        gone_after: int,
        gone_statuses: Sequence[int],
        exit_code: int | None,
    ) -> Work[tuple[ReconcileResult, dict[str, int]]]:
        from recrawler.state.sql.kb import gc_chunks

        result = yield from apply_misses(self.db, run, gone_after, list(gone_statuses), at)
        # held runs before it are covered by this publication (their pages were judged again)
        yield from _supersede(run)
        yield count(
            "UPDATE runs SET state = ?, published_at = COALESCE(published_at, ?) WHERE id = ?",
            (RUN_PUBLISHED, _ts(at), run.id),
        )
        yield from publish_pending(run.site)
        if exit_code is not None:
            # an approved held run: the exit code it would have had unheld
            yield count("UPDATE runs SET exit_code = ? WHERE id = ?", (exit_code, run.id))
        # what it took out, as the run's report shows it (the run's end records the rest)
        yield from record_run_pages(run.id, run.site, _ts(at) or "", _ts(at) or "")
        gc = yield from gc_chunks()
        return result, gc

    async def supersede(self, run: Run) -> None:
        """Held runs of the site before *run* hand their decision to it (before it embeds: their
        chunk texts are its to pay for now)."""
        await self.db.transaction(_supersede(run))

    async def hold_run(self, run: Run) -> None:
        """The run waits for a decision; held runs before it of its site hand theirs to it."""

        def work() -> Work[None]:
            yield from _supersede(run)
            yield count("UPDATE runs SET state = ? WHERE id = ?", (RUN_HELD, run.id))

        await self.db.transaction(work())

    # -- an operator's decision ------------------------------------------------------------------

    async def decision(self, run_id: int) -> Run:
        """The run whose decision *run_id* names: a held run, or a published one whose removals
        wait; refused (StateStoreError) otherwise, naming the run that carries it now, or the
        decision already taken on it."""

        def work() -> Work[Run]:
            row = yield one(
                "SELECT id, spider, site, state, started_at, decision FROM runs WHERE id = ?", (run_id,)
            )
            if row is None:
                raise StateStoreError(f"no run {run_id} in {self.db.label!r}")
            if row["decision"] is not None:
                raise StateStoreError(f"run {run_id} was {row['decision']} already: nothing of it waits")
            kept = yield one("SELECT COUNT(*) FROM run_misses WHERE run_id = ? AND kept = 1", (run_id,))
            if row["state"] != RUN_HELD and not int(kept[0]):
                later = yield one(
                    """SELECT MAX(id) FROM runs WHERE site IS NOT DISTINCT FROM ? AND id > ?
                         AND (state = ? OR id IN (SELECT run_id FROM run_misses WHERE kept = 1))""",
                    (row["site"], run_id, RUN_HELD),
                )
                if later is not None and later[0] is not None:
                    msg = (
                        f"run {run_id} is {row['state']}: its decision was carried to run {later[0]}; "
                        "decide that one"
                    )
                else:
                    msg = f"run {run_id} is {row['state']}: nothing of it waits for a decision"
                raise StateStoreError(msg)
            later = yield one(
                """SELECT id, state FROM runs WHERE site IS NOT DISTINCT FROM ? AND id > ?
                     AND state != ? ORDER BY id DESC LIMIT 1""",
                (row["site"], run_id, RUN_DISCARDED),
            )
            if later is not None:
                # a later run's pages wait on the same decision: it is taken on the latest run
                msg = (
                    f"run {run_id} is not the site's latest run (run {later['id']} is {later['state']}): "
                    "decide after the next run ends, on the run that carries the decision then"
                )
                raise StateStoreError(msg)
            started = _dt(row["started_at"])
            assert started is not None
            return Run(id=run_id, spider=row["spider"], site=row["site"], started_at=started)

        return await self.db.run(work(), flush=True)

    async def approve(
        self,
        run: Run,
        *,
        at: datetime,
        gone_after: int,
        gone_statuses: Sequence[int],
        exit_code: int | None = None,
    ) -> tuple[ReconcileResult, dict[str, int]]:
        """``runs approve``, in one transaction: take the decision (refused with StateStoreError
        when another process took one first, see :func:`_take`), let the misses kept for it
        apply, and publish the run as :meth:`publish_run` does (its texts are embedded before)."""

        def work() -> Work[tuple[ReconcileResult, dict[str, int]]]:
            yield from _take(run.id, DECISION_APPROVED)
            yield count("UPDATE run_misses SET kept = 0 WHERE run_id = ? AND kept = 1", (run.id,))
            yield from _supersede(run)
            return (yield from self._publish(run, at, gone_after, gone_statuses, exit_code))

        return await self.db.transaction(work())

    async def release_kept(self, run: Run) -> int:
        """``runs approve``: the misses kept for the run's decision apply with its publication."""

        def work() -> Work[int]:
            n: int = yield count("UPDATE run_misses SET kept = 0 WHERE run_id = ? AND kept = 1", (run.id,))
            return n

        return await self.db.transaction(work())

    async def discard(self, run_id: int) -> dict[str, int]:
        """``runs discard``: drop what waits for the run's decision. A held run: every pending
        page of its site is put back as it was published (the site's unpublished runs up to it
        become discarded: their chunks, history and events go) and its kept misses go. A published
        run whose removals wait: the kept misses go. Returns ``pages`` put back and
        ``chunks_dropped``."""
        run = await self.decision(run_id)

        def work() -> Work[dict[str, int]]:
            yield from _take(run_id, DECISION_DISCARDED)
            state = yield one("SELECT state FROM runs WHERE id = ?", (run_id,))
            dropped_misses = yield count(
                """DELETE FROM run_misses WHERE kept = 1 AND key IN (
                     SELECT key FROM pages WHERE site IS NOT DISTINCT FROM ?)""",
                (run.site,),
            )
            if state[0] != RUN_HELD:
                return {"pages": 0, "chunks_dropped": 0, "misses": dropped_misses}
            unpub = unpublished_runs(":site")
            dropped = yield one(f"SELECT COUNT(*) FROM chunks WHERE added_run IN {unpub}", {"site": run.site})
            # pages the runs touched that kept no published state (written before schema 10)
            legacy = yield rows(
                f"""SELECT DISTINCT key FROM chunks
                    WHERE (added_run IN {unpub} OR retired_run IN {unpub})
                      AND key NOT IN (SELECT key FROM page_before)""",
                {"site": run.site},
            )
            pages = yield from discard_pending(self.db.dialect, run.site)
            yield from _refetch(self.db.dialect, [r[0] for r in legacy])
            yield count(f"DELETE FROM run_misses WHERE run_id IN {unpub}", {"site": run.site})
            yield count(
                f"UPDATE runs SET state = :discarded WHERE id <= :id AND id IN {unpub}",
                {"discarded": RUN_DISCARDED, "id": run_id, "site": run.site},
            )
            return {"pages": pages, "chunks_dropped": int(dropped[0]), "misses": dropped_misses}

        return await self.db.transaction(work())

    # -- what the guards judge -------------------------------------------------------------------

    async def pending_changes(self, site: str | None) -> dict[str, int]:
        """The site's pages not published yet, whichever run stored them: ``new``, ``changed``
        (content), and the ``published`` pages the knowledge base holds."""
        return await self.db.run(pending_counts(site), flush=True)

    async def largest_same_content(
        self, run: Run, *, distance: Callable[[str, str], int]
    ) -> tuple[int, str] | None:
        """The largest group of the site's pending new or changed pages (whichever run stored
        them) that now say the same thing: the same text once noise is taken out, or (for pages
        whose content was replaced rather than edited, TLSH distance over 100) texts within TLSH
        distance 30 of each other (*distance*: the caller's, between two fuzzy hashes). Returns
        (size, a sample URL), or None."""

        def work() -> Work[tuple[int, str] | None]:
            row = yield one(
                """SELECT COUNT(*) AS n, MIN(p.url) AS url FROM pages p
                   LEFT JOIN page_before b ON b.key = p.key
                   WHERE p.pending IS NOT NULL AND p.site IS NOT DISTINCT FROM ? AND p.status = ?
                     AND p.content_hash IS NOT NULL AND p.content_hash IS DISTINCT FROM b.content_hash
                   GROUP BY p.content_hash ORDER BY n DESC LIMIT 1""",
                (run.site, LIVE),
            )
            best = (int(row["n"]), str(row["url"])) if row is not None else None
            # near-identical replacements (a maintenance page that names each page): greedy
            # clusters around representatives, over at most a few thousand pages
            reps: list[tuple[str, list[str]]] = []
            replaced = yield rows(
                f"""SELECT p.url, p.fuzzy_hash FROM page_changes c JOIN pages p ON p.key = c.key
                   WHERE c.run_id IN {unpublished_runs(":site")} AND c.verdict = 'changed'
                     AND c.distance > :distance AND p.site IS NOT DISTINCT FROM :site AND p.status = :live
                     AND p.fuzzy_hash IS NOT NULL AND p.pending IS NOT NULL
                   ORDER BY p.key LIMIT 5000""",
                {"site": run.site, "distance": _REPLACED_DISTANCE, "live": LIVE},
            )
            for url, digest in replaced:
                for rep, members in reps:
                    if distance(rep, digest) <= _SAME_CONTENT_DISTANCE:
                        members.append(url)
                        break
                else:
                    if len(reps) < 200:
                        reps.append((digest, [url]))
            for _, members in reps:
                if best is None or len(members) > best[0]:
                    best = (len(members), members[0])
            return best

        return await self.db.run(work(), flush=True)


def _take(run_id: int, decision: str) -> Work[None]:
    """Take the decision on run *run_id*: one conditional update of its row, which succeeds only
    while no decision is taken, the run waits for one (held, or removals kept) and no later run of
    its site carries it. Two processes deciding at once: the database lets one update the row, the
    other finds the condition false (PostgreSQL re-checks it on the row's newest version) and is
    refused with one line saying what the first decided."""
    taken = yield count(
        """UPDATE runs SET decision = :decision
           WHERE id = :run AND decision IS NULL
             AND (state = :held OR EXISTS (
               SELECT 1 FROM run_misses m WHERE m.run_id = :run AND m.kept = 1))
             AND NOT EXISTS (
               SELECT 1 FROM runs l WHERE l.site IS NOT DISTINCT FROM runs.site AND l.id > :run
                 AND l.state != :discarded)""",
        {"decision": decision, "run": run_id, "held": RUN_HELD, "discarded": RUN_DISCARDED},
    )
    if taken:
        return
    row = yield one("SELECT state, decision FROM runs WHERE id = ?", (run_id,))
    if row is not None and row["decision"] is not None:
        raise StateStoreError(f"run {run_id} was {row['decision']} already: nothing of it waits")
    state = row["state"] if row is not None else "gone"
    raise StateStoreError(f"run {run_id} is {state}: nothing of it waits for a decision now")


def _supersede(run: Run) -> Work[None]:
    """Held runs of the site before *run* hand their decision to it (their pages are judged again
    with its own)."""
    yield count(
        f"""UPDATE runs SET state = :superseded
            WHERE state = :held AND id < :run AND id IN {unpublished_runs(":site")}""",
        {"superseded": RUN_SUPERSEDED, "held": RUN_HELD, "run": run.id, "site": run.site},
    )


def _refetch(d: Dialect, keys: list[str]) -> Work[None]:
    """Pages discarded runs touched that kept no published state (written before schema 10 kept
    one): a page they brought in is forgotten; the others lose hash and validators, so the next
    run fetches and re-indexes them at once."""
    if not keys:
        return
    yield count(
        f"""DELETE FROM pages WHERE key {d.in_list("?")}
            AND NOT EXISTS (SELECT 1 FROM chunks c WHERE c.key = pages.key)""",
        (d.list_param(keys),),
    )
    yield count(
        f"""UPDATE pages SET content_hash = NULL, fuzzy_hash = NULL, etag = NULL, last_modified = NULL,
              status = 'live', misses = 0, next_check_at = NULL
            WHERE key {d.in_list("?")}""",
        (d.list_param(keys),),
    )
