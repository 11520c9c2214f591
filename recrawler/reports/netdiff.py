"""A page's net change over several changes: its text before the first, from its text now and the
stored unified diffs, each taken back in turn (pure)."""

from __future__ import annotations

import difflib
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["net_diff", "unapply"]

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def unapply(after: Sequence[str], diff: str) -> list[str] | None:
    """The lines *diff* (a stored unified diff of lines) was made from, given the lines it made;
    None when the diff does not fit them (it was cut short, or the text moved since)."""
    lines = diff.split("\n")
    if any(line.startswith("... diff truncated at ") for line in lines):
        return None
    out: list[str] = []
    at = 0
    i = 0
    while i < len(lines):
        m = _HUNK.match(lines[i])
        i += 1
        if m is None:
            continue
        new_start, new_len = int(m.group(3)), int(m.group(4) if m.group(4) is not None else 1)
        # an empty side names the line before it (RFC-less, as difflib writes it)
        start = new_start - 1 if new_len else new_start
        old_part: list[str] = []
        new_part: list[str] = []
        while i < len(lines) and not lines[i].startswith("@@ "):
            line = lines[i]
            i += 1
            if line.startswith("+"):
                new_part.append(line[1:])
            elif line.startswith("-"):
                old_part.append(line[1:])
            elif line.startswith(" ") or line == "":
                old_part.append(line[1:])
                new_part.append(line[1:])
        if start < at or list(after[start : start + len(new_part)]) != new_part:
            return None
        out.extend(after[at:start])
        out.extend(old_part)
        at = start + len(new_part)
    out.extend(after[at:])
    return out


def net_diff(now: str, diffs: Sequence[str], *, limit: int) -> tuple[list[str], str] | None:
    """(lines before the first change, unified diff from them to *now*) for *diffs*, the stored diffs
    of a page's changes, newest first; None when one of them does not fit. The diff is capped at
    *limit* characters."""
    lines = now.splitlines()
    for diff in diffs:
        before = unapply(lines, diff)
        if before is None:
            return None
        lines = before
    out = "\n".join(difflib.unified_diff(lines, now.splitlines(), "before", "after", n=2, lineterm=""))
    if len(out) > limit:
        out = out[:limit] + f"\n... diff truncated at {limit} characters"
    return lines, out
