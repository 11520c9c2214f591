"""Change detection over a live local site: every edit a reader would see is "changed", every kind
of noise is not; the fuzzy match never swallows a critical edit; history and `recrawler diff`."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING, Any, ClassVar

import pytest
from scrapy import Request
from scrapy.utils.defer import deferred_f_from_coro_f

from tests import docsite, shell, statedb

if TYPE_CHECKING:
    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0

BASE = {
    "retries": "Set max_retries to 3 to retry failed uploads. Each retry waits 30 s before it starts again.",
    "limits": "Uploads must not exceed 512 MB. Larger files are split into parts before they are sent.",
    "typo": "The client will recieve a confirmation e-mail once the whole upload has been stored.",
    "code": "acme sync --max-retries 3 --verbose",
    "offline": "Changes are queued while the machine is offline and sent when the network is back.",
}

EDITS = {
    "number": (
        "retries",
        "Set max_retries to 5 to retry failed uploads. Each retry waits 30 s before it starts again.",
    ),
    "negation": (
        "limits",
        "Uploads must exceed 512 MB. Larger files are split into parts before they are sent.",
    ),
    "identifier": (
        "retries",
        "Set retry_limit to 3 to retry failed uploads. Each retry waits 30 s before it starts again.",
    ),
    "code": ("code", "acme sync --retries 3 --verbose"),
    "appended": ("offline", BASE["offline"] + " Uploads are resumable after a restart."),
    "removed_section": ("offline", None),
    "typo": ("typo", "The client will receive a confirmation e-mail once the whole upload has been stored."),
}
CRITICAL = ("number", "negation", "identifier", "code", "appended", "removed_section")


def docs(parts: dict[str, str | None], *, extra_main: str = "", title: str = "Uploads") -> str:
    sections: list[Any] = [
        ("Retries", [parts["retries"]], parts["code"]),
        ("Limits", [parts["limits"], parts["typo"]]),
    ]
    if parts.get("offline") is not None:
        sections.append(("Offline", [parts["offline"]]))
    return docsite.page(title, sections, extra_main=extra_main)


def edited(kind: str) -> str:
    field, value = EDITS[kind]
    return docs({**BASE, field: value})


@pytest.mark.parametrize("kind", list(EDITS))
@deferred_f_from_coro_f
async def test_every_visible_edit_is_changed(site: Site, crawls: Crawls, kind: str) -> None:
    site.write("a.html", docs(BASE), mtime=T0)
    sitemap = site.write_sitemap(["a.html"])
    await crawls.crawl(sitemap)
    site.write("a.html", edited(kind), mtime=T0 + 10)
    r2 = await crawls.crawl(sitemap)
    assert r2.actions() == {"a.html": "changed"}
    assert r2.events[0]["changed_fields"]


@pytest.mark.parametrize("kind", list(EDITS))
@deferred_f_from_coro_f
async def test_guard_catches_critical_edits_with_fuzzy_on(site: Site, crawls: Crawls, kind: str) -> None:
    fuzzy = {"RECRAWLER_FUZZY_THRESHOLD": 400}  # far more generous than any real setting
    site.write("a.html", docs(BASE), mtime=T0)
    sitemap = site.write_sitemap(["a.html"])
    await crawls.crawl(sitemap, **fuzzy)
    site.write("a.html", edited(kind), mtime=T0 + 10)
    r2 = await crawls.crawl(sitemap, **fuzzy)
    history = statedb.rows(crawls.db_path, "SELECT verdict, critical FROM page_changes")
    assert len(history) == 1  # nothing is swallowed silently: every verdict is in the history
    if kind in CRITICAL:
        assert r2.actions() == {"a.html": "changed"}
        assert history[0][0] == "changed"
        assert history[0][1] != "[]"
    else:
        assert r2.stats["recrawler/page/unchanged/fuzzy"] == 1
        assert history[0][0] == "unchanged_fuzzy"


@deferred_f_from_coro_f
async def test_short_pages_fall_back_to_exact(site: Site, crawls: Crawls) -> None:
    fuzzy = {"RECRAWLER_FUZZY_THRESHOLD": 400}
    site.write("s.html", docsite.page("S", [("A", ["Use tls."])]), mtime=T0)
    sitemap = site.write_sitemap(["s.html"])
    await crawls.crawl(sitemap, **fuzzy)
    assert statedb.value(crawls.db_path, "SELECT fuzzy_hash FROM pages") is None
    site.write("s.html", docsite.page("S", [("A", ["Use ssl."])]), mtime=T0 + 10)
    r2 = await crawls.crawl(sitemap, **fuzzy)
    assert r2.actions() == {"s.html": "changed"}


NOISE_V1 = (
    "<p>Last updated: 2026-11-28 09:12 UTC</p><p>Edited 3 hours ago by the docs team.</p>"
    "<p>1,204 views</p><p>Request id 3f2a9c1e-4b7d-4e2a-9c1e-7d3b2a9f0e11</p>"
    "<p>Build 9f86d081884c7d659a2f</p>"
)
NOISE_V2 = (
    "<p>Last updated: Nov 30, 2026 10:40 AM</p><p>Edited 2 days ago by the docs team.</p>"
    "<p>1,377 views</p><p>Request id 77aa0b2c-1d2e-4f3a-8b9c-0d1e2f3a4b5c</p>"
    "<p>Build 2c26b46b68ffc68ff99b</p>"
)


@deferred_f_from_coro_f
async def test_volatile_tokens_are_not_changes(site: Site, crawls: Crawls) -> None:
    site.write("a.html", docs(BASE, extra_main=NOISE_V1), mtime=T0)
    sitemap = site.write_sitemap(["a.html"])
    await crawls.crawl(sitemap)
    site.write("a.html", docs(BASE, extra_main=NOISE_V2), mtime=T0 + 10)
    r2 = await crawls.crawl(sitemap)
    assert r2.counts["changed"] == 0
    assert r2.stats["recrawler/page/unchanged/hash"] == 1
    # the same noise next to a real edit does not hide the edit
    site.write("a.html", docs({**BASE, "limits": EDITS["negation"][1]}, extra_main=NOISE_V1), mtime=T0 + 20)
    r3 = await crawls.crawl(sitemap)
    assert r3.actions() == {"a.html": "changed"}


class RecheckProbe:
    """Below RecheckMiddleware on the output side: the rechecks a page's answer made (class
    attribute: one crawl per test)."""

    seen: ClassVar[list[str]] = []

    async def process_spider_output(self, response: Any, result: Any) -> Any:
        async for r in result:
            if isinstance(r, Request) and "_recrawler_first_body" in r.meta:
                type(self).seen.append(r.url)
            yield r


@deferred_f_from_coro_f
async def test_a_recheck_is_the_output_of_the_answer_it_judges(site: Site, crawls: Crawls) -> None:
    """ClassifyPipeline sent the recheck through ``engine.crawl`` from the item pipeline: it is
    the request the page's answer yields now, judged where the response comes in."""
    RecheckProbe.seen = []
    names = [f"p{i}.html" for i in range(40)]
    for name in names:
        site.write(name, docsite.page(name, [("Overview", [f"What {name} does, in full."])]), mtime=T0)
    site.write(
        "a.html", docs(BASE, extra_main="{{WIDGET}}"), mtime=T0, noise=True, validators="lm", no304=True
    )
    sitemap = site.write_sitemap([*names, "a.html"])
    probe = {"SPIDER_MIDDLEWARES": {f"{__name__}.RecheckProbe": 80}}
    await crawls.crawl(sitemap, **probe)
    assert RecheckProbe.seen == []
    r2 = await crawls.crawl(sitemap, **probe)
    assert RecheckProbe.seen == [site.url("a.html")]
    assert r2.stats["recrawler/volatile/recheck"] == 1
    assert r2.counts["changed"] == 0


