"""The database behind small roles: each a protocol with documented guarantees and a contract suite.

Every backend holds all of them on one object (:class:`StateStore`), a role an attribute
(``store.pages``, ``store.runs``, ...); a component is handed, and types, the roles it uses: only
the place that opens the store names the whole of it. The contract tests
(``tests/test_state_contract*.py``) hold each backend to the guarantees written here.
"""

from __future__ import annotations

from typing import Protocol

from recrawler.state.roles.blocks import BlockModel
from recrawler.state.roles.crawl import Decisions, Lifecycle, Pages, Runs
from recrawler.state.roles.reading import History, KnowledgeBase, Readers
from recrawler.state.roles.revisits import Frontier, Schedule, Trust
from recrawler.state.roles.search import SearchIndex

__all__ = [
    "BlockModel",
    "Decisions",
    "Frontier",
    "History",
    "KnowledgeBase",
    "Lifecycle",
    "Pages",
    "Readers",
    "Runs",
    "Schedule",
    "SearchIndex",
    "StateStore",
    "Trust",
]


class StateStore(Lifecycle, Protocol):
    """Every role on one object: what ``RECRAWLER_STATE_BACKENDS`` classes implement.

    All role methods are coroutines except the ``*_sync`` forms and the readers. Stores are never
    recreated or migrated downwards.
    """

    @property
    def pages(self) -> Pages: ...
    @property
    def runs(self) -> Runs: ...
    @property
    def decisions(self) -> Decisions: ...
    @property
    def kb(self) -> KnowledgeBase: ...
    @property
    def history(self) -> History: ...
    @property
    def schedule(self) -> Schedule: ...
    @property
    def frontier(self) -> Frontier: ...
    @property
    def host_trust(self) -> Trust: ...
    @property
    def readers(self) -> Readers: ...
    @property
    def search_index(self) -> SearchIndex: ...
