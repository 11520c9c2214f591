"""How two sequences of texts differ: modified pairs (alike enough), removals, additions and moves;
over a text's sentences, its modified passages; over its code blocks, the blocks edited."""

from __future__ import annotations

import difflib
import re
from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from recrawler.detect.text import Unit

# A similar removed and added sentence are one modified sentence (difflib ratio).
PAIR_RATIO = 0.6
_LONG = 300
_WORD_OR_MARK = re.compile(r"\w+|[^\w\s]")
# Beyond this many candidate pairs in one region, only nearby units are compared.
_MAX_PAIRS = 2_000
_WINDOW = 4
_WORD = re.compile(r"[^\W_]+")
_MIN_WORDS = 5
_MIN_SHARED = 0.3


def _forms(a: str, b: str) -> tuple[Sequence[str], Sequence[str]]:
    """What to compare: characters of short texts (a typo keeps them alike), lines of code blocks
    and words of long text (difflib is quadratic in the worst case)."""
    if len(a) <= _LONG and len(b) <= _LONG:
        return a, b
    if "\n" in a or "\n" in b:
        return a.splitlines(), b.splitlines()
    return _WORD_OR_MARK.findall(a), _WORD_OR_MARK.findall(b)


def ratio(a: str, b: str) -> float:
    """How alike two texts are (difflib ratio over characters, lines or words, see _forms)."""
    x, y = _forms(a, b)
    return difflib.SequenceMatcher(None, x, y, autojunk=False).ratio()


def _pair(
    old: Sequence[str], new: Sequence[str], olds: Sequence[int], news: Sequence[int]
) -> list[tuple[int, int, float]]:
    """Greedy best-first pairs (old index, new index, ratio) of items at least PAIR_RATIO alike."""
    if not olds or not news:
        return []
    near = len(olds) * len(news) > _MAX_PAIRS
    scale = len(news) / len(olds)
    old_words = {i: frozenset(_WORD.findall(old[i].lower())) for i in olds}
    candidates: list[tuple[float, int, int]] = []
    for pj, j in enumerate(news):
        b = new[j]
        b_words = frozenset(_WORD.findall(b.lower()))
        for pi, i in enumerate(olds):
            if near and abs(pi * scale - pj) > _WINDOW:
                continue
            a = old[i]
            # difflib's upper bound from the lengths alone, before any matching
            if 2 * min(len(a), len(b)) < PAIR_RATIO * (len(a) + len(b)):
                continue
            a_words = old_words[i]
            # sentences of several words that share few of them are not one sentence edited
            # (a cheap filter: character counts alone say little about English text)
            if (
                len(a_words) >= _MIN_WORDS
                and len(b_words) >= _MIN_WORDS
                and 2 * len(a_words & b_words) < _MIN_SHARED * (len(a_words) + len(b_words))
            ):
                continue
            x, y = _forms(a, b)
            sm = difflib.SequenceMatcher(None, x, y, autojunk=False)
            if sm.quick_ratio() >= PAIR_RATIO:
                r = sm.ratio()
                if r >= PAIR_RATIO:
                    candidates.append((r, i, j))
    candidates.sort(key=lambda c: (-c[0], c[1], c[2]))
    used_old: set[int] = set()
    used_new: set[int] = set()
    pairs: list[tuple[int, int, float]] = []
    for r, i, j in candidates:
        if i not in used_old and j not in used_new:
            used_old.add(i)
            used_new.add(j)
            pairs.append((i, j, r))
    return pairs