@deferred_f_from_coro_f
async def test_rotating_block_is_learned_from_a_recheck(site: Site, crawls: Crawls) -> None:
    # the server keeps Last-Modified (ignoring If-Modified-Since) but rotates a widget inside
    # the main content on every request
    site.write(
        "a.html", docs(BASE, extra_main="{{WIDGET}}"), mtime=T0, noise=True, validators="lm", no304=True
    )
    sitemap = site.write_sitemap(["a.html"])
    no_304: dict[str, Any] = {}
    await crawls.crawl(sitemap, **no_304)
    r2 = await crawls.crawl(sitemap, **no_304)
    assert r2.stats["recrawler/volatile/recheck"] == 1
    assert r2.stats["recrawler/volatile/learned"] >= 1
    assert r2.counts["changed"] == 0
    r3 = await crawls.crawl(sitemap, **no_304)
    assert r3.counts["changed"] == 0
    assert "recrawler/volatile/recheck" not in r3.stats  # learned once, not re-checked again
    _, out = await shell.acli("noise", "--db", crawls.db_uri)
    assert any(line.split()[1:2] == ["region"] and "(recheck, " in line for line in out.splitlines())


@deferred_f_from_coro_f
async def test_calibrate_learns_regions_of_a_page_without_validators(site: Site, crawls: Crawls) -> None:
    site.write("a.html", docs(BASE, extra_main="{{WIDGET}}"), mtime=T0, noise=True, validators="none")
    sitemap = site.write_sitemap(["a.html"])
    await crawls.crawl(sitemap)
    _, out = await shell.acli("calibrate", "--db", crawls.db_uri, "--delay", "0")
    assert "1 differed" in out
    r2 = await crawls.crawl(sitemap)
    assert r2.counts["changed"] == 0
    # learned after the page was stored: its next fetch is re-baselined, not "changed"
    assert r2.stats["recrawler/page/unchanged/rebaseline"] == 1


