"""Volatile tokens: the patterns (dates, counters, ids) and the Normalizer that replaces them."""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any

from recrawler.detect.patterns import (
    _COUNT_ICONS,
    _COUNT_LABELS,
    _COUNT_NOUNS,
    _LABELS,
    _TIMES_VERBS,
    DEFAULT_PATTERNS,
    VolatilePattern,
)
from recrawler.exceptions import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator


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
# hex digits become "x", "-" stays, anything else is a space: a run of hex digits is then a plain
# substring search (str.translate and ``in`` run in C; a leading character class makes re slow)
_HEX_SHAPE = dict.fromkeys(range(128), " ") | {ord(c): "x" for c in "0123456789abcdef"} | {ord("-"): "-"}


class _Shape:
    """``[0-9a-f]{8}-[0-9a-f]{4}-``-style hints as substrings of the text's hex shape (exact)."""

    __slots__ = ("needle",)

    def __init__(self, needle: str) -> None:
        self.needle = needle

    def __call__(self, lower: str) -> bool:
        # non-ASCII characters are never hex digits: they map to themselves, never to "x"
        return self.needle in lower.translate(_HEX_SHAPE)


class _Guarded:
    """A regex hint behind literals its every match contains: the regex runs only if one occurs."""

    __slots__ = ("literals", "regex")

    def __init__(self, literals: tuple[str, ...], regex: str) -> None:
        self.literals = literals
        self.regex = re.compile(regex)

    def __call__(self, lower: str) -> bool:
        return any(lit in lower for lit in self.literals) and self.regex.search(lower) is not None


class _Starts:
    """``(?:a|b|c)rest`` as one regex per word that occurs (``arest``, ...): a literal prefix lets
    re skip ahead with a fast search, which an alternation of words does not."""

    __slots__ = ("alternatives",)

    def __init__(self, words: tuple[str, ...], rest: str) -> None:
        self.alternatives = tuple((w, re.compile(re.escape(w) + rest)) for w in words)

    def __call__(self, lower: str) -> bool:
        return any(w in lower and r.search(lower) is not None for w, r in self.alternatives)


_COUNT_STEMS = tuple(_STEMS.split("|"))
# digits 0-5 become "a", 6-9 "b", ":" stays: ``\d:[0-5]\d`` is then one of four substrings
_CLOCK_SHAPE = dict.fromkeys(range(128), " ") | dict.fromkeys(map(ord, "012345"), "a")
_CLOCK_SHAPE |= dict.fromkeys(map(ord, "6789"), "b") | {ord(":"): ":"}
_CLOCK = re.compile(r"\d:[0-5]\d")


def _clock(lower: str) -> bool:
    """Whether a clock time (a digit, a colon, two digits) occurs: substring search on ASCII text."""
    if ":" not in lower:
        return False
    if not lower.isascii():
        # \d also matches other scripts' digits
        return _CLOCK.search(lower) is not None
    shape = lower.translate(_CLOCK_SHAPE)
    return any(n in shape for n in ("a:aa", "a:ab", "b:aa", "b:ab"))


_HINTS: dict[str, tuple[tuple[Any, ...], ...]] = {
    p.regex: hints
    for p, hints in zip(
        DEFAULT_PATTERNS,
        [
            ((_Shape("xxxxxxxx-xxxx-"),),),
            ((_Shape("x" * 16),),),
            ((_Starts(("commit", "build", "rev"), r"[a-z]*[\s:#@]*[0-9a-f]*\d"),),),
            ((_Starts(("build",), r"(?:[ _-]?(?:id|number|no)|\s*[:#])"),),),
            ((_Starts(("build",), r"\s+#?\d"),),),
            ((_Starts(("request", "trace", "correlation", "span", "ray"), r"[ _-]?id\b"),),),
            ((_label_then_value,),),
            (_CONTEXT_HINTS, (_clock,)),
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
                    _Guarded(_COUNT_STEMS, rf"\d[\d,.]*\s?[km]?\s+(?:{_STEMS})"),
                    _Starts(_COUNT_STEMS, r"[a-z]*\s*[:(|]\s*\d"),
                ),
            ),
            (
                (
                    _Starts(
                        ("viewed", "downloaded", "visited", "watched", "played", "starred", "forked"),
                        r"\s+\d",
                    ),
                ),
            ),
            (("found this",),),
            (tuple(_COUNT_ICONS), (_DIGIT,)),
            (("\u00a9", "(c)", "copyright"), (re.compile(r"(?:19|20)\d\d"),)),
            ((_Starts(("at 0x",), r"[0-9a-f]{6}"),),),
        ],
        strict=True,
    )
}


