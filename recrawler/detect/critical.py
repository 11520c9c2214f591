"""Critical tokens: the numbers, versions, identifiers, names, negations and modals whose change a
reader must not miss (pure), and the reasons an edit is critical: tokens changed within a modified
passage, headings and code changed, sentences added, removed or moved."""

from __future__ import annotations

import difflib
import re
from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

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


def counter_changes(old: Counter[str], new: Counter[str]) -> tuple[list[str], list[str]]:
    return list((old - new).elements()), list((new - old).elements())


def _bare(token: str) -> str:
    """A token as it reads after "+" or "-": quoted when it has spaces or starts with a dash."""
    return token if _BARE.fullmatch(token) else repr(token)


def token_reasons(old_text: str, new_text: str) -> list[str]:
    """Reasons from one modified sentence (or a sentence split or merged)."""
    a, b = _Tokens(old_text), _Tokens(new_text)
    reasons: list[str] = []
    minus, plus = counter_changes(a.numbers, b.numbers)
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
        minus, plus = counter_changes(old_c, new_c)
        if category == "name":
            # "The Free plan" -> "The free plan" changes the case, not the fact
            minus = [t for t in minus if t.casefold() not in b.casefolded]
            plus = [t for t in plus if t.casefold() not in a.casefolded]
        if minus or plus:
            parts = [f"-{_bare(t)}" for t in minus] + [f"+{_bare(t)}" for t in plus]
            reasons.append(f"{category}: " + " ".join(parts))
    return reasons


# Sentences listed per "sentence added/removed" reason kind before the rest is counted.
_MAX_LISTED = 5
_SHORT = 80


def _short(text: str, limit: int = _SHORT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _listed(prefix: str, texts: Sequence[str]) -> list[str]:
    reasons = [f"{prefix} {_short(t)!r}" for t in texts[:_MAX_LISTED]]
    if len(texts) > _MAX_LISTED:
        reasons.append(f"{prefix} {len(texts) - _MAX_LISTED} more")
    return reasons


def heading_reasons(old: Sequence[str], new: Sequence[str]) -> list[str]:
    """Reasons from the headings: each one gone or added, or their order changed."""
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


def code_reasons(
    edited: Sequence[tuple[str, str]], removed: Sequence[str], added: Sequence[str]
) -> list[str]:
    """Reasons from the code blocks (see :func:`~recrawler.detect.align.block_edits`): each edited
    block's changed lines, each removed or added block's first line."""
    changes = [_code_change(a, b) for a, b in edited]
    changes += [f"code: -{_short(a.splitlines()[0])!r}" for a in removed]
    changes += [f"code: +{_short(b.splitlines()[0])!r}" for b in added]
    reasons = changes[: 2 * _MAX_LISTED]
    if len(changes) > len(reasons):
        reasons.append(f"code: {len(changes) - len(reasons)} more changes")
    return reasons


def passage_reasons(
    modified: Sequence[tuple[str, str]], added: Sequence[str], removed: Sequence[str], moved: Sequence[str]
) -> list[str]:
    """Reasons from the sentences (see :class:`~recrawler.detect.align.Passages`): the critical
    tokens of each modified passage, then the sentences added, removed and moved."""
    reasons: list[str] = []
    for old, new in modified:
        reasons.extend(token_reasons(old, new))
    reasons.extend(_listed("sentence added:", added))
    reasons.extend(_listed("sentence removed:", removed))
    reasons.extend(_listed("order: moved", moved))
    return reasons


__all__ = ["code_reasons", "counter_changes", "heading_reasons", "passage_reasons", "token_reasons"]