@deferred_f_from_coro_f
async def test_site_wide_block_is_boilerplate_but_rare_blocks_are_content(site: Site, crawls: Crawls) -> None:
    pages = [f"p{i}.html" for i in range(12)]
    shared_by_two = "<p>See also the migration guide for version three.</p>"

    def write(banner: str, mtime: float) -> None:
        for i, p in enumerate(pages):
            own = shared_by_two if i < 2 else ""
            body = docs(
                {**BASE, "retries": f"Page {i} explains retries in its own words."},
                extra_main=f"<p>{banner}</p>{own}",
                title=f"P{i}",
            )
            site.write(p, body, mtime=mtime)

    write("Acme 3.2 is out: read the release notes.", T0)
    sitemap = site.write_sitemap(pages)
    r1 = await crawls.crawl(sitemap)
    assert r1.report["noise"]["boilerplate_on"] >= 1
    # a site-wide announcement changes on every page: boilerplate, not 12 changes (no spike hold)
    write("Acme 3.3 is out: read the release notes.", T0 + 10)
    r2 = await crawls.crawl(sitemap)
    assert r2.counts["changed"] == 0
    assert r2.stats["recrawler/page/unchanged/boilerplate"] == 12
    assert r2.report["index"]["state"] == "published"
    assert r2.events == []
    # a block on 2 of 12 pages stays content: editing it is a change on exactly those pages
    shared_by_two = "<p>See also the migration guide for version four.</p>"
    write("Acme 3.3 is out: read the release notes.", T0 + 20)
    r3 = await crawls.crawl(sitemap)
    assert sorted(r3.actions()) == ["p0.html", "p1.html"]


