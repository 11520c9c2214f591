"""Adaptive revisits end to end: a local site changing at different rates, runs on a simulated clock."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.cli import main as cli_main
from recrawler.intervals import EARLY
from tests import docsite, shell, statedb

if TYPE_CHECKING:
    from pathlib import Path

    from tests.conftest import CrawlResult, Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0
START = datetime(2026, 1, 5, 6, 0, tzinfo=UTC)
DAY = 86400.0


def at(day: float) -> str:
    return (START + timedelta(days=day)).isoformat()


def rows(db: Path, sql: str) -> dict[str, Any]:
    return {r[0].rsplit("/", 1)[-1]: r[1] if len(r) == 2 else r[1:] for r in statedb.rows(db, sql)}


def hits(site: Site, path: str) -> int:
    return len(site.requests(path))


def quiet_until(crawls: Crawls, *names: str) -> datetime:
    """The first run clock at which one of the stored pages *names* comes due by its own time
    within its bound (a hash of its URL places it: the test site's folder name is random)."""
    found = statedb.rows(crawls.db_path, "SELECT url, next_check_at, check_interval FROM pages")
    return min(
        datetime.fromisoformat(nxt) - timedelta(seconds=bound * EARLY)
        for url, nxt, bound in found
        if url.rsplit("/", 1)[-1] in names
    )


def iso(moment: datetime) -> str:
    return moment.isoformat()


async def run(
    crawls: Crawls, sitemap: str, day: float, spider_args: dict[str, Any] | None = None, **settings: Any
) -> CrawlResult:
    # no deploy probes: each run asks exactly what its schedule says (test_crawl_deploys.py probes)
    return await crawls.crawl(
        sitemap,
        spider_args,
        **{
            "RECRAWLER_SCHEDULE": "adaptive",
            "RECRAWLER_NOW": at(day),
            "RECRAWLER_DEPLOY_PROBES": 0,
            **settings,
        },
    )


@deferred_f_from_coro_f
async def test_each_page_is_checked_once_per_bound_at_a_time_of_its_own(site: Site, crawls: Crawls) -> None:
    # 24 pages and a changelog with a bound of its own; nothing changes; hourly runs for a day
    names = [f"p{i}.html" for i in range(24)]
    for name in [*names, "changelog.html"]:
        site.write(name, docsite.guide(name[:-5]), mtime=T0)
    sitemap = site.write_sitemap([*names, "changelog.html"])
    overrides = {"RECRAWLER_INTERVAL_OVERRIDES": {r"/changelog\.html$": 6 * 3600}}
    await run(crawls, sitemap, 0, **overrides)
    site.clear_requests()
    per_run = []
    for hour in range(1, 25):
        before = len(site.requests())
        r = await run(crawls, sitemap, hour / 24, **overrides)
        per_run.append(len(site.requests()) - before - 1)  # less the sitemap
        assert r.report["freshness"]["current"] is True
    # each page once a day (the bound), spread over the runs: never a burst where all come due
    assert [hits(site, name) for name in names] == [1] * 24
    assert max(per_run) <= 8
    # the changelog's own bound: every six hours
    assert hits(site, "changelog.html") == 4
    state = rows(crawls.db_path, "SELECT url, check_interval FROM pages")
    assert (state["p0.html"], state["changelog.html"]) == (DAY, 6 * 3600)


@deferred_f_from_coro_f
async def test_pages_not_due_are_not_requested_and_never_unseen(site: Site, crawls: Crawls) -> None:
    for name in ("a", "b", "c"):
        site.write(f"{name}.html", docsite.guide(name), mtime=T0)
    sitemap = site.write_sitemap(["a.html", "b.html", "c.html"])
    # a bound of ten years: no page's own time comes within these runs
    bounds = {"RECRAWLER_MAX_INTERVAL_SECS": 3650 * DAY}
    r1 = await run(crawls, sitemap, 0, **bounds)
    assert r1.counts["new"] == 3

    # c disappears from the listing and the server; nothing is due yet, but the listing's news
    # is acted on in the run that notices: a page left the listing (a deploy), so every page is
    # checked (a and b answer 304), c directly, and its 404 quarantines it
    site.remove("c.html")
    site.write_sitemap(["a.html", "b.html"])
    site.clear_requests()
    r2 = await run(crawls, sitemap, 0.5, **bounds)
    assert sorted(r["path"] for r in site.requests()) == ["a.html", "b.html", "c.html", "sitemap.xml"]
    assert r2.report["deploy"]["reason"] == "listing moved: 1 removed"
    assert r2.counts["not_modified"] == 2
    assert r2.stats["recrawler/reconcile/verified"] == 1
    assert r2.actions() == {"c.html": "quarantined"}

    # a listed page not due is never unseen: a and b are left alone while c is checked every run
    # until it is gone, whatever its schedule
    site.clear_requests()
    r3 = await run(crawls, sitemap, 0.6, **bounds)
    assert [r["path"] for r in site.requests()] == ["sitemap.xml", "c.html"]
    assert r3.counts["skipped_schedule"] == 2
    line = r3.report["counts"]
    assert (line["skipped_schedule"], line["skipped_lastmod"], line["skipped_deltafetch"]) == (2, 0, 0)
    assert r3.actions() == {"c.html": "gone"}
    assert rows(crawls.db_path, "SELECT url, status FROM pages")["a.html"] == "live"


@deferred_f_from_coro_f
async def test_schedule_all_forces_a_full_pass(site: Site, crawls: Crawls) -> None:
    site.write("a.html", docsite.guide("a"), mtime=T0)
    sitemap = site.write_sitemap(["a.html"])
    await run(crawls, sitemap, 0)
    r2 = await run(crawls, sitemap, 0.01)
    assert r2.counts["skipped_schedule"] == 1
    r3 = await run(crawls, sitemap, 0.01, RECRAWLER_SCHEDULE="all")
    assert r3.counts["unchanged"] == 1
    assert r3.report["schedule"]["due"] == {"all": 1}
    assert r3.report["schedule"]["now"] == at(0.01)


@deferred_f_from_coro_f
async def test_lastmod_skip_requests_nothing_old_even_past_the_bound(site: Site, crawls: Crawls) -> None:
    settings = {"RECRAWLER_LASTMOD_MODE": "skip", "RECRAWLER_MAX_INTERVAL_SECS": 5 * DAY}
    old = (START - timedelta(days=30)).date().isoformat()
    site.write("a.html", docsite.guide("a"), mtime=T0)
    site.write("b.html", docsite.guide("b"), mtime=T0)
    sitemap = site.write_sitemap([("a.html", old), ("b.html", old)])
    await run(crawls, sitemap, 0, **settings)

    site.clear_requests()
    for day in (1, 2, 3):
        if day == 2:
            # b changes and the sitemap says so: due at once
            site.write("b.html", docsite.guide("b", "New text."), mtime=T0 + 50)
            site.write_sitemap([("a.html", old), ("b.html", at(1.9))])
        r = await run(crawls, sitemap, day, **settings)
        if day == 2:
            assert r.actions() == {"b.html": "changed"}
            assert r.report["schedule"]["due"] == {"lastmod": 1}
    # a: not one request while its lastmod stayed old, though its schedule made it due daily
    assert hits(site, "a.html") == 0
    assert hits(site, "b.html") == 1

    # five days (the bound) after its last check, a is still not asked: its lastmod vouches for it
    r5 = await run(crawls, sitemap, 5, **settings)
    assert r5.report["schedule"]["due"] == {}
    assert r5.counts["skipped_lastmod"] == 2
    assert r5.stats["recrawler/schedule/vouched/lastmod"] == 2
    assert hits(site, "a.html") == 0
    fresh = r5.report["freshness"]
    assert (fresh["verified"], fresh["by"]["lastmod"], fresh["current"]) == (2, 2, True)


@deferred_f_from_coro_f
async def test_hint_never_skips_on_lastmod_and_ignore_reads_none(site: Site, crawls: Crawls) -> None:
    old = (START - timedelta(days=30)).date().isoformat()
    site.write("a.html", docsite.guide("a"), mtime=T0)
    sitemap = site.write_sitemap([("a.html", old)])
    await run(crawls, sitemap, 0)
    # hint (default): lastmod says nothing changed, the schedule says due: requested
    r2 = await run(crawls, sitemap, 1)
    assert r2.report["schedule"]["due"] == {"scheduled": 1}
    # a newer lastmod makes it due at once in hint mode, not in ignore mode
    t3 = min(START + timedelta(days=1.6), quiet_until(crawls, "a.html") - timedelta(minutes=2))
    site.write_sitemap([("a.html", iso(t3 - timedelta(minutes=1)))])
    r3 = await crawls.crawl(
        sitemap, RECRAWLER_SCHEDULE="adaptive", RECRAWLER_NOW=iso(t3), RECRAWLER_DEPLOY_PROBES=0
    )
    assert r3.report["schedule"]["due"] == {"lastmod": 1}
    t4 = min(t3 + timedelta(minutes=2), quiet_until(crawls, "a.html") - timedelta(seconds=10))
    site.write_sitemap([("a.html", iso(t4 - timedelta(seconds=5)))])
    r4 = await crawls.crawl(
        sitemap,
        RECRAWLER_SCHEDULE="adaptive",
        RECRAWLER_NOW=iso(t4),
        RECRAWLER_DEPLOY_PROBES=0,
        RECRAWLER_LASTMOD_MODE="ignore",
    )
    assert r4.counts["skipped_schedule"] == 1


def atom(entries: list[tuple[str, str]]) -> str:
    items = "".join(
        f"<entry><title>{link}</title><id>{link}</id><link href='{link}'/>"
        f"<updated>{updated}</updated></entry>"
        for link, updated in entries
    )
    return (
        "<?xml version='1.0' encoding='utf-8'?><feed xmlns='http://www.w3.org/2005/Atom'>"
        f"<title>Docs changes</title><id>urn:docs</id><updated>{at(0)}</updated>{items}</feed>"
    )


def rss(entries: list[tuple[str, str]]) -> str:
    from email.utils import format_datetime

    items = "".join(
        f"<item><title>{link}</title><link>{link}</link>"
        f"<pubDate>{format_datetime(datetime.fromisoformat(updated))}</pubDate></item>"
        for link, updated in entries
    )
    return f"<?xml version='1.0'?><rss version='2.0'><channel><title>Docs</title>{items}</channel></rss>"


@deferred_f_from_coro_f
async def test_feed_entries_make_their_pages_due(site: Site, crawls: Crawls) -> None:
    settings = {"RECRAWLER_MAX_INTERVAL_SECS": 30 * DAY}
    for name in ("a", "b", "c"):
        site.write(f"{name}.html", docsite.guide(name), mtime=T0)
    sitemap = site.write_sitemap(["a.html", "b.html", "c.html"])
    await run(crawls, sitemap, 0, **settings)
    # runs before any of the three pages' own time comes
    t2 = min(START + timedelta(days=1), quiet_until(crawls, "a.html", "b.html", "c.html")) - timedelta(
        minutes=1
    )
    t3 = t2 + timedelta(seconds=30)

    # a changed after its last check, b's entry is older than it; n is a page the sitemap lacks
    site.write("a.html", docsite.guide("a", "Edited."), mtime=T0 + 10)
    site.write("n.html", docsite.guide("n"), mtime=T0)
    for kind, build in (("atom.xml", atom), ("rss.xml", rss)):
        site.write(
            kind,
            build(
                [
                    (site.url("a.html"), iso(START + (t2 - START) / 2)),
                    (site.url("b.html"), at(-2)),
                    (site.url("n.html"), iso(START + (t2 - START) / 3)),
                ]
            ),
        )
    site.clear_requests()
    r2 = await crawls.crawl(
        sitemap,
        {"feed_url": site.url("atom.xml")},
        RECRAWLER_SCHEDULE="adaptive",
        RECRAWLER_NOW=iso(t2),
        RECRAWLER_DEPLOY_PROBES=0,
        **settings,
    )
    assert r2.actions() == {"a.html": "changed", "n.html": "new"}
    assert r2.report["schedule"]["due"] == {"feed": 1, "new": 1}
    assert r2.counts["skipped_schedule"] == 2  # b and c
    assert (hits(site, "b.html"), hits(site, "c.html")) == (0, 0)
    assert r2.stats["recrawler/feed/entries"] == 3
    found = rows(crawls.db_path, "SELECT url, found_via, found_from FROM pages")
    assert found["n.html"] == ("feed", site.url("atom.xml"))
    assert found["a.html"] == ("sitemap", None)

    # RSS works the same; an entry not newer than the last check changes nothing
    site.clear_requests()
    r3 = await crawls.crawl(
        sitemap,
        {"feed_url": site.url("rss.xml")},
        RECRAWLER_SCHEDULE="adaptive",
        RECRAWLER_NOW=iso(t3),
        RECRAWLER_DEPLOY_PROBES=0,
        **settings,
    )
    assert r3.stats["recrawler/feed/entries"] == 3
    assert [r["path"] for r in site.requests() if r["path"].endswith(".html")] == []


@deferred_f_from_coro_f
async def test_broken_feed_is_counted_and_the_run_goes_on(site: Site, crawls: Crawls) -> None:
    site.write("a.html", docsite.guide("a"), mtime=T0)
    sitemap = site.write_sitemap(["a.html"])
    r = await run(crawls, sitemap, 0, {"feed_url": site.url("missing.xml")})
    assert r.stats["recrawler/feed/error"] == 1
    assert r.counts["new"] == 1
    assert r.report["reconcile"]["applied"]


@deferred_f_from_coro_f
async def test_link_discovery_finds_pages_missing_from_the_sitemap(
    site: Site, crawls: Crawls, mockserver: Any
) -> None:
    links = "".join(
        f'<a href="{href}">{href}</a>'
        for href in (
            "hidden.html",
            "d1.html",
            f"{mockserver.url}/elsewhere.html",
            "https://example.org/x.html",
        )
    )
    site.write("index.html", docsite.page("Index", [("Links", [links])]), mtime=T0)
    site.write("hidden.html", docsite.guide("hidden"), mtime=T0)
    site.write("d1.html", docsite.page("D1", [("L", ['<a href="d2.html">d2</a>'])]), mtime=T0)
    site.write("d2.html", docsite.page("D2", [("L", ['<a href="d3.html">d3</a>'])]), mtime=T0)
    site.write("d3.html", docsite.guide("d3"), mtime=T0)
    sitemap = site.write_sitemap(["index.html"])
    r = await run(crawls, sitemap, 0, {"follow_links": "1"}, RECRAWLER_FOLLOW_DEPTH_LIMIT=2)
    assert set(r.actions()) == {"index.html", "hidden.html", "d1.html", "d2.html"}
    assert hits(site, "d3.html") == 0
    assert r.stats["recrawler/follow/depth_limit"] >= 1
    assert r.stats["recrawler/follow/offsite"] >= 2  # outside the site's folder, another host
    found = rows(crawls.db_path, "SELECT url, found_via, found_from FROM pages")
    assert found["hidden.html"] == ("link", site.url("index.html"))
    assert found["d2.html"] == ("link", site.url("d1.html"))
    assert found["index.html"] == ("sitemap", None)

    # without follow_links, the found pages are stored pages like any other: kept, not gone
    r2 = await run(crawls, sitemap, 0.01)
    assert r2.counts["skipped_schedule"] == 1
    assert r2.counts["gone"] == r2.counts["quarantined"] == 0


@deferred_f_from_coro_f
async def test_cli_due_lists_what_the_next_run_checks_and_why(
    site: Site, crawls: Crawls, capsys: Any
) -> None:
    for name in ("a", "b"):
        site.write(f"{name}.html", docsite.guide(name), mtime=T0)
    sitemap = site.write_sitemap(["a.html", ("b.html", at(0))])
    await run(crawls, sitemap, 0)
    capsys.readouterr()
    quiet = iso(quiet_until(crawls, "a.html", "b.html") - timedelta(minutes=1))
    assert cli_main(["due", "--db", crawls.db_uri, "--now", quiet]) == 0
    assert "0 of 2 stored pages due" in capsys.readouterr().out
    assert cli_main(["due", "--db", crawls.db_uri, "--now", at(2), "--json"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert {x["url"].rsplit("/", 1)[-1]: x["reason"] for x in lines} == {
        "a.html": "scheduled",
        "b.html": "scheduled",
    }
    assert all(x["interval_secs"] == DAY for x in lines)
    assert {x["verified_by"] for x in lines} == {"request"}
    assert cli_main(["due", "--db", crawls.db_uri, "--now", quiet, "--all"]) == 0
    out = capsys.readouterr().out
    assert "not due" in out
    assert "a.html" in out


def test_clock_schedule_and_overrides_from_the_command_line(site: Site, tmp_path: Path) -> None:
    for name in ("a", "b"):
        site.write(f"{name}.html", docsite.guide(name), mtime=T0)
    sitemap = site.write_sitemap(["a.html", "b.html"])
    db = tmp_path / "cli.db"

    def crawl(*settings: str) -> dict[str, Any]:
        report = tmp_path / "report.json"
        shell.scrapy_crawl(
            sitemap,
            f"RECRAWLER_DB_URI=sqlite:///{db}",
            f"RECRAWLER_REPORT_FILE={report}",
            *settings,
            check=True,
        )
        return dict(json.loads(report.read_text()))

    overrides = json.dumps({r"a\.html$": [7200, 7200]})
    r1 = crawl(f"RECRAWLER_NOW={at(0)}", f"RECRAWLER_INTERVAL_OVERRIDES={overrides}")
    assert r1["schedule"] == {"mode": "adaptive", "lastmod_mode": "hint", "now": at(0), "due": {"new": 2}}
    assert rows(db, "SELECT url, check_interval FROM pages") == {"a.html": 7200, "b.html": DAY}
    r2 = crawl(f"RECRAWLER_NOW={at(0.01)}", "RECRAWLER_SCHEDULE=all", "RECRAWLER_AUDIT_SAMPLE=50%")
    assert r2["schedule"]["due"] == {"all": 2}
    assert r2["audit"]["sample"] == 1


def honest_site(site: Site, n: int) -> dict[str, str]:
    """*n* pages, each with the honest lastmod of its last edit (all a month before START)."""
    lastmods = {f"h{i}.html": (START - timedelta(days=30)).isoformat() for i in range(n)}
    for i, name in enumerate(lastmods):
        site.write(name, docsite.guide(f"h{i}"), mtime=T0)
    return lastmods


def edit_some(site: Site, lastmods: dict[str, str], week: int, day: float) -> set[str]:
    """Edit five pages (a different five each week) at *day*; their lastmods say so."""
    edited = {f"h{(week * 5 + j) % len(lastmods)}.html" for j in range(5)}
    for name in edited:
        site.write(name, docsite.guide(name[:-5], f"Edition {week}."), mtime=T0 + week)
        lastmods[name] = at(day)
    return edited


@deferred_f_from_coro_f
async def test_honest_lastmods_vouch_for_unchanged_pages_on_weekly_runs(site: Site, crawls: Crawls) -> None:
    lastmods = honest_site(site, 120)
    sitemap = site.write_sitemap(list(lastmods.items()))
    settings = {"RECRAWLER_LASTMOD_MODE": "skip", "RECRAWLER_AUDIT_SAMPLE": 0.01}
    await run(crawls, sitemap, 0, **settings)
    for week in (1, 2, 3):
        edited = edit_some(site, lastmods, week, 7 * week - 2)
        site.write_sitemap(list(lastmods.items()))
        site.clear_requests()
        r = await run(crawls, sitemap, 7 * week, **settings)
        asked = {q["path"] for q in site.requests() if q["path"].endswith(".html")}
        assert {p for p, a in r.actions().items() if a == "changed"} == edited
        # the edited pages, the audit sample (2) and the run's probes: never every older lastmod
        assert len(asked - edited) <= 2 + 4, week
        fresh = r.report["freshness"]
        assert (fresh["verified"], fresh["current"]) == (120, True)
        assert fresh["by"]["lastmod"] >= 120 - len(asked)
    assert hits(site, "h100.html") <= 1


@deferred_f_from_coro_f
async def test_hint_lastmods_vouch_once_the_audit_found_them_honest(site: Site, crawls: Crawls) -> None:
    lastmods = honest_site(site, 120)
    sitemap = site.write_sitemap(list(lastmods.items()))
    await run(crawls, sitemap, 0, RECRAWLER_AUDIT_SAMPLE=0.01)
    asked: list[int] = []
    for week in (1, 2, 3):
        edited = edit_some(site, lastmods, week, 7 * week - 2)
        site.write_sitemap(list(lastmods.items()))
        site.clear_requests()
        r = await run(crawls, sitemap, 7 * week, RECRAWLER_AUDIT_SAMPLE=0.01)
        assert {p for p, a in r.actions().items() if a == "changed"} == edited
        asked.append(len({q["path"] for q in site.requests() if q["path"].endswith(".html")} - edited))
    # the first weekly run checks every page (the bound: no lastmod is trusted yet), and in doing
    # so audits their claims; from then on the honest lastmods vouch
    assert asked[0] == 115
    assert asked[1] <= 2 + 4
    assert asked[2] <= 2 + 4


@deferred_f_from_coro_f
async def test_lastmods_that_never_move_are_still_caught_lying(site: Site, crawls: Crawls) -> None:
    lastmods = honest_site(site, 60)
    sitemap = site.write_sitemap(list(lastmods.items()))
    settings = {
        "RECRAWLER_LASTMOD_MODE": "skip",
        "RECRAWLER_AUDIT_SAMPLE": 0.01,
        "RECRAWLER_DEPLOY_PROBES": 4,
    }
    await run(crawls, sitemap, 0, **settings)
    # a deploy (a new generator version on every page) edits 20 pages; the sitemap's lastmods stay
    for i in range(60):
        body = docsite.guide(f"h{i}", "Edition 2." if i < 20 else "The original text.")
        site.write(f"h{i}.html", body.replace("<head>", '<head><meta name="generator" content="Docs 2.0">'))
    r = await run(crawls, sitemap, 0.05, **settings)
    assert r.counts["changed"] == 20
    assert r.stats["recrawler/audit/lies/lastmod"] >= 1
    assert r.report["audit"]["distrusted"] == [{"host": site.url().split("/")[2], "signal": "lastmod"}]
