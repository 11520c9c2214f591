"""Boilerplate is the site's furniture, never a page's own content: end-to-end recrawls of a site
where about half the pages share a feature list, every page shares a note, and every page carries
an "Edit this page" line and a "Was this page helpful?" run inside ``<main>``; and a database from
before pair statistics migrates forward."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.detect.hashing import page_hash, unpack_blocks
from recrawler.state.sqlite import SCHEMA_VERSION
from tests import statedb
from tests.state_sqlite import opened, query

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site


MTIME = 1_760_000_000.0
PAGES = [f"p{i:02d}.html" for i in range(20)]
WITH_LIST = PAGES[:11]  # just over half the site: every pair of the list is boilerplate-grade
FEATURES = (
    "Builds in seconds, not minutes.",
    "Works offline once installed.",
    "Ships as a single binary with no runtime dependencies.",
    "Plugins can be written in any language.",
    "The same inputs give the same output on every machine.",
    "Free for open-source projects.",
)
NOTE = "Every example on this page assumes Acme 3 or later."
EDIT = "Edit this page"
HELPFUL = ("Was this page helpful?", "Yes / No")
TOPICS = (
    "install", "configure", "upload", "download", "sync", "share", "backup", "restore", "audit",
    "export", "import", "migrate", "monitor", "notify", "schedule", "search", "tag", "archive",
    "purge", "report",
)  # fmt: skip


def own(i: int, n: int) -> str:
    topic = TOPICS[i]
    return (
        f"Paragraph {n} of the {topic} guide: run acme {topic} with the options described here, "
        f"then check the output of acme {topic} --status before you go on."
    )


def body(
    i: int,
    features: Sequence[str] | None = None,
    *,
    list_after: int = 1,
    note: bool = True,
    bullet: str | None = None,
    edit: str = EDIT,
    helpful: tuple[str, str] = HELPFUL,
) -> str:
    """Page ``i``: furniture at the top and bottom of ``<main>``, the page's own paragraphs, and
    (where given) the shared feature list after paragraph ``list_after``."""
    if features is None and PAGES[i] in WITH_LIST:
        features = FEATURES
    listing = "<ul>" + "".join(f"<li>{html.escape(f)}</li>" for f in features or ()) + "</ul>"
    parts = [f"<p>{html.escape(own(i, 1))}</p>"]
    if list_after == 1 and features:
        parts.append(listing)
    if bullet is not None:
        parts.append(f"<ul><li>{html.escape(bullet)}</li></ul>")
    parts.append(f"<p>{html.escape(own(i, 2))}</p>")
    if note:
        parts.append(f'<div class="admonition note"><p>{html.escape(NOTE)}</p></div>')
    parts.append(f"<p>{html.escape(own(i, 3))}</p>")
    if list_after == 3 and features:
        parts.append(listing)
    content = "\n".join(parts)
    return f"""<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>Acme {TOPICS[i]} | Acme Docs</title></head>
