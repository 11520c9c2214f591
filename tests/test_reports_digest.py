"""The digest a team lead opens (``recrawler report --since 7d``): a week of real recrawls of a
120-page site, read as HTML and in headless Chromium.

Runs happen seconds apart; between them the database is aged by a day (every stored time moves
back), so a week of daily runs reads as one. ``RECRAWLER_TEST_SCREENSHOTS`` names a directory that
keeps the Chromium screenshots of the three weeks.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from lxml import html as lxml_html
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.cli import main as cli_main
from recrawler.cli.periods import parse_since
from recrawler.exceptions import ConfigurationError
from tests import docsite, statedb
from tests.test_reports import CHROMIUM, chromium, console

if TYPE_CHECKING:
    from lxml.html import HtmlElement

    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0
PAGES = 120
#: every stored time, by table: what a day's ageing moves back
TIMES = {
    "runs": ("started_at", "finished_at", "published_at"),
    "pages": ("first_seen", "last_checked", "last_changed", "last_check_at", "next_check_at"),
    "page_changes": ("at",),
    "run_pages": ("at",),
}


def body(i: int, text: str = "") -> str:
    words = text or f"Feature {i} uploads files in parts of 8 MB and retries failed parts 3 times."
    return docsite.page(
        f"Guide {i}", [("Overview", [words]), ("Usage", [f"Run tool-{i} --now."], f"tool-{i}")]
    )


def age(db: Path, days: float) -> None:
    """Move every stored time *days* back, as if the runs so far had happened that much earlier."""
    delta = timedelta(days=days)

    def back(value: str | None) -> str | None:
        if not value:
            return value
        moved = datetime.fromisoformat(value) - delta
        return moved.isoformat(timespec="microseconds" if "." in value else "seconds")

    def back_event(payload: str) -> str:
        event = json.loads(payload)
        event["at"] = back(event.get("at"))
        return json.dumps(event)

    with statedb.editing(db) as conn:
        conn.create_function("back", 1, back, deterministic=True)
        conn.create_function("back_event", 1, back_event, deterministic=True)
        # the outbox: each event's time is in its payload
        conn.execute("UPDATE outbox SET payload = back_event(payload)")
        for table, columns in TIMES.items():
            moves = ", ".join(f"{c} = back({c})" for c in columns)
            conn.execute(f"UPDATE {table} SET {moves}")


async def baseline(site: Site, crawls: Crawls) -> str:
    """The site's first crawl, ten days ago (before any week the tests look at)."""
    for i in range(PAGES):
        site.write(f"p{i}.html", body(i), mtime=T0)
    sitemap = site.write_sitemap([f"p{i}.html" for i in range(PAGES)])
    first = await crawls.crawl(sitemap)
    assert first.counts["new"] == PAGES
    age(crawls.db_path, 10)
    return sitemap


async def daily(site: Site, crawls: Crawls, sitemap: str, days: int) -> None:
    """A quiet run a day for *days* days, the last one now."""
    for _ in range(days):
        age(crawls.db_path, 1)
        run = await crawls.crawl(sitemap)
        assert run.counts["new"] + run.counts["changed"] + run.counts["gone"] == 0


def digest(crawls: Crawls, name: str) -> tuple[Path, HtmlElement]:
    out = crawls.tmp_path / f"{name}.html"
    assert cli_main(["report", "--since", "7d", "--db", crawls.db_uri, "-o", str(out)]) == 0
    return out, lxml_html.fromstring(out.read_text(encoding="utf-8"))


def text(doc: HtmlElement, selector: str) -> str:
    return " ".join(" ".join(e.text_content().split()) for e in doc.cssselect(selector))


def order(doc: HtmlElement, *ids: str) -> list[int]:
    """Where each section starts in the document (its position among all elements)."""
    positions = {e.get("id"): n for n, e in enumerate(doc.iter()) if e.get("id")}
    return [positions[i] for i in ids]


