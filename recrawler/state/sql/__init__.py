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
    """Every role over one database, as an attribute each (``pages``, ``runs``, ``decisions``, ``kb``,
    ``history``, ``schedule``, ``host_trust``, ``readers``, ``frontier``, ``search_index``): a
    component is handed the role(s) it uses, and calls them (``store.pages.record(...)``)."""

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
