"""The CLI fits people's habits: ``--db`` anywhere, tables with headers, empty results that say so,
one-line errors with exit code 2, JSON that always encodes, no zero-score hits, sane rates."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.cli import build_parser
from recrawler.cli.crawl import crawl_argv, crawl_db
from recrawler.cli.output import json_line
from tests import docsite, shell
from tests.test_cli_settings import make_db

if TYPE_CHECKING:
    from pathlib import Path

    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0
DB = "sqlite:///elsewhere.db"

#: the least each command needs after its name
MINIMAL = {
    "search": ["question"],
    "diff": ["https://docs.example.com/a"],
    "normalize": ["https://docs.example.com/a"],
    "crawl": ["https://docs.example.com/sitemap.xml"],
    "events": ["deliver"],
    "changes": ["--since", "0"],
    "sync": ["--store", "tests.stores.chroma", "--name", "chroma"],
}


def commands() -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sorted(sub.choices)  # type: ignore[arg-type]


@pytest.mark.parametrize("command", commands())
def test_db_goes_before_or_after_every_command(command: str) -> None:
    parser = build_parser()
    rest = MINIMAL.get(command, [])
    assert parser.parse_args(["--db", DB, command, *rest]).db == DB
    assert parser.parse_args([command, "--db", DB, *rest]).db == DB
    if command != "crawl":  # what follows its SITEMAP_URL is scrapy's (see the crawl test below)
        assert parser.parse_args([command, *rest, "--db", DB]).db == DB


def test_crawl_takes_db_among_the_scrapy_arguments_too() -> None:
    args = build_parser().parse_args(["crawl", "https://docs.example.com/s.xml", "--db", DB, "-s", "A=1"])
    assert crawl_db(args) == DB
    assert crawl_argv(args)[-2:] == ["-s", "A=1"]
    assert "--db" not in crawl_argv(args)
    assert "deployed=1" not in crawl_argv(args)


@pytest.mark.parametrize(
    "argv",
    [
        ["crawl", "--deployed", "https://docs.example.com/s.xml", "-s", "A=1"],
        ["crawl", "https://docs.example.com/s.xml", "--deployed", "-s", "A=1"],
        ["crawl", "https://docs.example.com/s.xml", "-s", "A=1", "--deployed"],
    ],
)
def test_crawl_deployed_goes_anywhere_and_becomes_the_spider_argument(argv: list[str]) -> None:
    got = crawl_argv(build_parser().parse_args(argv))
    assert got[:7] == [
        "scrapy",
        "crawl",
        "docs",
        "-a",
        "sitemap_url=https://docs.example.com/s.xml",
        "-a",
        "deployed=1",
    ]
    assert got[-2:] == ["-s", "A=1"]
    assert "--deployed" not in got


@pytest.mark.parametrize("action", ["approve", "discard"])
def test_db_goes_anywhere_around_runs_approve_and_discard(action: str) -> None:
    parser = build_parser()
    for argv in (
        ["--db", DB, "runs", action, "7"],
        ["runs", "--db", DB, action, "7"],
        ["runs", action, "--db", DB, "7"],
        ["runs", action, "7", "--db", DB],
    ):
        args = parser.parse_args(argv)
        assert (args.db, args.action, args.run_id) == (DB, action, 7), argv
    assert parser.parse_args(["runs", "--json"]).json
    assert parser.parse_args(["runs", "list", "--json", "--db", DB]).action == "list"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["pages"], "no pages stored\n"),
        (["pages", "--status", "gone"], "no gone pages stored\n"),
        (["runs"], "no runs yet\n"),
        (["trust"], "no trust records yet (the audit has checked no host's signals)\n"),
        (["immutable"], "no immutable pages stored (RECRAWLER_IMMUTABLE_PATTERNS names them)\n"),
        (["noise"], "nothing learned yet: no boilerplate blocks or volatile regions stored\n"),
        (["tune"], "no recorded changes with a TLSH distance yet (changed pages record one)\n"),
        # nothing to search is not "no match": the same line for both
        (
            ["chunks"],
            "no run has published yet: the knowledge base is empty (crawl first, or see `recrawler runs`)\n",
        ),
        (
            ["search", "anything"],
            "no run has published yet: the knowledge base is empty (crawl first, or see `recrawler runs`)\n",
        ),
        (["pages", "--status", "moved"], "no moved pages stored\n"),
        (["events", "list"], "no events since 7d\n"),
    ],
)
def test_empty_results_say_so(tmp_path: Path, argv: list[str], says: str) -> None:
    assert shell.cli(*argv, "--db", make_db(tmp_path / "state.db")) == (0, says)


def test_due_on_an_empty_database_says_so(tmp_path: Path) -> None:
    code, out = shell.cli("due", "--db", make_db(tmp_path / "state.db"))
    assert code == 0
    assert out.startswith("no pages stored\n0 of 0 stored pages due at ")


@pytest.mark.parametrize(
    "argv",
    [
        ["pages"],
        ["runs"],
        ["noise"],
        ["tune"],
        ["diff", "https://docs.example.com/a"],
        ["diff", "--json", "https://docs.example.com/a"],
        ["calibrate"],
        # refused before any fetch (a loopback port nothing listens on, should it try)
        ["calibrate", "http://127.0.0.1:9/a"],
        ["due"],
        ["trust"],
        ["immutable"],
        ["check"],
        ["chunks"],
        ["search", "question"],
        ["runs", "approve", "1"],
        ["runs", "discard", "1"],
        ["trust", "--reset"],
        ["immutable", "--reset"],
    ],
)
def test_a_zero_byte_database_is_one_line_exit_2_and_left_untouched(
    tmp_path: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "empty.db"
    db.touch()
    assert shell.cli(*argv, "--db", f"sqlite:///{db}") == (2, "")
    err = capsys.readouterr().err
    assert err.startswith("recrawler: error: "), err
    assert err.count("\n") == 1, err
    assert db.stat().st_size == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db"]


def test_json_lines_encode_bytes_and_datetimes() -> None:
    at = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert json.loads(json_line({"blob": b"\x00\xff", "at": at, "tags": {"b", "a"}})) == {
        "blob": "00ff",
        "at": "2025-01-02T03:04:05+00:00",
        "tags": ["a", "b"],
    }


async def _two_runs(site: Site, crawls: Crawls) -> str:
    """Two runs over three pages: the second changes one page, loses another (quarantined) and
    audits them all."""
    for name in ("a", "b", "c"):
        site.write(
            f"{name}.html", docsite.guide(name.upper(), f"Page {name} explains the widget setup."), mtime=T0
        )
    sitemap = site.write_sitemap(["a.html", "b.html", "c.html"])
    await crawls.crawl(sitemap)
    site.write("a.html", docsite.guide("A", "Page a now explains the gadget setup instead."), mtime=T0 + 60)
    site.remove("c.html")
    # the audit checks every page's validators: trust records
    await crawls.crawl(sitemap, RECRAWLER_AUDIT_SAMPLE=1.0)
    return sitemap


@deferred_f_from_coro_f
async def test_diff_json_is_json(site: Site, crawls: Crawls) -> None:
    await _two_runs(site, crawls)
    code, out = await asyncio.to_thread(
        shell.cli, "diff", "--json", site.url("a.html"), "--db", crawls.db_uri
    )
    assert code == 0
    row = json.loads(out)
    assert row["verdict"] == "changed"
    assert "old_blocks" not in row


@deferred_f_from_coro_f
async def test_tables_have_headers_and_runs_show_quarantined_pages_and_reasons(
    site: Site, crawls: Crawls
) -> None:
    await _two_runs(site, crawls)
    db = ["--db", crawls.db_uri]
    headers = {
        "pages": "STATUS       LAST CHECKED      LAST CHANGED      URL",
        "runs": "  ID  STARTED           STATE      EXIT  SITE                  CRAWLED  NEW  CHANGED  "
        "UNCHANGED  GONE  QUARANTINED  ERRORS  REASONS",
        "trust": "HOST                          SIGNAL         STATE    CHECKS  LIES  LAST LIE          "
        "LAST LIE URL",
        "due": "DUE                     NEXT CHECK        EVERY    VERIFIED          BY       "
        "CHANGES/DAY  URL",
        "chunks": "CHUNK  CHARS  URL                                                 HEADING",
        "search": "SCORE  VERIFIED          CHANGED           URL",
    }
    for command, header in headers.items():
        argv = (
            [command, "gadget"]
            if command == "search"
            else [command, "--all"]
            if command == "due"
            else [command]
        )
        code, out = await asyncio.to_thread(shell.cli, *argv, *db)
        assert code == 0, command
        assert out.splitlines()[0] == header, command
    _, out = await asyncio.to_thread(shell.cli, "runs", *db)
    run2 = out.splitlines()[1].split()
    # crawled new changed unchanged gone quarantined errors, then the reasons
    assert run2[6:13] == ["2", "0", "1", "1", "0", "1", "0"]

    # a held run says why
    for name in ("a", "b"):
        site.write(
            f"{name}.html",
            docsite.guide(name.upper(), f"Page {name}: site is down for maintenance."),
            mtime=T0 + 99,
        )
    held = await crawls.crawl(site.url("sitemap.xml"), RECRAWLER_CHANGE_ALERT_MIN=1)
    assert held.report["held"]
    _, out = await asyncio.to_thread(shell.cli, "runs", *db)
    assert out.splitlines()[1].split()[3:5] == ["held", "3"]
    assert out.splitlines()[1].endswith(", ".join(held.report["held"]))


@deferred_f_from_coro_f
async def test_search_returns_no_zero_score_padding(site: Site, crawls: Crawls) -> None:
    await _two_runs(site, crawls)
    db = ["--db", crawls.db_uri]
    code, out = await asyncio.to_thread(shell.cli, "search", "gadget", "-k", "5", "--json", *db)
    assert code == 0
    hits = [json.loads(line) for line in out.splitlines()]
    assert [h["url"].split("#")[0] for h in hits] == [site.url("a.html")]
    assert all(h["score"] > 0 for h in hits)
    assert await asyncio.to_thread(shell.cli, "search", "zeppelin", "-k", "5", "--json", *db) == (0, "")
    # a floor of its own (on the cosine, in vector mode)
    floor = ("--min-score", "0.99", "--mode", "vector", "--json")
    assert await asyncio.to_thread(shell.cli, "search", "gadget", *floor, *db) == (0, "")


def _due_rows(out: str) -> dict[str, dict[str, object]]:
    return {row["url"]: row for row in map(json.loads, out.splitlines())}


@deferred_f_from_coro_f
async def test_due_shows_no_rate_for_pages_checked_seconds_apart(site: Site, crawls: Crawls) -> None:
    await _two_runs(site, crawls)
    db = ["--db", crawls.db_uri]
    _, out = await asyncio.to_thread(shell.cli, "due", "--all", "--json", *db)
    a = _due_rows(out)[site.url("a.html")]
    assert a["checks"] == 1
    assert a["changes"] == 1
    # one change a few seconds after the first check is no evidence of 30000 changes a day
    assert a["changes_per_day"] is None
    _, out = await asyncio.to_thread(shell.cli, "due", "--all", *db)
    row = next(line for line in out.splitlines() if line.endswith("/a.html"))
    assert row.split()[-2] == "-"


@deferred_f_from_coro_f
async def test_due_shows_the_rate_once_checks_span_a_day(site: Site, crawls: Crawls) -> None:
    site.write("a.html", docsite.guide("A", "Version one."), mtime=T0)
    sitemap = site.write_sitemap(["a.html"])

    def day(n: float) -> str:
        return datetime.fromtimestamp(T0 + n * 86400, UTC).isoformat()

    await crawls.crawl(sitemap, RECRAWLER_NOW=day(0))
    site.write("a.html", docsite.guide("A", "Version two."), mtime=T0 + 60)
    await crawls.crawl(sitemap, RECRAWLER_NOW=day(2))
    _, out = await asyncio.to_thread(
        shell.cli, "due", "--all", "--json", "--now", day(2), "--db", crawls.db_uri
    )
    rate = _due_rows(out)[site.url("a.html")]["changes_per_day"]
    assert isinstance(rate, float)
    assert 0.1 < rate < 1.0
