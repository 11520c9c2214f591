"""Heading-aware chunks (recrawler.kb.chunking): heading paths, anchors, sizes and overlap."""

from __future__ import annotations

from itertools import pairwise

import pytest

from recrawler.detect.hashing import content_hash
from recrawler.exceptions import ConfigurationError
from recrawler.kb.chunking import Chunker

URL = "https://docs.example.com/guide"
HEADINGS = ((1, "Guide", "guide"), (2, "Install", "install"), (3, "From source", None), (2, "Use", "use"))
TEXT = (
    "# Guide\n\nAn introduction.\n\n## Install\n\n### From source\n\nBuild it yourself.\n\n"
    "## Use\n\nRun it.\n\n```\nguide run\n```"
)


def test_heading_paths_and_anchors() -> None:
    chunks = Chunker().chunk(TEXT, key="k", url=URL + "#top", headings=HEADINGS)
    assert [(c.heading, c.url) for c in chunks] == [
        ("Guide", f"{URL}#guide"),
        # "## Install" has nothing under it of its own: it lives on in the breadcrumb; its
        # subsection has no anchor, so the chunk links to the page
        ("Guide > Install > From source", URL),
        ("Guide > Use", f"{URL}#use"),
    ]
    assert [c.chunk_index for c in chunks] == [0, 1, 2]
    # each chunk starts with its section's heading line
    assert chunks[1].text == "### From source\n\nBuild it yourself."
    assert chunks[2].text == "## Use\n\nRun it.\n\n```\nguide run\n```"
    assert all(c.chunk_hash == content_hash(c.text) and c.key == "k" for c in chunks)


def test_an_anchor_is_taken_only_for_its_own_heading() -> None:
    chunks = Chunker().chunk("## Other\n\nText.", key="k", url=URL, headings=((2, "Install", "install"),))
    assert chunks[0].url == URL


def test_text_without_headings_is_one_chunk() -> None:
    chunks = Chunker().chunk("Just a paragraph.\n\n- and a list", key="k", url=URL)
    assert [(c.heading, c.text) for c in chunks] == [("", "Just a paragraph.\n\n- and a list")]


def test_a_page_of_only_headings_keeps_its_first() -> None:
    assert [c.text for c in Chunker().chunk("# A\n\n## B", key="k", url=URL)] == ["# A"]


def test_long_sections_are_packed_within_the_size_with_overlap() -> None:
    sentences = [f"Sentence number {i} says something about uploads." for i in range(60)]
    body = "\n\n".join(" ".join(sentences[i : i + 3]) for i in range(0, 60, 3))
    chunker = Chunker(size=300, overlap=60)
    chunks = chunker.chunk("## Long\n\n" + body, key="k", url=URL)
    assert len(chunks) > 5
    assert all(len(c.text) <= 300 for c in chunks)
    assert all(c.text.startswith("## Long\n\n") and c.heading == "Long" for c in chunks)
    # the next chunk carries the end of the previous one over
    for a, b in pairwise(chunks):
        carried = b.text.removeprefix("## Long\n\n").split("\n\n")[0]
        assert a.text.endswith(carried)
    # nothing is lost
    joined = " ".join(c.text for c in chunks)
    assert all(s in joined for s in sentences)


def test_a_long_code_block_is_cut_at_line_ends() -> None:
    code = "```\n" + "\n".join(f"line_{i} = {i}" for i in range(80)) + "\n```"
    chunks = Chunker(size=200, overlap=50).chunk(code, key="k", url=URL)
    assert len(chunks) > 1
    assert chunks[0].text.startswith("```\n")
    assert chunks[-1].text.endswith("\n```")
    # pieces after the first carry the overlap too (they no longer start with the fence)
    assert all(len(c.text) <= 200 + 50 for c in chunks)
    for i in range(80):
        assert any(f"line_{i} = {i}\n" in c.text + "\n" for c in chunks)


@pytest.mark.parametrize(("size", "overlap"), [(99, 0), (200, 100), (200, -1)])
def test_bad_sizes_are_configuration_errors(size: int, overlap: int) -> None:
    with pytest.raises(ConfigurationError, match="RECRAWLER_CHUNK_"):
        Chunker(size=size, overlap=overlap)
