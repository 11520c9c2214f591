"""The critical-token guard: why an edit is one a reader must not miss, even inside a fuzzy match."""

from __future__ import annotations

import difflib
import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from recrawler.detect.align import PAIR_RATIO, Alignment, ratio
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

_UNITS = (
    r"%|\u2030|\u00b0[CF]?|KiB|MiB|GiB|TiB|kB|KB|MB|GB|TB|PB|Kb|Mb|Gb|bytes?|bits?|B|"
    r"ms|\u00b5s|us|ns|s|secs?|seconds?|min|mins|minutes?|h|hrs?|hours?|days?|weeks?|months?|years?|"
    r"milliseconds?|microseconds?|nanoseconds?|kilobytes?|megabytes?|gigabytes?|terabytes?|percent|"
    r"px|em|rem|pt|vh|vw|dpi|Hz|kHz|MHz|GHz|fps|rpm|k|K|M|x|V|W|kW|mA|USD|EUR|GBP|st|nd|rd|th"
)
# one spelling per unit, so that "30 s" -> "30 seconds" is wording (case matters: MB is not Mb)
_UNIT_NAMES = {
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), "s"),
    **dict.fromkeys(("ms", "millisecond", "milliseconds"), "ms"),
    **dict.fromkeys(("\u00b5s", "us", "microsecond", "microseconds"), "\u00b5s"),
    **dict.fromkeys(("ns", "nanosecond", "nanoseconds"), "ns"),
    **dict.fromkeys(("min", "mins", "minute", "minutes"), "min"),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), "h"),
    **dict.fromkeys(("day", "days"), "d"),
    **dict.fromkeys(("week", "weeks"), "w"),
    **dict.fromkeys(("month", "months"), "mo"),
    **dict.fromkeys(("year", "years"), "y"),
    **dict.fromkeys(("B", "byte", "bytes"), "B"),
    **dict.fromkeys(("bit", "bits"), "bit"),
    **dict.fromkeys(("kB", "KB", "kilobyte", "kilobytes"), "kB"),
    **dict.fromkeys(("MB", "megabyte", "megabytes"), "MB"),
    **dict.fromkeys(("GB", "gigabyte", "gigabytes"), "GB"),
    **dict.fromkeys(("TB", "terabyte", "terabytes"), "TB"),
    **dict.fromkeys(("%", "percent"), "%"),
}
_TOKEN = re.compile(
    r"(?P<url>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s<>\"'`]+[^\s<>\"'`.,;:!?)\]])"
    r"|(?P<path>(?<![\w.:/])(?:~|\.{1,2})?/[\w.@%+~-]+(?:/[\w.@%+~-]+)*/?"
    r"|(?<![\w.:/-])[\w.~-]+/[\w.@%+~-]+(?:/[\w.@%+~-]+)*/?)"
    r"|(?P<flag>(?<![\w-])--?[A-Za-z](?:[\w-]*\w)?)"
    r"|(?P<version>(?<![\w.])[vV]\d+(?:\.\d+)*(?:[-.]?(?:a|b|rc|alpha|beta|dev|post)\d*)?(?!\w))"
    r"|(?P<number>(?<![\w.])(?:[$\u20ac\u00a3\u00a5\u20b9]\s?)?-?\d+(?:[.,]\d+)*"
    rf"(?:\s?(?P<unit>{_UNITS})(?![\w%]))?(?!\w))"
    r"|(?P<alnum>(?<![\w.])\d+[A-Za-z_]\w*)"
    r"|(?P<word>(?<![\w.])\.?[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?:\(\))?)"
)
_NEXT_WORD = re.compile(r"\s?([A-Za-z][\w-]*)")
# words not worth showing after a number ("$19.99 a month" reads as "$19.99")
_FILLERS = frozenset({"a", "an", "the", "and", "or", "of", "per", "to", "in", "on", "at", "for", "is", "are"})
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_WORDS = re.compile(r"[a-z]+(?:'[a-z]+)?")
_NEGATIONS = frozenset(
    {"not", "no", "never", "none", "nothing", "nobody", "nowhere", "neither", "nor", "without"}
)
_MODALS = frozenset(
    {
        "must",
        "should",
        "shall",
        "may",
        "might",
        "required",
        "require",
        "requires",
        "optional",
        "optionally",
        "mandatory",
        "recommended",
        "discouraged",
        "forbidden",
        "prohibited",
        "deprecated",
        "removed",
        "obsolete",
        "unsupported",
        "supported",
        "experimental",
        "always",
        "only",
        "unless",
        "except",
        "enabled",
        "disabled",
        "true",
        "false",
    }
)
_NUMBER_WORDS = frozenset(
    {
        "zero",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "once",
        "twice",
        "thrice",
        "half",
        "double",
        "triple",
        "dozen",
        "hundred",
        "thousand",
        "million",
        "billion",
    }
)
_NT_BASES = {"ca": "can", "wo": "will", "sha": "shall"}
# Capitalised after a colon or in a table cell, yet no proper name: rewording, not a fact.
_NOT_NAMES = frozenset(
    {"A", "An", "And", "Also", "All", "Any", "As", "At", "But", "By", "Each", "For", "From", "However"}
    | {"If", "In", "It", "Its", "Note", "On", "Or", "Our", "See", "So", "Some", "That", "The", "Then"}
    | {"There", "These", "They", "This", "Those", "To", "Use", "We", "When", "Where", "Which", "While"}
    | {"With", "You", "Your"}
)
_INNER_CAPS = re.compile(r"[a-z][A-Z]|[A-Z]{2}[a-z]")
_HAS_DIGIT = re.compile(r"\d")


