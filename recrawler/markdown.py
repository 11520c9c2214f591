"""Markdown documents and llms.txt files: a page's markdown twin read into the rendered-text format,
and the links an llms.txt lists (pure, markdown-it-py and lxml only).

The llms.txt proposal (llmstxt.org) lists a site's pages as markdown links in ``##`` sections and
suggests a clean markdown copy of each page at the page's URL with ``.md`` appended
(``index.html.md`` for a URL with no file name); sites also publish ``page.md`` beside an
extensionless ``page``. :func:`twin_page` maps a twin's URL to the page's own.
"""

from __future__ import annotations

import re
from functools import cache
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit

import lxml.html

from recrawler.extract import Content, clean_text, content_of

if TYPE_CHECKING:
    from markdown_it import MarkdownIt

__all__ = ["MARKDOWN_TYPES", "is_llms_txt", "llms_links", "read_markdown", "twin_page"]

#: media types of markdown (``text/plain`` and untyped bodies count when the path ends in ``.md``)
MARKDOWN_TYPES = frozenset({b"text/markdown", b"text/x-markdown"})
# YAML front matter: a block between two "---" lines at the very start
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.DOTALL)
_TITLE = re.compile(r"""^title:[ \t]*["']?(.*?)["']?[ \t]*$""", re.MULTILINE)
# an item of a markdown list: "- ", "* ", "+ ", "1. ", "1) "
_LIST_ITEM = re.compile(r"^[ \t]*(?:[-*+]|\d{1,9}[.)])[ \t]+")
# a markdown link [text](url "title") that is not an image; the URL may be in angle brackets
_LINK = re.compile(
    r"""(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>\s]*>|[^)\s]+)(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)"""
)


@cache
def _renderer() -> MarkdownIt:
    from markdown_it import MarkdownIt

    # CommonMark with GitHub's tables; raw HTML blocks are read as HTML
    return MarkdownIt("commonmark", {"html": True}).enable("table")


def read_markdown(body: bytes | str, encoding: str | None = None) -> Content:
    """The Content of a markdown document: its front matter's ``title`` (else its first ``#``
    heading) and its text, headings, code and links rendered as an HTML page's are."""
    text = body if isinstance(body, str) else body.decode(encoding or "utf-8", "replace")
    text = text.removeprefix("\ufeff")
    title = ""
    front = _FRONT_MATTER.match(text)
    if front is not None:
        found = _TITLE.search(front.group(1))
        title = found.group(1).strip() if found else ""
        text = text[front.end() :]
    main = lxml.html.fragment_fromstring(_renderer().render(text), create_parent="main")
    for el in main.xpath(".//script | .//style"):
        el.drop_tree()
    if not title:
        h1 = main.find(".//h1")
        title = " ".join(clean_text(h1.text_content()).split()) if h1 is not None else ""
    return content_of(title, main)


def is_llms_txt(url: str) -> bool:
    """Whether *url* names an llms.txt file (``/llms.txt``, ``/docs/llms.txt``)."""
    return urlsplit(url).path.rsplit("/", 1)[-1].lower() == "llms.txt"


def llms_links(body: bytes | str, base_url: str) -> list[str]:
    """The URLs an llms.txt lists, in its order (each once): the links of its list items, resolved
    against *base_url*; links in its prose and images are not pages it lists."""
    text = body if isinstance(body, str) else body.decode("utf-8", "replace")
    found: dict[str, None] = {}
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if fenced or not _LIST_ITEM.match(line):
            continue
        for match in _LINK.finditer(line):
            href = match.group(1).strip("<>")
            try:
                found.setdefault(urljoin(base_url, href).split("#", 1)[0], None)
            except ValueError:
                found.setdefault(href, None)
    return [u for u in found if u]


def twin_page(url: str) -> str | None:
    """The page whose markdown twin *url* is (None: it is none): ``x.html.md`` is ``x.html``,
    ``dir/index.html.md`` and ``dir/index.md`` are ``dir/``, ``x.md`` is ``x``."""
    parts = urlsplit(url)
    path = parts.path
    if not path.endswith(".md") or path.endswith("/.md"):
        return None
    folder, _, name = path.rpartition("/")
    index = name in ("index.html.md", "index.htm.md", "index.md")
    page = folder + "/" if index else path.removesuffix(".md")
    return parts._replace(path=page).geturl()
