"""Volatile-token normalisation (recrawler.detect.tokens)."""

from __future__ import annotations

import dataclasses

import pytest

from recrawler.detect.tokens import DEFAULT_PATTERNS, Normalizer, VolatilePattern
from recrawler.exceptions import ConfigurationError

NORMALIZER = Normalizer()


def norm(text: str) -> str:
    return NORMALIZER.normalize(text)


# --- volatile tokens: two renderings of the same page normalise to the same text ----------------


LAST_UPDATED_DATES = [
    "2026-11-30",
    "2026-11-30T10:35:42Z",
    "2026-11-30T10:35:42+00:00",
    "2026-11-30 10:35:42 UTC",
    "30 Nov 2026",
    "30 November 2026, 10:35",
    "November 30, 2026",
    "Nov 30, 2026",
    "Nov 30, 2026, 10:35 AM",
    "Mon, 30 Nov 2026 10:35:42 GMT",
    "30/11/2026",
    "11/30/2026 10:35",
    "2026/11/30",
    "30.11.2026",
]


@pytest.mark.parametrize("date", LAST_UPDATED_DATES)
def test_last_updated_date_in_every_format(date: str) -> None:
    text = f"Install the client first.\n\nLast updated: {date}\n\nSee also: retries."
    assert norm(text) == "Install the client first.\n\nLast updated: <date>\n\nSee also: retries."


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("Last updated on Nov 29, 2026", "Last updated on Nov 30, 2026"),
        ("Last updated by Alice on 2026-11-29", "Last updated by Alice on 2026-11-30"),
        (
            "This page was last modified on 29 November 2026, at 09:12.",
            "This page was last modified on 30 November 2026, at 10:35.",
        ),
        ("Last update: November 29, 2026", "Last update: November 30, 2026"),
        (
            "Generated on Sun Nov 29 2026 09:12:01 for Client by doxygen 1.9.8",
            "Generated on Mon Nov 30 2026 10:35:42 for Client by doxygen 1.9.8",
        ),
        ("Published 2026-11-29", "Published 2026-11-30"),
        ("Built 2026-11-29T09:12:01Z", "Built 2026-11-30T10:35:42Z"),
        ("Rendered: 29/11/2026 09:12", "Rendered: 30/11/2026 10:35"),
        ("Updated: yesterday", "Updated: today"),
        ("Updated 3 days ago", "Updated Nov 23, 2026"),
        ("Last edited: just now", "Last edited: 2 minutes ago"),
        ("| Last updated | 2026-11-29 |", "| Last updated | 2026-11-30 |"),
        ("Generated at 09:12", "Generated at 10:35:42"),
        ("Prices as of 29 Nov 2026 09:12 UTC.", "Prices as of 30 Nov 2026 10:35 UTC."),
    ],
)
def test_dates_and_times_in_volatile_contexts(before: str, after: str) -> None:
    assert before != after
    assert norm(before) == norm(after)
    assert "<date>" in norm(after) or "<time>" in norm(after)


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("Posted 3 hours ago", "Posted 5 minutes ago"),
        ("Answered a minute ago", "Answered 2 days ago"),
        ("Edited just now", "Edited yesterday"),
        ("Seen an hour ago by 3 people", "Seen 4 hours ago by 3 people"),
        ("Last sync: 3h ago", "Last sync: 12m ago"),
        ("Refreshes in 5 minutes", "Refreshes in 1 minute"),
        ("Page generated in 0.23 seconds", "Page generated in 1.7 seconds"),
    ],
)
def test_relative_times(before: str, after: str) -> None:
    assert norm(before) == norm(after)
    assert norm(after) != after


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("1,234 views", "1,240 views"),
        ("Views: 1234", "Views: 1301"),
        ("12 comments", "13 comments"),
        ("Posted 3 hours ago · 1,234 views · 12 comments", "Posted 4 hours ago · 1,301 views · 15 comments"),
        ("★ 1.2k · 👁 345", "★ 1.3k · 👁 350"),
        ("Viewed 12k times", "Viewed 13k times"),
        ("12 of 15 people found this helpful", "13 of 17 people found this helpful"),
        ("1,234 people found this helpful", "1,301 people found this helpful"),
        ("Comments (12)", "Comments (13)"),
    ],
)
def test_counters(before: str, after: str) -> None:
    assert norm(before) == norm(after)
    assert "<count>" in norm(after)