_HAS_ALPHA = re.compile(r"[A-Za-z]")
_LETTERS = re.compile(r"[^\W\d_]+")
_BARE = re.compile(r"[\w.()/:~@][\w.()/:~@-]*")


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


class _Tokens:
    __slots__ = ("casefolded", "display", "identifiers", "modals", "names", "negations", "numbers")

    def __init__(self, text: str) -> None:
        self.numbers: Counter[str] = Counter()
        self.display: dict[str, str] = {}
        self.identifiers: Counter[str] = Counter()
        self.names: Counter[str] = Counter()
        self.negations: Counter[str] = Counter()
        self.modals: Counter[str] = Counter()
        self.casefolded: frozenset[str] = frozenset(_LETTERS.findall(text.casefold()))
        for m in _TOKEN.finditer(text):
            kind = m.lastgroup
            tok = m.group()
            if kind == "number" or kind == "version":
                self._number(m, text)
            elif kind == "word":
                self._word(tok, text, m.start())
            elif kind == "path":
                if self._is_path(tok):
                    self.identifiers[tok.rstrip("/")] += 1
                else:
                    for part in re.finditer(r"[\w.()]+", tok):
                        self._word(part.group(), text, m.start() + part.start())
            else:  # url, flag, alnum
                self.identifiers[tok] += 1
        self._words(text)

    def _number(self, m: re.Match[str], text: str) -> None:
        tok = m.group()
        unit = m.group("unit") if m.lastgroup == "number" else None
        value = tok[: m.start("unit") - m.start()] if unit else tok
        value = _THOUSANDS.sub("", value.replace(" ", "")).rstrip()
        if unit:
            unit = _UNIT_NAMES.get(unit.lower() if len(unit) > 2 else unit, unit)
        key = f"{value} {unit}" if unit else value
        self.numbers[key] += 1
        if key not in self.display:
            shown = tok
            if not unit:
                nxt = _NEXT_WORD.match(text, m.end())
                if nxt and nxt.group(1).lower() not in _FILLERS:
                    shown = f"{tok} {nxt.group(1)}"
            self.display[key] = shown

    @staticmethod
    def _is_path(tok: str) -> bool:
        if tok.startswith(("/", "~", ".")) or tok.count("/") >= 2:
            return True
        last = tok.rstrip("/").rsplit("/", 1)[-1]
        return "." in last.strip(".") or any(_identifier(p) for p in tok.split("/"))

    def _word(self, tok: str, text: str, start: int) -> None:
        if _identifier(tok):
            self.identifiers[tok] += 1
        elif tok[0].isupper() and tok not in _NOT_NAMES and not _sentence_start(text, start):
            # a proper name inside a sentence ("... on Linux and Windows") is a fact, not wording
            self.names[tok] += 1

    def _words(self, text: str) -> None:
        words = _WORDS.findall(text.lower().replace("\u2019", "'").replace("\u2018", "'"))
        skip = False
        for i, w in enumerate(words):
            if skip:
                skip = False
                continue
            if w == "no" and i + 1 < len(words) and words[i + 1] == "longer":
                self.negations["no longer"] += 1
                skip = True
            elif w.endswith("n't"):
                base = w[:-3]
                base = _NT_BASES.get(base, base)
                if base in _MODALS:
                    self.modals[base] += 1
                self.negations["not"] += 1
            elif w == "cannot":
                self.negations["not"] += 1
            elif w in _NEGATIONS:
                self.negations[w] += 1
            elif w in _MODALS:
                self.modals[w] += 1
            elif w in _NUMBER_WORDS:
                self.numbers[w] += 1


