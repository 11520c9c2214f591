"""Soft 404s: a page that answers 200 but says it is not there, or a redirect that leads nowhere in
particular (the site's home). Pure: the shapes only, no Scrapy, no state."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = [
    "HOME_REDIRECT",
    "NOT_FOUND_PAGE",
    "NOT_FOUND_TEXT",
    "SHARED_REDIRECT",
    "SHORT_TEXT",
    "home_redirect",
    "might_be_not_found",
    "not_found",
]

#: the shapes (the ``recrawler/page/soft_404/<shape>`` stats)
NOT_FOUND_TEXT = "not_found_text"  # a stored page became much shorter and says it is not there
NOT_FOUND_PAGE = "not_found_page"  # a page never stored whose title or heading is a not-found one
HOME_REDIRECT = "redirect_home"  # a page redirected to the site's root or the listing's home
SHARED_REDIRECT = "redirect_shared"  # several pages of one run lent the same target

#: a not-found page is short: a main text longer than this is content, whatever it says
SHORT_TEXT = 2000
# what a not-found page says in its title or main heading
_SAYS = re.compile(
    r"\b404\b|\boops\b|\bnot\s+found\b|\bno\s+(?:such\s+)?page\b|\bcould\s*n(?:o|')?t\s+find\b"
    r"|\b(?:does\s+not|doesn'?t|no\s+longer)\s+exists?\b|\bcould\s*n(?:o|')?t\s+be\s+found\b"
    r"|\bcan(?:not|'t)\s+be\s+found\b|\bno\s+longer\s+available\b",
    re.IGNORECASE,
)
# a text, title or heading that is a not-found message from its first words ("Page not found",
# "404 - Acme", "Oops! Nothing here", "No page /docs/x here.", "Sorry, this page does not exist")
_NAMED = re.compile(
    r"^\W*(?:(?:sorry|oops|error)\b\W*)?(?:404\b|(?:page|document|file|resource)?\s*not\s+found\b|oops\b"
    r"|no\s+(?:such\s+)?page\b|nothing\s+(?:was\s+)?found\b|we\s+could\s*n(?:o|')?t\s+find\b"
    r"|(?:this|that|the)\s+page\s+(?:you\s+(?:\w+\s+){1,3})?(?:(?:does\s+not|doesn'?t)\s+exist"
    r"|(?:could\s*n(?:o|')?t|can(?:not|'t))\s+be\s+found|is\s+(?:not|no\s+longer)\s+(?:available|here)"
    r"|(?:was|has\s+been)\s+(?:removed|deleted|not\s+found))\b)",
    re.IGNORECASE,
)
# a title's site part: "Page not found | Example Docs" -> "Page not found"
_TITLE_SUFFIX = re.compile(r"\s+[|\u2013\u2014-]\s+.*$")
# the heading lines the rendered text starts with ("# Title", "## Section")
_HEADING_LINES = re.compile(r"^(?:#{1,6} [^\n]*\n+)+")
#: a folder's own page: /docs/index.html redirecting to /docs/ is not a page sent home
_INDEX_FILES = frozenset(
    {"index.html", "index.htm", "index.php", "index.shtml", "default.htm", "default.aspx"}
)


def _parts(
    title: str | None, headings: Sequence[tuple[int, str, str | None]], text: str
) -> tuple[str, str, str]:
    """The page's title (without its site part), main heading, and first words of its text."""
    heading = headings[0][1] if headings else ""
    body = _HEADING_LINES.sub("", text.lstrip(), count=1)[:200]
    return _TITLE_SUFFIX.sub("", (title or "").strip()), heading, body


def might_be_not_found(title: str | None, headings: Sequence[tuple[int, str, str | None]], text: str) -> bool:
    """Cheap first look: a short text whose title or main heading says "not found", or whose
    first words are a not-found message. Only then is the stored page worth reading (see
    :func:`not_found`)."""
    if len(text) > SHORT_TEXT:
        return False
    name, heading, body = _parts(title, headings, text)
    return bool(_SAYS.search(name) or _SAYS.search(heading) or _NAMED.search(body))


def not_found(
    title: str | None,
    headings: Sequence[tuple[int, str, str | None]],
    text: str,
    stored_length: int | None,
) -> str | None:
    """The soft-404 shape of a 200's page (None: it is content).

    A stored page (*stored_length*: its stored text's length) is a soft 404 when its text became
    short, at most half of what it was, and its title or main heading says it is not there
    (``Page not found``, ``404``, ``does not exist``...), or its text begins by saying so (``No page
    /docs/x here.``, ``Sorry, this page does not exist``). A page never stored has nothing to
    compare with: its title, main heading or first words must be a not-found message from their
    first word. A long text is content whatever it says, and so is a section about errors.
    """
    if not might_be_not_found(title, headings, text):
        return None
    if stored_length is None:
        name, heading, body = _parts(title, headings, text)
        return NOT_FOUND_PAGE if any(_NAMED.search(part) for part in (name, heading, body)) else None
    return NOT_FOUND_TEXT if 2 * len(text) <= stored_length else None


def home_redirect(source_path: str, target_path: str, homes: Iterable[str]) -> bool:
    """True when a page at *source_path* redirects to a home (the site's root, the listing's
    folder), which it is not itself: a removed page sent home, a soft 404. A folder's own index
    file redirecting to its folder is not one."""
    homes = {h if h.endswith("/") else h + "/" for h in homes}
    target = target_path if target_path.endswith("/") else target_path + "/"
    folder, _, name = source_path.rpartition("/")
    source = source_path if source_path.endswith("/") else source_path + "/"
    if target not in homes or source == target:
        return False
    # /docs/index.html -> /docs/: the same page at its folder's address
    return not (name.lower() in _INDEX_FILES and folder + "/" == target)
