"""How text splits into the words a keyword search looks for, pure: one split for a query's terms
(both readers) and for a chunk's words (what PostgreSQL's full-text index files, computed by the
writer), so that a chunk and a query agree on every word."""

from __future__ import annotations

import re
import string

__all__ = ["STOPWORDS", "WORD", "chunk_words", "keyword_terms"]

# Words of a question that say nothing about which page answers it (short English function words).
# PostgreSQL's chunks.words leaves them out (chunk_words): a word taken off this list is found in
# chunks written after the change only.
STOPWORDS = frozenset(
    """a about after all also an and any are as at be been before but by can could did do does
    doing done for from get gets got had has have how i if in into is it its just me more most my
    no not of off on once only or other our out over own same should so some such than that the
    their them then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your""".split()  # noqa: SIM905 (a paragraph reads better than 120 strings)
)
#: letters and digits, as SQLite's unicode61 tokenizer and the PostgreSQL index split text
WORD = re.compile(r"[^\W_]+")
# the same over lowercased ASCII text: every other character a space, then split (for a first
# run's 16,060 chunks 0.27 s against the regular expression's 0.35 s, CPU PostgreSQL's writer spends)
_ASCII_SPACES = {i: " " for i in range(128) if chr(i) not in string.ascii_lowercase + string.digits}
#: the longest word PostgreSQL's full-text index holds, in bytes of UTF-8
_LONGEST_WORD = 2046


def keyword_terms(query: str) -> list[str]:
    """The query's words a keyword search looks for: lowercased letters-and-digits runs (an
    identifier like ``retry_limit`` or ``--cross-file`` gives its parts), function words left
    out, each once, in order."""
    seen: dict[str, None] = {}
    for word in WORD.findall(query.lower()):
        if word not in STOPWORDS:
            seen.setdefault(word, None)
    return list(seen)


def chunk_words(heading: str, text: str) -> str:
    """The words a keyword search can find a chunk by, each once, space-separated: split as
    :func:`keyword_terms` splits a query, without the function words a query never looks for.
    PostgreSQL stores them as the chunk's ``words`` (its full-text index): computed here, the
    server only files them."""
    lowered = f"{heading} {text}".lower()
    words = set(lowered.translate(_ASCII_SPACES).split() if lowered.isascii() else WORD.findall(lowered))
    words -= STOPWORDS
    # (a word of a quarter as many characters fits whatever they are: no encoding for most)
    if words and max(map(len, words)) > _LONGEST_WORD // 4:
        words = {w for w in words if len(w.encode()) <= _LONGEST_WORD}
    return " ".join(words)
