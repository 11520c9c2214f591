"""The caller's block arithmetic, which the store applies to the blocks it keeps."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Collection, Sequence

__all__ = ["BlockModel"]


class BlockModel(Protocol):
    """The caller's block arithmetic (change detection's), which the history role applies to the
    blocks it stores: it counts block pairs and re-hashes pages with it, and decides nothing.
    A store is handed one where it is opened (:attr:`~recrawler.state.roles.Lifecycle.blocks`)."""

    #: a page's start and end in its block pairs
    edge: int

    def pairs(self, blocks: Sequence[int]) -> set[tuple[int, int]]:
        """The page's adjacent block pairs, its start and end included as :attr:`edge`."""

    def page_hash(self, blocks: Sequence[int], boilerplate: Collection[tuple[int, int]]) -> str:
        """The page's content hash from its blocks under the site's *boilerplate* pairs."""

    def same_content(
        self, old: Sequence[int], new: Sequence[int], boilerplate: Collection[tuple[int, int]]
    ) -> bool:
        """Whether two block lists say the same once *boilerplate* is left out."""

    def joins_furniture(self, old: Sequence[int], new: Sequence[int], furniture: Collection[int]) -> bool:
        """Whether every block *new* adds to *old* joins the site's *furniture* blocks."""