@pytest.mark.parametrize(
    ("before", "after", "placeholder"),
    [
        (
            "Request ID: 7f3c2a9e-1b4d-4c8e-9f0a-3d2b1c4e5f60",
            "Request ID: 0b1e2d3c-4a5b-6c7d-8e9f-a0b1c2d3e4f5",
            "<uuid>",
        ),
        (
            "Your session 123e4567-e89b-12d3-a456-426614174000 expired.",
            "Your session 9f8e7d6c-5b4a-3210-fedc-ba9876543210 expired.",
            "<uuid>",
        ),
        ("asset main.3f5a9c1b2d4e6f70.js", "asset main.0a1b2c3d4e5f6789.js", "<hexid>"),
        ("Build 4f3c2a1 from commit 9ab12cd", "Build 77aa3e0 from commit 1f2e3d4", "<hexid>"),
        ("Docs rev a1b2c3d4e5", "Docs rev 0f9e8d7c6b", "<hexid>"),
        ("Build #1234", "Build #1240", "<id>"),
        ("Build: 20261129.3", "Build: 20261130.1", "<id>"),
        ("Trace ID: abc123def456", "Trace ID: 99ff00aa11bb", "<id>"),
        ("request id=req_8f3c2a1b", "request id=req_1a2b3c4d", "<id>"),
        ("<Client object at 0x7f3a2c1b4d50>", "<Client object at 0x7f0011223344>", "<addr>"),
    ],
)
def test_ids(before: str, after: str, placeholder: str) -> None:
    assert norm(before) == norm(after)
    assert placeholder in norm(after)


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("© 2025 Acme Inc.", "© 2026 Acme Inc."),
        ("Copyright 2012-2025 The Client developers", "Copyright 2012-2026 The Client developers"),
        ("© Copyright 2025, Client Project.", "© Copyright 2026, Client Project."),
        ("(c) 2025 Acme", "(c) 2026 Acme"),
    ],
)
def test_copyright_year(before: str, after: str) -> None:
    assert norm(before) == norm(after)
    assert "<year>" in norm(after)


# --- content stays as it is -----------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        # dates a reader sees as content: a release date, a changelog entry, history
        "Released on 2025-10-18.",
        "## 1.10.0 (2025-10-18)",
        "Meson 1.9.0 was released on 24 August 2025.",
        "Updated in version 1.10.0 (2025-10-18): retries are configurable.",
        "The library was tested on a phone (updated on September 9th 2013).",
        "As of September 2021, there are 3 projects attempting this.",
        "Support ends on 30 November 2026.",
        # times that are not stamps
        "The job runs at 10:00 every day.",
        "Maintenance window: 02:00-04:00 UTC.",
        # version numbers
        "Requires Python 3.11 or later; tested with 1.10.0 and v2.",
        "Build 1.10.0 adds retries.",
        "Meson build 1.10.0 is out.",
        # prices, percentages and numbers with units
        "The Pro plan costs $19 a month, 20% off yearly.",
        "Timeouts are 30 s, uploads up to 512 MB, with 3 retries.",
        "Tokens expire in 5 minutes.",
        "The API returns up to 100 comments per page.",
        "Keep at most 3 downloads in parallel.",
        "Run the build 1000 times.",
        "New in 0.53.0 Like the compiler, the linker is configurable.",
        # short hex-looking words, and hex that is content
        "A cafe with deadbeef and c0ffee on the menu.",
        "Set the magic to 0xDEADBEEF.",
        "commit deadbeef is the last one.",
        "sha256: 3f5a9c1b2d4e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8",
        "source_hash = 5ebeea0dfb75d090ea0e7ff84799b2a7a1550db3fe61eb5f6f61c2e971e57663",
        "PGP key: 19E2D6D9B46D8DAA6288F877C24E631BABB1FE70",
        # code identifiers
        "Call os.path.join() with max_retries=3 and --max-retries 5 or -v.",
        "Build options",
        "Build DEP-11 metadata.",
    ],
)
def test_content_is_not_touched(text: str) -> None:
    assert norm(text) == text
    assert NORMALIZER.matches(text) == []


