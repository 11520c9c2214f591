"""Boilerplate block pairs, and what of a page the hash covers (furniture dropped)."""

from __future__ import annotations

from itertools import pairwise

import pytest

from recrawler.detect.boilerplate import (
    EDGE,
    block_pairs,
    deleted_runs,
    is_pure_deletion,
    kept_blocks,
    shared_run,
    without_furniture,
)
from recrawler.detect.hashing import block_hash, page_hash

# blocks by name: T top furniture, H/Y the feedback run at the bottom, F1..F5 a shared feature
# list, N a shared note, a..e the page's own paragraphs
NAMES = ("T", "H", "Y", "F1", "F2", "F3", "F4", "F5", "N", "a", "b", "c", "d", "e", "X")
B = {name: block_hash(name) for name in NAMES}


def blocks(names: str) -> list[int]:
    return [B[n] for n in names.split()]


def pairs(*chains: str) -> frozenset[tuple[int, int]]:
    """Boilerplate pairs along each chain; ``^`` and ``$`` are the page's start and end."""
    out = set()
    for chain in chains:
        seq = [EDGE if n in "^$" else B[n] for n in chain.split()]
        out.update(pairwise(seq))
    return frozenset(out)


# what the site learned: the edit line opens every page, the feedback run closes it, and about
# half the pages list the features in the middle of their own content
SITE = pairs("^ T", "H Y $", "F1 F2 F3 F4 F5")
PAGE = "T a F1 F2 F3 F4 F5 b N c H Y"


def kept(names: str, boilerplate: frozenset[tuple[int, int]] = SITE) -> list[int]:
    return kept_blocks(blocks(names), boilerplate)


def test_block_pairs_include_the_page_edges() -> None:
    assert block_pairs(blocks("a b")) == {(EDGE, B["a"]), (B["a"], B["b"]), (B["b"], EDGE)}
    assert block_pairs(blocks("a")) == {(EDGE, B["a"]), (B["a"], EDGE)}
    assert block_pairs([]) == set()
    # a pair repeated on one page counts once
    assert len(block_pairs(blocks("a b a b"))) == 4


def test_without_boilerplate_every_block_is_kept() -> None:
    assert kept(PAGE, frozenset()) == blocks(PAGE)


def test_edge_furniture_is_dropped_and_a_shared_run_leaves_a_mark() -> None:
    assert kept(PAGE) == [B["a"], shared_run(5), B["b"], B["N"], B["c"]]
    # a shared run's mark counts its blocks, and is no block's hash
    assert shared_run(5) != shared_run(4)
    assert shared_run(5) not in B.values()


@pytest.mark.parametrize(
    "edited",
    [
        "T a F1 F3 F2 F4 F5 b N c H Y",  # two bullets swapped
        "T a F1 F2 F4 F5 b N c H Y",  # one removed from the middle
        "T a F2 F3 F4 F5 b N c H Y",  # the first one removed
        "T a F1 F2 F3 F4 b N c H Y",  # the last one removed
        "T a b N c H Y",  # the whole list removed
        "T a b N c F1 F2 F3 F4 F5 H Y",  # the list moved among the page's own paragraphs
        "T a F1 F2 F3 F4 F5 b c H Y",  # the shared note removed
        "T a F1 F2 F3 F4 F5 b N F3 c H Y",  # a shared bullet added between own paragraphs
        "T a F1 F2 F3 F4 F5 b N c N H Y",  # the shared note added a second time
        "T a F1 F2 F3 F4 F5 F1 F2 b N c H Y",  # the list grew a repeat of its own pairs
        "T a F1 F2 F3 F4 F5 X b N c H Y",  # a page's own bullet appended to the list
        "T F1 F2 F3 F4 F5 a b N c H Y",  # the list moved above the first own paragraph
    ],
)
def test_a_page_s_own_use_of_shared_blocks_is_content(edited: str) -> None:
    assert kept(edited) != kept(PAGE)
    assert page_hash(kept(edited)) != page_hash(kept(PAGE))


@pytest.mark.parametrize(
    "edited",
    [
        "a F1 F2 F3 F4 F5 b N c H Y",  # no edit line on this page
        "T a F1 F2 F3 F4 F5 b N c",  # no feedback run
    ],
)
def test_furniture_at_the_edges_is_not_content(edited: str) -> None:
    assert kept(edited) == kept(PAGE)


def test_new_furniture_wording_is_noise_once_learned() -> None:
    # "Was this page helpful?" became X on every page: while the run lasts X is new, so the page
    # changed; once X's pairs are learned (and H's still count, as at the end of that run) it did not
    reworded = "T a F1 F2 F3 F4 F5 b N c X Y"
    assert kept(reworded) != kept(PAGE)
    learned = SITE | pairs("X Y $")
    assert kept(reworded, learned) == kept(PAGE, learned)


def test_an_in_place_rewording_of_a_shared_run_is_noise_once_learned() -> None:
    reworded = "T a F1 F2 X F4 F5 b N c H Y"
    assert kept(reworded) != kept(PAGE)
    learned = SITE | pairs("F2 X F4")
    assert kept(reworded, learned) == kept(PAGE, learned)


def test_a_shared_block_between_own_paragraphs_is_content() -> None:
    # N is on every page, but always between the page's own paragraphs: no pair of it is shared
    assert B["N"] in kept(PAGE)


def test_chains_are_split_where_a_pair_is_not_boilerplate() -> None:
    # F1 F2 | F4 F5: two shared runs; F3 alone between own paragraphs would be content
    assert kept("a F1 F2 F4 F5 b") == [B["a"], shared_run(2), shared_run(2), B["b"]]
    assert kept("a F3 b") == blocks("a F3 b")
    # a shared run that reaches a page edge is furniture there; a page of nothing but furniture
    # keeps every block (empty content is never a page's state: its hash is never sha256(""))
    assert kept("F1 F2 F3 F4 F5", SITE | pairs("^ F1")) == blocks("F1 F2 F3 F4 F5")
    assert kept("F1 F2 F3 F4 F5") == [shared_run(5)]


def test_without_furniture_keeps_shared_runs_block_by_block() -> None:
    assert without_furniture(blocks(PAGE), SITE) == blocks("a F1 F2 F3 F4 F5 b N c")
    assert without_furniture(blocks(PAGE), frozenset()) == blocks(PAGE)
    # a paragraph cut before the feedback run: one deletion
    old = without_furniture(blocks(PAGE), SITE)
    new = without_furniture(blocks("T a F1 F2 F3 F4 F5 b N H Y"), SITE)
    assert is_pure_deletion(old, new)
    assert deleted_runs(old, new) == 1