def _identifier(tok: str) -> bool:
    """snake_case, camelCase, PascalCase with inner caps, dotted.names, name(), CONSTANTS, sha256."""
    core = tok[:-2] if tok.endswith("()") else tok
    if tok.endswith("()") or "_" in core:
        return True
    if "." in core.strip("."):
        parts = core.strip(".").split(".")
        # e.g, i.e, a.m: abbreviations, not names
        return not all(len(p) == 1 for p in parts)
    if core.startswith("."):
        return len(core) > 1
    if _INNER_CAPS.search(core):
        return True
    if len(core) >= 2 and core.isupper():
        return True
    return bool(_HAS_DIGIT.search(core) and _HAS_ALPHA.search(core))


def _sentence_start(text: str, start: int) -> bool:
    i = start - 1
    while i >= 0 and (text[i].isspace() or text[i] in "\"'(\u201c\u2018[*_"):
        i -= 1
    return i < 0 or text[i] in ".!?\u2026"


def _changes(old: Counter[str], new: Counter[str]) -> tuple[list[str], list[str]]:
    return list((old - new).elements()), list((new - old).elements())


def _bare(token: str) -> str:
    """A token as it reads after "+" or "-": quoted when it has spaces or starts with a dash."""
    return token if _BARE.fullmatch(token) else repr(token)


def _token_reasons(old_text: str, new_text: str) -> list[str]:
    """Reasons from one modified sentence (or a sentence split or merged)."""
    a, b = _Tokens(old_text), _Tokens(new_text)
    reasons: list[str] = []
    minus, plus = _changes(a.numbers, b.numbers)
    if minus or plus:
        shown_minus = [a.display.get(k, k) for k in minus]
        shown_plus = [b.display.get(k, k) for k in plus]
        if len(minus) == 1 and len(plus) == 1:
            reasons.append(f"number: {shown_minus[0]!r} -> {shown_plus[0]!r}")
        else:
            parts = [f"-{s!r}" for s in shown_minus] + [f"+{s!r}" for s in shown_plus]
            reasons.append("number: " + " ".join(parts))
    for category, old_c, new_c in (
        ("identifier", a.identifiers, b.identifiers),
        ("negation", a.negations, b.negations),
        ("modal", a.modals, b.modals),
        ("name", a.names, b.names),
    ):
        minus, plus = _changes(old_c, new_c)
        if category == "name":
            # "The Free plan" -> "The free plan" changes the case, not the fact
            minus = [t for t in minus if t.casefold() not in b.casefolded]
            plus = [t for t in plus if t.casefold() not in a.casefolded]
        if minus or plus:
            parts = [f"-{_bare(t)}" for t in minus] + [f"+{_bare(t)}" for t in plus]
            reasons.append(f"{category}: " + " ".join(parts))
    return reasons


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
        reasons.extend(_token_reasons(_joined(old, g.old), _joined(new, g.new)))
    reasons.extend(_listed("sentence added:", [new_texts[k] for k in sorted(al.added)]))
    reasons.extend(_listed("sentence removed:", [old_texts[k] for k in sorted(al.removed)]))
    moved = [old_texts[i] for i, _ in sorted(al.moved)] + [new_texts[j] for _, j in sorted(al.far)]
    reasons.extend(_listed("order: moved", moved))
    return reasons


def _heading_reasons(old: Sequence[str], new: Sequence[str]) -> list[str]:
    if list(old) == list(new):
        return []
    minus, plus = _changes(Counter(old), Counter(new))
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