def test_normalize_is_idempotent() -> None:
    text = (
        "Last updated: 2026-11-30 10:35 · 1,234 views · Posted 3 hours ago\n\n"
        "Request ID: 7f3c2a9e-1b4d-4c8e-9f0a-3d2b1c4e5f60, build 4f3c2a1, © 2026 Acme"
    )
    once = norm(text)
    assert norm(once) == once
    assert "2026" not in once
    assert "1,234" not in once


def test_matches_names_what_is_ignored() -> None:
    text = "Last updated: 2026-11-30 · 1,234 views\n\nReleased on 2025-10-18."
    assert NORMALIZER.matches(text) == [("date", "2026-11-30"), ("counter", "1,234")]


def test_a_date_split_from_its_label_by_a_blank_line() -> None:
    # <dt>Last updated</dt><dd>...</dd> renders as two blocks
    assert norm("Last updated:\n\n30 Nov 2026") == "Last updated:\n\n<date>"


# --- configuration ------------------------------------------------------------------------------


def test_default_patterns() -> None:
    assert isinstance(DEFAULT_PATTERNS, tuple)
    assert all(isinstance(p, VolatilePattern) for p in DEFAULT_PATTERNS)
    names = [p.name for p in DEFAULT_PATTERNS]
    assert len(names) == len(set(names))
    assert Normalizer().patterns == DEFAULT_PATTERNS
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT_PATTERNS[0].regex = "x"  # type: ignore[misc]


def test_plain_string_pattern_becomes_volatile() -> None:
    n = Normalizer([r"session=\w+"])
    assert n.normalize("id session=abc123 end") == "id <volatile> end"
    assert n.patterns[0].name == r"session=\w+"
    assert n.matches("session=abc123") == [(r"session=\w+", "session=abc123")]
    # only the listed patterns apply
    assert n.normalize("Last updated: 2026-11-30") == "Last updated: 2026-11-30"


def test_extra_patterns_after_the_defaults() -> None:
    n = Normalizer([*DEFAULT_PATTERNS, r"Served by node-\d+"])
    assert n.normalize("Last updated: 2026-11-30. Served by node-7") == "Last updated: <date>. <volatile>"


def test_value_group_replaces_only_the_value() -> None:
    pattern = VolatilePattern(name="visitors", regex=r"Visitors today: (?P<value>\d+)", replacement="<n>")
    assert Normalizer([pattern]).normalize("Visitors today: 42!") == "Visitors today: <n>!"
    # a match in which ``value`` takes no part is left alone
    guarded = VolatilePattern(name="g", regex=r"keep \d+|(?P<value>\d+)", replacement="<n>")
    assert Normalizer([guarded]).normalize("keep 1 and 2") == "keep 1 and <n>"


def test_replacement_is_literal() -> None:
    pattern = VolatilePattern(name="p", regex=r"\d+", replacement=r"\1 <n>")
    assert Normalizer([pattern]).normalize("a 12 b") == r"a \1 <n> b"


