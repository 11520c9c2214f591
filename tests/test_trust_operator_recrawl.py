"""The observed operator sequence, end to end: a discarded run, a recrawl and an approval leave
history, events and the published pages as if the discarded runs never ran.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import TYPE_CHECKING, Any

from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.cli import main as cli_main
from recrawler.kb.sqlite import SQLiteKnowledgeBase
from tests import docsite, shell
from tests.trust_operator import current

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site


# --- the observed sequence, end to end -----------------------------------------------------------


def body(i: int, edition: str) -> str:
    return docsite.page(f"Page {i}", [("Overview", [f"Page {i}, {edition}: feature {i} explained."])])


def kb_chunks(path: Path) -> list[tuple[str, str]]:
    """What the bot reads of a database file: (page key, chunk text) of every published chunk."""
    with SQLiteKnowledgeBase(str(path), embedder="hashing") as kb:
        return sorted((c.key, c.text) for c in kb.chunks())


@deferred_f_from_coro_f
async def test_discard_recrawl_approve_leaves_history_as_if_the_discarded_runs_never_ran(
    site: Site, crawls: Crawls, capsys: pytest.CaptureFixture[str]
) -> None:
    names = [f"p{i}.html" for i in range(12)]
    for i, name in enumerate(names):
        site.write(name, body(i, "first edition"), mtime=1_760_000_000)
    sitemap = site.write_sitemap(names)
    await crawls.crawl(sitemap)
    for i, name in enumerate(names):
        site.write(name, body(i, "second edition"), mtime=1_760_000_100)
    r2 = await crawls.crawl(sitemap)
    assert r2.report["index"]["state"] == "held"
    # nothing of a held run is announced or read: no event, no history, the published metadata
    assert [e for e in r2.events if e["action"] == "changed"] == []
    assert list(open_store_at(crawls).readers.iter_changes()) == []
    # the next cron run goes on and carries the decision (it holds again: the site still says so)
    r3 = await crawls.crawl(sitemap)
    assert (r3.finish_reason, r3.report["index"]["state"]) == ("finished", "held")
    code, out = await asyncio.to_thread(
        shell.cli_captured, capsys, "runs", "discard", str(r2.report["run_id"]), "--db", crawls.db_uri
    )
    assert code == 2
    await asyncio.to_thread(cli_main, ["runs", "discard", str(r3.report["run_id"]), "--db", crawls.db_uri])
    assert all("first edition" in text for _, text in kb_chunks(crawls.db_path))
    assert list(open_store_at(crawls).readers.iter_changes()) == []
    # the site still says "second edition": held again, then approved
    r4 = await crawls.crawl(sitemap)
    assert r4.report["index"]["state"] == "held"
    await asyncio.to_thread(cli_main, ["runs", "approve", str(r4.report["run_id"]), "--db", crawls.db_uri])
    history = list(open_store_at(crawls).readers.iter_changes())
    assert len(history) == 12
    assert {h["run_id"] for h in history} == {r4.report["run_id"]}
    assert all("-Page" in h["diff"] or "first edition" in h["diff"] for h in history)
    assert all("+" in h["diff"] and "second edition" in h["diff"] for h in history)
    code, out = await asyncio.to_thread(
        shell.cli_captured, capsys, "diff", site.url(names[0]), "--db", crawls.db_uri
    )
    assert code == 0
    assert "fields: -" not in out
    assert "second edition" in out
    code, out = await asyncio.to_thread(
        shell.cli_captured, capsys, "report", str(r4.report["run_id"]), "--db", crawls.db_uri, "-o", "-"
    )
    assert code == 0
    assert out.count("second edition") >= 12
    await crawls.crawl(sitemap)
    # each changed page is announced once: the approved run's events (the next delivery sent them)
    changed = [e for e in crawls._events() if e["action"] == "changed"]
    assert sorted(e["url"] for e in changed) == sorted(site.url(n) for n in names)
    assert {e["run_id"] for e in changed} == {r4.report["run_id"]}
    seen = kb_chunks(crawls.db_path)
    assert Counter(key for key, _ in seen) == {f"{site.url(n).split('://')[1]}": 1 for n in names}
    assert all("second edition" in text for _, text in seen)
    assert seen == current(crawls.db_path)


def open_store_at(crawls: Crawls) -> Any:
    from recrawler.state.sqlite import SQLiteStateStore

    return SQLiteStateStore(crawls.db_uri)
