"""Volatile-token normalisation and the critical-token guard (recrawler.noise)."""

from __future__ import annotations

import dataclasses

import pytest

from recrawler.exceptions import ConfigurationError
from recrawler.noise import (
    DEFAULT_PATTERNS,
    Fields,
    Normalizer,
    VolatilePattern,
    critical_changes,
    fields_from_text,
)

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


# --- critical-token guard -------------------------------------------------------------------------

PAGE = """# Uploading files

The client uploads files in parts of 8 MB. Each part is retried 3 times before the upload fails.

## Retries

Retries use exponential backoff, starting at 500 ms and doubling each time. Set max_retries to change \
the number of attempts, or pass --max-retries on the command line. The upload is not resumable: \
a failed upload starts again from the first part.

You should call client.close() when you are done. Uploads larger than 5 GB are not supported.

1. Create a client with Client(api_key).
2. Call client.upload(path).
3. Check the returned UploadResult.

| Option | Default | Meaning |
| max_retries | 3 | attempts per part |
| part_size | 8 MB | size of one part |
| timeout | 30 s | per request |

```
client = Client(api_key, max_retries=3)
result = client.upload("backup.tar")
print(result.etag)
```

## Limits

The Free plan allows 10 uploads per day; the Pro plan costs $19.99 a month and has no daily limit. \
Deprecated: the upload_file() helper will be removed in 2.0.

Uploads from Linux and macOS are supported. Contact support if you recieve an error that is not \
listed here.
"""
PAGE_CODE = ("max_retries", "--max-retries", "client.close()", "Client(api_key)", "client.upload(path)")


def fields(text: str, code: tuple[str, ...] = PAGE_CODE) -> Fields:
    return fields_from_text(text, code)


def edit(old: str, new: str, text: str = PAGE) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def test_page_is_realistic() -> None:
    assert 1000 < len(PAGE) < 2500
    assert critical_changes(fields(PAGE), fields(PAGE)) == []


def test_fields_from_text() -> None:
    f = fields_from_text(PAGE, ["max_retries"])
    assert f.text == PAGE
    assert f.headings == ("Uploading files", "Retries", "Limits")
    assert f.code == (
        "max_retries",
        'client = Client(api_key, max_retries=3)\nresult = client.upload("backup.tar")\nprint(result.etag)',
    )
    # a block that extraction already listed (as <pre> text) is not added twice
    block = (
        'client = Client(api_key, max_retries=3)  \nresult = client.upload("backup.tar")\nprint(result.etag)'
    )
    block = f"\n{block}\n\n"
    assert len(fields_from_text(PAGE, [block]).code) == 1


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        # numbers with their units
        ("retried 3 times", "retried 5 times", "number: '3 times' -> '5 times'"),
        ("starting at 500 ms", "starting at 500 s", "number: '500 ms' -> '500 s'"),
        ("parts of 8 MB", "parts of 8 GB", "number: '8 MB' -> '8 GB'"),
        ("costs $19.99 a month", "costs $29.99 a month", "number: '$19.99' -> '$29.99'"),
        ("| timeout | 30 s |", "| timeout | 60 s |", "number: '30 s' -> '60 s'"),
        ("removed in 2.0", "removed in 3.0", "number: '2.0' -> '3.0'"),
        ("allows 10 uploads", "allows ten uploads", "number: '10 uploads' -> 'ten'"),
        # negations and modal words
        ("The upload is not resumable", "The upload is resumable", "negation: -not"),
        (
            "Uploads from Linux and macOS are supported",
            "Uploads from Linux and macOS are not supported",
            "negation: +not",
        ),
        ("that is not listed", "that is no longer listed", "negation: -not +'no longer'"),
        ("You should call", "You must call", "modal: -should +must"),
        ("are supported. Contact", "are deprecated. Contact", "modal: -supported +deprecated"),
        # identifiers
        ("Set max_retries to change", "Set retry_limit to change", "identifier: -max_retries +retry_limit"),
        ("pass --max-retries on", "pass --retries on", "identifier: -'--max-retries' +'--retries'"),
        (
            "call client.close() when",
            "call client.shutdown() when",
            "identifier: -client.close() +client.shutdown()",
        ),
        ("returned UploadResult.", "returned UploadResponse.", "identifier: -UploadResult +UploadResponse"),
        ("the upload_file() helper", "the upload() helper", "identifier: -upload_file() +upload()"),
        ("Set max_retries to change", "Set maxRetries to change", "identifier: -max_retries +maxRetries"),
        (
            "call client.close() when",
            "call os.path.join() when",
            "identifier: -client.close() +os.path.join()",
        ),
        ("on the command line.", "on the command line, or -v.", "identifier: +'-v'"),
        ("Set max_retries to", "Set MAX_RETRIES to", "identifier: -max_retries +MAX_RETRIES"),
        # proper names
        ("from Linux and macOS", "from Linux, macOS and Windows", "name: +Windows"),
    ],
)
def test_critical_edit_in_a_sentence(old: str, new: str, expected: str) -> None:
    reasons = critical_changes(fields(PAGE), fields(edit(old, new)))
    assert expected in reasons or any(r.startswith(expected) for r in reasons), reasons


