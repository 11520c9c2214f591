"""Docs change in deploys: the run after a deploy catches all of it, a run with nothing new asks
almost nothing (real crawls with default settings on the local server, runs minutes apart)."""

from __future__ import annotations

import asyncio
import csv
import html
import tarfile
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler import default_settings
from recrawler.cli import main as cli_main
from tests import docsite
from tests.conftest_mockserver import REPO_ROOT

if TYPE_CHECKING:
    from tests.conftest import CrawlResult, Crawls
    from tests.conftest_mockserver import Site

#: the shared corpus beside the checkout (or beside the folder of worktrees it is one of)
CORPUS = (
    next(
        (d for d in (REPO_ROOT.parent, REPO_ROOT.parent.parent) if (d / "shared" / "corpus").is_dir()),
        REPO_ROOT.parent,
    )
    / "shared"
    / "corpus"
    / "mesonbuild"
)
START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
#: what a team gets without a single setting (the crawls fixture checks every page and audits none)
DEFAULTS: dict[str, Any] = {
    "RECRAWLER_SCHEDULE": default_settings.RECRAWLER_SCHEDULE,
    "RECRAWLER_AUDIT_SAMPLE": default_settings.RECRAWLER_AUDIT_SAMPLE,
}
needs_corpus = pytest.mark.skipif(
    not (CORPUS / "v1.tar.gz").exists(), reason="the labelled docs corpus is not here"
)


def at(minutes: float) -> str:
    return (START + timedelta(minutes=minutes)).isoformat()


async def crawl(crawls: Crawls, sitemap: str, minutes: float, **settings: Any) -> CrawlResult:
    return await crawls.crawl(sitemap, **{**DEFAULTS, "RECRAWLER_NOW": at(minutes), **settings})


def html_requests(site: Site) -> list[dict[str, Any]]:
    return [r for r in site.requests() if r["path"].endswith(".html")]


# --- the labelled corpus: a real docs site deployed four times -----------------------------------


def deploy_corpus(site: Site, version: int) -> list[str]:
    """Serve the corpus version as a deploy would leave it: its files with the tarball's mtimes (each
    file of a version carries the version's commit time, so every file has new validators), the
    pages of the last version gone, and a sitemap without lastmod; returns the pages."""
    pages: list[str] = []
    with tarfile.open(CORPUS / f"v{version}.tar.gz") as tar:
        for member in tar.getmembers():
            name = member.name.removeprefix("./")
            if not member.isfile():
                continue
            file = tar.extractfile(member)
            assert file is not None
            site.write(name, file.read(), mtime=member.mtime)
            if name.endswith(".html") and "/" not in name:
                pages.append(name)
    for old in site.root.glob("*.html"):
        if old.name not in pages:
            site.remove(old.name)
    # nginx's validators: mtime and size (a deploy touches every file)
    site.options("*", validators="mtime")
    site.write_sitemap(sorted(pages))
    return pages


def truth() -> dict[str, dict[str, str]]:
    """step -> path -> label (added, removed, changed, noise, identical)."""
    out: dict[str, dict[str, str]] = {}
    with (CORPUS / "truth.tsv").open(encoding="utf-8") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            out.setdefault(row["step"], {})[row["path"]] = row["label"]
    return out


def score(result: CrawlResult, labels: dict[str, str]) -> dict[str, Any]:
    actions = result.actions()
    changed = {p for p, a in actions.items() if a == "changed"}
    want = {p for p, label in labels.items() if label == "changed"}
    added = {p for p, label in labels.items() if label == "added"}
    removed = {p for p, label in labels.items() if label == "removed"}
    return {
        "recall": len(changed & want) / len(want),
        "missed": sorted(want - changed),
        "false": sorted(changed - want),
        "new": {p for p, a in actions.items() if a == "new"} == added,
        "removed": {p for p, a in actions.items() if a in ("quarantined", "gone")} == removed,
    }


