"""The database behind small roles: each a protocol with documented guarantees and a contract suite.

Every backend implements all of them on one object (:class:`StateStore`); a component types its
store by the roles it uses. The contract tests (``tests/test_state_contract*.py``) hold each
backend to the guarantees written here.
"""

from __future__ import annotations

from typing import Protocol

from recrawler.state.roles.crawl import Decisions, Lifecycle, Pages, Runs
from recrawler.state.roles.reading import History, KnowledgeBase, Readers
from recrawler.state.roles.revisits import Frontier, Schedule, Trust

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


class StateStore(
    Lifecycle, Pages, Runs, Decisions, KnowledgeBase, History, Schedule, Frontier, Trust, Readers, Protocol
):
    """Every role on one object: what ``RECRAWLER_STATE_BACKENDS`` classes implement.

    All methods are coroutines except the ``*_sync`` forms and the readers. Stores are never
    recreated or migrated downwards.
    """
