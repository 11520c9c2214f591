"""A site with no sitemap, crawled from a start URL: its links are the listing. Every reachable page
is indexed, edits are caught, removed pages leave on proof, an unlinked page that still answers
stays, and a link crawl that reached far fewer pages than the last one is a failed listing."""

from __future__ import annotations

import html
import json
import tarfile
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.exceptions import ConfigurationError
from recrawler.spiders.docs import DocsSpider
from tests import docsite, statedb
from tests.conftest import Crawls
from tests.conftest_mockserver import REPO_ROOT, Site

if TYPE_CHECKING:
    from pathlib import Path

    from tests.conftest import CrawlResult
    from tests.conftest_mockserver import MockServer

T0 = 1_760_000_000.0
START = datetime(2026, 1, 5, 6, 0, tzinfo=UTC)


@dataclass
class TreeSite:
    """A docs site shaped as a tree under ``index.html``: each page lists its children in a side
    navigation (outside the main content) and links back to its parent and to the root. No sitemap."""

    site: Site
    #: path -> (title, parent path or None, body text)
    pages: dict[str, tuple[str, str | None, str]] = field(default_factory=dict)
    #: parent path -> child paths it links to (a page may stay on disk without its link)
    links: dict[str, list[str]] = field(default_factory=dict)
    version: int = 1

    @classmethod
    def build(cls, site: Site, fanout: tuple[int, ...] = (5, 4, 3, 3), deep: int = 10) -> TreeSite:
        tree = cls(site)
        tree.add("index.html", "Home", None)
        level = ["index.html"]
        for depth, n in enumerate(fanout, start=1):
            nxt = []
            for parent in level:
                stem = parent.removesuffix(".html").replace("index", "p")
                nxt.extend(
                    tree.add(f"{stem}-{i}.html", f"Page {stem}-{i} (level {depth})", parent) for i in range(n)
                )
            level = nxt
        # an API reference below the first leaves: two more levels, 6 links from the root
        for leaf in level[:deep]:
            api = tree.add(leaf.replace(".html", "-api.html"), f"API of {leaf}", leaf)
            tree.add(api.replace(".html", "-members.html"), f"Members of {leaf}", api)
        return tree

    def add(self, path: str, title: str, parent: str | None, text: str | None = None) -> str:
        self.pages[path] = (title, parent, text or f"{title} explains its own topic, {path}, in detail.")
        self.links.setdefault(path, [])
        if parent is not None:
            self.links[parent].append(path)
        return path

    def depth(self, path: str) -> int:
        parent = self.pages[path][1]
        return 0 if parent is None else 1 + self.depth(parent)

    def render(self, path: str) -> str:
        title, parent, text = self.pages[path]
        nav = "".join(f'<li><a href="{c}">{html.escape(self.pages[c][0])}</a></li>' for c in self.links[path])
        up = f'<a href="{parent}">Up</a> <a href="index.html">Home</a>' if parent else ""
        body = docsite.page(title, [("Overview", [html.escape(text)])])
        # the side navigation and the breadcrumbs sit outside <main>: links, not content
        return body.replace("<main>", f"<nav class='local'>{up}<ul>{nav}</ul></nav>\n<main>", 1)

    def deploy(self, mtime: float) -> None:
        for path in self.pages:
            if (self.site.root / path).exists() and self.site.root.joinpath(path).read_text() == self.render(
                path
            ):
                continue
            self.site.write(path, self.render(path), mtime=mtime)

    def edit(self, path: str, words: str) -> None:
        title, parent, text = self.pages[path]
        self.pages[path] = (title, parent, f"{text} {words}")

    def remove(self, path: str, *, gone: bool = False) -> None:
        """The page and its link leave the site (it answers 404, or 410)."""
        parent = self.pages.pop(path)[1]
        if parent is not None:
            self.links[parent].remove(path)
        self.site.remove(path, gone=gone)

    def unlink(self, path: str) -> None:
        """The page's link leaves the site; the page still answers."""
        parent = self.pages[path][1]
        assert parent is not None
        self.links[parent].remove(path)

    def reachable(self) -> set[str]:
        seen, todo = {"index.html"}, ["index.html"]
        while todo:
            for child in self.links[todo.pop()]:
                if child not in seen:
                    seen.add(child)
                    todo.append(child)
        return seen


