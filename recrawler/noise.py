"""Volatile-token normalisation and the critical-token guard for fuzzy matches (pure, stdlib only)."""

from __future__ import annotations

import difflib
import functools
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from recrawler.exceptions import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

# --- volatile tokens ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class VolatilePattern:
    """A volatile token: a regex and the placeholder its matches become.

    When the regex has a group named ``value``, only that group is replaced, so the words that
    make the context volatile ("Last updated") stay; a match in which ``value`` took no part is
    left as it is, which lets a pattern claim look-alikes it must not touch (a checksum after
    "sha256"). Without that group the whole match is replaced. The replacement is literal text.
    """

    name: str
    regex: str
    replacement: str


_MONTH = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
    r"|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)\.?"
)
_WEEKDAY = r"(?:(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]{0,6}\.?,?\s+)"
_DAY = r"(?:3[01]|[12]\d|0?[1-9])(?:st|nd|rd|th)?(?!\d)"
_YEAR = r"(?:19|20)\d{2}(?!\d)"
_TZ = (
    r"(?:\s*(?:UTC|GMT)(?:[+-]\d{1,2}(?::?\d{2})?)?|\s?[+-]\d{2}:?\d{2}|Z"
    r"|\s*\(?(?:[ECMPA][SD]T|CES?T|BST|IST|JST|AES?T)\)?)?"
)
_TIME = rf"(?:[01]?\d|2[0-3]):[0-5]\d(?::[0-5]\d(?:[.,]\d+)?)?(?:\s*[AaPp]\.?[Mm]\b\.?)?{_TZ}(?![\d:])"
_DATE = (
    r"(?:\d{4}-\d{2}-\d{2}(?:T\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?(?![\d-])"
    r"|\d{4}/\d{1,2}/\d{1,2}(?![\d/])"
    r"|(?:\d{1,2}[/-]\d{1,2}[/-](?:\d{4}|\d{2})|\d{1,2}\.\d{1,2}\.\d{4})(?![\d/.-]\d)"
    rf"|{_WEEKDAY}?{_DAY}\s+(?:of\s+)?{_MONTH},?(?:\s+{_YEAR})?"
    rf"|{_WEEKDAY}?{_MONTH}\s+{_DAY}(?:,?\s+{_YEAR})?"
    rf"|{_MONTH},?\s+{_YEAR}"
    r"|(?i:today|yesterday))"
)
# The words that make a date volatile: a page's own "last updated" line, a build stamp. A bare
# "updated" is a label only when capitalised or followed by a colon: "(updated on 9 September
# 2013)" in running prose is content.
_LABELS = "updated|modified|edited|generated|built|published|rendered"
_CONTEXT = (
    r"(?:(?i:\blast[ -](?:updated?|modified|edited|changed|reviewed|built|generated|published))"
    rf"|\b(?:{_LABELS.title()}|{_LABELS.upper()})|(?i:\b(?:{_LABELS}))(?=\s*:))\b"
    r"(?:\s+by\s+[^\s,:|]+(?:\s+[^\s,:|]+)?)?,?(?:\s+(?i:on|at))?\s*[:|\-\u2013\u2014]?\s*"
)
# "As of September 2021, three projects..." is content; "data as of 30 Nov 2026 10:35" is a stamp.
_AS_OF = r"(?i:\bas\s+of)\s*:?\s*"
_UNIT_WORDS = r"(?:seconds?|secs?|minutes?|mins?|hours?|hrs?|days?|weeks?|wks?|months?|mos?|years?|yrs?)"
_AGO_AMOUNT = r"(?:\d+|an?|one|two|three|four|five|six|seven|eight|nine|ten|(?:a\s+)?few|several|some)"
_AGO = (
    r"(?i:\b(?:(?:about|around|almost|nearly|over|under|less\s+than|more\s+than)\s+)?"
    rf"(?:{_AGO_AMOUNT}\s+{_UNIT_WORDS}|\d+\s*(?:[smhdwy]|mo)\.?)"
    rf"(?:,?\s+(?:and\s+)?\d+\s+{_UNIT_WORDS})*\s+ago\b"
    r"|\bjust\s+now\b|\b(?:a\s+)?moments?\s+ago\b"
    rf"|\byesterday(?:,?\s+at\s+{_TIME})?\b)"
)
_COUNT_NUM = r"(?:\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?\s?[kKmM]\b|\d+)"
_COUNT_NOUNS = (
    "views",
    "comments",
    "likes",
    "downloads",
    "stars",
    "forks",
    "reads",
    "reactions",
    "replies",
    "visits",
    "votes",
    "upvotes",
    "followers",
    "watchers",
    "subscribers",
    "shares",
    "clicks",
    "answers",
)
# eyes, thumbs, hearts, stars, speech balloon
_COUNT_ICONS = "\U0001f441\U0001f440\U0001f44d\U0001f44e\u2764\u2665\u2605\u2b50\U0001f4ac"
_COUNT_WORD = (
    r"(?i:(?:view|comment|like|download|star|fork|read|reaction|visit|vote|upvote|follower|watcher"
    r"|subscriber|share|click|answer)s?|repl(?:y|ies))\b"
)
# A counter is a UI widget: it starts a line, follows a separator or another counter. A number
# in running prose ("returns up to 100 comments per page") is content and stays.
_COUNT_LEFT = (
    r"(?=\d)(?<!\d[.,])(?:^|(?<=[|\u00b7\u2022,;:(\[{\u2013\u2014>/])|(?<=[|\u00b7\u2022,;:(\[{\u2013\u2014>/.!?]\s)"
    + "".join(f"|(?<={w} )|(?<={w.capitalize()} )" for w in _COUNT_NOUNS)
    + ")"
)
_COUNT_PROSE = (
    r"(?!\s+(?i:per|each|in|at|for|from|to|of|on|by|are|is|were|was|will|can|may|must|should|the|an?)\b)"
)

