"""Volatile-region learning (recrawler.detect.regions): what differs between two fetches of a page."""

from __future__ import annotations

import lxml.html
from lxml.cssselect import CSSSelector

from recrawler.detect.regions import differing_elements, selector_for, volatile_regions
from recrawler.detect.tokens import Normalizer


def main(body: str) -> lxml.html.HtmlElement:
    return lxml.html.fromstring(f"<main>{body}</main>")


PAGE = """<h1>Uploads</h1>
<p>The client uploads files in parts of 8 MB, each retried three times before it fails.</p>
<p>Retries use exponential backoff, starting at 500 ms and doubling each time until they stop.</p>
<p>Large files are split into parts before they are sent, and every part is checked on arrival.</p>
<div class="related"><ul><li><a href="/a">{a}</a></li><li><a href="/b">{b}</a></li></ul></div>
<p class="presence">{n} people are reading this page</p>
<p id="stamp">Last updated: {date}</p>"""


def fetch(
    a: str = "Pricing", b: str = "Quotas", n: int = 3, date: str = "2026-03-01"
) -> lxml.html.HtmlElement:
    return main(PAGE.format(a=a, b=b, n=n, date=date))


def test_the_same_page_has_no_regions() -> None:
    assert volatile_regions(fetch(), fetch()) == []


def test_a_rotating_list_is_one_region_and_a_counter_another() -> None:
    first, second = fetch(), fetch(a="Billing", b="Limits", n=7)
    assert sorted(volatile_regions(first, second)) == ["div.related > ul", "p.presence"]
    # the selectors find the same elements on the next fetch
    assert [el.tag for el in CSSSelector("div.related > ul", translator="html")(second)] == ["ul"]


def test_tokens_the_normalizer_replaces_are_not_regions() -> None:
    first, second = fetch(date="2026-03-01"), fetch(date="2026-04-02")
    assert volatile_regions(first, second) == ["p#stamp"]
    assert volatile_regions(first, second, Normalizer().normalize) == []


def test_headings_and_most_of_the_page_are_content_not_regions() -> None:
    a = main("<h2>Install</h2><p>short</p>")
    b = main("<h2>Setup</h2><p>short</p>")
    assert [el.tag for el in differing_elements(a, b)] == ["h2"]
    assert volatile_regions(a, b) == []
    # a paragraph holding most of the page's text changing is an edit
    c = main("<p class='x'>A long paragraph that is most of the page, edited.</p><p class='y'>tiny</p>")
    d = main("<p class='x'>A long paragraph that is most of the page, rewritten!</p><p class='y'>tiny</p>")
    assert volatile_regions(c, d) == []


def test_selectors_are_anchored_on_an_id_or_class_and_unique() -> None:
    lists = "<ul class='nav'><li>a</li><li>b</li></ul><ul class='nav'><li>c</li></ul>"
    m = main(lists + "<div><span>x</span></div>")
    second_list = m.findall("ul")[1]
    assert selector_for(second_list, m) == "ul.nav:nth-of-type(2)"
    # nothing to anchor a bare chain on
    assert selector_for(m.find("div/span"), m) is None
