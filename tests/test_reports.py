"""The HTML run report of real recrawls: its content, its escaping, and how it looks in Chromium."""

from __future__ import annotations

import asyncio
import html
import json
import os
import re
import shutil
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from lxml import html as lxml_html
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.cli import main as cli_main
from recrawler.cli.settings import build_settings, open_store
from recrawler.exceptions import ConfigurationError
from recrawler.reports import _hold_reasons, collect
from tests import docsite, statedb
from tests.conftest_mockserver import REPO_ROOT

if TYPE_CHECKING:
    from lxml.html import HtmlElement

    from tests.conftest import CrawlResult, Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# page text is untrusted: this must reach the report as text, never as markup that runs
INJECTED = '<script>console.error("injected")</script><img src=x onerror=alert(1)>'


async def recrawl(site: Site, crawls: Crawls, **settings: object) -> tuple[CrawlResult, CrawlResult]:
    """Run 1 stores 4 pages; run 2 sees an edit with a critical number, a new page and a 404."""
    for name in ("intro", "faq", "old"):
        site.write(f"{name}.html", docsite.tool_guide(name.title(), f"The {name} page."), mtime=T0)
    site.write("limits.html", docsite.tool_guide("Limits", "Uploads are split into 8 MB parts."), mtime=T0)
    site.write_sitemap([f"{n}.html" for n in ("limits", "intro", "faq", "old")])
    report_html = str(crawls.tmp_path / "run-{run_id}.html")
    r1 = await crawls.crawl(site.url("sitemap.xml"), RECRAWLER_REPORT_HTML_FILE=report_html, **settings)
    site.write(
        "limits.html",
        docsite.tool_guide(
            "Limits", "Uploads are split into 16 MB parts.", f"Run it like this. {html.escape(INJECTED)}"
        ),
        mtime=T0 + 100,
    )
    site.write("new.html", docsite.tool_guide(f"New {INJECTED}", "A new page."), mtime=T0)
    site.remove("old.html")
    site.write_sitemap(["limits.html", "intro.html", "faq.html", "old.html", "new.html"])
    r2 = await crawls.crawl(site.url("sitemap.xml"), RECRAWLER_REPORT_HTML_FILE=report_html, **settings)
    return r1, r2


def parse(path: Path) -> HtmlElement:
    return lxml_html.fromstring(path.read_text(encoding="utf-8"))


@deferred_f_from_coro_f
async def test_report_after_each_run_shows_changes_pages_and_trends(site: Site, crawls: Crawls) -> None:
    r1, r2 = await recrawl(site, crawls)
    assert r2.counts["changed"] >= 1
    assert r2.counts["new"] == 1
    assert r2.counts["quarantined"] == 1
    first, second = (crawls.tmp_path / f"run-{r['run_id']}.html" for r in (r1.report, r2.report))
    assert first.exists()
    doc = parse(second)

    assert [td.text for td in doc.cssselect('table.head td[data-count="new"]')] == ["1"]
    assert [td.text for td in doc.cssselect('table.layers td[data-count="not_modified"]')] == [
        str(r2.counts["not_modified"])
    ]
    # the changed page, its diff, and the critical tokens the guard found, marked in the diff
    (change,) = doc.cssselect("article.change")
    assert change.get("data-url") == site.url("limits.html")
    diff = change.cssselect("pre.diff")[0].text_content()
    assert "-Uploads are split into 8 MB parts." in diff
    assert "+Uploads are split into 16 MB parts." in diff
    assert any("8 MB" in li.text_content() for li in change.cssselect("ul.critical li"))
    assert {m.text for m in change.cssselect("mark.critical")} >= {"8 MB", "16 MB"}
    # new and quarantined pages
    assert [a.text for a in doc.cssselect("#pages-new td a")] == [site.url("new.html")]
    assert f"New {INJECTED}" in doc.cssselect("#pages-new td")[1].text_content()
    assert [a.text for a in doc.cssselect("#pages-quarantined td a")] == [site.url("old.html")]
    # the charts: inline SVG, one bar group per run, nothing fetched when the page opens
    assert len(doc.cssselect("#trends svg")) == 4
    # bytes downloaded per run: the first run fetched every body, a 304 fetches none
    assert r1.counts["bytes_received"] > 0
    assert "Bytes downloaded" in doc.cssselect("#trends")[0].text_content()
    assert {t.text for t in doc.cssselect("#trends svg text.tick")} >= {str(r1.report["run_id"]), "1"}
    assert not doc.cssselect("[src]")
    assert not doc.cssselect("link")
    assert not doc.cssselect("#held")

    # untrusted page text is printed as text: no element, handler or script came from it
    raw = second.read_text(encoding="utf-8")
    assert not doc.cssselect("script, img, [onerror]")
    assert INJECTED in change.text_content()
    assert "&lt;script&gt;" in raw
    assert "<script" not in raw

    # `recrawler report` writes the same report on demand, for any run
    out = crawls.tmp_path / "cli-{run_id}.html"
    assert cli_main(["report", str(r1.report["run_id"]), "--db", crawls.db_uri, "-o", str(out)]) == 0
    one = parse(crawls.tmp_path / f"cli-{r1.report['run_id']}.html")
    assert len(one.cssselect("#pages-new td a")) == 4
    assert not one.cssselect("article.change")
    assert cli_main(["report", "99", "--db", crawls.db_uri, "-o", str(out)]) == 2


