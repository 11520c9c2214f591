"""Volatile regions: the parts of a page that differ between two fetches a short time apart.

Two cleaned main-content trees of the same page are walked side by side; the smallest elements
whose (token-normalised) text differs become CSS selectors that the site's extraction drops from
then on. Pure: lxml only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cssselect import SelectorError
from lxml.cssselect import CSSSelector

if TYPE_CHECKING:
    from collections.abc import Callable

    from lxml.etree import _Element

_HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
# A "region" covering more of the page than this is not a widget: it is the content changing.
MAX_REGION_SHARE = 0.5


def _text(el: _Element) -> str:
    return " ".join("".join(el.itertext()).split())


def _elements(el: _Element) -> list[_Element]:
    return [c for c in el if isinstance(c.tag, str)]


def _own_text(el: _Element) -> str:
    parts = [el.text or ""]
    parts.extend(c.tail or "" for c in el)
    return " ".join("".join(parts).split())


def differing_elements(
    a: _Element, b: _Element, normalize: Callable[[str], str] = lambda t: t
) -> list[_Element]:
    """The smallest elements of *a* whose text differs from their counterpart in *b*."""
    if normalize(_text(a)) == normalize(_text(b)):
        return []
    ca, cb = _elements(a), _elements(b)
    same_shape = len(ca) == len(cb) and all(x.tag == y.tag for x, y in zip(ca, cb, strict=True))
    if not same_shape or normalize(_own_text(a)) != normalize(_own_text(b)):
        return [a]
    found: list[_Element] = []
    for x, y in zip(ca, cb, strict=True):
        found.extend(differing_elements(x, y, normalize))
    return found or [a]


def _step(el: _Element) -> str:
    """One selector step: ``tag#id``, or ``tag.class.class``, or ``tag``."""
    tag = str(el.tag)
    if el.get("id"):
        return f"{tag}#{el.get('id')}"
    classes = [c for c in (el.get("class") or "").split() if c.replace("-", "_").isidentifier()]
    return tag + "".join(f".{c}" for c in classes)


def selector_for(el: _Element, main: _Element) -> str | None:
    """The shortest descendant selector (from *main*) that matches *el* and nothing else."""
    chain: list[_Element] = []
    node: _Element | None = el
    while node is not None and node is not main:
        chain.append(node)
        node = node.getparent()
    if node is None:
        return None
    steps: list[str] = []
    for _depth, current in enumerate(chain):
        step = _step(current)
        parent = current.getparent()
        if parent is not None and "#" not in step:
            same = [c for c in _elements(parent) if _step(c) == step]
            if len(same) > 1:
                position = [c for c in _elements(parent) if c.tag == current.tag].index(current) + 1
                step += f":nth-of-type({position})"
        steps.insert(0, step)
        candidate = " > ".join(steps)
        try:
            matched = CSSSelector(candidate, translator="html")(main)
        except SelectorError:  # a name cssselect cannot express: try the next, longer chain
            matched = []
        # anchored: a bare positional chain (li:nth-of-type(1) > a) would hit other lists
        if matched == [el] and any("#" in st or "." in st for st in steps):
            return candidate
    return None


def _widen(elements: list[_Element], main: _Element) -> list[_Element]:
    """Siblings that all differ are one widget (a rotating list): take their parent instead."""
    lifted = []
    for el in elements:
        # an element that is all of its parent (a link alone in a list item) stands for it
        parent = el.getparent()
        while (
            parent is not None
            and parent is not main
            and len(_elements(parent)) == 1
            and not _own_text(parent)
        ):
            el, parent = parent, parent.getparent()
        if el not in lifted:
            lifted.append(el)
    elements = lifted
    changed = True
    while changed:
        changed = False
        by_parent: dict[int, list[_Element]] = {}
        for el in elements:
            parent = el.getparent()
            if parent is not None and parent is not main:
                by_parent.setdefault(id(parent), []).append(el)
        for group in by_parent.values():
            if len(group) > 1:
                parent = group[0].getparent()
                assert parent is not None
                elements = [e for e in elements if e not in group]
                elements.append(parent)
                changed = True
                break
    return elements


def volatile_regions(a: _Element, b: _Element, normalize: Callable[[str], str] = lambda t: t) -> list[str]:
    """CSS selectors for the regions of *a* that differ in *b* (two fetches of one page).

    Never a heading, never the whole main content, never a region holding more than half of
    the page's text: those are the page's own content changing, not noise.
    """
    total = len(_text(a)) or 1
    selectors: list[str] = []
    for el in _widen(differing_elements(a, b, normalize), a):
        if el is a or el.tag in _HEADINGS or any(d.tag in _HEADINGS for d in el.iterdescendants()):
            continue
        if len(_text(el)) / total > MAX_REGION_SHARE:
            continue
        sel = selector_for(el, a)
        if sel and sel not in selectors:
            selectors.append(sel)
    return selectors
