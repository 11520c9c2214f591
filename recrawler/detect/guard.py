"""The critical-token guard: why an edit is one a reader must not miss, even inside a fuzzy match."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from recrawler.detect.align import PAIR_RATIO, Passages, block_edits
from recrawler.detect.critical import code_reasons, heading_reasons, passage_reasons
from recrawler.detect.text import clean, merge_code, units

if TYPE_CHECKING:
    from collections.abc import Sequence


@dataclass(frozen=True, slots=True, kw_only=True)
class Fields:
    """What the guard compares: the text, its code (inline spans and blocks) and its headings."""

    text: str
    code: tuple[str, ...] = ()
    headings: tuple[str, ...] = ()


def fields_from_text(text: str, code: Sequence[str] = ()) -> Fields:
    """Build :class:`Fields` from cleaned text: headings from its ``#`` lines, and its fenced code
    blocks added to *code* (inline spans and blocks, as extraction lists them) unless already there.
    """
    _, headings, blocks = units(text)
    return Fields(text=text, code=tuple(merge_code(code, blocks)), headings=tuple(headings))


def critical_changes(old: Fields, new: Fields) -> list[str]:
    """Return why the edit from *old* to *new* is one a reader must not miss (empty: it is not).

    Trips on numbers with their units, code spans and blocks, identifiers, negations and modal
    words, proper names and headings, each compared within a modified sentence, and on sentences
    added, removed or moved. A modified sentence is a removed and an added one at least
    :data:`PAIR_RATIO` alike; rewording without such tokens (a typo fix) is not critical. Pass
    normalised text (:meth:`Normalizer.normalize`) so that volatile tokens do not trip it.

    The data flows one way: the texts are read (:mod:`~recrawler.detect.text`), aligned
    (:mod:`~recrawler.detect.align`), then the differences are told (:mod:`~recrawler.detect.critical`).
    """
    if old == new:
        return []
    old_units, old_headings, old_blocks = units(old.text)
    new_units, new_headings, new_blocks = units(new.text)
    if old.headings:
        old_headings = [clean(h) for h in old.headings]
    if new.headings:
        new_headings = [clean(h) for h in new.headings]
    old_code = merge_code(old.code, old_blocks)
    new_code = merge_code(new.code, new_blocks)
    code = block_edits(old_code, new_code)
    passages = Passages(old_units, new_units)
    reasons = heading_reasons(old_headings, new_headings)
    reasons += code_reasons(*code)
    reasons += passage_reasons(passages.modified, passages.added, passages.removed, passages.moved)
    return list(dict.fromkeys(reasons))


__all__ = ["PAIR_RATIO", "Fields", "critical_changes", "fields_from_text"]