@deferred_f_from_coro_f
async def test_held_run_report_gives_the_approve_and_discard_commands(site: Site, crawls: Crawls) -> None:
    names = [f"p{i}.html" for i in range(6)]
    for name in names:
        site.write(name, docsite.tool_guide(name, f"Page {name}."), mtime=T0)
    site.write_sitemap(names)
    await crawls.crawl(site.url("sitemap.xml"))
    for name in names[:4]:
        site.remove(name)
    r2 = await crawls.crawl(site.url("sitemap.xml"))
    assert r2.report["held"] == ["mass_removal"]
    run_id = r2.report["run_id"]

    context = collect(open_store(build_settings(db=crawls.db_uri)).readers, db=crawls.db_uri)
    assert context["run"]["id"] == run_id
    assert context["hold_reasons"] == [r2.report["alert"]]
    assert context["hold_reasons"][0].startswith("mass_removal: 4 of 6 live pages")
    assert context["commands"] == [
        f"recrawler runs approve {run_id} --db {crawls.db_uri}",
        f"recrawler runs discard {run_id} --db {crawls.db_uri}",
    ]
    out = crawls.tmp_path / "held.html"
    assert cli_main(["report", "--db", crawls.db_uri, "-o", str(out)]) == 0
    doc = parse(out)
    held = doc.cssselect("#held")[0].text_content()
    assert "mass_removal: 4 of 6 live pages would leave the knowledge base" in held
    assert f"recrawler runs approve {run_id} --db {crawls.db_uri}" in held
    assert len(doc.cssselect("#pages-held tbody tr")) == 4


@deferred_f_from_coro_f
async def test_report_of_a_database_without_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = f"sqlite:///{tmp_path / 'state.db'}"
    store = open_store(build_settings(db=db))
    await store.open()
    await store.close()
    with pytest.raises(ConfigurationError, match="no runs"):
        collect(store.readers)
    assert cli_main(["report", "--db", db, "-o", str(tmp_path / "r.html")]) == 2
    assert "no runs in the database yet" in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()


@deferred_f_from_coro_f
async def test_a_report_leads_with_what_changed_and_says_how_fresh_the_knowledge_base_is(
    site: Site, crawls: Crawls
) -> None:
    _, r2 = await recrawl(site, crawls)
    doc = parse(crawls.tmp_path / f"run-{r2.report['run_id']}.html")
    ids = [e.get("id") for e in doc.iter() if e.get("id")]
    # what changed, what left and how fresh, before the crawler's internals and the charts
    assert ids.index("changes") < ids.index("pages") < ids.index("freshness") < ids.index("counts")
    assert ids.index("counts") < ids.index("trends")
    assert [td.text for td in doc.cssselect('[data-fresh="live"]')] == ["4"]
    assert [td.text for td in doc.cssselect('[data-fresh="verified"]')] == ["4"]
    assert [td.text for td in doc.cssselect('[data-fresh="delisted"]')] == ["0"]
    # quarantines are charted with the rest
    legend = [li.text_content() for li in doc.cssselect("#trends figure.chart")[0].cssselect("ul.legend li")]
    assert legend == ["new", "changed", "quarantined", "gone"]
    # one is one: "1 chunk added", never "1 chunks added"
    assert not re.search(r"\b1 (chunks|texts)\b", doc.cssselect("table.layers")[0].text_content())
    assert not doc.cssselect("#kb-not-updated")


@deferred_f_from_coro_f
async def test_an_old_report_shows_its_run_as_it_ended(site: Site, crawls: Crawls) -> None:
    _, r2 = await recrawl(site, crawls)
    # run 3: old.html answers 404 again and is gone
    r3 = await crawls.crawl(site.url("sitemap.xml"))
    assert r3.counts["gone"] == 1
    out = crawls.tmp_path / "again.html"
    assert cli_main(["report", str(r2.report["run_id"]), "--db", crawls.db_uri, "-o", str(out)]) == 0
    doc = parse(out)
    # run 2 quarantined it: its report says so still, in its counts and in its pages
    assert [td.text for td in doc.cssselect('table.head td[data-count="quarantined"]')] == ["1"]
    assert [a.text for a in doc.cssselect("#pages-quarantined td a")] == [site.url("old.html")]
    assert [td.text for td in doc.cssselect("#pages-quarantined td.state")] == ["quarantined"]
    assert "After the run" in doc.cssselect("#pages-quarantined thead")[0].text_content()
    assert cli_main(["report", "--db", crawls.db_uri, "-o", str(out)]) == 0
    three = parse(out)
    assert [a.text for a in three.cssselect("#pages-gone td a")] == [site.url("old.html")]