def live(crawls: Crawls, site: Site) -> set[str]:
    return {
        u.removeprefix(site.base_url)
        for (u,) in statedb.rows(crawls.db_path, "SELECT url FROM pages WHERE status = 'live'")
    }


def by_status(crawls: Crawls, site: Site) -> dict[str, str]:
    return {
        u.removeprefix(site.base_url): s
        for u, s in statedb.rows(crawls.db_path, "SELECT url, status FROM pages")
    }


async def crawl_from(crawls: Crawls, site: Site, path: str = "index.html", **settings: Any) -> CrawlResult:
    return await crawls.crawl(None, spider_args={"start_url": site.url(path)}, **settings)


def changed(r: CrawlResult, site: Site, action: str) -> set[str]:
    return {e["url"].removeprefix(site.base_url) for e in r.events if e["action"] == action}


# --- the spider's arguments ----------------------------------------------------------------------


def test_a_start_url_is_a_listing_of_its_own() -> None:
    spider = DocsSpider(start_url="https://docs.example.com/en/stable/index.html")
    assert spider.sitemap_urls == ()
    assert spider.recrawler_site == "docs.example.com"
    assert spider.follow_links is True
    # links are followed under the start URL's folder
    assert spider.follow_prefixes == ("/en/stable/",)
    several = DocsSpider(start_url="https://docs.example.com/a/, https://docs.example.com/b/x.html")
    assert several.follow_prefixes == ("/a/", "/b/")


@pytest.mark.parametrize(
    ("args", "why"),
    [
        ({}, "needs a sitemap or a start URL"),
        ({"start_url": "ftp://docs.example.com/"}, r"start_url: not an http\(s\) URL"),
        ({"start_url": "https://alice:pw@docs.example.com/"}, r"start_url: not an http\(s\) URL"),
    ],
)
def test_a_bad_start_is_one_line(args: dict[str, str], why: str) -> None:
    with pytest.raises(ConfigurationError, match=why):
        DocsSpider(**args)


# --- four versions of a site with no sitemap, crawled from its root --------------------------------