@pytest.mark.parametrize("bad", ["(unclosed", "[a-", "*"])
def test_bad_regex_is_a_configuration_error(bad: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        Normalizer([bad])
    assert "RECRAWLER_VOLATILE_PATTERNS" in str(info.value)
    assert repr(bad) in str(info.value)


def test_regex_matching_empty_string_is_rejected() -> None:
    with pytest.raises(ConfigurationError, match=r"RECRAWLER_VOLATILE_PATTERNS.*empty string"):
        Normalizer([r"\d*"])


def test_no_patterns_no_change() -> None:
    text = "Last updated: 2026-11-30 · 1,234 views"
    assert Normalizer([]).normalize(text) == text


# --- where a pattern is tried ---------------------------------------------------------------


def _examples() -> list[str]:
    """Every string in this module: the volatile and the content examples above."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


_FRAGMENTS = [
    *("Last updated", "LAST UPDATED", "Last-Modified", "Updated", "UPDATED", "updated", "Updated:"),
    *("modified:", "Edited", "generated", "Generated in", "rendered in", "served in", "Built", "built:"),
    *("Published", "published on", "As of", "as of", "AS OF:", "data as of", "was", "has", "class"),
    *(" 2026-11-30", " 30 Nov 2026", " Nov 30, 2026", " 10:35", " 10:35:07 UTC", " 3 hours ago", " today"),
    *(" 11/30/2026", " 2026/11/30", " Sunday, 30 November 2026 at 10:35", " yesterday at 9:00 am"),
    *("Build #", "Build ID:", "build-number ", "Build 1.10.0", " 4711", " a1b2c3d4", " 20261130.1"),
    *("request-id: ", "Trace ID ", "span_id=", "ray id ", "abc-123-def", "Refreshes in ", "next update in "),
    *(" 5 minutes", " 30s", "starts in ", "ends in 2 days", "closes in", "reloading in 10 s"),
    *("1,234 views", "12 comments", " 1.2k likes", "Views: 12", "stars (42)", "forks | 7", "3 replies"),
    *("start", "starting", "likely", "overview", "viewed 12 times", "downloaded 3,000 times", "42"),
    *("12,3456", "1234,567", "0.53.0", "v2", "10.0.0.1", "x86_64", "3.11", "1e10", "١٢٣ views"),
    *("\u0131", "\u017f", "\u212a", "\u0130", "\u017ftarts in 5 min", "for\u212a 3"),
    *("LA\u017fT UPDATED: 2026-11-30", "Last upd\u0130ted: 2026-11-30", "publi\u017fhed: today"),
    *(" ", "  ", "\n", "\n\n", "\t", ": ", " | ", " \u00b7 ", ", ", ". ", "(", ")", "- ", "— ", "> ", "/"),
]


def test_a_pattern_tried_where_its_matches_can_start_finds_what_finditer_finds() -> None:
    """The default patterns are tried only at the words (or numbers) their matches begin with:
    on real docs pages that cut the token pass from about a quarter of a worker's time. The
    matches must be exactly those of trying everywhere, whatever the case, the spacing or the
    characters whose lower case is longer (which fall back to trying everywhere)."""
    import random

    from tests import docsite

    rnd = random.Random(20261202)
    texts = _examples()
    texts += ["".join(rnd.choice(_FRAGMENTS) for _ in range(rnd.randint(1, 24))) for _ in range(4000)]
    texts.append(
        docsite.page(
            "Guide",
            [("Overview", ["Last updated: 2026-11-30 10:35", "1,234 views · 12 comments"], "build 42")],
        )
    )
    anchored = [c for c in NORMALIZER._compiled if c.anchors is not None]
    assert {c.pattern.name for c in anchored} >= {"date", "time", "counter", "countdown", "render-time"}
    found = 0
    for text in texts:
        for c in anchored:
            everywhere = [(m.start(), m.end()) for m in c.regex.finditer(text)]
            assert [(m.start(), m.end()) for m in c.finditer(text)] == everywhere, (c.pattern.name, text)
            found += len(everywhere)
    assert found > 2000  # the fuzz does reach the patterns
