"""An llms.txt as the listing: the pages it names, read from their markdown twins where it names
those (cleaner than the HTML), stored, keyed and cited as the HTML pages; and the look for a listing
(robots.txt, sitemap.xml, llms.txt) before a crawl from a start URL."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.cli import main as cli_main
from recrawler.markdown import is_llms_txt, llms_links, read_markdown, twin_page
from recrawler.spiders.docs import DocsSpider
from tests import docsite, statedb

if TYPE_CHECKING:
    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0

LLMS = """# Example Docs

> The docs of Example, for language models.

Read the [guides](prose.html) first; every page has a markdown copy.

## Guides

- [Introduction](intro.html.md): start here
- [Install](install/index.html.md)
- [Configuration](config.md): an extensionless page
- [Plain page](plain.html)

## Optional

- [Changelog](changelog.html.md)
- [Elsewhere](https://other.example.org/page.md)
"""


def twin(title: str, body: str) -> str:
    return f"---\ntitle: {title}\n---\n\n# {title}\n\n{body}\n\n## Usage\n\n```\ntool --run\n```\n"


def write_site(site: Site) -> None:
    site.write("llms.txt", LLMS, mtime=T0)
    for path, title in (
        ("intro.html", "Introduction"),
        ("install/index.html", "Install"),
        ("config", "Configuration"),
        ("changelog.html", "Changelog"),
    ):
        site.write(path, docsite.guide(title, "The HTML copy of the page."), mtime=T0)
        twin_path = (
            path.replace("index.html", "index.html.md") if path.endswith("index.html") else path + ".md"
        )
        site.write(
            twin_path, twin(title, f"The markdown twin of {title}: TWINMARKER {title.lower()}."), mtime=T0
        )
    site.write("plain.html", docsite.guide("Plain", "A page with no twin."), mtime=T0)
    site.write("prose.html", docsite.guide("Prose", "Linked from prose only."), mtime=T0)


def pages(crawls: Crawls, site: Site) -> dict[str, tuple[str, str]]:
    return {
        url.removeprefix(site.base_url): (key, status)
        for key, url, status in statedb.rows(crawls.db_path, "SELECT key, url, status FROM pages")
    }


# --- pure parts ----------------------------------------------------------------------------------


def test_a_twin_is_cited_as_its_page() -> None:
    assert twin_page("https://d.example.com/a/b.html.md") == "https://d.example.com/a/b.html"
    assert twin_page("https://d.example.com/a/index.html.md") == "https://d.example.com/a/"
    assert twin_page("https://d.example.com/a/index.md") == "https://d.example.com/a/"
    assert twin_page("https://d.example.com/a/config.md") == "https://d.example.com/a/config"
    assert twin_page("https://d.example.com/a/b.html") is None
    assert twin_page("https://d.example.com/a/") is None
    assert is_llms_txt("https://d.example.com/docs/llms.txt")
    assert not is_llms_txt("https://d.example.com/docs/llms-full.txt")


def test_an_llms_txt_lists_the_links_of_its_list_items() -> None:
    links = llms_links(LLMS, "https://d.example.com/docs/llms.txt")
    assert links == [
        "https://d.example.com/docs/intro.html.md",
        "https://d.example.com/docs/install/index.html.md",
        "https://d.example.com/docs/config.md",
        "https://d.example.com/docs/plain.html",
        "https://d.example.com/docs/changelog.html.md",
        "https://other.example.org/page.md",
    ]
    # an image and a fenced example are not pages it lists
    assert llms_links("- ![logo](logo.png)\n```\n- [x](x.md)\n```\n- [<y>](<y.md> 'Y')", "https://d/") == [
        "https://d/y.md"
    ]


def test_a_markdown_twin_reads_as_its_page() -> None:
    content = read_markdown(
        b"---\ntitle: Retries\n---\n# Retrying uploads\n\nSet **retry_limit** in `config.toml`, see"
        b" [the guide](guide.md).\n\n| option | default |\n|---|---|\n| retry_limit | 3 |\n\n"
        b"```toml\nretry_limit = 5\n```\n\n- one\n- two\n"
    )
    assert content.title == "Retries"
    assert [h[:2] for h in content.headings] == [(1, "Retrying uploads")]
    # the blocks an HTML page with the same content renders to
    assert content.text.split("\n\n") == [
        "# Retrying uploads",
        "Set retry_limit in config.toml, see the guide.",
        "| option | default |",
        "| retry_limit | 3 |",
        "```\nretry_limit = 5\n```",
        "- one",
        "- two",
    ]
    assert "config.toml" in content.code
    assert ("guide.md", "the guide") in content.links


# --- an llms.txt as the listing --------------------------------------------------------------------


@deferred_f_from_coro_f
async def test_pages_are_read_from_their_twins_and_cited_by_their_html_urls(
    site: Site, crawls: Crawls, capsys: Any
) -> None:
    write_site(site)
    r1 = await crawls.crawl(site.url("llms.txt"))
    assert r1.exit_code == 0, r1.report.get("outcome")
    stored = pages(crawls, site)
    assert sorted(stored) == ["changelog.html", "config", "install/", "intro.html", "plain.html"]
    assert stored["intro.html"][0].endswith("/intro.html")
    assert r1.stats["recrawler/document/markdown"] == 4
    asked = {q["path"] for q in site.requests() if q["method"] == "GET"}
    assert {"intro.html.md", "install/index.html.md", "config.md", "changelog.html.md", "plain.html"} <= asked
    # the HTML of a page with a twin is never fetched, nor a page linked from the prose
    assert not asked & {
        "intro.html",
        "install/index.html",
        "install/",
        "config",
        "changelog.html",
        "prose.html",
    }
    assert r1.stats["recrawler/url/refused/offsite"] == 1
    # the twin's text, cited by the HTML page's URL
    chunks = statedb.rows(crawls.db_path, "SELECT url, text FROM chunks WHERE key LIKE '%intro.html'")
    assert chunks
    assert all(url.startswith(site.url("intro.html")) for url, _ in chunks)
    text = " ".join(t for _, t in chunks)
    assert "TWINMARKER introduction" in text
    assert "HTML copy" not in text
    assert "All rights reserved" not in text
    capsys.readouterr()
    assert cli_main(["search", "TWINMARKER configuration", "--db", crawls.db_uri, "--json", "-k", "1"]) == 0
    assert site.url("config") in capsys.readouterr().out

    # an edit of one twin is caught; the rest answer 304
    site.write(
        "intro.html.md", twin("Introduction", "TWINMARKER introduction, now with retries."), mtime=T0 + 10
    )
    r2 = await crawls.crawl(site.url("llms.txt"))
    assert {e["url"].removeprefix(site.base_url): e["action"] for e in r2.events} == {"intro.html": "changed"}
    assert r2.counts["not_modified"] == 4

    # a page the site removed (its twin too, and its entry) leaves on proof
    site.write("llms.txt", LLMS.replace("- [Changelog](changelog.html.md)\n", ""), mtime=T0 + 20)
    site.remove("changelog.html.md")
    site.remove("changelog.html")
    r3 = await crawls.crawl(site.url("llms.txt"))
    assert r3.exit_code == 0, r3.report.get("outcome")
    assert {e["url"].removeprefix(site.base_url): e["action"] for e in r3.events} == {
        "changelog.html": "quarantined"
    }


# --- looking for a listing before a crawl from a start URL ------------------------------------------


def start_site(site: Site) -> None:
    links = ' <a href="a.html">a</a> <a href="b.html">b</a>'
    site.write("docs/index.html", docsite.guide("Docs", extra=links), mtime=T0)
    for name in ("a", "b", "c"):
        site.write(f"docs/{name}.html", docsite.guide(name.upper()), mtime=T0)
    site.write("other/x.html", docsite.guide("X"), mtime=T0)


@deferred_f_from_coro_f
async def test_a_sitemap_in_the_start_folder_is_found_and_is_the_listing(site: Site, crawls: Crawls) -> None:
    start_site(site)
    site.write_sitemap(["docs/index.html", "docs/c.html", "other/x.html"], name="docs/sitemap.xml")
    r = await crawls.crawl(None, spider_args={"start_url": site.url("docs/index.html")})
    assert r.exit_code == 0, r.report.get("outcome")
    # the sitemap's pages under the folder, and the links' pages too; not the one outside it
    assert sorted(pages(crawls, site)) == ["docs/a.html", "docs/b.html", "docs/c.html", "docs/index.html"]
    assert r.stats["recrawler/sitemap/pages"] == 2
    assert site.requests("other/x.html") == []


@deferred_f_from_coro_f
async def test_an_llms_txt_in_the_start_folder_is_found_and_is_the_listing(
    site: Site, crawls: Crawls
) -> None:
    start_site(site)
    site.write("docs/c.html.md", twin("C", "TWINMARKER c"), mtime=T0)
    site.write("docs/llms.txt", "# Docs\n\n## Pages\n\n- [C](c.html.md)\n- [A](a.html)\n", mtime=T0)
    r = await crawls.crawl(None, spider_args={"start_url": site.url("docs/index.html")})
    assert r.exit_code == 0, r.report.get("outcome")
    # what it names, no links followed
    assert sorted(pages(crawls, site)) == ["docs/a.html", "docs/c.html"]
    assert site.requests("docs/sitemap.xml")[0]["status"] == 404


@pytest.mark.parametrize("discover", ["0", None])
@deferred_f_from_coro_f
async def test_with_no_listing_found_the_links_are_the_listing(
    site: Site, crawls: Crawls, discover: str | None
) -> None:
    start_site(site)
    args = {"start_url": site.url("docs/index.html"), **({"discover": discover} if discover else {})}
    r = await crawls.crawl(None, spider_args=args)
    assert r.exit_code == 0, r.report.get("outcome")
    assert sorted(pages(crawls, site)) == ["docs/a.html", "docs/b.html", "docs/index.html"]
    looked = [q["path"] for q in site.requests() if q["path"].endswith(("sitemap.xml", "llms.txt"))]
    assert looked == ([] if discover == "0" else ["docs/sitemap.xml", "docs/llms.txt"])


def test_discover_needs_no_sitemap() -> None:
    spider = DocsSpider(sitemap_url="https://d.example.com/sitemap.xml", start_url="https://d.example.com/")
    assert spider.recrawler_discover is False
    assert DocsSpider(start_url="https://d.example.com/docs/").recrawler_discover is True