def test_code_span_change() -> None:
    new_code = tuple(c.replace("client.close()", "client.aclose()") for c in PAGE_CODE)
    new_text = edit("call client.close() when", "call client.aclose() when")
    reasons = critical_changes(fields(PAGE), fields(new_text, new_code))
    assert "code: 'client.close()' -> 'client.aclose()'" in reasons


def test_code_block_change() -> None:
    reasons = critical_changes(fields(PAGE), fields(edit("print(result.etag)", "print(result.md5)")))
    assert reasons == ["code: -'print(result.etag)' +'print(result.md5)'"]


def test_code_block_indentation_is_a_change() -> None:
    reasons = critical_changes(fields(PAGE), fields(edit("print(result.etag)", "    print(result.etag)")))
    assert len(reasons) == 1
    assert reasons[0].startswith("code:")


def test_code_blocks_are_compared_when_fields_are_built_by_hand() -> None:
    old = Fields(text="Run:\n\n```\nmake -j4\n```")
    new = Fields(text="Run:\n\n```\nmake -j8\n```")
    assert critical_changes(old, new) == ["code: 'make -j4' -> 'make -j8'"]


def test_appended_sentence() -> None:
    new = edit("from the first part.", "from the first part. Uploads are now resumable.")
    reasons = critical_changes(fields(PAGE), fields(new))
    assert "sentence added: 'Uploads are now resumable.'" in reasons


def test_appended_paragraph() -> None:
    reasons = critical_changes(fields(PAGE), fields(PAGE + "\nUploads are now resumable.\n"))
    assert reasons == ["sentence added: 'Uploads are now resumable.'"]


def test_removed_sentence() -> None:
    new = edit(" Uploads larger than 5 GB are not supported.", "")
    reasons = critical_changes(fields(PAGE), fields(new))
    assert reasons == ["sentence removed: 'Uploads larger than 5 GB are not supported.'"]


def test_removed_section() -> None:
    start = PAGE.index("## Limits")
    new = PAGE[:start].rstrip() + "\n"
    reasons = critical_changes(fields(PAGE), fields(new))
    assert "heading: -'Limits'" in reasons
    assert any(r.startswith("sentence removed: 'The Free plan allows 10 uploads per day") for r in reasons)
    assert any(r.startswith("sentence removed: 'Uploads from Linux and macOS") for r in reasons)


def test_heading_change() -> None:
    reasons = critical_changes(fields(PAGE), fields(edit("## Retries", "## Retry policy")))
    assert reasons == ["heading: -'Retries'", "heading: +'Retry policy'"]


def test_headings_from_fields_take_precedence() -> None:
    old = Fields(text="Some text.", headings=("Intro", "Usage"))
    new = Fields(text="Some text.", headings=("Usage", "Intro"))
    assert critical_changes(old, new) == ["heading: order changed"]


def test_table_row_change() -> None:
    reasons = critical_changes(fields(PAGE), fields(edit("| part_size | 8 MB |", "| part_size | 16 MB |")))
    assert reasons == ["number: '8 MB' -> '16 MB'"]