# Where a default pattern's matches can start: each match begins with one of its words (any case)
# or where one of its regexes finds a start, in the case-folded text. The regex is then tried
# only there (``match`` at each start, as ``finditer`` would find them) instead of at every
# character: most of the text is never looked at. Keyed by regex, like the hints.
_LABEL_WORDS = ("last", *_LABELS.split("|"))
_AS_OF_START = re.compile(r"as\s+of")
#: a number's first digit (a counter after a separator, a line start or a counter word never
#: starts inside a number)
_NUMBER_START = re.compile(r"(?<!\d)\d")
_COUNTDOWN_WORDS = (
    *("refresh", "reload", "updates", "updating", "retrying", "resets", "next"),
    *("starts", "ends", "closes"),
)
_ANCHORS: dict[str, tuple[tuple[str, ...], tuple[re.Pattern[str], ...]]] = {
    p.regex: anchors
    for p, anchors in zip(
        DEFAULT_PATTERNS,
        [
            None,  # uuid: its hint reads the hex shape already
            None,  # hex-id
            None,  # revision
            (("build",), ()),  # build-id
            (("build",), ()),  # build-number
            (("request", "trace", "correlation", "span", "ray"), ()),  # request-id
            (_LABEL_WORDS, (_AS_OF_START,)),  # date
            (_LABEL_WORDS, ()),  # time
            None,  # relative-time: "a", "an", any number can begin it
            (_COUNTDOWN_WORDS, ()),  # countdown
            (("generated", "rendered", "served"), ()),  # render-time
            ((*_COUNT_NOUNS, *_COUNT_LABELS), (_NUMBER_START,)),  # counter
            (_TIMES_VERBS, ()),  # counter-times
            None,  # counter-helpful: it may begin inside a number
            None,  # counter-icon
            None,  # copyright-year
            None,  # object-address
        ],
        strict=True,
    )
    if anchors is not None
}
# re's IGNORECASE also matches these to ASCII letters; lower() keeps them as they are
_FOLD = {0x131: "i", 0x17F: "s"}


def fold(text: str) -> str:
    """*text* in lower case, with the letters re's IGNORECASE also takes for ASCII ones folded to
    them: where the patterns' start words are looked for."""
    return text.lower().translate(_FOLD)


def _starts(folded: str, words: tuple[str, ...], regexes: tuple[re.Pattern[str], ...]) -> list[int]:
    """Every position of *folded* where one of *words* begins or one of *regexes* matches."""
    found: set[int] = set()
    for word in words:
        i = folded.find(word)
        while i >= 0:
            found.add(i)
            i = folded.find(word, i + 1)
    for regex in regexes:
        found.update(m.start() for m in regex.finditer(folded))
    return sorted(found)


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
    __slots__ = ("anchors", "groups", "hints", "pattern", "regex", "replacement")

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
        self.anchors = _ANCHORS.get(pattern.regex)
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

    def finditer(self, text: str, folded: str | None = None) -> Iterator[re.Match[str]]:
        """The matches ``regex.finditer(text)`` gives; for a default pattern, the regex is tried
        only where a match can start (it never matches the empty string, so each match found at
        the first such start at or after the last match's end is the one ``finditer`` finds).
        *folded* is :func:`fold` of *text*, when the caller has it."""
        if self.anchors is not None and folded is None:
            folded = fold(text)
        if self.anchors is None or folded is None or len(folded) != len(text):
            # a character whose lower case is longer ("İ") shifts positions: look everywhere
            yield from self.regex.finditer(text)
            return
        end = 0
        for start in _starts(folded, *self.anchors):
            if start < end:
                continue
            m = self.regex.match(text, start)
            if m is not None:
                end = m.end()
                yield m

    def sub(self, text: str, folded: str | None = None) -> str:
        out: list[str] = []
        pos = 0
        for m in self.finditer(text, folded):
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

    def __reduce__(self) -> tuple[Any, ...]:
        # rebuilt from its patterns where it is unpickled (a CPU worker process)
        return (Normalizer, (self.patterns,))

    def _applicable(self, text: str) -> list[_Compiled]:
        lower = " ".join(text.split()).lower()
        return [c for c in self._compiled if _holds(c.hints, lower)]

    def normalize(self, text: str) -> str:
        """Return *text* with every volatile token replaced by its placeholder."""
        folded: str | None = None  # of the text as it is now, for the patterns' starts
        for c in self._applicable(text):
            if c.anchors is not None and folded is None:
                folded = fold(text)
            replaced = c.sub(text, folded)
            if replaced is not text:
                text, folded = replaced, None
        return text

    def matches(self, text: str) -> list[tuple[str, str]]:
        """List (pattern name, matched text) for each token :meth:`normalize` would replace."""
        found: list[tuple[str, str]] = []
        for c in self._applicable(text):
            hit = False
            for m in c.finditer(text):
                span = c.span(m)
                if span is not None:
                    found.append((c.pattern.name, text[span[0] : span[1]]))
                    hit = True
            if hit:
                text = c.sub(text)
        return found


__all__ = ["DEFAULT_PATTERNS", "Normalizer", "VolatilePattern"]
