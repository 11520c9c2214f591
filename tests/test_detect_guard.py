"""The critical-token guard (recrawler.detect.guard): which edits a reader must not miss."""

from __future__ import annotations

import pytest

from recrawler.detect.guard import Fields, critical_changes, fields_from_text
from recrawler.detect.tokens import Normalizer

NORMALIZER = Normalizer()


def norm(text: str) -> str:
    return NORMALIZER.normalize(text)


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
