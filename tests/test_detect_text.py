"""The rendered-text format (recrawler.detect.text): blocks, headings, code, and one reading of it."""

from __future__ import annotations

import pytest

from recrawler.detect.guard import fields_from_text
from recrawler.detect.text import Block, blocks, clean_code, code, heading, headings, parse, unmarked
from recrawler.kb.chunking import Chunker


def test_blocks_split_at_blank_lines_and_keep_code_with_blank_lines_whole() -> None:
    text = "# Title\n\nOne.\n\n```\na = 1\n\nb = 2\n```\n\n- item\n\n\n\nTwo."
    assert blocks(text) == ["# Title", "One.", "```\na = 1\n\nb = 2\n```", "- item", "Two."]


def test_an_unclosed_fence_runs_to_the_end() -> None:
    assert blocks("Intro.\n\n```\nx\n\ny") == ["Intro.", "```\nx\n\ny"]


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        ("# Title", (1, "Title")),
        ("###### Six", (6, "Six")),
        ("## Spaced   out  title ", (2, "Spaced out title")),
        ("##\tTabbed", (2, "Tabbed")),
        ("  ## Indented", (2, "Indented")),
        ("## Caf\u0065\u0301", (2, "Caf\u00e9")),  # NFC, as extraction renders
        ("####### Seven", None),
        ("#NoSpace", None),
        ("#", None),
        ("#   ", None),
        ("# Title\nand a second line", None),
        ("Text\n# not a heading inside a block", None),
        ("- # a list item", None),
        ("```\n# a comment in code\n```", None),
    ],
)
def test_heading_rule(block: str, expected: tuple[int, str] | None) -> None:
    assert heading(block) == expected


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        ("```\na = 1\nb = 2\n```", "a = 1\nb = 2"),
        ("```python\nprint(1)\n```", "print(1)"),
        ("```\n```", ""),
        ("```\na\n\nb\n```  ", "a\n\nb"),
        ("```\nnot closed", None),
        ("```inline``` in prose", None),
        ("Text with ``` inside", None),
    ],
)
def test_code_rule(block: str, expected: str | None) -> None:
    assert code(block) == expected


def test_parse_reads_each_block_once() -> None:
    text = "# A\n\nPara.\n\n```\nx\n```\n\n## B"
    assert parse(text) == [
        Block("# A", level=1, title="A"),
        Block("Para."),
        Block("```\nx\n```", code="x"),
        Block("## B", level=2, title="B"),
    ]


def test_markers_and_code_cleaning() -> None:
    assert unmarked("- 1. > quoted item") == "quoted item"
    assert unmarked("12) step") == "step"
    assert unmarked("-not a marker") == "-not a marker"
    assert clean_code("\n\n  a = 1   \n\nb\n\n") == "  a = 1\n\nb"


EDGE_CASES = [
    "# One\n\nText.\n\n## Two\n\nMore.",
    # not headings: seven hashes, no space, a heading line inside a block, a code comment
    "####### Seven\n\n#hashtag\n\nText\n# inline\n\n```\n# comment\n\nx = 1\n```\n\n## Real\n\nBody.",
    # tabs, indentation, extra spaces: headings all the same
    "#\tTabbed\n\nBody.\n\n  ## Indented\n\nBody.\n\n###   Spaced   out\n\nBody.",
    # empty heading text is no heading
    "#   \n\nBody.\n\n## Kept\n\nBody.",
    # a code block holding fence lines (a markdown example): its pieces are text, not headings
    "## Example\n\n```\n```meson\nenv = environment()\n\n# MY_PATH will be set\nenv.set('A', '1')\n```\n```"
    "\n\n## Methods\n\nBody.",
]


@pytest.mark.parametrize("text", EDGE_CASES)
def test_chunking_and_the_guard_read_the_same_headings(text: str) -> None:
    expected = [title for _, title in headings(text)]
    # the guard's headings (fields_from_text reads them from the text)
    assert list(fields_from_text(text).headings) == expected
    # chunking's headings: every heading here has a body, so each opens a section of its own
    chunker = Chunker(size=100, overlap=0)
    crumbs = [c.heading for c in chunker.chunk(text, key="k", url="https://example.com/p")]
    leaves = [crumb.rsplit(" > ", 1)[-1] for crumb in dict.fromkeys(crumbs) if crumb]
    assert leaves == expected


def test_edge_case_headings() -> None:
    assert headings(EDGE_CASES[1]) == [(2, "Real")]
    assert headings(EDGE_CASES[2]) == [(1, "Tabbed"), (2, "Indented"), (3, "Spaced out")]
    assert headings(EDGE_CASES[3]) == [(2, "Kept")]
    assert headings(EDGE_CASES[4]) == [(2, "Example"), (2, "Methods")]