DEFAULT_PATTERNS: tuple[VolatilePattern, ...] = (
    VolatilePattern(
        name="uuid",
        regex=r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b",
        replacement="<uuid>",
    ),
    VolatilePattern(
        # a checksum or digest the reader copies is content: it is claimed here and kept
        name="hex-id",
        regex=(
            r"(?i:(?<![a-z0-9])(?:sha-?(?:1|224|256|384|512)(?:sum)?|sha3-\d+|md5(?:sum)?|blake2[bs]?"
            r"|checksum|digest|hash|fingerprint|integrity|pgp|gpg|key(?:\s+id)?|signature)(?![a-z0-9]))"
            r"[^\w\n]{0,4}(?:sha\d+-)?[0-9A-Fa-f]{16,}\b"
            r"|\b(?=[0-9A-Fa-f]{16})(?P<value>(?=[0-9A-Fa-f]*\d)(?=[0-9A-Fa-f]*[A-Fa-f])[0-9A-Fa-f]{16,})\b"
        ),
        replacement="<hexid>",
    ),
    VolatilePattern(
        name="revision",
        regex=(
            r"(?i:\b(?:commit|build|rev|revision)\b)[\s:#@]*"
            r"(?P<value>(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40})\b"
        ),
        replacement="<hexid>",
    ),
    VolatilePattern(
        name="build-id",
        regex=(
            r"(?:\bBuild(?:\s+(?:ID|[Nn]umber|No\.?))?\s*[:#]|(?i:\bbuild[ _-]?(?:id|number|no\.?))\s*[:#]?)"
            r"\s*#?(?!v?\d{1,3}(?:\.\d+){1,3}\b)(?P<value>(?=[\w.:-]*\d)[A-Za-z0-9](?:[\w.:-]*[A-Za-z0-9])?)"
        ),
        replacement="<id>",
    ),
    VolatilePattern(
        name="build-number",
        regex=(
            r"\bBuild\s+#?(?!v?\d{1,3}(?:\.\d+){1,3}\b)"
            r"(?P<value>\d[\w.-]{3,}[A-Za-z0-9])\b(?!\.\d)"
        ),
        replacement="<id>",
    ),
    VolatilePattern(
        name="request-id",
        regex=(
            r"(?i:\b(?:request|trace|correlation|span|ray)[ _-]?id\b)\s*[:#=]?\s*"
            r"(?P<value>(?=[\w-]*\d)[\w-]{4,})"
        ),
        replacement="<id>",
    ),
    VolatilePattern(
        name="date",
        regex=(
            # after a label, "3 hours ago" and "Nov 23, 2026" are one slot: sites switch forms
            rf"{_CONTEXT}(?P<value>{_AGO}|{_DATE}(?:,?\s+(?:at\s+|@\s*)?{_TIME}(?:\s+{_YEAR})?)?"
            rf"|{_TIME},?\s+(?:on\s+)?{_DATE})"
            rf"|{_AS_OF}(?P<value2>{_DATE},?\s+(?:at\s+|@\s*)?{_TIME}(?:\s+{_YEAR})?"
            rf"|{_TIME}(?:,?\s+(?:on\s+)?{_DATE})?|(?i:today|now))"
        ),
        replacement="<date>",
    ),
    VolatilePattern(name="time", regex=rf"{_CONTEXT}(?P<value>{_TIME})", replacement="<time>"),
    VolatilePattern(name="relative-time", regex=_AGO, replacement="<ago>"),
    VolatilePattern(
        # "expires in 5 minutes" is content; only live countdowns are volatile
        name="countdown",
        regex=(
            r"(?i:\b(?:refresh(?:es|ing)?|reload(?:s|ing)?|updates|updating|retrying|resets"
            r"|next\s+(?:update|refresh|run|sync|build)|starts|ends|closes)\s+in\s+)"
            rf"(?P<value>(?i:{_AGO_AMOUNT}\s+{_UNIT_WORDS}|\d+\s*[smhd]\b))"
        ),
        replacement="<ago>",
    ),
    VolatilePattern(
        name="render-time",
        regex=(
            r"(?i:\b(?:generated|rendered|served)\s+in\s+)"
            r"(?P<value>\d+(?:[.,]\d+)?\s*(?i:ms|\u00b5s|s|secs?|seconds?|milliseconds?))\b"
        ),
        replacement="<duration>",
    ),
    VolatilePattern(
        name="counter",
        regex=(
            rf"(?m:{_COUNT_LEFT})(?P<value>{_COUNT_NUM})\s+{_COUNT_WORD}{_COUNT_PROSE}"
            rf"|(?i:\b(?:{'|'.join(_COUNT_NOUNS)}|view|comment|like|download|star|fork)\b)"
            rf"\s*[:(|]\s*(?P<value2>{_COUNT_NUM})(?!\s*(?:[-\u2013]|to)\s*\d)"
        ),
        replacement="<count>",
    ),
    VolatilePattern(
        name="counter-times",
        regex=(
            r"(?i:\b(?:viewed|downloaded|visited|watched|played|starred|forked)\s+)"
            rf"(?P<value>{_COUNT_NUM})\s+times\b"
        ),
        replacement="<count>",
    ),
    VolatilePattern(
        name="counter-helpful",
        regex=(
            rf"(?P<value>{_COUNT_NUM}(?:\s+(?:of|out\s+of)\s+{_COUNT_NUM})?)\s+"
            r"(?i:people|users|readers|customers|members)\s+found\s+this\s+(?i:helpful|useful)"
        ),
        replacement="<count>",
    ),
    VolatilePattern(
        name="counter-icon",
        regex=rf"[{_COUNT_ICONS}]\ufe0f?\s*(?P<value>{_COUNT_NUM})",
        replacement="<count>",
    ),
    VolatilePattern(
        name="copyright-year",
        regex=(
            r"(?:\u00a9|\([cC]\)|(?i:\bcopyright\b))(?:\s*(?:\u00a9|\([cC]\)|(?i:copyright)))*\s*"
            r"(?P<value>(?:19|20)\d{2}(?:\s*(?:[-\u2013\u2014,]|to)\s*(?:19|20)\d{2})*)(?!\d)"
        ),
        replacement="<year>",
    ),
    VolatilePattern(
        # a Python repr's memory address ("<Foo object at 0x7f3a2c1b4d50>") moves every run
        name="object-address",
        regex=r"\bat\s+(?P<value>0x[0-9a-fA-F]{6,16})\b",
        replacement="<addr>",
    ),
)


