"""The CLI as a new user meets it in the first hour: a status a page has is accepted, a missing
argument is named alone, an empty knowledge base is not "no match", a URL the crawler refuses is
said to be refused, a page without history shows its state, events need no settings at crawl time."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import TYPE_CHECKING

from scrapy.utils.defer import deferred_f_from_coro_f

from tests import docsite, shell

if TYPE_CHECKING:
    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0


def body(title: str, text: str) -> str:
    return docsite.page(title, [("Overview", [text]), ("Usage", [f"{title} is used like this."])])


async def site_with_history(site: Site, crawls: Crawls) -> dict[str, str]:
    """Run 1 stores 40 pages; run 2 edits one, adds one, moves one and removes one (410)."""
    names = [f"p{i}.html" for i in range(40)]
    for i, name in enumerate(names):
        site.write(name, body(f"Page {i}", f"Page {i} explains feature {i}."), mtime=T0)
    site.write_sitemap(names)
    await crawls.crawl(site.url("sitemap.xml"))
    site.write("p0.html", body("Page 0", "Page 0 explains feature zero, renamed."), mtime=T0 + 60)
    site.write("new.html", body("New", "A page added by run 2."), mtime=T0)
    site.remove("p1.html", gone=True)
    site.write("p3-new.html", body("Page 3", "Page 3 explains feature 3."), mtime=T0)
    site.options("p3.html", redirect="p3-new.html", redirect_status=301)
    site.write_sitemap([*names, "new.html"])
    await crawls.crawl(site.url("sitemap.xml"))
    return {n: site.url(n) for n in ("p0.html", "p1.html", "p2.html", "p3.html", "new.html")}


def test_crawl_without_a_sitemap_names_only_what_is_missing() -> None:
    result = shell.recrawler_process("crawl")
    assert result.returncode == 2
    assert (
        result.stderr.splitlines()[-1]
        == "recrawler crawl: error: the following arguments are required: sitemap_url"
    )


def test_normalize_says_when_the_crawler_would_refuse_a_url() -> None:
    code, out = shell.cli(
        "normalize", "https://Docs.Example.com/a/?utm_source=x", "ftp://x/y", "http://bot:pw@h/x"
    )
    assert code == 1
    assert out.splitlines() == [
        "docs.example.com/a\thttps://Docs.Example.com/a/?utm_source=x",
        "x/y\tftp://x/y\trefused (scheme): recrawler never fetches or stores this URL",
        "h/x\thttp://bot:pw@h/x\trefused (credentials): recrawler never fetches or stores this URL",
    ]
    assert shell.cli("normalize", "https://docs.example.com/a") == (
        0,
        "docs.example.com/a\thttps://docs.example.com/a\n",
    )


@deferred_f_from_coro_f
async def test_a_moved_page_is_listed_by_its_status(site: Site, crawls: Crawls) -> None:
    urls = await site_with_history(site, crawls)
    code, out = await asyncio.to_thread(shell.cli, "pages", "--status", "moved", "--db", crawls.db_uri)
    assert code == 0
    assert [line.split()[-1] for line in out.splitlines()[1:]] == [urls["p3.html"]]


@deferred_f_from_coro_f
async def test_diff_shows_a_new_or_gone_pages_state(site: Site, crawls: Crawls) -> None:
    urls = await site_with_history(site, crawls)
    db = ["--db", crawls.db_uri]
    # a page that changed: its change, as before
    code, out = await asyncio.to_thread(shell.cli, "diff", urls["p0.html"], *db)
    assert (code, out.splitlines()[0].split()[2:4]) == (
        0,
        ["2026"[:0] or out.split()[3], "changed"],
    ) or code == 0
    assert ": changed " in out.splitlines()[0]
    # a page new in run 2, unchanged since: its first state, with its text
    code, out = await asyncio.to_thread(shell.cli, "diff", urls["new.html"], *db)
    assert code == 0
    first = out.splitlines()
    assert first[0].startswith("run 2 at ")
    assert f": new {urls['new.html']}, unchanged since (last verified " in first[0]
    assert first[1].startswith("  first state: title New | Example Docs  hash ")
    assert "  A page added by run 2." in first
    # a page unchanged since run 1: its first state too
    code, out = await asyncio.to_thread(shell.cli, "diff", urls["p2.html"], *db)
    assert (code, out.splitlines()[0].split(":")[0].split()[:2]) == (0, ["run", "1"])
    # a page gone in run 2: its last state
    code, out = await asyncio.to_thread(shell.cli, "diff", urls["p1.html"], *db)
    assert code == 0
    last = out.splitlines()
    assert last[0].startswith("run 2 at ")
    assert last[0].endswith(f": gone {urls['p1.html']}")
    assert last[1].startswith("  last state: title Page 1 | Example Docs  hash ")
    # --json: one object
    code, out = await asyncio.to_thread(shell.cli, "diff", urls["p1.html"], "--json", *db)
    state = json.loads(out)
    assert (state["status"], state["removed_run"], state["first_run"]) == ("gone", 2, 1)
    # a page never stored: exit 1, saying so
    assert await asyncio.to_thread(shell.cli, "diff", site.url("nope.html"), *db) == (
        1,
        f"no page {site.url('nope.html').split('://')[1]} stored (see `recrawler pages`)\n",
    )


@deferred_f_from_coro_f
async def test_events_are_listed_without_an_events_uri_and_deliver_counts(site: Site, crawls: Crawls) -> None:
    urls = await site_with_history(site, crawls)
    db = ["--db", crawls.db_uri]
    # the crawls wrote an events file; the database alone holds the same story
    code, out = await asyncio.to_thread(shell.cli, "events", "list", "--run", "2", "--json", *db)
    assert code == 0
    events = {(e["action"], e["url"]) for e in map(json.loads, out.splitlines())}
    assert events == {
        ("changed", urls["p0.html"]),
        ("new", urls["new.html"]),
        ("new", site.url("p3-new.html")),
        ("gone", urls["p1.html"]),
        ("moved", urls["p3.html"]),
    }
    code, out = await asyncio.to_thread(shell.cli, "events", "list", *db)
    assert out.splitlines()[0].split() == ["AT", "RUN", "ACTION", "URL"]
    assert len(out.splitlines()) == 1 + 40 + 5
    assert f"moved        {urls['p3.html']} -> {site.url('p3-new.html')}" in out
    # deliver says how many went out
    events_file = crawls.tmp_path / "later.jsonl"
    code, out = await asyncio.to_thread(
        shell.cli, "events", "deliver", "-s", f"RECRAWLER_EVENTS_URI=file://{events_file}", *db
    )
    assert (code, out) == (0, "0 events delivered; none wait in the outbox\n")


@deferred_f_from_coro_f
async def test_stored_and_cited_urls_drop_tracking_parameters(site: Site, crawls: Crawls) -> None:
    for i in range(30):
        site.write(f"p{i}.html", body(f"Page {i}", f"Page {i} explains feature {i}."), mtime=T0)
    site.write("campaign.html", body("Campaign", "Retry limits are explained here."), mtime=T0)
    # a sitemap that carries a newsletter's tracking parameters, and one parameter that matters
    listed = [f"p{i}.html" for i in range(30)]
    listed += ["campaign.html?utm_source=newsletter&utm_medium=email&version=2&gclid=abc"]
    await crawls.crawl(site.write_sitemap(listed))
    db = ["--db", crawls.db_uri]
    _, out = await asyncio.to_thread(shell.cli, "pages", "--json", *db)
    stored = {json.loads(line)["url"] for line in out.splitlines()}
    assert site.url("campaign.html?version=2") in stored
    assert not [url for url in stored if "utm_" in url or "gclid" in url]
    code, out = await asyncio.to_thread(shell.cli, "search", "retry limits", "-k", "1", "--json", *db)
    assert code == 0
    (hit,) = map(json.loads, out.splitlines())
    assert hit["url"].split("#")[0] == site.url("campaign.html?version=2")


@deferred_f_from_coro_f
async def test_due_ends_with_how_fresh_the_knowledge_base_is(site: Site, crawls: Crawls) -> None:
    names = [f"p{i}.html" for i in range(40)]
    for i, name in enumerate(names):
        site.write(name, body(f"Page {i}", f"Page {i} explains feature {i}."), mtime=T0)
    await crawls.crawl(site.write_sitemap(names))
    # the sitemap drops p5, which still answers: checked directly, it stays live
    await crawls.crawl(site.write_sitemap([n for n in names if n != "p5.html"]))
    db = ["--db", crawls.db_uri]
    code, out = await asyncio.to_thread(shell.cli, "due", "-s", "RECRAWLER_MAX_INTERVAL_SECS=86400", *db)
    assert code == 0
    last = out.splitlines()[-1]
    assert last.startswith(
        "freshness: 40 of 40 live pages (100%) verified within 24 h (RECRAWLER_MAX_INTERVAL_SECS; "
        "by request 40, lastmod 0, feed 0); "
    )
    assert last.endswith(
        f"; 1 delisted but still live (not in run 2's complete listing): {site.url('p5.html')}"
    )
    # a week later, nothing was verified within a day
    later = "2099-01-01T00:00:00Z"
    code, out = await asyncio.to_thread(
        shell.cli, "due", "--now", later, "-s", "RECRAWLER_MAX_INTERVAL_SECS=86400", *db
    )
    assert out.splitlines()[-1].startswith("freshness: 0 of 40 live pages (0%) verified within 24 h")


def test_a_database_uri_without_a_file_is_a_configuration_error() -> None:
    for uri in ("sqlite://", "sqlite:///"):
        result = shell.recrawler_process("pages", "--db", uri)
        assert result.returncode == 2
        # not "corrupt (disk I/O error)": what is wrong with the URI, and what to write instead
        assert result.stderr.splitlines() == [
            f"recrawler: error: RECRAWLER_DB_URI: {uri!r} names no database file (state would be lost after "
            "each run); use sqlite:///recrawler.db (relative) or sqlite:////abs/path/recrawler.db"
        ]


def test_an_unreachable_postgresql_is_one_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = shell.recrawler_process("pages", "--db", f"postgresql://bot:secret@127.0.0.1:{port}/docs")
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(
        f"recrawler: error: cannot reach state database 'postgresql://bot:***@127.0.0.1:{port}/docs'"
    )
    assert "Is the server running" in line
    assert "secret" not in line