@pytest.mark.timeout(600)
@deferred_f_from_coro_f
async def test_a_site_without_a_sitemap_crawled_from_its_root_over_four_versions(
    site: Site, crawls: Crawls
) -> None:
    tree = TreeSite.build(site)
    assert 250 <= len(tree.pages) <= 400
    assert max(tree.depth(p) for p in tree.pages) == 6
    tree.deploy(T0)
    r1 = await crawl_from(crawls, site)
    # every reachable page, down to the API members 6 links from the root
    assert r1.exit_code == 0, r1.report.get("outcome")
    assert r1.counts["new"] == len(tree.pages)
    assert live(crawls, site) == set(tree.pages)
    deepest = [p for p in tree.pages if tree.depth(p) == 6]
    assert (
        statedb.value(
            crawls.db_path, "SELECT MAX(found_depth) FROM pages WHERE url = ?", (site.url(deepest[0]),)
        )
        == 6
    )

    # v2: ten edits, five pages added (one of them 6 deep), three removed, one only unlinked
    pages = sorted(tree.pages)
    edited2 = set(pages[10:110:10])
    for p in edited2:
        tree.edit(p, "Version 2 adds a retry_limit option.")
    added2 = {
        tree.add(f"new2-{i}.html", f"New page {i}", parent)
        for i, parent in enumerate(["index.html", "p-0.html", "p-1-1.html", "p-2-0-1.html", deepest[1]])
    }
    leaves = [p for p in pages if not tree.links[p] and tree.depth(p) == 4 and p not in edited2 | added2]
    removed2 = set(leaves[40:43])
    for p in removed2:
        tree.remove(p)
    unlinked = leaves[60]
    tree.unlink(unlinked)
    tree.deploy(T0 + 100)
    r2 = await crawl_from(crawls, site)
    assert r2.exit_code == 0, r2.report.get("outcome")
    assert changed(r2, site, "new") == added2
    assert changed(r2, site, "changed") == edited2
    assert changed(r2, site, "quarantined") == removed2
    assert (r2.counts["changed"], r2.counts["new"], r2.counts["quarantined"]) == (10, 5, 3)
    # the page no one links to any more still answers: it stays, checked directly
    assert by_status(crawls, site)[unlinked] == "live"
    assert live(crawls, site) == set(tree.pages) | {unlinked}

    # v3: edits, a page gone for good (410), the quarantined ones now gone, the unlinked one kept
    edited3 = set(pages[5:80:15]) - removed2
    for p in edited3:
        tree.edit(p, "Version 3 renames retry_limit to max_retries.")
    added3 = {tree.add("new3-deep.html", "New deep page", deepest[2])}
    gone3 = next(p for p in leaves[80:] if p not in edited3)
    tree.remove(gone3, gone=True)
    tree.deploy(T0 + 200)
    r3 = await crawl_from(crawls, site)
    assert r3.exit_code == 0, r3.report.get("outcome")
    assert changed(r3, site, "changed") == edited3
    assert changed(r3, site, "new") == added3
    assert changed(r3, site, "gone") == removed2 | {gone3}
    assert by_status(crawls, site)[unlinked] == "live"
    # and it is reported as no longer linked, as a page a sitemap stopped listing is
    assert r3.report["freshness"]["delisted"] == 1

    # v4: the unlinked page is edited where only a direct check sees it; two pages change
    tree.edit(unlinked, "Still here, edited without a link.")
    edited4 = set(pages[60:62])
    for p in edited4:
        tree.edit(p, "Version 4.")
    tree.deploy(T0 + 300)
    r4 = await crawl_from(crawls, site)
    assert r4.exit_code == 0, r4.report.get("outcome")
    assert changed(r4, site, "changed") == edited4 | {unlinked}
    assert live(crawls, site) == tree.reachable() | {unlinked}
    assert tree.reachable() == set(tree.pages) - {unlinked}


@deferred_f_from_coro_f
async def test_an_unchanged_page_lists_its_stored_links(site: Site, crawls: Crawls) -> None:
    """A 304 has no body: the links it had when last read are the listing, as a sitemap file's 304
    lists its stored entries. Nothing is checked as unseen, nothing is reported unlinked."""
    tree = TreeSite.build(site, fanout=(4, 3, 3), deep=3)
    tree.deploy(T0)
    r1 = await crawl_from(crawls, site)
    listed = r1.stats["recrawler/sitemap/pages"]
    r2 = await crawl_from(crawls, site)
    assert r2.counts["not_modified"] == len(tree.pages)
    assert r2.stats["recrawler/sitemap/pages"] == listed
    assert r2.counts["verified"] == 0
    assert r2.report["freshness"]["delisted"] == 0
    assert r2.exit_code == 0


@deferred_f_from_coro_f
async def test_an_adaptive_schedule_reads_every_linked_page_conditionally(site: Site, crawls: Crawls) -> None:
    """Pages not due are still asked (a 304 costs no body): the links are the listing, and a page
    left out would hide the pages below it."""
    tree = TreeSite.build(site, fanout=(4, 3, 3), deep=3)
    tree.deploy(T0)
    adaptive = {"RECRAWLER_SCHEDULE": "adaptive"}
    r1 = await crawl_from(crawls, site, RECRAWLER_NOW=START.isoformat(), **adaptive)
    later = (START + timedelta(hours=2)).isoformat()
    tree.edit("p-1-2-0.html", "Edited under pages that are not due.")
    tree.deploy(T0 + 50)
    r2 = await crawl_from(crawls, site, RECRAWLER_NOW=later, **adaptive)
    assert changed(r2, site, "changed") == {"p-1-2-0.html"}
    assert r2.stats["recrawler/sitemap/pages"] == r1.stats["recrawler/sitemap/pages"]
    assert r2.counts["skipped_schedule"] == 0
    assert r2.counts["verified"] == 0
    assert r2.exit_code == 0