<body>
<header class="site-header"><a class="logo" href="/">Acme Docs</a></header>
<main>
<p class="edit-link"><a href="https://git.example.com/acme/docs/edit/{PAGES[i]}">{html.escape(edit)}</a></p>
<h1>Acme {TOPICS[i]}</h1>
{content}
<div class="feedback"><p>{html.escape(helpful[0])}</p><p>{html.escape(helpful[1])}</p></div>
</main>
<footer class="site-footer"><p>Acme Inc.</p></footer>
</body>
</html>
"""


def write(site: Site, page: str, text: str, mtime: float) -> None:
    # no validators: every request is a 200, so the content hash decides on every run
    site.write(page, text, mtime=mtime, validators="none")


def write_all(site: Site, mtime: float, *, edit: str = EDIT, helpful: tuple[str, str] = HELPFUL) -> None:
    for i, page in enumerate(PAGES):
        write(site, page, body(i, edit=edit, helpful=helpful), mtime)


def verdicts(crawls: Crawls) -> list[tuple[str, str]]:
    rows = statedb.rows(crawls.db_path, "SELECT url, verdict FROM page_changes ORDER BY id")
    return [(url.rsplit("/", 1)[-1], verdict) for url, verdict in rows]


SWAPPED = (FEATURES[0], FEATURES[2], FEATURES[1], *FEATURES[3:])


@deferred_f_from_coro_f
async def test_a_page_s_own_use_of_shared_blocks_is_content(site: Site, crawls: Crawls) -> None:
    write_all(site, MTIME)
    sitemap = site.write_sitemap(PAGES)
    r1 = await crawls.crawl(sitemap)
    assert r1.counts["new"] == 20
    assert r1.report["noise"]["boilerplate_on"] > 0

    # each edit moves, removes or adds shared blocks among one page's own content
    edits = {
        "p00.html": body(0, SWAPPED),  # two bullets swapped inside the list
        "p01.html": body(1, FEATURES[:3] + FEATURES[4:]),  # a bullet removed from the middle
        "p02.html": body(2, FEATURES[1:]),  # the first bullet removed
        "p03.html": body(3, FEATURES[:-1]),  # the last bullet removed
        "p04.html": body(4, ()),  # the whole list removed
        "p05.html": body(5, list_after=3),  # the list moved below the page's own paragraphs
        "p11.html": body(11, FEATURES),  # the whole list added to a page without it
        "p12.html": body(12, bullet=FEATURES[3]),  # one shared bullet added between own paragraphs
        "p13.html": body(13, note=False),  # the note every page shares removed from one page
    }
    for page, text in edits.items():
        write(site, page, text, MTIME + 10)
    r2 = await crawls.crawl(sitemap)
    assert r2.actions() == dict.fromkeys(edits, "changed")
    assert {k: v for k, v in r2.counts.items() if k in ("crawled", "changed", "unchanged")} == {
        "crawled": 20,
        "changed": 9,
        "unchanged": 11,
    }
    assert r2.stats["recrawler/page/unchanged/hash"] == 11
    assert r2.report["alert"] is None
    assert sorted(verdicts(crawls)) == sorted((page, "changed") for page in edits)

    # an untouched page stays unchanged, and a page that puts the list back as it was is changed
    write(site, "p04.html", body(4), MTIME + 20)
    r3 = await crawls.crawl(sitemap)
    assert r3.actions() == {"p04.html": "changed"}


@deferred_f_from_coro_f
async def test_furniture_changed_on_every_page_is_not_a_spike(site: Site, crawls: Crawls) -> None:
    write_all(site, MTIME)
    sitemap = site.write_sitemap(PAGES)
    await crawls.crawl(sitemap)
    r2 = await crawls.crawl(sitemap)
    assert r2.stats["recrawler/page/unchanged/hash"] == 20

    # new wording of the edit link and of the feedback run on all 20 pages, in one deploy
    edit, helpful = "Edit this page on GitHub", ("Did this page help you?", "Yes / No")
    write_all(site, MTIME + 10, edit=edit, helpful=helpful)
    r3 = await crawls.crawl(sitemap)
    assert r3.stats["recrawler/page/unchanged/boilerplate"] == 20
    assert {k: v for k, v in r3.counts.items() if k in ("crawled", "changed", "unchanged")} == {
        "crawled": 20,
        "changed": 0,
        "unchanged": 20,
    }
    assert r3.report["alert"] is None
    assert r3.report["index"]["state"] == "published"
    assert r3.events == []
    assert {v for _, v in verdicts(crawls)} == {"unchanged_boilerplate"}

    # the new furniture is learned: the next run is unchanged by hash, and a swap is still caught
    write(site, "p07.html", body(7, SWAPPED, edit=edit, helpful=helpful), MTIME + 20)
    r4 = await crawls.crawl(sitemap)
    assert r4.actions() == {"p07.html": "changed"}
    assert r4.stats["recrawler/page/unchanged/hash"] == 19


PAIRS = "SELECT site, prev, block, pages, boilerplate FROM site_pairs ORDER BY site, prev, block"


def before_pairs(db: Path) -> None:
    """Leave the database as recrawler before schema 6 did: no pair counts; boilerplate blocks
    (on at least half the live pages) flagged in ``site_blocks`` and dropped from page hashes."""
    with statedb.editing(db) as conn:
        conn.execute("DROP TABLE site_pairs")
        conn.execute("DELETE FROM schema_version WHERE version = 6")
        live = conn.execute("SELECT COUNT(*) FROM pages WHERE status = 'live'").fetchone()[0]
        conn.execute("UPDATE site_blocks SET boilerplate = (pages * 2 >= ?)", (live,))
        boiler = {r[0] for r in conn.execute("SELECT block FROM site_blocks WHERE boilerplate = 1")}
        rows = conn.execute("SELECT key, blocks FROM page_fields").fetchall()
        conn.executemany(
            "UPDATE pages SET content_hash = ? WHERE key = ?",
            [(page_hash([b for b in unpack_blocks(blob) if b not in boiler]), key) for key, blob in rows],
        )


@deferred_f_from_coro_f
async def test_a_database_from_before_pairs_migrates_forward(site: Site, crawls: Crawls) -> None:
    write_all(site, MTIME)
    sitemap = site.write_sitemap(PAGES)
    await crawls.crawl(sitemap)
    learned = query(crawls.db_path, PAIRS)
    before_pairs(crawls.db_path)

    # counted from the stored blocks on open, once; every page re-hashed: nothing changed
    async with opened(crawls.db_path):
        pass
    assert query(crawls.db_path, PAIRS) == learned
    async with opened(crawls.db_path):
        pass
    assert query(crawls.db_path, "SELECT MAX(version) FROM schema_version") == [(SCHEMA_VERSION,)]
    r2 = await crawls.crawl(sitemap)
    assert r2.stats["recrawler/page/unchanged/hash"] == 20
    assert r2.report["noise"]["boilerplate_on"] == 0

    write(site, "p00.html", body(0, SWAPPED), MTIME + 10)
    r3 = await crawls.crawl(sitemap)
    assert r3.actions() == {"p00.html": "changed"}