def shoot(page: Path, tmp_path: Path, name: str) -> Path:
    """The page as Chromium shows it at 1200 px wide: no console error, a real PNG."""
    dumped = chromium(page, tmp_path / f"profile-{name}-dom", "--dump-dom")
    assert console(dumped.stderr) == []
    shot = tmp_path / f"digest-{name}.png"
    shown = chromium(
        page,
        tmp_path / f"profile-{name}",
        "--hide-scrollbars",
        "--window-size=1200,2000",
        f"--screenshot={shot}",
    )
    assert console(shown.stderr) == []
    assert shot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    keep = os.environ.get("RECRAWLER_TEST_SCREENSHOTS")
    if keep:
        shutil.copy(shot, Path(keep) / shot.name)
    dom = lxml_html.fromstring(dumped.stdout)
    # nothing from the page ran or was fetched
    assert not dom.cssselect("script, img, link, [src]")
    return shot


@deferred_f_from_coro_f
async def test_a_quiet_week(site: Site, crawls: Crawls, tmp_path: Path) -> None:
    sitemap = await baseline(site, crawls)
    await daily(site, crawls, sitemap, 7)
    page, doc = digest(crawls, "quiet")
    # it leads with what changed, what left, what waits and how fresh the knowledge base is
    assert order(doc, "status", "changed", "left", "waiting", "freshness", "internals") == sorted(
        order(doc, "status", "changed", "left", "waiting", "freshness", "internals")
    )
    assert "A quiet 7 days: no page changed, none was added and none left." in text(doc, "#status")
    assert "Nothing waits for a decision." in text(doc, "#status")
    assert text(doc, "#changed > h2") == "What changed 0"
    assert "Nothing left the knowledge base." in text(doc, "#left")
    assert [td.text for td in doc.cssselect('[data-fresh="live"]')] == [str(PAGES)]
    assert [td.text for td in doc.cssselect('[data-fresh="percent"]')] == ["100%"]
    assert [td.text for td in doc.cssselect('[data-fresh="delisted"]')] == ["0"]
    # seven runs, all published, each saving every request by a 304 or a hash
    assert len(doc.cssselect("#runs tbody tr")) == 7
    assert {td.text_content() for td in doc.cssselect("#runs tbody td:last-child")} == {"updated"}
    assert [td.text for td in doc.cssselect('#layers [data-count="not_modified"]')] == [str(7 * PAGES)]
    # four charts; a quiet week has nothing new or changed, downloads nothing (every page and the
    # sitemap answer 304) and embeds nothing: only the requests saved are drawn
    assert len(doc.cssselect("#trends figure.chart")) == 4
    drawn = [
        f.cssselect("figcaption")[0].text for f in doc.cssselect("#trends figure.chart") if f.cssselect("svg")
    ]
    assert drawn == ["Requests saved, by layer"]
    if CHROMIUM:
        shoot(page, tmp_path, "quiet-week")


@deferred_f_from_coro_f
async def test_a_release_week(site: Site, crawls: Crawls, tmp_path: Path) -> None:
    sitemap = await baseline(site, crawls)
    await daily(site, crawls, sitemap, 3)
    # the release: five pages edited (one number that matters), four new pages, two removed
    for i in range(5):
        site.write(
            f"p{i}.html",
            body(i, f"Feature {i} uploads files in parts of 16 MB, retrying 3 times."),
            mtime=T0 + 9,
        )
    for i in range(PAGES, PAGES + 4):
        site.write(f"p{i}.html", body(i), mtime=T0 + 9)
    site.remove("p118.html", gone=True)
    site.remove("p119.html", gone=True)
    site.write_sitemap([f"p{i}.html" for i in range(PAGES + 4) if i not in (118, 119)])
    age(crawls.db_path, 1)
    release = await crawls.crawl(sitemap)
    assert (release.counts["changed"], release.counts["new"], release.counts["gone"]) == (5, 4, 2)
    await daily(site, crawls, sitemap, 3)

    page, doc = digest(crawls, "release")
    assert "5 pages changed, 4 new, 2 left the knowledge base." in text(doc, "#status")
    changed = doc.cssselect("#changed article.change")
    assert sorted(a.get("data-url") for a in changed) == sorted(site.url(f"p{i}.html") for i in range(5))
    # the guard's findings, and the diff (folded) with the critical tokens marked
    assert any("8 MB" in li.text_content() for li in doc.cssselect("#changed ul.critical li"))
    assert {m.text for m in doc.cssselect("#changed mark.critical")} >= {"8 MB", "16 MB"}
    assert sorted(a.text for a in doc.cssselect("#pages-new td a")) == sorted(
        site.url(f"p{i}.html") for i in range(PAGES, PAGES + 4)
    )
    assert sorted(a.text for a in doc.cssselect("#pages-gone td a")) == [
        site.url("p118.html"),
        site.url("p119.html"),
    ]
    assert [td.text for td in doc.cssselect('[data-fresh="live"]')] == [str(PAGES + 2)]
    # the release run's row: what it did
    row = doc.cssselect(f'#runs tr[data-run="{release.report["run_id"]}"] td')
    assert [td.text_content() for td in row[5:9]] == ["4", "5", "0", "2"]
    if CHROMIUM:
        shoot(page, tmp_path, "release-week")


