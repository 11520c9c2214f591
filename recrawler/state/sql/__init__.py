"""The role implementations every SQL backend shares, over a thin dialect layer.

Each role (:mod:`recrawler.state.roles`) is one class whose database work is written once, as
generators of statements (:mod:`recrawler.state.sql.dialect`); a backend supplies the connection
(:class:`~recrawler.state.sql.database.Database`): SQLite's worker thread, psycopg's async pool.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from recrawler.state.sql.database import Database

__all__ = ["RoleMethods"]


class RoleMethods:
    """Every role over one database, as attributes (``pages``, ``runs``, ``decisions``, ``kb``, ``history``,
    ``schedule``, ``host_trust``, ``readers``) and as the store's own methods, bound once,
    so callers may type a store by :class:`~recrawler.state.roles.StateStore` or by one role."""

    def _bind_roles(self, db: Database) -> None:
        # imported here: a reader of the dialect or of one role (open_kb) loads none of the others
        from recrawler.state.sql.decisions import SQLDecisions
        from recrawler.state.sql.frontier import SQLFrontier
        from recrawler.state.sql.history import SQLHistory
        from recrawler.state.sql.kb import SQLKnowledgeBaseWriter
        from recrawler.state.sql.pages import SQLPages
        from recrawler.state.sql.readers import SQLReaders
        from recrawler.state.sql.runs import SQLRuns
        from recrawler.state.sql.schedule import SQLSchedule
        from recrawler.state.sql.search import SQLSearchIndex
        from recrawler.state.sql.trust import SQLTrust

        self.pages = SQLPages(db)
        self.runs = SQLRuns(db)
        self.decisions = SQLDecisions(db)
        self.kb = SQLKnowledgeBaseWriter(db)
        self.history = SQLHistory(db)
        self.schedule = SQLSchedule(db)
        self.host_trust = SQLTrust(db)
        self.readers = SQLReaders(db)
        self.frontier = SQLFrontier(db)
        self.search_index = SQLSearchIndex(db)
        self.index_vectors = self.search_index.index_vectors
        self.get = self.pages.get
        self.record = self.pages.record
        self.record_error = self.pages.record_error
        self.record_miss = self.pages.record_miss
        self.record_moves = self.pages.record_moves
        self.miss_moves = self.pages.miss_moves
        self.unseen = self.pages.unseen
        self.unseen_sync = self.pages.unseen_sync
        self.begin_run = self.runs.begin_run
        self.begin_run_sync = self.runs.begin_run_sync
        self.heartbeat = self.runs.heartbeat
        self.finish_run = self.runs.finish_run
        self.carry_misses = self.decisions.carry_misses
        self.removal_plan = self.decisions.removal_plan
        self.settle_misses = self.decisions.settle_misses
        self.publish_run = self.decisions.publish_run
        self.supersede = self.decisions.supersede
        self.hold_run = self.decisions.hold_run
        self.decision = self.decisions.decision
        self.release_kept = self.decisions.release_kept
        self.approve = self.decisions.approve
        self.discard = self.decisions.discard
        self.pending_changes = self.decisions.pending_changes
        self.largest_same_content = self.decisions.largest_same_content
        self.missing_embeddings = self.kb.missing_embeddings
        self.count_missing = self.kb.count_missing
        self.missing_for = self.kb.missing_for
        self.store_embeddings = self.kb.store_embeddings
        self.run_index_counts = self.kb.run_index_counts
        self.set_run_state = self.kb.set_run_state
        self.publish = self.kb.publish
        self.run_info = self.kb.run_info
        self.get_fields = self.history.get_fields
        self.load_regions = self.history.load_regions
        self.add_regions = self.history.add_regions
        self.load_boilerplate = self.history.load_boilerplate
        self.fold_block_stats = self.history.fold_block_stats
        self.update_boilerplate = self.history.update_boilerplate
        self.take_back_boilerplate_changes = self.history.take_back_boilerplate_changes
        self.scheduled = self.schedule.scheduled
        self.mark_listed = self.schedule.mark_listed
        self.revisit = self.schedule.revisit
        self.record_revisit = self.schedule.record_revisit
        self.update_revisit = self.schedule.update_revisit
        self.audit_sample = self.schedule.audit_sample
        self.take_skipped = self.schedule.take_skipped
        self.probe_sample = self.schedule.probe_sample
        self.mark_solo = self.schedule.mark_solo
        self.site_build = self.schedule.site_build
        self.record_site_build = self.schedule.record_site_build
        self.live_pages = self.schedule.live_pages
        self.sitemap_file = self.frontier.sitemap_file
        self.add_listing = self.frontier.add_listing
        self.listing_read = self.frontier.listing_read
        self.listing = self.frontier.listing
        self.frontier_add = self.frontier.frontier_add
        self.frontier_add_listed = self.frontier.frontier_add_listed
        self.frontier_has = self.frontier.frontier_has
        self.frontier_next = self.frontier.frontier_next
        self.frontier_claim = self.frontier.frontier_claim
        self.trust = self.host_trust.trust
        self.record_trust = self.host_trust.record_trust
        self.reset_trust = self.host_trust.reset_trust
        self.immutable_seen = self.host_trust.immutable_seen
        self.immutable_add = self.host_trust.immutable_add
        self.immutable_reset = self.host_trust.immutable_reset
        self.noise_report = self.readers.noise_report
        self.iter_changes = self.readers.iter_changes
        self.iter_pages = self.readers.iter_pages
        self.iter_runs = self.readers.iter_runs
        self.run_report = self.readers.run_report
        self.iter_run_pages = self.readers.iter_run_pages
        self.iter_schedule = self.readers.iter_schedule
        self.freshness = self.readers.freshness
        self.iter_site_builds = self.readers.iter_site_builds
        self.iter_events = self.readers.iter_events
        self.page_state = self.readers.page_state
        self.iter_held_runs = self.readers.iter_held_runs
        self.iter_trust = self.readers.iter_trust
        self.iter_immutable = self.readers.iter_immutable
        self.check_sync = self.readers.check_sync
        self.repair = self.readers.repair