@deferred_f_from_coro_f
async def test_history_and_diff_for_a_renamed_parameter(site: Site, crawls: Crawls) -> None:
    site.write("a.html", docs(BASE), mtime=T0)
    sitemap = site.write_sitemap(["a.html"])
    await crawls.crawl(sitemap)
    site.write("a.html", edited("identifier"), mtime=T0 + 10)
    await crawls.crawl(sitemap)
    site.write("a.html", edited("number"), mtime=T0 + 20)
    await crawls.crawl(sitemap)
    rows = statedb.rows(
        crawls.db_path, "SELECT verdict, changed_fields, critical FROM page_changes ORDER BY id"
    )
    assert [r[0] for r in rows] == ["changed", "changed"]
    assert "text" in rows[0][1]
    assert "max_retries" in rows[0][2]
    assert "retry_limit" in rows[0][2]
    _, out = await shell.acli("diff", site.url("a.html"), "--db", crawls.db_uri, "--all")
    assert out.count("changed") >= 2
    assert "-## Retries" not in out
    assert "-Set max_retries to 3" in out
    assert "+Set retry_limit to 3" in out
    assert "critical: identifier" in out
    _, last = await shell.acli("diff", site.url("a.html"), "--db", crawls.db_uri)
    assert "+Set max_retries to 5" in last
    assert "retry_limit to 3" in last  # the line it replaced


@deferred_f_from_coro_f
async def test_tune_replays_history(site: Site, crawls: Crawls) -> None:
    site.write("a.html", docs(BASE), mtime=T0)
    sitemap = site.write_sitemap(["a.html"])
    await crawls.crawl(sitemap)
    for n, kind in enumerate(("typo", "identifier"), start=1):
        site.write("a.html", edited(kind), mtime=T0 + 10 * n)
        await crawls.crawl(sitemap)
    _, out = await shell.acli("tune", "--db", crawls.db_uri, "--thresholds", "0,1000", "--json")
    import json

    rows = {r["threshold"]: r for r in map(json.loads, out.splitlines())}
    assert rows[0]["suppressed"] == 0
    assert rows[1000]["suppressed"] == 2
    assert rows[1000]["caught_by_guard"] == 1  # the rename; the typo would be let through
    assert rows[1000]["missed"] == 1


@deferred_f_from_coro_f
async def test_recheck_happens_once_when_nothing_can_be_learned(site: Site, crawls: Crawls) -> None:
    # a heading that changes on every request is content, never a learnable region
    page = docsite.page("R", [("Report", ["Body text that stays the same."])]).replace(
        "<h1>R</h1>", "<h1>Report of {{NOW}}</h1>"
    )
    site.write("r.html", page, mtime=T0, noise=True, validators="lm", no304=True)
    sitemap = site.write_sitemap(["r.html"])
    await crawls.crawl(sitemap)
    r2 = await crawls.crawl(sitemap)
    assert r2.stats["recrawler/volatile/recheck"] == 1
    assert r2.actions() == {"r.html": "changed"}
    assert len(site.requests("r.html")) == 3  # run 1, run 2, and one re-fetch: no loop


@deferred_f_from_coro_f
async def test_paragraph_deleted_after_learning_is_still_a_change(site: Site, crawls: Crawls) -> None:
    site.write("a.html", docs(BASE, extra_main="{{WIDGET}}"), mtime=T0, noise=True, validators="none")
    sitemap = site.write_sitemap(["a.html"])
    await crawls.crawl(sitemap)
    _, out = await shell.acli("calibrate", "--db", crawls.db_uri, "--delay", "0")
    assert "1 new volatile regions learned" in out
    # the noise model changed since the page was stored, and a real paragraph goes too
    site.write("a.html", docs({**BASE, "offline": None}, extra_main="{{WIDGET}}"), mtime=T0 + 5)
    r2 = await crawls.crawl(sitemap)
    assert r2.actions() == {"a.html": "changed"}


def test_the_detect_package_imports_nothing_from_scrapy() -> None:
    code = (
        "import pkgutil, importlib, sys, recrawler.detect as d\n"
        "names = [m.name for m in pkgutil.iter_modules(d.__path__, 'recrawler.detect.')]\n"
        "for name in names: importlib.import_module(name)\n"
        "print(len(names), sorted(m for m in sys.modules if m.split('.')[0] in ('scrapy', 'twisted')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    count, loaded = out.split(" ", 1)
    assert int(count) >= 9  # every module of the package was imported
    assert loaded.strip() == "[]"