@deferred_f_from_coro_f
async def test_a_week_with_a_held_decision(site: Site, crawls: Crawls, tmp_path: Path) -> None:
    sitemap = await baseline(site, crawls)
    await daily(site, crawls, sitemap, 5)
    # a broken deploy: twenty listed pages answer 404 at once, more than a run may remove; and the
    # sitemap stops naming three pages that still answer
    for i in range(100, PAGES):
        site.remove(f"p{i}.html")
    site.write_sitemap([f"p{i}.html" for i in range(PAGES) if i not in (10, 11, 12)])
    age(crawls.db_path, 1)
    held = await crawls.crawl(sitemap)
    assert held.report["held"] == ["mass_removal"]
    age(crawls.db_path, 1)
    # the next run goes on; the decision waits, carried by it
    later = await crawls.crawl(sitemap)

    page, doc = digest(crawls, "held")
    waiting = doc.cssselect("#waiting [data-run]")
    assert len(waiting) == 1
    run = int(waiting[0].get("data-run"))
    assert run in (held.report["run_id"], later.report["run_id"])
    status = text(doc, "#status")
    assert f"1 run waits for a decision: run {run} (mass_removal)." in status
    shown = waiting[0].text_content()
    assert "mass_removal: 20 of " in shown
    assert "20 removals staged" in shown
    assert f"recrawler runs approve {run} --db {crawls.db_uri}" in shown
    assert f"recrawler runs discard {run} --db {crawls.db_uri}" in shown
    # the three pages are still live and still searchable, though the sitemap dropped them
    assert [td.text for td in doc.cssselect('[data-fresh="delisted"]')] == ["3"]
    assert "Nothing left the knowledge base." in text(doc, "#left")
    if CHROMIUM:
        shoot(page, tmp_path, "held-week")

    # decided: the digest no longer lists it
    # `runs discard` runs an event loop of its own: on a thread of its own here
    assert await asyncio.to_thread(cli_main, ["runs", "discard", str(run), "--db", crawls.db_uri]) == 0
    _, after = digest(crawls, "decided")
    assert "Nothing waits for a decision." in text(after, "#status")
    assert not after.cssselect("#waiting [data-run]")


@deferred_f_from_coro_f
async def test_an_unpublished_run_is_said_plainly(site: Site, crawls: Crawls) -> None:
    sitemap = await baseline(site, crawls)
    for i in range(10):
        site.write(f"p{i}.html", body(i, f"Page {i} was rewritten."), mtime=T0 + 5)
    # the run is cut short after 20 pages: it finishes its work but publishes nothing
    cut = await crawls.crawl(sitemap, CLOSESPIDER_PAGECOUNT=20)
    assert cut.report["index"]["state"] == "unpublished"
    _, doc = digest(crawls, "cut")
    row = doc.cssselect(f'#runs tr[data-run="{cut.report["run_id"]}"] td')
    assert (
        row[-1].text_content().startswith("knowledge base not updated (run ended with closespider_pagecount")
    )
    assert f"run {cut.report['run_id']} (knowledge base not updated" in text(doc, "#status")