@needs_corpus
@pytest.mark.timeout(600)
@deferred_f_from_coro_f
async def test_each_deploy_of_a_real_docs_site_is_caught_by_the_next_run(site: Site, crawls: Crawls) -> None:
    labels = truth()
    deploy_corpus(site, 1)
    sitemap = site.url("sitemap.xml")
    first = await crawl(crawls, sitemap, 0)
    assert first.counts["new"] == 198
    minutes = 0
    for step, version in (("v1->v2", 2), ("v2->v3", 3), ("v3->v4", 4)):
        # a run with nothing deployed since the last asks almost nothing
        minutes += 5
        site.clear_requests()
        quiet = await crawl(crawls, sitemap, minutes)
        assert len(html_requests(site)) <= 0.10 * 198, step
        assert quiet.counts["changed"] == quiet.counts["new"] == 0
        assert "recrawler/deploy/detected" not in quiet.stats
        # then the deploy, and the run minutes after it
        pages = deploy_corpus(site, version)
        minutes += 5
        site.clear_requests()
        result = await crawl(crawls, sitemap, minutes)
        s = score(result, labels[step])
        assert (s["recall"], s["missed"]) == (1.0, []), step
        assert len(s["false"]) <= 0.01 * len(pages), (step, s["false"])
        assert s["new"], step
        assert s["removed"], step
        assert result.stats["recrawler/deploy/detected"] == 1
        assert result.report["deploy"]["detected"] is True
        # every listed page was asked, once (a conditional request: unchanged pages cost a 304)
        asked = [r["path"] for r in html_requests(site)]
        assert set(pages) <= set(asked), step
        assert result.report["freshness"]["current"] is True


# --- a generated docs site whose every answer carries per-request noise ---------------------------


def built_page(i: int, build: str, *, edition: int = 0) -> str:
    """Page *i* as a static generator builds it: hashed asset names of *build*, its generator and
    version meta, and what a CDN or a theme adds per request (a cache-busting query, a script
    nonce, a CSRF token, a rotating "related" block, the time)."""
    body = docsite.page(
        f"Widget {i}",
        [
            ("Overview", [f"Widget {i} retries its uploads after {i % 7 + 1} seconds (edition {edition})."]),
            ("Usage", [f"Run widget {i} from the command line."], f"widget-{i} --retry"),
        ],
        chrome_noise=True,
    )
    head = (
        f'<meta name="generator" content="Sphinx 7.2.6">\n<meta name="docsearch:version" content="{build}">\n'
        f'<link rel="stylesheet" href="/_static/styles.{build}.css">\n'
        '<link rel="stylesheet" href="/_static/pygments.css?v={{TOKEN}}">\n'
        f'<script src="/_static/app.{build}.js" nonce="{{{{TOKEN}}}}"></script>\n'
        '<script src="/_static/analytics.js?rid={{TOKEN}}"></script>\n'
    )
    return body.replace('<link rel="stylesheet" href="/static/site.css">', head)


def write_built_site(site: Site, n: int, build: str, editions: dict[int, int] | None = None) -> list[str]:
    names = [f"guide/w{i}.html" for i in range(n)]
    for i, name in enumerate(names):
        site.write(name, built_page(i, build, edition=(editions or {}).get(i, 0)), mtime=T0, noise=True)
    return names


T0 = 1_760_000_000.0