def test_steps_reordered() -> None:
    new = edit(
        "2. Call client.upload(path).\n3. Check the returned UploadResult.",
        "2. Check the returned UploadResult.\n3. Call client.upload(path).",
    )
    reasons = critical_changes(fields(PAGE), fields(new))
    assert len(reasons) == 1
    assert reasons[0].startswith("order: moved")


def test_list_item_inserted_does_not_renumber_the_rest() -> None:
    new = edit("2. Call client.upload(path).", "2. Open the file.\n3. Call client.upload(path).")
    new = new.replace("3. Check the returned", "4. Check the returned")
    assert critical_changes(fields(PAGE), fields(new)) == ["sentence added: 'Open the file.'"]


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # typo fixes and grammar
        ("if you recieve an error", "if you receive an error"),
        ("The Free plan allows", "The Free plan allow"),
        ("Each part is retried", "Every part is retried"),
        # whitespace
        ("uploads files in parts", "uploads  files   in parts"),
        # punctuation only
        ("per day; the Pro plan", "per day, the Pro plan"),
        ("when you are done.", "when you are done!"),
        ("The upload is not resumable:", "The upload is not resumable;"),
        # a sentence split in two, or the same negation spelled differently
        ("not resumable: a failed upload", "not resumable. A failed upload"),
        ("are not supported.", "aren\u2019t supported."),
        ("that is not listed", "that isn't listed"),
        # the same quantity spelled another way
        ("starting at 500 ms", "starting at 500 milliseconds"),
        ("parts of 8 MB", "parts of 8MB"),
        ("| timeout | 30 s |", "| timeout | 30 seconds |"),
    ],
)
def test_non_critical_edit(old: str, new: str) -> None:
    assert critical_changes(fields(PAGE), fields(edit(old, new))) == []


def test_has_have() -> None:
    old = Fields(text="Both clients has the same options. Use either one.")
    new = Fields(text="Both clients have the same options. Use either one.")
    assert critical_changes(old, new) == []


def test_one_critical_edit_in_a_realistic_page() -> None:
    # several harmless edits around one that changes what a reader must do
    new = edit("if you recieve an error", "if you receive an error")
    new = edit("The Free plan allows", "The free plan allows", new)
    new = edit("You should call client.close()", "You must call client.close()", new)
    reasons = critical_changes(fields(PAGE), fields(new))
    assert reasons == ["modal: -should +must"]


def test_volatile_tokens_do_not_trip_the_guard_once_normalised() -> None:
    old = PAGE + "\nLast updated: 2026-11-29 · 1,234 views\n"
    new = edit("if you recieve", "if you receive", PAGE) + "\nLast updated: 2026-11-30 · 1,301 views\n"
    assert critical_changes(fields(old), fields(new))  # raw: the date and the counter moved
    assert critical_changes(fields(norm(old)), fields(norm(new))) == []


def test_reasons_are_capped() -> None:
    old = Fields(text="Intro.")
    new = Fields(text="Intro.\n\n" + "\n\n".join(f"New sentence number {i}." for i in range(20)))
    reasons = critical_changes(old, new)
    assert len(reasons) == 6
    assert reasons[-1] == "sentence added: 15 more"


def test_empty_texts() -> None:
    assert critical_changes(Fields(text=""), Fields(text="")) == []
    assert critical_changes(Fields(text=""), Fields(text="Hello there.")) == [
        "sentence added: 'Hello there.'"
    ]


# --- performance sanity (no timing asserts: this must simply finish) ------------------------------


def _big_page(n: int, word: str) -> str:
    return "\n\n".join(
        f"## Option {i}\n\nThe option_{i} setting takes a {word} of values; it defaults to {i} items and "
        f"accepts at most {i * 10} entries. See the {word} reference for the syntax of each entry."
        for i in range(n)
    )


def test_large_pages() -> None:
    old = _big_page(60, "list")
    assert len(old) > 10_000
    # one rename repeated in every section: the worst case for pairing
    reasons = critical_changes(fields_from_text(old), fields_from_text(_big_page(60, "array")))
    assert reasons == []
    # a completely different page
    other = "\n\n".join(
        f"Paragraph {i} talks about something else entirely, with no overlap." for i in range(150)
    )
    assert critical_changes(fields_from_text(old), fields_from_text(other))
    assert norm(old) == old