def test_since_reads_ages_and_times() -> None:
    now = datetime(2026, 12, 1, 6, 0, tzinfo=UTC)
    assert parse_since("7d", now) == now - timedelta(days=7)
    assert parse_since("2w", now) == now - timedelta(days=14)
    assert parse_since("12h", now) == now - timedelta(hours=12)
    assert parse_since("30m", now) == now - timedelta(minutes=30)
    assert parse_since("2026-11-24", now) == datetime(2026, 11, 24, tzinfo=UTC)
    assert parse_since("2026-11-24T06:00:00Z", now) == datetime(2026, 11, 24, 6, tzinfo=UTC)
    with pytest.raises(ConfigurationError, match="--since: 'last week'"):
        parse_since("last week", now)


def feature(i: int, size: str) -> str:
    return body(i, f"Feature {i} uploads files in parts of {size} and retries failed parts 3 times.")


@deferred_f_from_coro_f
async def test_a_page_changed_three_times_is_one_card_with_its_net_diff(site: Site, crawls: Crawls) -> None:
    sitemap = await baseline(site, crawls)
    site.write("p1.html", feature(1, "8 MB"), mtime=T0)
    for n, size in enumerate(("16 MB", "32 MB", "64 MB"), 1):
        site.write("p1.html", feature(1, size), mtime=T0 + n)
        age(crawls.db_path, 1)
        assert (await crawls.crawl(sitemap)).counts["changed"] == 1
    _, doc = digest(crawls, "thrice")
    # one page, counted once
    assert "1 page changed, 0 new, 0 left the knowledge base." in text(doc, "#status")
    assert text(doc, "#changed > h2") == "What changed 1"
    (card,) = doc.cssselect("#changed article.change")
    assert card.get("data-url") == site.url("p1.html")
    assert "changed 3 times" in text(card, "p.muted")
    # its net diff: the text before the week's first change against the text now
    diff = card.cssselect("pre.diff")[0].text_content()
    assert "-Feature 1 uploads files in parts of 8 MB and retries failed parts 3 times." in diff
    assert "+Feature 1 uploads files in parts of 64 MB and retries failed parts 3 times." in diff
    assert "16 MB" not in diff
    assert "32 MB" not in diff
    assert {m.text for m in card.cssselect("mark.critical")} >= {"8 MB", "64 MB"}
    assert any("64 MB" in li.text_content() for li in card.cssselect("ul.critical li"))


@deferred_f_from_coro_f
async def test_a_first_crawl_says_so_and_is_not_counted_as_new(site: Site, crawls: Crawls) -> None:
    for i in range(PAGES):
        site.write(f"p{i}.html", body(i), mtime=T0)
    sitemap = site.write_sitemap([f"p{i}.html" for i in range(PAGES)])
    assert (await crawls.crawl(sitemap)).counts["new"] == PAGES
    age(crawls.db_path, 3)
    # since then: two pages added and one edited
    site.write("p0.html", feature(0, "16 MB"), mtime=T0 + 5)
    for i in (PAGES, PAGES + 1):
        site.write(f"p{i}.html", body(i), mtime=T0 + 5)
    site.write_sitemap([f"p{i}.html" for i in range(PAGES + 2)])
    assert (await crawls.crawl(sitemap)).counts["new"] == 2
    _, doc = digest(crawls, "first")
    status = text(doc, "#status")
    assert f"First crawl: {PAGES} pages." in status
    assert "Since then: 1 page changed, 2 new, 0 left the knowledge base." in status
    assert f"{PAGES} new" not in status
    assert text(doc, "#pages-new h3") == "New pages 2"
    assert sorted(a.text for a in doc.cssselect("#pages-new td a")) == [
        site.url(f"p{PAGES}.html"),
        site.url(f"p{PAGES + 1}.html"),
    ]


