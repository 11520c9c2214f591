"""Site furniture over boilerplate block pairs: what of a page's blocks its hash covers."""

from __future__ import annotations

from difflib import SequenceMatcher
from itertools import pairwise
from typing import TYPE_CHECKING

from recrawler.detect.hashing import block_hash, page_hash

if TYPE_CHECKING:
    from collections.abc import Collection, Iterator, Sequence

#: a page's start and end in block pairs: (EDGE, first block) and (last block, EDGE)
EDGE = 0
# what a span of a page is (see _runs)
_OWN, _SHARED, _FURNITURE = 0, 1, 2


def block_pairs(blocks: Sequence[int]) -> set[tuple[int, int]]:
    """The page's adjacent block pairs, its start and end included as :data:`EDGE`."""
    if not blocks:
        return set()
    edged = [EDGE, *blocks, EDGE]
    return set(pairwise(edged))


def shared_run(length: int) -> int:
    """What stands in the hash for a run of *length* shared blocks among a page's own content."""
    return block_hash(f"\x00shared run of {length} blocks")


def _runs(blocks: Sequence[int], boilerplate: Collection[tuple[int, int]]) -> Iterator[tuple[int, int, int]]:
    """(start, end, kind) spans of the page in order: one block of its own content
    (:data:`_OWN`), or a run of blocks chained by boilerplate pairs, either to a page edge
    (:data:`_FURNITURE`) or among the page's own content (:data:`_SHARED`)."""
    n = len(blocks)
    edged = [EDGE, *blocks, EDGE]
    # joined[i]: blocks i - 1 and i (the page edges at 0 and n) are a boilerplate pair
    joined = [(edged[i], edged[i + 1]) in boilerplate for i in range(n + 1)]
    i = 0
    while i < n:
        if not (joined[i] or joined[i + 1]):
            yield i, i + 1, _OWN
            i += 1
            continue
        end = i + 1
        while end < n and joined[end]:
            end += 1
        yield i, end, _FURNITURE if (i == 0 and joined[0]) or (end == n and joined[n]) else _SHARED
        i = end


def kept_blocks(blocks: Sequence[int], boilerplate: Collection[tuple[int, int]]) -> list[int]:
    """What of a page its hash covers, given the site's *boilerplate* block pairs.

    Blocks chained together by boilerplate pairs form a shared run. A run chained to the page's
    start or end is the site's furniture and is dropped. A run among the page's own content is
    replaced by one mark of its length, so adding, removing or moving a shared block there changes
    the hash while a site-wide rewording of a block inside the run does not. Every other block is
    kept. A page that is nothing but furniture (a maintenance page served for most of the site)
    keeps every block: empty content is never a page's state.
    """
    if not boilerplate:
        return list(blocks)
    kept: list[int] = []
    for start, end, kind in _runs(blocks, boilerplate):
        if kind == _OWN:
            kept.append(blocks[start])
        elif kind == _SHARED:
            kept.append(shared_run(end - start))
    return kept or list(blocks)


def without_furniture(blocks: Sequence[int], boilerplate: Collection[tuple[int, int]]) -> list[int]:
    """The page's blocks with its furniture (see :func:`kept_blocks`) left out, shared runs among
    its own content kept block by block: what a pure deletion of noise is judged on, since cutting
    a block can join its neighbours into a run."""
    if not boilerplate:
        return list(blocks)
    out: list[int] = []
    for start, end, kind in _runs(blocks, boilerplate):
        if kind != _FURNITURE:
            out.extend(blocks[start:end])
    return out


def joins_furniture(old: Sequence[int], new: Sequence[int], furniture: Collection[int]) -> bool:
    """Whether every block *new* adds to *old* is furniture: it replaces a block of *furniture*
    (the site's boilerplate before the change) in place, or sits next to one, or next to an added
    block that is. A block added next to a page's own content is content, however many pages it
    is on (a site-wide edit, such as a deprecation notice)."""
    joined: set[int] = set()
    added: set[int] = set()
    for op, i1, i2, j1, j2 in SequenceMatcher(a=list(old), b=list(new), autojunk=False).get_opcodes():
        if op in ("replace", "insert"):
            added.update(range(j1, j2))
            if op == "replace" and any(b in furniture for b in old[i1:i2]):
                joined.update(range(j1, j2))
    grew = True
    while grew:
        grew = False
        for i in added - joined:
            if any(
                j in joined or (0 <= j < len(new) and j not in added and new[j] in furniture)
                for j in (i - 1, i + 1)
            ):
                joined.add(i)
                grew = True
    return joined == added


def is_pure_deletion(old: Sequence[int], new: Sequence[int]) -> bool:
    """True when *new* is *old* with some blocks removed and nothing added or reordered."""
    if len(new) >= len(old):
        return False
    it = iter(old)
    return all(any(h == o for o in it) for h in new)


def deleted_runs(old: Sequence[int], new: Sequence[int]) -> int:
    """In how many contiguous places blocks of *old* are missing from *new* (a pure deletion)."""
    runs, j, gap = 0, 0, False
    for h in old:
        if j < len(new) and new[j] == h:
            j += 1
            gap = False
        elif not gap:
            runs += 1
            gap = True
    return runs


def only_noise_removed(
    old: Sequence[int], new: Sequence[int], boilerplate: Collection[tuple[int, int]], region_hits: int
) -> bool:
    """Whether *new* is *old* with only noise cut, furniture aside (see :func:`without_furniture`):
    blocks went, nothing came in, and they went in no more places than the learned volatile regions
    cut from this very page (*region_hits*; a paragraph deleted elsewhere is still a change)."""
    old_blocks = without_furniture(old, boilerplate)
    new_blocks = without_furniture(new, boilerplate)
    return is_pure_deletion(old_blocks, new_blocks) and deleted_runs(old_blocks, new_blocks) <= region_hits


class PageBlocks:
    """Change detection's block arithmetic, as the state's history role applies it to stored
    blocks (:class:`~recrawler.state.roles.BlockModel`): the store counts and re-hashes with it,
    and decides nothing of its own."""

    edge = EDGE

    def pairs(self, blocks: Sequence[int]) -> set[tuple[int, int]]:
        """See :func:`block_pairs`."""
        return block_pairs(blocks)

    def page_hash(self, blocks: Sequence[int], boilerplate: Collection[tuple[int, int]]) -> str:
        """The page's fingerprint over what its hash keeps under *boilerplate* (:func:`kept_blocks`)."""
        return page_hash(kept_blocks(blocks, boilerplate))

    def same_content(
        self, old: Sequence[int], new: Sequence[int], boilerplate: Collection[tuple[int, int]]
    ) -> bool:
        """Whether *old* and *new* keep the same blocks under *boilerplate*."""
        return kept_blocks(old, boilerplate) == kept_blocks(new, boilerplate)

    def joins_furniture(self, old: Sequence[int], new: Sequence[int], furniture: Collection[int]) -> bool:
        """See :func:`joins_furniture`."""
        return joins_furniture(old, new, furniture)


#: the block arithmetic a crawl hands the store's history role
PAGE_BLOCKS = PageBlocks()
