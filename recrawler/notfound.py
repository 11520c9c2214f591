"""Soft 404s: a page that answers 200 with the site's own not-found page, or a redirect that leads
nowhere in particular (the site's home). Pure: the shapes only, no Scrapy, no state."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from recrawler.detect.hashing import fuzzy_distance, fuzzy_hash

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "HOME_REDIRECT",
    "NOT_FOUND_PAGE",
    "NOT_FOUND_TEXT",
    "PROBE_NAME",
    "SHARED_REDIRECT",
    "SHORT_TEXT",
    "NotFoundAnswer",
    "home_redirect",
    "not_found",
    "not_found_answer",
    "probe",
]

#: the shapes (the ``recrawler/page/soft_404/<shape>`` stats)
NOT_FOUND_TEXT = "not_found_text"  # a stored page now answers with the site's not-found page
NOT_FOUND_PAGE = "not_found_page"  # a page never stored answers with the site's not-found page
HOME_REDIRECT = "redirect_home"  # a page redirected to the site's root or the listing's home
SHARED_REDIRECT = "redirect_shared"  # several pages of one run lent the same target

#: a not-found page is short: a main text longer than this is content, whatever it is like
SHORT_TEXT = 2000
#: what a probe names the path it asks for: no site has a page there
PROBE_NAME = "recrawler-no-such-page-"
#: TLSH distance within which a page's text is the site's not-found text (a page that names
#: more than the path asked for: a suggestion list, a request id), as for same-content holds
_SAME_DISTANCE = 30
#: a folder's own page: /docs/index.html redirecting to /docs/ is not a page sent home
_INDEX_FILES = frozenset(
    {"index.html", "index.htm", "index.php", "index.shtml", "default.htm", "default.aspx"}
)


def probe(page_url: str, homes: Iterable[str], token: str) -> tuple[str, str]:
    """What the site answers for pages like *page_url* is learned once per run from a probe:
    ``(scope, probe URL)``. The probe asks, on the page's origin and under the longest of *homes*
    that holds the page (the listing's folder, else the root), for an HTML page no site has
    (*token* makes its name unique). The scope names every page the answer stands for."""
    parts = urlsplit(page_url)
    path = parts.path or "/"
    folders = {h if h.endswith("/") else h + "/" for h in homes} | {"/"}
    home = max((h for h in folders if path.startswith(h)), key=len)
    origin = f"{parts.scheme}://{parts.netloc}"
    return f"{origin}{home}", f"{origin}{home}{PROBE_NAME}{token}.html"


def _masked(text: str, *urls: str) -> str:
    """*text* normalised (case, whitespace), with the addresses it was asked for at masked: a
    not-found page often names the path it did not find."""
    marks: set[str] = set()
    for url in urls:
        parts = urlsplit(url)
        name = parts.path.rstrip("/").rsplit("/", 1)[-1]
        stem = name.rsplit(".", 1)[0]
        marks |= {url, parts.path, parts.path.lstrip("/"), name, stem if len(stem) > 3 else ""}
    marks |= {unquote(m) for m in marks}
    out = text
    for mark in sorted((m for m in marks if m), key=len, reverse=True):
        out = out.replace(mark, "\x00")
    return " ".join(out.lower().split())


@dataclass(frozen=True, slots=True)
class NotFoundAnswer:
    """What a site answers for a path it does not have: its main text, the path masked."""

    text: str
    fuzzy: str | None


def not_found_answer(text: str, *urls: str) -> NotFoundAnswer | None:
    """The site's not-found answer from the main *text* of what it answered for the probe at
    *urls* (the probe's, and where a redirect took it), or None: it answered with no text,
    nothing to compare a page with."""
    masked = _masked(text, *urls)
    if not masked.strip("\x00 ") or len(masked) > SHORT_TEXT:
        # nothing to compare with, or a page no not-found page is (a whole site map)
        return None
    return NotFoundAnswer(text=masked, fuzzy=fuzzy_hash(masked))


def not_found(text: str, url: str, answer: NotFoundAnswer | None, *, stored: bool) -> str | None:
    """The soft-404 shape of a 200's page at *url* with main *text* (None: it is content).

    Decided on the site's own evidence, never on words alone: a page is a soft 404 only when its
    text is the site's not-found *answer* (what it answers for a path it does not have), the
    path each names masked: the same text, or within a small TLSH distance of it. A page about
    errors, a glossary entry "404", a page starting "Oops!" differ from it: content. No answer (a
    bare 404, a failed probe): content. *stored*: the page is stored (``not_found_text``), or
    was never stored (``not_found_page``).
    """
    if answer is None or not text or len(text) > SHORT_TEXT:
        return None
    masked = _masked(text, url)
    if max(len(masked), len(answer.text)) > 2 * min(len(masked), len(answer.text)) + 50:
        # not the same page, whatever it says
        return None
    same = masked == answer.text
    if not same and answer.fuzzy is not None:
        digest = fuzzy_hash(masked)
        same = digest is not None and fuzzy_distance(digest, answer.fuzzy) <= _SAME_DISTANCE
    if not same:
        return None
    return NOT_FOUND_TEXT if stored else NOT_FOUND_PAGE


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