_CONTEXT_HINTS = (
    "updat",
    "modified",
    "edited",
    "changed",
    "reviewed",
    "built",
    "generated",
    "published",
    "rendered",
    "as of",
)
_STEMS = (
    "view|comment|like|download|star|fork|read|reaction|repl|visit|vote|follower|watcher|subscriber|share"
)
_STEMS += "|click|answer"
_DIGIT = re.compile(r"\d")
_VALUE = re.compile(r"\d|today|yesterday|now|ago|moment")


def _label_then_value(lower: str) -> bool:
    """A "last updated"-style label with a date-like value right behind it (str.find, no scan)."""
    for label in _CONTEXT_HINTS:
        i = lower.find(label)
        while i >= 0:
            if _VALUE.search(lower, i, i + 80):
                return True
            i = lower.find(label, i + 1)
    return False


# What a default pattern cannot match without, tested on the lowercased text with single spaces:
# each group needs one of its words or regexes, or the pattern's regex is skipped. Keyed by regex,
# so that only the exact default regexes use them.
_HINTS: dict[str, tuple[tuple[Any, ...], ...]] = {
    p.regex: hints
    for p, hints in zip(
        DEFAULT_PATTERNS,
        [
            ((re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-"),),),
            ((re.compile(r"[0-9a-f]{16}"),),),
            ((re.compile(r"(?:commit|build|rev)[a-z]*[\s:#@]*[0-9a-f]*\d"),),),
            ((re.compile(r"build(?:[ _-]?(?:id|number|no)|\s*[:#])"),),),
            ((re.compile(r"build\s+#?\d"),),),
            ((re.compile(r"(?:request|trace|correlation|span|ray)[ _-]?id\b"),),),
            ((_label_then_value,),),
            (_CONTEXT_HINTS, (re.compile(r"\d:[0-5]\d"),)),
            (("ago", "just now", "yesterday"),),
            (
                tuple(
                    f"{w} in"
                    for w in (
                        *("refresh", "refreshes", "refreshing", "reload", "reloads", "reloading"),
                        *("updates", "updating", "retrying", "resets", "update", "run", "sync", "build"),
                        *("starts", "ends", "closes"),
                    )
                ),
            ),
            (("generated in", "rendered in", "served in"),),
            (
                (
                    re.compile(rf"\d[\d,.]*\s?[km]?\s+(?:{_STEMS})"),
                    re.compile(rf"(?:{_STEMS})[a-z]*\s*[:(|]\s*\d"),
                ),
            ),
            ((re.compile(r"(?:viewed|downloaded|visited|watched|played|starred|forked)\s+\d"),),),
            (("found this",),),
            (tuple(_COUNT_ICONS), (_DIGIT,)),
            (("\u00a9", "(c)", "copyright"), (re.compile(r"(?:19|20)\d\d"),)),
            ((re.compile(r"at 0x[0-9a-f]{6}"),),),
        ],
        strict=True,
    )
}


def _hint(h: str | re.Pattern[str] | Callable[[str], bool], lower: str) -> bool:
    if isinstance(h, str):
        return h in lower
    if isinstance(h, re.Pattern):
        return h.search(lower) is not None
    return h(lower)


def _holds(hints: tuple[tuple[str | re.Pattern[str] | Callable[[str], bool], ...], ...], lower: str) -> bool:
    return all(any(_hint(h, lower) for h in group) for group in hints)


@functools.cache
def _compile(regex: str) -> re.Pattern[str]:
    return re.compile(regex)


def _as_pattern(pattern: VolatilePattern | str) -> VolatilePattern:
    if isinstance(pattern, VolatilePattern):
        return pattern
    if isinstance(pattern, str):
        return VolatilePattern(name=pattern, regex=pattern, replacement="<volatile>")
    msg = f"RECRAWLER_VOLATILE_PATTERNS: expected a regex string, got {pattern!r}"
    raise ConfigurationError(msg)


class _Compiled:
    __slots__ = ("groups", "hints", "pattern", "regex", "replacement")

    def __init__(self, pattern: VolatilePattern) -> None:
        try:
            self.regex: re.Pattern[str] = _compile(pattern.regex)
        except re.error as exc:
            msg = f"RECRAWLER_VOLATILE_PATTERNS: bad regex {pattern.regex!r} ({pattern.name}): {exc}"
            raise ConfigurationError(msg) from exc
        if self.regex.fullmatch(""):
            msg = f"RECRAWLER_VOLATILE_PATTERNS: regex {pattern.regex!r} matches the empty string"
            raise ConfigurationError(msg)
        self.pattern = pattern
        self.replacement = pattern.replacement
        self.hints = _HINTS.get(pattern.regex, ())
        # ``value`` (and value2, value3...: a regex cannot name one group twice) mark the part replaced
        self.groups: tuple[str, ...] = tuple(
            g for g in sorted(self.regex.groupindex) if g == "value" or re.fullmatch(r"value\d+", g)
        )

    def span(self, m: re.Match[str]) -> tuple[int, int] | None:
        """The span to replace in *m*, or None when the match is to be left alone."""
        if not self.groups:
            start, end = m.span()
        else:
            for g in self.groups:
                start, end = m.span(g)
                if start >= 0:
                    break
            else:
                return None
        return (start, end) if end > start else None

    def sub(self, text: str) -> str:
        out: list[str] = []
        pos = 0
        for m in self.regex.finditer(text):
            span = self.span(m)
            if span is not None:
                out.append(text[pos : span[0]])
                out.append(self.replacement)
                pos = span[1]
        if not out:
            return text
        out.append(text[pos:])
        return "".join(out)


class Normalizer:
    """Replaces volatile tokens (dates in "last updated" lines, relative times, counters, ids)
    with placeholders, so that two renderings of the same page hash the same.

    Patterns apply in order, each to the output of the previous one. A plain string is a regex
    whose matches become ``<volatile>``; a bad regex raises :class:`ConfigurationError` naming
    ``RECRAWLER_VOLATILE_PATTERNS``.
    """

    def __init__(self, patterns: Iterable[VolatilePattern | str] = DEFAULT_PATTERNS) -> None:
        self.patterns: tuple[VolatilePattern, ...] = tuple(_as_pattern(p) for p in patterns)
        self._compiled: tuple[_Compiled, ...] = tuple(_Compiled(p) for p in self.patterns)

    def _applicable(self, text: str) -> list[_Compiled]:
        lower = " ".join(text.split()).lower()
        return [c for c in self._compiled if _holds(c.hints, lower)]

    def normalize(self, text: str) -> str:
        """Return *text* with every volatile token replaced by its placeholder."""
        for c in self._applicable(text):
            text = c.sub(text)
        return text

    def matches(self, text: str) -> list[tuple[str, str]]:
        """List (pattern name, matched text) for each token :meth:`normalize` would replace."""
        found: list[tuple[str, str]] = []
        for c in self._applicable(text):
            hit = False
            for m in c.regex.finditer(text):
                span = c.span(m)
                if span is not None:
                    found.append((c.pattern.name, text[span[0] : span[1]]))
                    hit = True
            if hit:
                text = c.sub(text)
        return found


# --- critical-token guard -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Fields:
    """What the guard compares: the text, its code (inline spans and blocks) and its headings."""

    text: str
    code: tuple[str, ...] = ()
    headings: tuple[str, ...] = ()


# A similar removed and added sentence are one modified sentence (difflib ratio).
PAIR_RATIO = 0.6
# Sentences listed per "sentence added/removed" reason kind before the rest is counted.
_MAX_LISTED = 5
_SHORT = 80

_FENCE = re.compile(r"^```[^\n]*\n(.*?)\n?^```[ \t]*$", re.MULTILINE | re.DOTALL)
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+)$")
_MARKER = re.compile(r"^(?:(?:[-*+>]|\d{1,3}[.)])[ \t]+)+")
_BLOCK_SEP = re.compile(r"\n[ \t]*\n")
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


def _clean(text: str) -> str:
    return " ".join(unicodedata.normalize("NFC", text).split())


def _clean_code(code: str) -> str:
    lines = [line.rstrip() for line in unicodedata.normalize("NFC", code).splitlines()]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


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
    """Split markdown-like text into sentence units, heading texts and code blocks."""
    code = [_clean_code(m.group(1)) for m in _FENCE.finditer(text)]
    body = _FENCE.sub("\n\n", text) if code else text
    units: list[_Unit] = []
    headings: list[str] = []
    n = 0
    for block in _BLOCK_SEP.split(body):
        for raw in block.splitlines():
            line = raw.strip()
            if not line:
                continue
            n += 1
            heading = _HEADING.match(line)
            if heading:
                headings.append(_clean(heading.group(1)))
                continue
            line = _clean(_MARKER.sub("", line))
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


def _ratio(a: str, b: str) -> float:
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


class _Alignment:
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
                r = _ratio(o, n)
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
    al = _Alignment(old_texts, new_texts)
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
    al = _Alignment(old, new)
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
    spans = [c for c in (_clean_code(s) for s in code) if c]
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
        [_clean(h) for h in old.headings] if old.headings else old_headings,
        [_clean(h) for h in new.headings] if new.headings else new_headings,
    )
    reasons += _code_reasons(_merge_code(old.code, old_blocks), _merge_code(new.code, new_blocks))
    reasons += _text_reasons(old_units, new_units)
    return list(dict.fromkeys(reasons))


__all__ = [
    "DEFAULT_PATTERNS",
    "PAIR_RATIO",
    "Fields",
    "Normalizer",
    "VolatilePattern",
    "critical_changes",
    "fields_from_text",
]
