"""Volatile tokens, the catalogue: dates, times, counters, build and request ids, and the words
that make a number volatile (the Normalizer in :mod:`recrawler.detect.tokens` replaces them)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_PATTERNS", "VolatilePattern"]


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
# a counter's label before its number ("Views: 12", "stars (42)"), besides the plural nouns
_COUNT_LABELS = ("view", "comment", "like", "download", "star", "fork")
# "viewed 12 times"
_TIMES_VERBS = ("viewed", "downloaded", "visited", "watched", "played", "starred", "forked")
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
            rf"|(?i:\b(?:{'|'.join((*_COUNT_NOUNS, *_COUNT_LABELS))})\b)"
            rf"\s*[:(|]\s*(?P<value2>{_COUNT_NUM})(?!\s*(?:[-\u2013]|to)\s*\d)"
        ),
        replacement="<count>",
    ),
    VolatilePattern(
        name="counter-times",
        regex=(
            rf"(?i:\b(?:{'|'.join(_TIMES_VERBS)})\s+)"
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
