"""`recrawler changes` and KnowledgeBase.changes: what the published runs after a run did, page by
page, with text and chunks, resumable by cursor (recrawler.kb.changes), over real recrawls."""

from __future__ import annotations

import asyncio
import io
import json
from typing import TYPE_CHECKING

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.cli import main as cli_main
from recrawler.kb.reader import open_kb
from tests import docsite
from tests.kbfill import fill_sync

if TYPE_CHECKING:
    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0
N = 120


def page(i: int, version: int = 1) -> str:
    return docsite.page(
        f"Guide {i}",
        [
            ("Install", [f"Install component {i} with pip (version {version})."]),
            ("Usage", [f"Call <code>run_{i}()</code> to start component {i}."]),
        ],
    )


def changes(
    uri: str, since: int | None = None, **kw: object
) -> tuple[list[dict[str, object]], dict[str, object]]:
    out = io.StringIO()
    argv = ["changes", "--json", "--db", uri]
    if since is not None:
        argv += ["--since", str(since)]
    for name, value in kw.items():
        argv += [f"--{name}", str(value)]
    assert cli_main(argv, out=out) == 0
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    return lines[:-1], lines[-1]


@deferred_f_from_coro_f
async def test_changes_since_a_run_page_by_page(site: Site, crawls: Crawls) -> None:
    paths = [f"guide{i:03d}.html" for i in range(N)]
    for i, path in enumerate(paths):
        site.write(path, page(i), mtime=T0)
    sitemap = site.write_sitemap(paths)
    r1 = await crawls.crawl(sitemap)
    assert r1.report["index"]["state"] == "published"
    run1 = r1.report["run_id"]
    everything, end = await asyncio.to_thread(changes, crawls.db_uri, 0, limit=1000)
    assert len(everything) == N
    assert {c["action"] for c in everything} == {"new"}
    assert end["done"] is True

    # run 2: 5 pages edited, 2 removed for good (410), 3 added
    for i in range(5):
        site.write(paths[i], page(i, version=2), mtime=T0 + 10)
    for path in paths[10:12]:
        site.remove(path, gone=True)
    added = [f"extra{i}.html" for i in range(3)]
    for i, path in enumerate(added):
        site.write(path, page(900 + i), mtime=T0 + 10)
    sitemap = site.write_sitemap([*paths[:10], *paths[12:], *added])
    r2 = await crawls.crawl(sitemap)
    assert r2.report["index"]["state"] == "published"
    run2 = r2.report["run_id"]

    found, end = await asyncio.to_thread(changes, crawls.db_uri, run1)
    by_path = {str(c["url"]).rsplit("/", 1)[1]: c for c in found}
    assert {p: c["action"] for p, c in by_path.items()} == {
        **{paths[i]: "changed" for i in range(5)},
        **dict.fromkeys(paths[10:12], "gone"),
        **dict.fromkeys(added, "new"),
    }
    assert end == {"cursor": end["cursor"], "upto": run2, "done": True}
    # a changed page comes with its text as markdown and the chunks the bot now reads
    edited = by_path[paths[0]]
    assert edited["run_id"] == run2
    assert "## Install" in str(edited["text"])
    assert "(version 2)" in str(edited["text"])
    with open_kb(crawls.db_uri, embedder="hashing") as kb:
        published = [c.to_dict() for c in kb.chunks() if c.key == edited["key"]]
    assert edited["chunks"] == published
    assert by_path[paths[10]]["chunks"] == []
    assert by_path[paths[10]]["text"] is None

    # resumable: 4 pages a call, the cursor carries on to the end, then to what comes next
    seen: list[str] = []
    cursor = None
    while True:
        part, end = await asyncio.to_thread(
            changes,
            crawls.db_uri,
            run1 if cursor is None else None,
            limit=4,
            **({"cursor": cursor} if cursor else {}),
        )
        seen += [str(c["key"]) for c in part]
        cursor = end["cursor"]
        if end["done"]:
            break
    assert seen == sorted(str(c["key"]) for c in found)
    assert await asyncio.to_thread(changes, crawls.db_uri, cursor=cursor) == ([], end)

    # run 3 rewrites many pages and is held: nothing it did is listed until it is approved
    for i in range(20, 60):
        site.write(paths[i], page(i, version=3), mtime=T0 + 20)
    r3 = await crawls.crawl(sitemap, RECRAWLER_CHANGE_ALERT_RATIO=0.1)
    assert r3.report["index"]["state"] == "held"
    assert (await asyncio.to_thread(changes, crawls.db_uri, cursor=cursor))[0] == []
    assert (
        await asyncio.to_thread(
            cli_main, ["runs", "approve", str(r3.report["run_id"]), "--db", crawls.db_uri]
        )
        == 0
    )
    found, end = await asyncio.to_thread(changes, crawls.db_uri, cursor=cursor)
    assert sorted(str(c["url"]).rsplit("/", 1)[1] for c in found) == paths[20:60]
    assert {c["action"] for c in found} == {"changed"}

    # one page, as an event names it
    one, _ = await asyncio.to_thread(changes, crawls.db_uri, run1, key=edited["key"])
    assert [c["key"] for c in one] == [edited["key"]]


@deferred_f_from_coro_f
async def test_events_say_where_to_fetch_a_pages_content(site: Site, crawls: Crawls) -> None:
    site.write("a.html", page(1), mtime=T0)
    r1 = await crawls.crawl(site.write_sitemap(["a.html"]))
    [event] = r1.events
    assert event["action"] == "new"
    assert event["changes_since"] == r1.report["run_id"] - 1
    found, _ = await asyncio.to_thread(changes, crawls.db_uri, event["changes_since"], key=event["key"])
    assert [c["content_hash"] for c in found] == [event["content_hash"]]


@pytest.mark.postgres
def test_changes_read_postgresql_alike(postgres_uri: str) -> None:
    run1 = fill_sync(postgres_uri, {"a": ["alpha one"], "b": ["beta one"], "c": ["gamma one"]})
    run2 = fill_sync(postgres_uri, {"b": ["beta two", "beta three"], "d": ["delta one"]})
    with open_kb(postgres_uri, embedder="hashing") as kb:
        batch = kb.changes(run1)
        assert [(c.key.rsplit("/", 1)[1], c.action, c.run_id) for c in batch.changes] == [
            ("b", "changed", run2),
            ("d", "new", run2),
        ]
        assert [c.text for c in batch.changes[0].chunks] == ["beta two", "beta three"]
        assert batch.done
        assert batch.upto == run2
        assert kb.changes(cursor=batch.cursor).changes == []
        first = kb.changes(0, limit=2)
        assert not first.done
        rest = kb.changes(cursor=first.cursor, limit=10)
        assert [c.key.rsplit("/", 1)[1] for c in first.changes + rest.changes] == ["a", "b", "c", "d"]
