"""A stored unified diff as lines of parts, with the critical-token guard's tokens marked (pure)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["DiffLine", "critical_tokens", "diff_lines"]

# a Python repr'd string (how the guard quotes a token or a sentence), or a bare +/- token
_TOKEN = re.compile(r"""(?<![\w'"])([-+]?)('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\s'"]+)""")
#: guard reasons whose bare +/- words are tokens; the others quote what they name
_TOKEN_CATEGORIES = frozenset({"number", "identifier", "negation", "modal", "name", "heading", "code"})
_ELLIPSIS = "\u2026"


@dataclass(frozen=True, slots=True, kw_only=True)
class DiffLine:
    """One diff line: ``add``, ``del``, ``ctx``, ``hunk`` or ``meta``, as (text, critical) parts."""

    kind: str
    parts: list[tuple[str, bool]]


def _unquote(text: str) -> str:
    if text[:1] in "'\"":
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return text.strip("'\"")
        return value if isinstance(value, str) else text
    return text


def critical_tokens(reasons: Sequence[str]) -> list[str]:
    """The words and phrases the guard's *reasons* name (``number: '8 MB' -> '16 MB'``, ...),
    longest first; a sentence the guard shortened keeps the part it showed."""
    tokens: set[str] = set()
    for reason in reasons:
        category, sep, rest = reason.partition(": ")
        if not sep:
            continue
        bare_ok = category in _TOKEN_CATEGORIES
        for m in _TOKEN.finditer(rest):
            sign, raw = m.groups()
            quoted = raw[:1] in "'\""
            if not quoted and not (bare_ok and sign):
                continue
            token = _unquote(raw).removesuffix(_ELLIPSIS).strip()
            if any(ch.isalnum() for ch in token):
                tokens.add(token)
    return sorted(tokens, key=lambda t: (-len(t), t))


def _whole(token: str) -> str:
    """A pattern for *token* that does not match inside a longer word."""
    before = r"(?<!\w)" if token[0].isalnum() or token[0] == "_" else ""
    after = r"(?!\w)" if token[-1].isalnum() or token[-1] == "_" else ""
    return before + re.escape(token) + after


def _mark(text: str, pattern: re.Pattern[str] | None) -> list[tuple[str, bool]]:
    if pattern is None or not text:
        return [(text, False)]
    parts: list[tuple[str, bool]] = []
    at = 0
    for m in pattern.finditer(text):
        if m.start() > at:
            parts.append((text[at : m.start()], False))
        parts.append((m.group(), True))
        at = m.end()
    if at < len(text):
        parts.append((text[at:], False))
    return parts


def diff_lines(diff: str, reasons: Sequence[str] = ()) -> list[DiffLine]:
    """Split a unified diff into lines, marking the critical tokens on added and removed lines."""
    tokens = critical_tokens(reasons)
    # whole words only: "not" is critical, the "not" in "note" is not
    pattern = re.compile("|".join(_whole(t) for t in tokens)) if tokens else None
    out: list[DiffLine] = []
    for line in diff.splitlines():
        if line.startswith(("+++", "---")):
            out.append(DiffLine(kind="meta", parts=[(line, False)]))
        elif line.startswith("@@"):
            out.append(DiffLine(kind="hunk", parts=[(line, False)]))
        elif line.startswith(("+", "-")):
            kind = "add" if line[0] == "+" else "del"
            out.append(DiffLine(kind=kind, parts=[(line[0], False), *_mark(line[1:], pattern)]))
        else:
            out.append(DiffLine(kind="ctx", parts=[(line, False)]))
    return out
