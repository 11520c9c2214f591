"""SQLite state store: one file, WAL, group commits on one dedicated worker thread.

:class:`SQLiteStateStore` composes one class per role (:mod:`recrawler.state.roles`) over one
shared :class:`~recrawler.state.sqlite.database.SQLiteDatabase` (connection, worker thread,
group transaction, outbox).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from recrawler.state.records import LIVE
from recrawler.state.sqlite.database import SQLiteDatabase
from recrawler.state.sqlite.frontier import SQLiteFrontier
from recrawler.state.sqlite.history import SQLiteHistory
from recrawler.state.sqlite.kb import SQLiteKnowledgeBaseWriter
from recrawler.state.sqlite.pages import SQLitePages
from recrawler.state.sqlite.readers import SQLiteReaders
from recrawler.state.sqlite.rows import _at
from recrawler.state.sqlite.runs import SQLiteRuns, lease_holder
from recrawler.state.sqlite.schedule import SQLiteSchedule
from recrawler.state.sqlite.trust import SQLiteTrust
from recrawler.state.sqlite.versions import SCHEMA_VERSION, path_from_uri

if TYPE_CHECKING:
    from recrawler.events import EventSink

__all__ = ["LIVE", "SCHEMA_VERSION", "SQLiteStateStore", "_at", "lease_holder", "path_from_uri"]


class SQLiteStateStore(SQLiteDatabase):
    """State in one SQLite file (WAL, ``synchronous=NORMAL``): every role over one connection.

    Every call runs on one dedicated worker thread that owns the connection, so the reactor never
    blocks. Page writes are savepoints inside a group transaction committed every
    ``RECRAWLER_DB_BATCH_SIZE`` pages or ``RECRAWLER_DB_COMMIT_SECS`` seconds: each page is atomic,
    and a kill loses at most the uncommitted tail, which the next run simply checks again.

    The roles are attributes (``pages``, ``runs``, ``kb``, ``history``, ``schedule``, ``signals``
    for trust, ``readers``); the store's methods are theirs, bound once, so callers may type a
    store by :class:`~recrawler.state.roles.StateStore` or by the one role they use.
    """

    def __init__(
        self,
        uri: str,
        *,
        batch_size: int = 200,
        commit_secs: float = 2.0,
        timeout_secs: float = 10.0,
        sink: EventSink | None = None,
        dry_run: bool = False,
        deliver_on_commit: bool = True,
    ) -> None:
        super().__init__(
            uri,
            batch_size=batch_size,
            commit_secs=commit_secs,
            timeout_secs=timeout_secs,
            sink=sink,
            dry_run=dry_run,
            deliver_on_commit=deliver_on_commit,
        )
        self.pages = SQLitePages(self)
        self.runs = SQLiteRuns(self)
        self.kb = SQLiteKnowledgeBaseWriter(self)
        self.history = SQLiteHistory(self)
        self.schedule = SQLiteSchedule(self)
        self.signals = SQLiteTrust(self)
        self.readers = SQLiteReaders(self)
        self.frontier = SQLiteFrontier(self)
        self.get = self.pages.get
        self.record = self.pages.record
        self.record_error = self.pages.record_error
        self.record_miss = self.pages.record_miss
        self.record_moves = self.pages.record_moves
        self.unseen = self.pages.unseen
        self.unseen_sync = self.pages.unseen_sync
        self.begin_run = self.runs.begin_run
        self.begin_run_sync = self.runs.begin_run_sync
        self.heartbeat = self.runs.heartbeat
        self.finish_run = self.runs.finish_run
        self.removal_plan = self.runs.removal_plan
        self.reconcile = self.runs.reconcile
        self.apply_held = self.runs.apply_held
        self.largest_same_content = self.runs.largest_same_content
        self.missing_embeddings = self.kb.missing_embeddings
        self.count_missing = self.kb.count_missing
        self.missing_for = self.kb.missing_for
        self.store_embeddings = self.kb.store_embeddings
        self.run_index_counts = self.kb.run_index_counts
        self.set_run_state = self.kb.set_run_state
        self.publish = self.kb.publish
        self.discard = self.kb.discard
        self.run_info = self.kb.run_info
        self.get_fields = self.history.get_fields
        self.load_regions = self.history.load_regions
        self.add_regions = self.history.add_regions
        self.load_boilerplate = self.history.load_boilerplate
        self.update_boilerplate = self.history.update_boilerplate
        self.take_back_boilerplate_changes = self.history.take_back_boilerplate_changes
        self.scheduled = self.schedule.scheduled
        self.mark_listed = self.schedule.mark_listed
        self.revisit = self.schedule.revisit
        self.record_revisit = self.schedule.record_revisit
        self.update_revisit = self.schedule.update_revisit
        self.audit_sample = self.schedule.audit_sample
        self.sitemap_file = self.frontier.sitemap_file
        self.add_listing = self.frontier.add_listing
        self.listing_read = self.frontier.listing_read
        self.listing = self.frontier.listing
        self.frontier_add = self.frontier.frontier_add
        self.frontier_next = self.frontier.frontier_next
        self.frontier_claim = self.frontier.frontier_claim
        self.records = self.frontier.records
        self.frontier_next_sync = self.frontier.frontier_next_sync
        self.trust = self.signals.trust
        self.record_trust = self.signals.record_trust
        self.reset_trust = self.signals.reset_trust
        self.immutable_seen = self.signals.immutable_seen
        self.immutable_add = self.signals.immutable_add
        self.immutable_reset = self.signals.immutable_reset
        self.noise_report = self.readers.noise_report
        self.iter_changes = self.readers.iter_changes
        self.iter_pages = self.readers.iter_pages
        self.iter_runs = self.readers.iter_runs
        self.iter_schedule = self.readers.iter_schedule
        self.iter_trust = self.readers.iter_trust
        self.iter_immutable = self.readers.iter_immutable
        self.check_sync = self.readers.check_sync
        self.repair = self.readers.repair


if TYPE_CHECKING:
    from recrawler.state.roles import StateStore

    def _implements_every_role(store: SQLiteStateStore) -> StateStore:
        # mypy checks here that the SQLite store keeps every role's signatures
        return store