@pytest.mark.timeout(600)
@deferred_f_from_coro_f
async def test_per_request_noise_never_reads_as_a_deploy_and_a_real_build_does(
    site: Site, crawls: Crawls
) -> None:
    names = write_built_site(site, 300, "3f2a91c0")
    sitemap = site.write_sitemap(names)
    await crawl(crawls, sitemap, 0)
    # quiet hourly runs: every answer differs from the last (noise), yet nothing was deployed.
    # Each page is due once a day at a phase hashed from its URL, so an hour's share of the 300
    # is binomial (12.5 on average, more some hours): the quiet hours cost under a tenth of the
    # site on average (probes and the audit sample included), and no hour much more.
    asked: list[int] = []
    for hour in (1, 2, 3):
        site.clear_requests()
        quiet = await crawl(crawls, sitemap, 60 * hour)
        assert "recrawler/deploy/detected" not in quiet.stats, hour
        assert quiet.report["deploy"]["detected"] is False
        asked.append(len(html_requests(site)))
        assert asked[-1] <= 0.15 * 300, (hour, asked)
        assert quiet.counts["changed"] == 0
    assert sum(asked) / len(asked) <= 0.10 * 300, asked
    # a new build: new asset hashes on every page, and 30 pages edited
    edited = dict.fromkeys(range(0, 300, 10), 1)
    write_built_site(site, 300, "b71d04e5", edited)
    site.clear_requests()
    result = await crawl(crawls, sitemap, 4 * 60)
    assert {p for p, a in result.actions().items() if a == "changed"} == {names[i] for i in edited}
    assert result.stats["recrawler/deploy/detected/fingerprint"] == 1
    assert result.report["deploy"]["signals"] == ["fingerprint"]
    line = result.report["deploy"]["line"]
    assert line.startswith("deploy detected: build fingerprint changed: ")
    assert line.endswith("; checking all 300 pages")
    assert {r["path"] for r in html_requests(site)} >= set(names)
    # the run's HTML report and the week's digest lead with it
    page, digest = crawls.tmp_path / "run.html", crawls.tmp_path / "week.html"
    assert await asyncio.to_thread(cli_main, ["report", "--db", crawls.db_uri, "-o", str(page)]) == 0
    assert "<h2>Deploy detected</h2>" in page.read_text()
    argv = ["report", "--since", "7d", "--db", crawls.db_uri, "-o", str(digest)]
    assert await asyncio.to_thread(cli_main, argv) == 0
    assert html.escape(line) in digest.read_text()
    # and the next quiet run is quiet again: the new build is the site's fingerprint now
    site.clear_requests()
    after = await crawl(crawls, sitemap, 5 * 60)
    assert "recrawler/deploy/detected" not in after.stats
    assert len(html_requests(site)) <= 0.10 * 300


# --- "ignores validators" only on evidence -------------------------------------------------------


def write_plain_site(site: Site, n: int, *, mtime: float = T0, **options: Any) -> list[str]:
    names = [f"p{i}.html" for i in range(n)]
    for i, name in enumerate(names):
        site.write(name, docsite.feature_page(i), mtime=mtime, **options)
    return names


def warned_no_304(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "ignores validators" in r.getMessage()]


@deferred_f_from_coro_f
async def test_a_redeploy_that_only_touched_timestamps_is_no_evidence_of_ignored_validators(
    site: Site, crawls: Crawls, caplog: pytest.LogCaptureFixture
) -> None:
    names = write_plain_site(site, 40, validators="mtime")
    sitemap = site.write_sitemap(names)
    await crawls.crawl(sitemap)
    # the same bytes deployed again: every file has a new mtime, so new validators (200s)
    write_plain_site(site, 40, mtime=T0 + 3600, validators="mtime")
    caplog.clear()
    r2 = await crawls.crawl(sitemap)
    assert (r2.counts["unchanged"], r2.counts["not_modified"]) == (40, 0)
    assert warned_no_304(caplog) == []
    assert r2.report["hosts_without_304"] == []
    # the server does honour validators: the next run gets 304s
    r3 = await crawls.crawl(sitemap)
    assert r3.counts["not_modified"] == 40


@deferred_f_from_coro_f
async def test_an_outage_is_no_evidence_of_ignored_validators(
    site: Site, crawls: Crawls, caplog: pytest.LogCaptureFixture
) -> None:
    names = write_plain_site(site, 40)
    sitemap = site.write_sitemap(names)
    await crawls.crawl(sitemap)
    for name in names:
        site.options(name, status=503)
    caplog.clear()
    # (no slowing down to the 503s: the test waits on nothing)
    r2 = await crawls.crawl(sitemap, RECRAWLER_RETRY_AFTER_MAX_SECS=0)
    assert r2.counts["errors"] == 40
    assert warned_no_304(caplog) == []
    assert r2.report["hosts_without_304"] == []


@deferred_f_from_coro_f
async def test_a_server_that_answers_the_same_entity_in_full_ignores_validators(
    site: Site, crawls: Crawls, caplog: pytest.LogCaptureFixture
) -> None:
    names = write_plain_site(site, 40, no304=True)
    sitemap = site.write_sitemap(names)
    await crawls.crawl(sitemap)
    caplog.clear()
    r2 = await crawls.crawl(sitemap)
    host = site.url().split("/")[2]
    assert r2.report["hosts_without_304"] == [host]
    (line,) = warned_no_304(caplog)
    # the evidence: 200s carrying the very validators the requests sent
    assert "40 conditional requests answered in full with the validators sent" in line


# --- the explicit trigger, the hold, and no false comfort ----------------------------------------