@deferred_f_from_coro_f
async def test_a_page_missing_then_gone_counts_once(site: Site, crawls: Crawls) -> None:
    sitemap = await baseline(site, crawls)
    site.remove("p5.html")  # 404 while the sitemap still names it: missing, then gone
    age(crawls.db_path, 1)
    assert (await crawls.crawl(sitemap)).counts["quarantined"] == 1
    age(crawls.db_path, 1)
    assert (await crawls.crawl(sitemap)).counts["gone"] == 1
    _, doc = digest(crawls, "missing-then-gone")
    assert "0 pages changed, 0 new, 1 left the knowledge base." in text(doc, "#status")
    assert text(doc, "#left > h2") == "What left the knowledge base 1"
    assert [a.text for a in doc.cssselect("#pages-gone td a")] == [site.url("p5.html")]
    assert not doc.cssselect("#pages-quarantined")


#: what a week's digest may weigh and how tall it may be at 1200 px wide (it was 624 KB and
#: 16,000 px for a week of 51 pages changed, some of them three times, after a first crawl)
DIGEST_MAX_BYTES, DIGEST_MAX_HEIGHT = 150_000, 6_000


def height(page: Path, tmp_path: Path) -> int:
    """How tall Chromium draws *page* at 1200 px wide: the lowest row that is not background."""
    image = pytest.importorskip("PIL.Image")
    ops = pytest.importorskip("PIL.ImageOps")
    shot = tmp_path / "tall.png"
    chromium(
        page,
        tmp_path / "profile-tall",
        "--hide-scrollbars",
        "--window-size=1200,16000",
        f"--screenshot={shot}",
    )
    keep = os.environ.get("RECRAWLER_TEST_SCREENSHOTS")
    if keep:
        shutil.copy(shot, Path(keep) / "tall.png")
        shutil.copy(page, Path(keep) / page.name)
    with image.open(shot) as img:
        box = ops.invert(img.convert("L")).getbbox()
    assert box is not None
    return int(box[3])


@pytest.mark.timeout(600)
@deferred_f_from_coro_f
async def test_a_busy_week_stays_a_short_page(site: Site, crawls: Crawls, tmp_path: Path) -> None:
    pages = 200
    for i in range(pages):
        site.write(f"p{i}.html", body(i), mtime=T0)
    sitemap = site.write_sitemap([f"p{i}.html" for i in range(pages)])
    assert (await crawls.crawl(sitemap)).counts["new"] == pages
    # three days of edits to the same 60 pages, 30 pages added, 10 removed
    for day, size in enumerate(("16 MB", "32 MB", "64 MB"), 1):
        for i in range(60):
            site.write(f"p{i}.html", feature(i, size), mtime=T0 + day)
        if day == 2:
            for i in range(pages, pages + 30):
                site.write(f"p{i}.html", body(i), mtime=T0 + day)
            for i in range(190, pages):
                site.remove(f"p{i}.html", gone=True)
            site.write_sitemap([f"p{i}.html" for i in range(pages + 30) if not 190 <= i < pages])
        age(crawls.db_path, 1)
        run = await crawls.crawl(sitemap)
        assert run.counts["changed"] == 60
    page, doc = digest(crawls, "busy")
    status = text(doc, "#status")
    assert f"First crawl: {pages} pages." in status
    assert "Since then: 60 pages changed, 30 new, 10 left the knowledge base." in status
    # one card per page up to a few dozen, the rest listed and folded; long lists fold with a count
    cards = doc.cssselect("#changed article.change")
    assert 0 < len(cards) < 60
    assert len({c.get("data-url") for c in cards}) == len(cards)
    assert text(doc, "#pages-changed-more h3") == f"And {60 - len(cards)} more changed pages"
    assert text(doc, "#pages-new details > summary") == "20 more"
    assert len(doc.cssselect("#pages-new > table tbody tr")) == 10
    size = page.stat().st_size
    assert size <= DIGEST_MAX_BYTES, size
    if CHROMIUM:
        drawn = height(page, tmp_path)
        assert drawn <= DIGEST_MAX_HEIGHT, drawn
        shoot(page, tmp_path, "busy-week")