@deferred_f_from_coro_f
async def test_immutable_pages_still_list_their_links(site: Site, crawls: Crawls) -> None:
    """A page RECRAWLER_IMMUTABLE_PATTERNS names is asked again (a 304) when its links are the
    listing: skipped, it would hide the pages below it and the listing would look shrunk."""
    tree = TreeSite.build(site, fanout=(4, 3, 3), deep=3)
    tree.deploy(T0)
    immutable = {"RECRAWLER_IMMUTABLE_PATTERNS": [r"/p-[0-2]"]}
    r1 = await crawl_from(crawls, site, **immutable)
    r2 = await crawl_from(crawls, site, **immutable)
    assert r2.exit_code == 0, r2.report.get("outcome")
    assert r2.stats["recrawler/sitemap/pages"] == r1.stats["recrawler/sitemap/pages"]
    assert r2.counts["verified"] == 0


@deferred_f_from_coro_f
async def test_a_link_crawl_that_reached_far_fewer_pages_is_no_proof(site: Site, crawls: Crawls) -> None:
    """The root lost its navigation (a broken deploy) and some pages answer 404: the link crawl
    reached almost nothing, so the 404s are kept for later evidence, not acted on."""
    tree = TreeSite.build(site, fanout=(4, 3, 3), deep=3)
    tree.deploy(T0)
    await crawl_from(crawls, site)
    for p in ("p-0-0-0.html", "p-1-1-1.html", "p-2-2-2.html", "p-3-0-1.html"):
        site.remove(p)
    site.write("index.html", docsite.guide("Home", "The navigation failed to render."), mtime=T0 + 10)
    r2 = await crawl_from(crawls, site)
    assert "listing_shrunk" in r2.report["outcome"]["reasons"]
    assert r2.counts["quarantined"] == 0
    assert r2.exit_code == 4
    assert set(by_status(crawls, site).values()) == {"live"}


@deferred_f_from_coro_f
async def test_links_outside_the_prefix_and_past_the_bounds_are_not_followed(
    site: Site, crawls: Crawls
) -> None:
    site.write(
        "docs/index.html",
        docsite.guide("Docs", extra=' <a href="a.html">a</a> <a href="../blog/post.html">blog</a>'),
        mtime=T0,
    )
    site.write("docs/a.html", docsite.guide("A", extra=' <a href="b.html">b</a>'), mtime=T0)
    site.write("docs/b.html", docsite.guide("B"), mtime=T0)
    site.write("blog/post.html", docsite.guide("Post"), mtime=T0)
    r = await crawls.crawl(
        None, spider_args={"start_url": site.url("docs/index.html")}, RECRAWLER_FOLLOW_DEPTH_LIMIT=1
    )
    assert live(crawls, site) == {"docs/index.html", "docs/a.html"}
    assert r.stats["recrawler/follow/offsite"] >= 1
    assert r.stats["recrawler/follow/depth_limit"] >= 1
    assert site.requests("docs/b.html") == []
    assert site.requests("blog/post.html") == []


@deferred_f_from_coro_f
async def test_the_default_bounds_reach_a_deep_reference(site: Site, crawls: Crawls) -> None:
    """A Sphinx API reference sits 4 to 6 clicks below the root: the default depth and link budget
    reach a chain 8 links deep."""
    for i in range(9):
        nxt = f' <a href="l{i + 1}.html">next</a>' if i < 8 else ""
        site.write(f"l{i}.html", docsite.guide(f"Level {i}", extra=nxt), mtime=T0)
    r = await crawl_from(crawls, site, "l0.html")
    assert r.counts["new"] == 9


# --- a real docs site with no sitemap: the mesonbuild corpus, four versions ----------------------

#: beside the checkout, or beside the folder of worktrees it is one of
CORPUS = next(
    (c for d in REPO_ROOT.parents if (c := d / "shared" / "corpus" / "mesonbuild").exists()),
    REPO_ROOT.parent / "shared" / "corpus" / "mesonbuild",
)
STEPS = ("v1->v2", "v2->v3", "v3->v4")