@deferred_f_from_coro_f
async def test_a_report_stored_before_deploys_were_reported_still_renders(site: Site, crawls: Crawls) -> None:
    _, r2 = await recrawl(site, crawls)
    run = r2.report["run_id"]
    stored = json.loads(statedb.value(crawls.db_path, "SELECT report FROM runs WHERE id = ?", (run,)))
    stored.pop("deploy")
    with closing(sqlite3.connect(crawls.db_path)) as conn, conn:
        conn.execute("UPDATE runs SET report = ? WHERE id = ?", (json.dumps(stored), run))
    out = crawls.tmp_path / "old.html"
    assert cli_main(["report", str(run), "--db", crawls.db_uri, "-o", str(out)]) == 0
    assert parse(out).cssselect("#deploy") == []
    assert cli_main(["report", "--since", "7d", "--db", crawls.db_uri, "-o", str(out)]) == 0


@deferred_f_from_coro_f
async def test_an_interrupted_run_says_the_knowledge_base_was_not_updated(site: Site, crawls: Crawls) -> None:
    r1, _ = await recrawl(site, crawls)
    site.write("intro.html", docsite.tool_guide("Intro", "The intro page, rewritten."), mtime=T0 + 500)
    cut = await crawls.crawl(site.url("sitemap.xml"), CLOSESPIDER_PAGECOUNT=1)
    assert cut.report["index"]["state"] == "unpublished"
    out = crawls.tmp_path / "cut.html"
    assert cli_main(["report", "--db", crawls.db_uri, "-o", str(out)]) == 0
    doc = parse(out)
    banner = " ".join(doc.cssselect("#kb-not-updated")[0].text_content().split())
    assert banner.startswith(
        "Knowledge base not updated This run did not publish (run ended with closespider_pagecount"
    )
    published = max(r1.report["run_id"], cut.report["run_id"] - 1)
    assert f"The bot answers from run {published} " in banner
    assert "not published" in doc.cssselect("h1 .badge")[0].text_content()


@deferred_f_from_coro_f
async def test_an_approved_run_stands_at_exit_0(site: Site, crawls: Crawls) -> None:
    names = [f"p{i}.html" for i in range(6)]
    for name in names:
        site.write(name, docsite.tool_guide(name, f"Page {name}."), mtime=T0)
    site.write_sitemap(names)
    await crawls.crawl(site.url("sitemap.xml"))
    for name in names[:4]:
        site.remove(name)
    held = await crawls.crawl(site.url("sitemap.xml"))
    run_id = held.report["run_id"]
    assert held.exit_code == 3
    assert await asyncio.to_thread(cli_main, ["runs", "approve", str(run_id), "--db", crawls.db_uri]) == 0
    store = open_store(build_settings(db=crawls.db_uri))
    row = next(r for r in store.readers.iter_runs() if r["id"] == run_id)
    assert (row["state"], row["exit_code"], row["reasons"]) == ("published", 0, ["mass_removal"])
    context = collect(store.readers, run_id)
    assert [p["url"] for p in context["pages"]["quarantined"]] == [site.url(n) for n in sorted(names[:4])]
    out = crawls.tmp_path / "approved.html"
    assert cli_main(["report", str(run_id), "--db", crawls.db_uri, "-o", str(out)]) == 0
    doc = parse(out)
    assert "it is now published" in doc.cssselect("#held")[0].text_content()
    assert "exit code 0" in doc.cssselect("header")[0].text_content()