@deferred_f_from_coro_f
async def test_deployed_flag_checks_every_listed_page_now(site: Site, crawls: Crawls) -> None:
    names = write_plain_site(site, 60)
    sitemap = site.write_sitemap(names)
    await crawl(crawls, sitemap, 0)
    # an edit no signal shows (same listing, same build): a docs CI says "just deployed"
    site.write("p7.html", docsite.feature_page(7, "Now with retries."), mtime=T0 + 60)
    site.clear_requests()
    r = await crawls.crawl(sitemap, {"deployed": "1"}, **DEFAULTS, RECRAWLER_NOW=at(2))
    assert r.actions() == {"p7.html": "changed"}
    asked = [x["path"] for x in html_requests(site)]
    # each page once (and the audit sample's 304 fetched again in full)
    assert set(asked) == set(names)
    assert len(asked) == len(names) + r.stats.get("recrawler/audit/refetched", 0)
    assert r.report["deploy"]["signals"] == ["flag"]
    assert r.report["deploy"]["checking"] == 60
    assert r.stats["recrawler/schedule/due/deploy"] + r.stats.get("recrawler/schedule/due/probe", 0) == 60


@deferred_f_from_coro_f
async def test_a_deploy_that_rewrites_most_pages_is_still_held(site: Site, crawls: Crawls) -> None:
    names = write_plain_site(site, 40)
    sitemap = site.write_sitemap(names)
    await crawl(crawls, sitemap, 0)
    for i, name in enumerate(names[:30]):
        site.write(name, docsite.feature_page(i, "Rewritten by the new theme's macro."), mtime=T0 + 60)
    r = await crawls.crawl(sitemap, {"deployed": "1"}, **DEFAULTS, RECRAWLER_NOW=at(2))
    assert r.counts["changed"] == 30
    assert r.report["held"] == ["change_spike"]


@deferred_f_from_coro_f
async def test_no_full_marks_while_a_detected_deploy_is_unchecked(site: Site, crawls: Crawls) -> None:
    names = write_plain_site(site, 50)
    sitemap = site.write_sitemap(names)
    await crawl(crawls, sitemap, 0)
    # the deploy is announced, but five pages fail while it is checked
    for name in names[:5]:
        site.options(name, status=503)
    r = await crawls.crawl(
        sitemap, {"deployed": "1"}, **DEFAULTS, RECRAWLER_NOW=at(2), RECRAWLER_RETRY_AFTER_MAX_SECS=0
    )
    fresh = r.report["freshness"]
    assert (fresh["deploy_unchecked"], fresh["current"]) == (5, False)
    assert fresh["verified"] == 45
    assert fresh["share"] < 1
    # the next run (no flag) finishes the deploy's check: the five are due, the rest are not
    for name in names[:5]:
        site.options(name, status=None)
    site.clear_requests()
    r2 = await crawl(crawls, sitemap, 4)
    assert set(names[:5]) <= {x["path"] for x in html_requests(site)}
    # (due for the deploy, unless drawn as a probe: asked first, and counted so)
    assert 1 <= r2.stats.get("recrawler/schedule/due/deploy", 0) <= 5
    assert (r2.report["freshness"]["deploy_unchecked"], r2.report["freshness"]["current"]) == (0, True)


@deferred_f_from_coro_f
async def test_a_change_the_listing_announced_is_no_sign_of_a_deploy(site: Site, crawls: Crawls) -> None:
    names = [f"p{i}.html" for i in range(40)]
    old = (START - timedelta(days=30)).isoformat()
    for i, name in enumerate(names):
        site.write(name, docsite.feature_page(i), mtime=T0)
    sitemap = site.write_sitemap([(name, old) for name in names])
    settings = {"RECRAWLER_LASTMOD_MODE": "skip"}
    await crawl(crawls, sitemap, 0, **settings)
    # two pages edited, and the sitemap says so; the audit samples every page, the probes four
    for i in (3, 4):
        site.write(names[i], docsite.feature_page(i, "Edited."), mtime=T0 + 60)
    site.write_sitemap([(name, at(1) if i in (3, 4) else old) for i, name in enumerate(names)])
    r = await crawl(crawls, sitemap, 2, RECRAWLER_AUDIT_SAMPLE="100%", **settings)
    assert r.actions() == {"p3.html": "changed", "p4.html": "changed"}
    assert r.report["deploy"]["detected"] is False