def deploy_version(site: Site, version: int) -> set[str]:
    """Serve version *version* of the corpus in the site's folder (the files it drops are gone);
    return its HTML pages."""
    for path in site.root.rglob("*"):
        if path.is_file() and not path.name.startswith("_"):
            path.unlink()
    with tarfile.open(CORPUS / f"v{version}.tar.gz") as tar:
        # the archive's mtimes are the deploy's: every file looks new to Last-Modified
        tar.extractall(site.root, filter="data")
    return {p.name for p in site.root.glob("*.html")}


def truth() -> dict[str, dict[str, str]]:
    labels: dict[str, dict[str, str]] = {}
    for line in (CORPUS / "truth.tsv").read_text().splitlines()[1:]:
        step, path, label = line.split("\t")
        labels.setdefault(step, {})[path] = label
    return labels


def score(labels: dict[str, str], r: CrawlResult, site: Site) -> dict[str, Any]:
    found = changed(r, site, "changed")
    real = {p for p, label in labels.items() if label == "changed"}
    hits = found & real
    return {
        "precision": round(len(hits) / len(found), 3) if found else None,
        "recall": round(len(hits) / len(real), 3) if real else None,
        "false_changes": len(found - real),
        "new": len(changed(r, site, "new")),
        "removed": len(changed(r, site, "quarantined") | changed(r, site, "gone")),
        "missed": sorted(real - found),
        "false": sorted(found - real),
    }


async def crawl_corpus(site: Site, crawls: Crawls, *, sitemap: bool) -> list[dict[str, Any]]:
    """Crawl v1..v4 in turn (from the sitemap, else from index.html); each step's figures."""
    labels, figures, previous = truth(), [], None
    for version in (1, 2, 3, 4):
        pages = deploy_version(site, version)
        asked = len(site.requests())
        if sitemap:
            r = await crawls.crawl(site.write_sitemap(sorted(pages)))
        else:
            r = await crawl_from(crawls, site, "index.html")
        assert r.exit_code == 0, r.report.get("outcome")
        indexed = live(crawls, site) & pages
        assert len(indexed) >= 0.99 * len(pages), sorted(pages - indexed)
        share = f"{len(indexed)}/{len(pages)}"
        # what the run asked the site (a 304 costs no body: the link crawl asks every page)
        cost = {"requests": len(site.requests()) - asked, "not_modified": r.counts["not_modified"]}
        if previous is None:
            figures.append({"step": "v1", "indexed": share, **cost})
        else:
            step = STEPS[version - 2]
            figures.append({"step": step, "indexed": share, **cost, **score(labels[step], r, site)})
        previous = r
    return figures


@pytest.mark.skipif(not (CORPUS / "v1.tar.gz").exists(), reason="the labelled docs corpus is not here")
@pytest.mark.timeout(1200)
@deferred_f_from_coro_f
async def test_a_real_docs_site_crawled_from_its_index_scores_as_with_its_sitemap(
    mockserver: MockServer, tmp_path: Path
) -> None:
    """mesonbuild.com (hotdoc, no sitemap of its own; index.html links every page) at four
    versions: crawled from index.html, the same precision, recall and false changes as from a
    sitemap listing every page, and at least 99% of its pages indexed every time."""
    results = {}
    for variant in ("sitemap", "links"):
        folder = tmp_path / variant
        folder.mkdir()
        results[variant] = await crawl_corpus(
            Site(mockserver, f"meson-{variant}-{tmp_path.name}"), Crawls(folder), sitemap=variant == "sitemap"
        )
    print(json.dumps(results))
    same = ("indexed", "precision", "recall", "false_changes", "new", "removed", "missed", "false")
    assert [{k: v for k, v in step.items() if k in same} for step in results["links"]] == [
        {k: v for k, v in step.items() if k in same} for step in results["sitemap"]
    ]
    # the corpus's own labels: every step's real changes found
    assert all(step["recall"] == 1.0 for step in results["links"][1:])