class Alignment:
    """How two sequences differ: modified pairs, removed and added items, moved items."""

    __slots__ = ("added", "far", "moved", "pairs", "removed")

    def __init__(self, old: Sequence[str], new: Sequence[str]) -> None:
        regions: list[tuple[list[int], list[int]]] = []
        sm = difflib.SequenceMatcher(None, old, new, autojunk=False)
        for tag, i1, i2, j1, j2 in sm.get_opcodes():
            if tag != "equal":
                regions.append((list(range(i1, i2)), list(range(j1, j2))))
        # the same item removed in one place and added in another moved
        waiting: dict[str, list[int]] = {}
        for _, news in regions:
            for j in news:
                waiting.setdefault(new[j], []).append(j)
        self.moved: list[tuple[int, int]] = []
        for olds, _ in regions:
            for i in olds:
                if waiting.get(old[i]):
                    self.moved.append((i, waiting[old[i]].pop(0)))
        moved_old = {i for i, _ in self.moved}
        moved_new = {j for _, j in self.moved}
        self.pairs: list[tuple[int, int, float]] = []
        left_old: list[int] = []
        left_new: list[int] = []
        # modifications are looked for where the sequences differ first, then anywhere
        for olds, news in regions:
            o = [i for i in olds if i not in moved_old]
            n = [j for j in news if j not in moved_new]
            found = _pair(old, new, o, n)
            self.pairs.extend(found)
            paired_old = {i for i, _, _ in found}
            paired_new = {j for _, j, _ in found}
            left_old.extend(i for i in o if i not in paired_old)
            left_new.extend(j for j in n if j not in paired_new)
        found = _pair(old, new, left_old, left_new)
        self.pairs.extend(found)
        # paired across unchanged items: modified and moved
        self.far: list[tuple[int, int]] = [(i, j) for i, j, _ in found]
        self.removed: set[int] = set(left_old) - {i for i, _, _ in found}
        self.added: set[int] = set(left_new) - {j for _, j, _ in found}


class _Group:
    """A modified passage: old units and new units (contiguous, each side) that say the same thing."""

    __slots__ = ("new", "old", "ratio")

    def __init__(self, old: int, new: int, ratio: float) -> None:
        self.old = [old]
        self.new = [new]
        self.ratio = ratio


def _joined(units: Sequence[Unit], idx: Sequence[int]) -> str:
    return " ".join(units[k].text for k in idx)


def _absorb(
    groups: list[_Group], left: set[int], old: Sequence[Unit], new: Sequence[Unit], side: str
) -> None:
    """Attach leftover units to a neighbouring group when that makes the group more alike: a
    sentence split in two or two merged into one is a modification, not an addition."""
    units = new if side == "new" else old
    changed = True
    while changed and left:
        changed = False
        for g in groups:
            idx = g.new if side == "new" else g.old
            for k in (idx[0] - 1, idx[-1] + 1):
                if k not in left or units[k].line != units[idx[0]].line:
                    continue
                trial = sorted([*idx, k])
                o = _joined(old, trial if side == "old" else g.old)
                n = _joined(new, trial if side == "new" else g.new)
                r = ratio(o, n)
                if r > g.ratio:
                    idx[:] = trial
                    g.ratio = r
                    left.discard(k)
                    changed = True
                    break


class Passages:
    """How two texts' sentence units differ: modified passages (a sentence edited, split in two or
    merged with its neighbour) as (old, new) texts in new order, and sentences added, removed and
    moved."""

    __slots__ = ("added", "modified", "moved", "removed")

    def __init__(self, old: Sequence[Unit], new: Sequence[Unit]) -> None:
        self.modified: list[tuple[str, str]] = []
        self.added: list[str] = []
        self.removed: list[str] = []
        self.moved: list[str] = []
        old_texts = [u.text for u in old]
        new_texts = [u.text for u in new]
        if old_texts == new_texts:
            return
        al = Alignment(old_texts, new_texts)
        groups = [_Group(i, j, r) for i, j, r in al.pairs]
        _absorb(groups, al.added, old, new, "new")
        _absorb(groups, al.removed, old, new, "old")
        groups.sort(key=lambda g: g.new[0])
        self.modified = [(_joined(old, g.old), _joined(new, g.new)) for g in groups]
        self.added = [new_texts[k] for k in sorted(al.added)]
        self.removed = [old_texts[k] for k in sorted(al.removed)]
        self.moved = [old_texts[i] for i, _ in sorted(al.moved)] + [new_texts[j] for _, j in sorted(al.far)]


def block_edits(old: Sequence[str], new: Sequence[str]) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    """How two lists of code blocks differ: (old, new) blocks edited, in new order, then blocks
    removed and added; when as many went as came, each one is taken as edited in place. The same
    blocks in another order differ in nothing: a reordered code block alone is no edit a reader
    acts on (inline spans move with their sentences, which the passages show)."""
    if Counter(old) == Counter(new):
        return [], [], []
    al = Alignment(old, new)
    edited = [(old[i], new[j]) for i, j, _ in sorted(al.pairs, key=lambda p: p[1])]
    removed, added = sorted(al.removed), sorted(al.added)
    if len(removed) == len(added):
        edited += [(old[i], new[j]) for i, j in zip(removed, added, strict=True)]
        return edited, [], []
    return edited, [old[i] for i in removed], [new[j] for j in added]


__all__ = ["PAIR_RATIO", "Alignment", "Passages", "block_edits", "ratio"]
