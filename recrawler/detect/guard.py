"""The critical-token guard: why an edit is one a reader must not miss, even inside a fuzzy match."""

from __future__ import annotations

import difflib
import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from recrawler.detect.align import PAIR_RATIO, Alignment, ratio
from recrawler.detect.critical import counter_changes, token_reasons
from recrawler.detect.text import clean, clean_code, parse, unmarked

if TYPE_CHECKING:
    from collections.abc import Sequence


@dataclass(frozen=True, slots=True, kw_only=True)
class Fields:
    """What the guard compares: the text, its code (inline spans and blocks) and its headings."""

    text: str
    code: tuple[str, ...] = ()
    headings: tuple[str, ...] = ()


# Sentences listed per "sentence added/removed" reason kind before the rest is counted.
_MAX_LISTED = 5
_SHORT = 80

_SENTENCE_END = re.compile(r"[.!?\u2026]+[\"'\u201d\u2019)\]]*\s+(?=[^\sa-z])")
_ABBREVIATIONS = frozenset(
    {"e.g", "i.e", "etc", "vs", "cf", "approx", "dr", "mr", "mrs", "ms", "fig", "eq", "incl", "al", "resp"}
)


def _short(text: str, limit: int = _SHORT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _sentences(line: str) -> list[str]:
    out: list[str] = []
    start = 0
    for m in _SENTENCE_END.finditer(line):
        before = line[start : m.start()].rsplit(None, 1)
        last = before[-1].lstrip("([\"'").lower() if before else ""
        # an abbreviation or an initial ("e.g. Foo", "J. Smith") does not end a sentence
        if last in _ABBREVIATIONS or (len(last) == 1 and last.isalpha()):
            continue
        out.append(line[start : m.end()].strip())
        start = m.end()
    rest = line[start:].strip()
    if rest:
        out.append(rest)
    return out


@dataclass(frozen=True, slots=True)
class _Unit:
    text: str
    line: int  # the line (block, list item, table row) it comes from


def _parse(text: str) -> tuple[list[_Unit], list[str], list[str]]:
    """Split rendered text into sentence units, heading texts and code blocks."""
    units: list[_Unit] = []
    headings: list[str] = []
    code: list[str] = []
    n = 0
    for block in parse(text):
        if block.code is not None:
            code.append(clean_code(block.code))
            continue
        if block.level:
            n += 1
            headings.append(block.title)
            continue
        for raw in block.text.splitlines():
            line = raw.strip()
            if not line:
                continue
            n += 1
            line = clean(unmarked(line))
            if not line:
                continue
            if line.startswith("|"):
                units.append(_Unit(line, n))
            else:
                units.extend(_Unit(s, n) for s in _sentences(line))
    return units, headings, [c for c in code if c]


class _Group:
    """A modified passage: old units and new units (contiguous, each side) that say the same thing."""

    __slots__ = ("new", "old", "ratio")

    def __init__(self, old: int, new: int, ratio: float) -> None:
        self.old = [old]
        self.new = [new]
        self.ratio = ratio


def _joined(units: Sequence[_Unit], idx: Sequence[int]) -> str:
    return " ".join(units[k].text for k in idx)


def _absorb(
    groups: list[_Group], left: set[int], old: Sequence[_Unit], new: Sequence[_Unit], side: str
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


def _listed(prefix: str, texts: Sequence[str]) -> list[str]:
    reasons = [f"{prefix} {_short(t)!r}" for t in texts[:_MAX_LISTED]]
    if len(texts) > _MAX_LISTED:
        reasons.append(f"{prefix} {len(texts) - _MAX_LISTED} more")
    return reasons


def _text_reasons(old: list[_Unit], new: list[_Unit]) -> list[str]:
    old_texts = [u.text for u in old]
    new_texts = [u.text for u in new]
    if old_texts == new_texts:
        return []
    al = Alignment(old_texts, new_texts)
    groups = [_Group(i, j, r) for i, j, r in al.pairs]
    _absorb(groups, al.added, old, new, "new")
    _absorb(groups, al.removed, old, new, "old")
    groups.sort(key=lambda g: g.new[0])
    reasons: list[str] = []
    for g in groups:
        reasons.extend(token_reasons(_joined(old, g.old), _joined(new, g.new)))
    reasons.extend(_listed("sentence added:", [new_texts[k] for k in sorted(al.added)]))
    reasons.extend(_listed("sentence removed:", [old_texts[k] for k in sorted(al.removed)]))
    moved = [old_texts[i] for i, _ in sorted(al.moved)] + [new_texts[j] for _, j in sorted(al.far)]
    reasons.extend(_listed("order: moved", moved))
    return reasons


def _heading_reasons(old: Sequence[str], new: Sequence[str]) -> list[str]:
    if list(old) == list(new):
        return []
    minus, plus = counter_changes(Counter(old), Counter(new))
    if not minus and not plus:
        return ["heading: order changed"]
    return [f"heading: -{_short(h)!r}" for h in minus] + [f"heading: +{_short(h)!r}" for h in plus]


def _code_change(a: str, b: str) -> str:
    if "\n" not in a and "\n" not in b:
        return f"code: {_short(a)!r} -> {_short(b)!r}"
    al, bl = a.splitlines(), b.splitlines()
    minus: list[str] = []
    plus: list[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, al, bl, autojunk=False).get_opcodes():
        if tag != "equal":
            minus.extend(al[i1:i2])
            plus.extend(bl[j1:j2])
    if [x.strip() for x in minus] == [x.strip() for x in plus]:
        return f"code: indentation changed in {_short(a.splitlines()[0].strip())!r}"
    parts = [f"-{_short(x.strip(), 60)!r}" for x in minus[:3]]
    parts += [f"+{_short(x.strip(), 60)!r}" for x in plus[:3]]
    more = len(minus) + len(plus) - len(parts)
    return "code: " + " ".join(parts) + (f" (+{more} lines)" if more > 0 else "")


def _code_reasons(old: list[str], new: list[str]) -> list[str]:
    if old == new:
        return []
    if Counter(old) == Counter(new):
        # the same code in another order: inline spans move with their sentences, which the text
        # comparison reports; a reordered code block alone is no edit a reader acts on
        return []
    al = Alignment(old, new)
    changes = [_code_change(old[i], new[j]) for i, j, _ in sorted(al.pairs, key=lambda p: p[1])]
    removed, added = sorted(al.removed), sorted(al.added)
    if len(removed) == len(added):
        # as many blocks went as came: show each one's changed lines rather than its first line
        changes += [_code_change(old[i], new[j]) for i, j in zip(removed, added, strict=True)]
    else:
        changes += [f"code: -{_short(old[i].splitlines()[0])!r}" for i in removed]
        changes += [f"code: +{_short(new[j].splitlines()[0])!r}" for j in added]
    reasons = changes[: 2 * _MAX_LISTED]
    if len(changes) > len(reasons):
        reasons.append(f"code: {len(changes) - len(reasons)} more changes")
    return reasons


def _merge_code(code: Sequence[str], blocks: Sequence[str]) -> list[str]:
    """Code spans (cleaned) plus the fenced blocks of the text that they do not hold yet."""
    spans = [c for c in (clean_code(s) for s in code) if c]
    have = Counter(spans)
    for block in blocks:
        if have[block] > 0:
            have[block] -= 1
        else:
            spans.append(block)
    return spans


def fields_from_text(text: str, code: Sequence[str] = ()) -> Fields:
    """Build :class:`Fields` from cleaned text: headings from its ``#`` lines, and its fenced code
    blocks added to *code* (inline spans and blocks, as extraction lists them) unless already there.
    """
    _, headings, blocks = _parse(text)
    return Fields(text=text, code=tuple(_merge_code(code, blocks)), headings=tuple(headings))


def critical_changes(old: Fields, new: Fields) -> list[str]:
    """Return why the edit from *old* to *new* is one a reader must not miss (empty: it is not).

    Trips on numbers with their units, code spans and blocks, identifiers, negations and modal
    words, proper names and headings, each compared within a modified sentence, and on sentences
    added, removed or moved. A modified sentence is a removed and an added one at least
    :data:`PAIR_RATIO` alike; rewording without such tokens (a typo fix) is not critical. Pass
    normalised text (:meth:`Normalizer.normalize`) so that volatile tokens do not trip it.
    """
    if old == new:
        return []
    old_units, old_headings, old_blocks = _parse(old.text)
    new_units, new_headings, new_blocks = _parse(new.text)
    reasons = _heading_reasons(
        [clean(h) for h in old.headings] if old.headings else old_headings,
        [clean(h) for h in new.headings] if new.headings else new_headings,
    )
    reasons += _code_reasons(_merge_code(old.code, old_blocks), _merge_code(new.code, new_blocks))
    reasons += _text_reasons(old_units, new_units)
    return list(dict.fromkeys(reasons))


__all__ = ["PAIR_RATIO", "Fields", "critical_changes", "fields_from_text"]
