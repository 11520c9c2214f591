"""Operator paths are exact: whatever sequence of runs, holds, approves and discards, the bot sees the
chunks of each live page's current stored state, each once (a property-based test on a real database)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.cli import main as cli_main
from recrawler.detect.hashing import content_hash
from recrawler.index.sqlite import SQLiteKnowledgeBase
from recrawler.kb.chunking import Chunk
from recrawler.state import RUN_HELD, PageRecord, Run
from recrawler.state.sqlite import SQLiteStateStore
from tests import docsite

if TYPE_CHECKING:
    import pytest

    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

SITE = "docs.example.com"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
KEYS = [f"{SITE}/p{i}" for i in range(5)]
TEXTS = ["alpha", "beta", "gamma", "delta"]
# a page's next answer: a text version, a 404 or a 410
ANSWERS = st.sampled_from([*TEXTS, 404, 410])


def visible(path: Path) -> list[tuple[str, str]]:
    """What the bot can read: (page key, chunk text) of every published chunk."""
    with SQLiteKnowledgeBase(str(path), embedder="hashing") as kb:
        return sorted((c.key, c.text) for c in kb.chunks())


def current(path: Path) -> list[tuple[str, str]]:
    """The chunks of each live page's current stored state."""
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            """SELECT c.key, c.text FROM chunks c JOIN pages p ON p.key = c.key
               WHERE p.status = 'live' AND c.retired_run IS NULL"""
        ).fetchall()
        counts = conn.execute(
            """SELECT p.key, p.chunks, (SELECT COUNT(*) FROM chunks c
                                        WHERE c.key = p.key AND c.retired_run IS NULL)
               FROM pages p WHERE p.status = 'live'"""
        ).fetchall()
    for key, stored, actual in counts:
        assert stored == actual, f"{key}: pages.chunks {stored} != {actual} current chunk rows"
    return sorted(rows)


class Operations(RuleBasedStateMachine):
    """Runs against one real SQLite file, driven as the pipelines and the CLI drive the store."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = Path(self.loop.run_until_complete(asyncio.to_thread(_tempdir)))
        self.path = self.dir / "state.db"
        self.store = SQLiteStateStore(f"sqlite:///{self.path}", batch_size=1)
        self.run_until(self.store.open())
        #: the site as a stored page would show it: key -> text (None: never stored)
        self.stored: dict[str, str | None] = dict.fromkeys(KEYS)
        #: what the bot saw after the last publication
        self.published: list[tuple[str, str]] = []
        self.held: int | None = None
        self.runs = 0

    def run_until(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.run_until(self.store.close())
        self.loop.close()

    @initialize()
    def first_run(self) -> None:
        self.crawl(dict(zip(KEYS, TEXTS * 2, strict=False)), hold=False)

    def crawl(self, answers: dict[str, str | int], *, hold: bool) -> None:
        self.runs += 1
        run: Run = self.run_until(self.store.begin_run("docs", SITE, T0, lease_secs=0))
        for key, answer in answers.items():
            rec = self.run_until(self.store.get(key))
            if isinstance(answer, int):
                if rec is not None:
                    self.run_until(self.store.record_miss(run, key, answer))
                continue
            page = PageRecord(
                key=key, site=SITE, url=f"https://{key}", content_hash=content_hash(answer), first_seen=T0
            )
            if rec is not None and rec.status == "live" and rec.content_hash == page.content_hash:
                # unchanged: a state write without chunks
                self.run_until(self.store.record(run, page, []))
            elif rec is not None and rec.status == "quarantined" and rec.content_hash == page.content_hash:
                self.run_until(self.store.record(run, page, [], restore=True))
            else:
                chunk = Chunk(
                    key=key,
                    url=page.url,
                    chunk_index=0,
                    heading="",
                    text=answer,
                    chunk_hash=content_hash(answer),
                )
                self.run_until(self.store.record(run, page, [], chunks=[chunk]))
        self.run_until(self.store.flush())
        result = self.run_until(
            self.store.reconcile(run, apply=not hold, keep=hold, gone_after=2, gone_statuses=[410], at=T0)
        )
        assert result.applied != hold
        if hold:
            self.run_until(self.store.set_run_state(run.id, RUN_HELD))
            self.held = run.id
        else:
            self.run_until(self.store.publish(run.id, T0))
            self.published = visible(self.path)
        self.run_until(
            self.store.finish_run(run, reason="finished", at=T0, report={}, reasons=["x"] if hold else [])
        )

    @precondition(lambda self: self.held is None)
    @rule(answers=st.dictionaries(st.sampled_from(KEYS), ANSWERS, max_size=len(KEYS)), hold=st.booleans())
    def run(self, answers: dict[str, str | int], hold: bool) -> None:
        self.crawl(answers, hold=hold)

    @precondition(lambda self: self.held is not None)
    @rule()
    def approve(self) -> None:
        assert self.held is not None
        self.run_until(self.store.apply_held(self.held, gone_after=2, gone_statuses=[410], at=T0))
        self.run_until(self.store.publish(self.held, T0))
        self.held = None
        self.published = visible(self.path)

    @precondition(lambda self: self.held is not None)
    @rule()
    def discard(self) -> None:
        assert self.held is not None
        self.run_until(self.store.discard(self.held))
        self.held = None

    @invariant()
    def the_bot_sees_each_live_page_once_as_stored(self) -> None:
        seen = visible(self.path)
        assert all(n == 1 for n in Counter(key for key, _ in seen).values()), seen
        if self.held is None:
            assert seen == current(self.path)
        else:
            # a held run changes nothing the bot can see
            assert seen == self.published


def _tempdir() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="recrawler-operator-")


def test_any_sequence_of_runs_holds_approves_and_discards_keeps_the_visible_kb_exact() -> None:
    machine = Operations.TestCase
    machine.settings = settings(
        max_examples=60, stateful_step_count=8, deadline=None, suppress_health_check=list(HealthCheck)
    )
    # the reactor's loop runs in this thread: the machine gets a thread (and event loop) of its own
    with ThreadPoolExecutor(1) as pool:
        pool.submit(machine().runTest).result()


# --- the observed sequence, end to end -----------------------------------------------------------


def body(i: int, edition: str) -> str:
    return docsite.page(f"Page {i}", [("Overview", [f"Page {i}, {edition}: feature {i} explained."])])


@deferred_f_from_coro_f
async def test_discard_then_approve_leaves_every_chunk_once(
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
    # the next cron run while run 2 still waits for a decision: refused (it used to run and
    # hold too, and `discard 2` then `approve 3` left every chunk in search twice)
    held = r2.report["run_id"]
    r3 = await crawls.crawl(sitemap)
    assert r3.finish_reason == "recrawler_held"
    assert "is held" in str(r3.failure)
    await asyncio.to_thread(cli_main, ["runs", "discard", str(r2.report["run_id"]), "--db", crawls.db_uri])
    if held == r2.report["run_id"]:
        r3 = await crawls.crawl(sitemap)
        assert r3.report["index"]["state"] == "held"
        held = r3.report["run_id"]
    await asyncio.to_thread(cli_main, ["runs", "approve", str(held), "--db", crawls.db_uri])
    await crawls.crawl(sitemap)
    seen = visible(crawls.db_path)
    assert Counter(key for key, _ in seen) == {f"{site.url(n).split('://')[1]}": 1 for n in names}
    assert all("second edition" in text for _, text in seen)
    assert seen == current(crawls.db_path)