@deferred_f_from_coro_f
async def test_report_goes_to_the_project_data_directory(
    site: Site, crawls: Crawls, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await recrawl(site, crawls)
    work = tmp_path / "somewhere"
    work.mkdir()
    monkeypatch.chdir(work)
    assert cli_main(["report", "--db", crawls.db_uri]) == 0
    assert cli_main(["report", "--since", "7d", "--db", crawls.db_uri]) == 0
    # not the working directory: Scrapy's data directory, which a checkout ignores
    assert [p.name for p in work.iterdir()] == [".scrapy"]
    written = sorted(p.name for p in (work / ".scrapy" / "reports").iterdir())
    assert written[0].startswith("recrawler-digest-")
    assert written[1] == "recrawler-report-2.html"
    ignored = (REPO_ROOT / ".gitignore").read_text().splitlines()
    assert {".scrapy/", "recrawler-report-*.html", "recrawler-digest-*.html"} <= set(ignored)


def test_hold_reasons_split_between_reasons_only() -> None:
    report = {
        "held": ["change_spike", "mass_removal"],
        "alert": "change_spike: 9 of 10 pages; a template?; mass_removal: 4 of 6 (4 quarantined; RATIO=0.1)",
    }
    assert _hold_reasons(report) == [
        "change_spike: 9 of 10 pages; a template?",
        "mass_removal: 4 of 6 (4 quarantined; RATIO=0.1)",
    ]
    # the outage guard's reasons are no hold
    assert _hold_reasons({"held": [], "alert": None, "reconcile": {"skipped": ["error_ratio"]}}) == []


def chromium(page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Open *page* in headless Chromium with its console on stderr (no network, no profile reuse)."""
    assert CHROMIUM is not None
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        *args,
        page.as_uri(),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=90, check=True)


def console(stderr: str) -> list[str]:
    """Console messages (errors, CSP refusals, uncaught exceptions) Chromium logged for the page."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs it)")
@deferred_f_from_coro_f
async def test_report_in_headless_chromium(site: Site, crawls: Crawls, tmp_path: Path) -> None:
    _, r2 = await recrawl(site, crawls)
    page = crawls.tmp_path / f"run-{r2.report['run_id']}.html"

    dumped = chromium(page, tmp_path / "profile-dom", "--dump-dom")
    assert console(dumped.stderr) == []
    dom = lxml_html.fromstring(dumped.stdout)
    (change,) = dom.cssselect("article.change")
    assert change.get("data-url") == site.url("limits.html")
    assert "+Uploads are split into 16 MB parts." in change.cssselect("pre.diff")[0].text_content()
    assert "16 MB" in [m.text for m in change.cssselect("mark.critical")]
    # the injected markup stayed text in the live DOM too
    assert not dom.cssselect("script")
    assert not dom.cssselect("img")
    assert INJECTED in change.text_content()

    shot = tmp_path / "report.png"
    shown = chromium(
        page,
        tmp_path / "profile-shot",
        "--hide-scrollbars",
        "--window-size=1200,2400",
        f"--screenshot={shot}",
    )
    assert console(shown.stderr) == []
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(data) > 10_000
    keep = os.environ.get("RECRAWLER_TEST_SCREENSHOTS")
    if keep:
        shutil.copy(shot, Path(keep) / "run-report.png")


@deferred_f_from_coro_f
async def test_a_report_opens_with_one_line_of_totals(site: Site, crawls: Crawls) -> None:
    r1, r2 = await recrawl(site, crawls)
    first = parse(crawls.tmp_path / f"run-{r1.report['run_id']}.html")
    second = parse(crawls.tmp_path / f"run-{r2.report['run_id']}.html")
    for doc in (first, second):
        # the first thing under the title
        header = doc.cssselect("header")[0]
        assert [e.tag for e in header][:2] == ["h1", "p"]
        assert header[1].get("id") == "totals"
    assert " ".join(first.cssselect("#totals")[0].text_content().split()) == (
        "First crawl: 4 pages checked: 4 new, 0 changed, 0 unchanged, 0 gone, 0 errors. "
        "Published: the bot answers from this run."
    )
    assert " ".join(second.cssselect("#totals")[0].text_content().split()) == (
        "4 pages checked: 1 new, 1 changed, 2 unchanged, 0 gone, 0 errors, "
        "1 missing (out of search until they answer again). Published: the bot answers from this run."
    )


@deferred_f_from_coro_f
async def test_an_old_report_shows_freshness_as_of_its_run(site: Site, crawls: Crawls) -> None:
    from tests.test_reports_digest import age

    _, r2 = await recrawl(site, crawls)
    # three days later, nothing crawled since: today every page is older than the 24 h bound
    age(crawls.db_path, 3)
    out = crawls.tmp_path / "later.html"
    assert cli_main(["report", str(r2.report["run_id"]), "--db", crawls.db_uri, "-o", str(out)]) == 0
    doc = parse(out)
    heading = " ".join(doc.cssselect("#freshness h2")[0].text_content().split())
    assert heading.startswith("How fresh the knowledge base was after this run (")
    assert [td.text for td in doc.cssselect('[data-fresh="verified"]')] == ["4"]
    assert [td.text for td in doc.cssselect('[data-fresh="percent"]')] == ["100%"]
    assert "just now" in text_of(doc, "#freshness")


def text_of(doc: HtmlElement, selector: str) -> str:
    return " ".join(" ".join(e.text_content().split()) for e in doc.cssselect(selector))
