"""Operator paths are exact: whatever sequence of runs, holds, approves, discards and killed runs, the
bot sees each live page once, as published; and history, events and page metadata read exactly as if
the discarded runs never ran (a property-based test on real databases, SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from recrawler.detect.hashing import content_hash
from recrawler.detect.verdict import Verdict
from recrawler.exceptions import StateStoreError
from recrawler.items import PageStatus
from recrawler.kb.chunking import Chunk
from recrawler.pipelines.commit import pending_after, unified_diff
from recrawler.state import PENDING_CHANGED, ChangeRow, Event, FieldsRow, PageRecord, Run, store_from_uri
from recrawler.state.records import SETTLE_APPLY, SETTLE_KEEP
from recrawler.state.sql.visibility import visible_from, visible_run, visible_where
from tests.trust_operator import current

if TYPE_CHECKING:
    from collections.abc import Callable

    from recrawler.state import StateStore
    from tests.postgres import PostgresServer


SITE = "docs.example.com"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
KEYS = [f"{SITE}/p{i}" for i in range(5)]
TEXTS = ["alpha one", "beta two", "gamma three", "delta four"]
# a page's next answer: a text version, a 404 or a 410
ANSWERS = st.sampled_from([*TEXTS, 404, 410])
# how a run ends: published, held (its changes wait), its removals held (the rest published), or
# killed before its end
ENDINGS = st.sampled_from(["publish", "hold", "hold_removals", "kill"])


def visible(store: StateStore) -> list[tuple[str, str]]:
    """What the bot can read: (page key, chunk text) of every published chunk."""
    with store.reader() as conn:
        return sorted(
            (r[0], r[1])
            for r in conn.iter(
                f"SELECT c.key, c.text FROM chunks c {visible_from('c')} WHERE {visible_where('c')}"
            )
        )


def readers(store: StateStore) -> dict[str, Any]:
    """Everything a reader can see, run ids aside (they differ where runs were discarded: an event's
    ``run_id`` and ``changes_since``)."""
    pages = [
        (p.key, p.status, p.content_hash, p.title, p.last_changed, p.misses, p.chunks)
        for p in store.readers.iter_pages()
    ]
    history = sorted(
        (h["key"], h["verdict"], h["old_hash"], h["new_hash"], tuple(h["changed_fields"]), h["diff"])
        for h in store.readers.iter_changes()
    )
    with store.reader() as conn:
        events = sorted(
            tuple(
                (k, v)
                for k, v in sorted(json.loads(r[0]).items())
                if k not in ("run_id", "changes_since", "at")
            )
            for r in conn.iter(f"SELECT payload FROM outbox WHERE {visible_run('run_id')}")
        )
    return {"chunks": visible(store), "pages": pages, "history": history, "events": events}


class Driver:
    """Drives one store as the pipelines, the closing extension and the CLI drive it."""

    def __init__(self, store: StateStore, run: Callable[[Any], Any]) -> None:
        self.store = store
        self.run_until = run

    def crawl(self, answers: dict[str, str | int], ending: str) -> int:
        store = self.store
        run: Run = self.run_until(store.runs.begin_run("docs", SITE, T0, lease_secs=0))
        for key, answer in answers.items():
            self.answer(run, key, answer)
        self.run_until(store.flush())
        if ending == "kill":
            return run.id
        self.run_until(store.decisions.carry_misses(run))
        action = {"hold": SETTLE_KEEP, "hold_removals": SETTLE_KEEP}.get(ending, SETTLE_APPLY)
        self.run_until(store.decisions.settle_misses(run, action))
        if ending == "hold":
            self.run_until(store.decisions.hold_run(run))
        else:
            self.run_until(store.decisions.supersede(run))
            self.run_until(store.decisions.publish_run(run, at=T0, gone_after=2, gone_statuses=[410]))
        self.run_until(store.runs.finish_run(run, reason="finished", at=T0, report={}))
        return run.id

    def answer(self, run: Run, key: str, answer: str | int) -> None:
        store = self.store
        rec: PageRecord | None = self.run_until(store.pages.get(key))
        if isinstance(answer, int):
            if rec is not None:
                self.run_until(store.pages.record_miss(run, key, answer))
            return
        h = content_hash(answer)
        url = f"https://{key}"
        if rec is None or rec.status in ("gone", "moved"):
            status = PageStatus.NEW
        elif (
            rec.pending == PENDING_CHANGED
            and rec.status == "live"
            and rec.content_hash != h
            and rec.published_hash == h
        ):
            # the page is back to what the knowledge base shows
            self.run_until(
                store.pages.record(
                    run,
                    dataclasses.replace(rec, status="live", misses=0, pending=None, last_checked=T0),
                    [],
                    revert=True,
                )
            )
            return
        elif rec.content_hash == h:
            status = PageStatus.UNCHANGED
        else:
            status = PageStatus.CHANGED
        pending = pending_after(rec, Verdict(status=status), each_page=False)
        if status == PageStatus.UNCHANGED:
            assert rec is not None
            restore = rec.status == "quarantined"
            events = [_event(run, PageStatus.RESTORED, key, h)] if restore else []
            page = dataclasses.replace(rec, status="live", misses=0, last_checked=T0, pending=pending)
            self.run_until(store.pages.record(run, page, events, restore=restore))
            return
        old = self.run_until(store.history.get_fields(key)) if rec is not None else None
        change = None
        if old is not None and status == PageStatus.CHANGED:
            change = ChangeRow(
                key=key,
                url=url,
                at=T0,
                verdict="changed",
                old_hash=rec.content_hash if rec else None,
                new_hash=h,
                changed_fields=["text"],
                diff=unified_diff(old.text, answer, url=url, limit=20_000),
            )
        page = PageRecord(
            key=key,
            site=SITE,
            url=url,
            content_hash=h,
            title=answer.split()[0],
            first_seen=rec.first_seen if rec else T0,
            last_checked=T0,
            last_changed=T0,
            changed_run=run.id,
            pending=pending,
        )
        chunk = Chunk(key=key, url=url, chunk_index=0, heading="", text=answer, chunk_hash=h)
        fields = FieldsRow(title=page.title or "", headings=[], code=[], links=[], text=answer, blocks=b"")
        self.run_until(
            store.pages.record(
                run,
                page,
                [_event(run, status, key, h)],
                chunks=[chunk],
                fields=fields,
                change=change,
            )
        )

    def decision(self) -> int | None:
        """The run whose decision waits, if any."""
        with self.store.reader() as conn:
            found = list(
                conn.iter(
                    "SELECT MAX(id) FROM runs WHERE state = 'held' "
                    "OR id IN (SELECT run_id FROM run_misses WHERE kept = 1)"
                )
            )
        return found[0][0] if found and found[0][0] is not None else None

    def latest(self, run_id: int) -> bool:
        """Whether no run came after *run_id* (a decision is taken on the latest run)."""
        with self.store.reader() as conn:
            later = list(
                conn.iter("SELECT COUNT(*) FROM runs WHERE id > ? AND state != 'discarded'", (run_id,))
            )
        return not later[0][0]

    def approve(self, run_id: int) -> None:
        store = self.store
        run: Run = self.run_until(store.decisions.decision(run_id))
        self.run_until(store.decisions.release_kept(run))
        self.run_until(store.decisions.supersede(run))
        self.run_until(store.decisions.publish_run(run, at=T0, gone_after=2, gone_statuses=[410]))

    def discard(self, run_id: int) -> list[int]:
        """Discard; the runs the decision covered (discarded with it)."""
        with self.store.reader() as conn:
            covered = [
                r[0]
                for r in conn.iter(
                    """SELECT id FROM runs WHERE id <= ? AND (state = 'held' OR id > COALESCE(
                         (SELECT MAX(id) FROM runs WHERE state = 'published'), 0))""",
                    (run_id,),
                )
            ]
        self.run_until(self.store.decisions.discard(run_id))
        return covered


def _event(run: Run, action: str, key: str, h: str) -> Event:
    return Event(
        run_id=run.id, action=action, url=f"https://{key}", key=key, content_hash=h, status="live", at=T0
    )


class Operations(RuleBasedStateMachine):
    """Runs against a real database, driven as the pipelines and the CLI drive the store, beside a
    shadow database that replays only what was never discarded: every reader (chunks, page
    metadata, history, events) must read alike on both."""

    #: a fresh database URI for each store (SQLite files by default)
    new_uri: Callable[[], str] | None = None

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = Path(self.loop.run_until_complete(asyncio.to_thread(_tempdir)))
        self.n = 0
        self.main = self.open()
        self.shadow = self.open()
        #: what happened, in order: ("run", answers, ending, run id) and ("approve",)
        self.log: list[tuple[Any, ...]] = []
        self.discarded: set[int] = set()
        #: what the bot saw after the last publication
        self.published: list[tuple[str, str]] = []
        self.settled = True

    def open(self) -> Driver:
        self.n += 1
        uri = self.new_uri() if self.new_uri is not None else f"sqlite:///{self.dir / f'db{self.n}.db'}"
        store = store_from_uri(uri, _settings())
        self.run_until(store.open())
        return Driver(store, self.run_until)

    def run_until(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        for d in (self.main, self.shadow):
            self.run_until(d.store.close())
        self.loop.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @initialize()
    def first_run(self) -> None:
        self.crawl(dict(zip(KEYS, TEXTS * 2, strict=False)), "publish")

    def crawl(self, answers: dict[str, str | int], ending: str) -> None:
        run_id = self.main.crawl(answers, ending)
        self.shadow.crawl(answers, ending)
        self.log.append(("run", answers, ending, run_id))
        if ending == "publish" or ending == "hold_removals":
            self.published = visible(self.main.store)
            self.settled = True
        else:
            self.settled = False

    @rule(answers=st.dictionaries(st.sampled_from(KEYS), ANSWERS, max_size=len(KEYS)), ending=ENDINGS)
    def run(self, answers: dict[str, str | int], ending: str) -> None:
        self.crawl(answers, ending)

    @precondition(lambda self: self.main.decision() is not None)
    @rule()
    def approve(self) -> None:
        run_id = self.main.decision()
        assert run_id is not None
        if not self.main.latest(run_id):
            # a later (killed) run's pages wait on the same decision: refused until a run ends
            with pytest.raises(StateStoreError, match="not the site's latest run"):
                self.main.approve(run_id)
            return
        self.main.approve(run_id)
        shadow_run = self.shadow.decision()
        assert shadow_run is not None
        self.shadow.approve(shadow_run)
        self.log.append(("approve",))
        self.published = visible(self.main.store)
        self.settled = True

    @precondition(lambda self: self.main.decision() is not None)
    @rule()
    def discard(self) -> None:
        run_id = self.main.decision()
        assert run_id is not None
        if not self.main.latest(run_id):
            with pytest.raises(StateStoreError, match="not the site's latest run"):
                self.main.discard(run_id)
            return
        self.discarded.update(self.main.discard(run_id))
        self.log.append(("discard",))
        # the shadow never saw the discarded runs: replayed from the start without them
        self.run_until(self.shadow.store.close())
        self.shadow = self.open()
        for entry in self.log:
            if entry[0] == "run" and entry[3] not in self.discarded:
                self.shadow.crawl(entry[1], entry[2])
            elif entry[0] in ("approve", "discard") and (decided := self.shadow.decision()) is not None:
                if entry[0] == "approve":
                    self.shadow.approve(decided)
                else:
                    self.shadow.discard(decided)
        self.settled = False
        self.published = visible(self.main.store)

    @invariant()
    def the_bot_sees_each_live_page_once_as_published(self) -> None:
        seen = visible(self.main.store)
        assert all(n == 1 for n in Counter(key for key, _ in seen).values()), seen
        # what the knowledge base shows of each page is what its published metadata says
        shown = {p.key: p for p in self.main.store.readers.iter_pages()}
        for key, text in seen:
            assert shown[key].status == "live", key
            assert shown[key].content_hash == content_hash(text), key
        if self.settled and self.main.decision() is None and self.new_uri is None:
            assert seen == current(self.dir / "db1.db")
        else:
            assert seen == self.published

    @invariant()
    def readers_read_as_if_discarded_runs_never_ran(self) -> None:
        assert readers(self.main.store) == readers(self.shadow.store)


def _settings() -> Any:
    from scrapy.settings import Settings

    from recrawler import default_settings

    s = Settings()
    s.setmodule(default_settings)
    s.set("RECRAWLER_DB_BATCH_SIZE", 1)
    return s


def _tempdir() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="recrawler-operator-")


def _run_machine(machine: type[Operations], examples: int) -> None:
    case = machine.TestCase
    case.settings = settings(
        max_examples=examples, stateful_step_count=8, deadline=None, suppress_health_check=list(HealthCheck)
    )
    # the reactor's loop runs in this thread: the machine gets a thread (and event loop) of its own
    with ThreadPoolExecutor(1) as pool:
        pool.submit(case().runTest).result()


@pytest.mark.timeout(600)
def test_any_sequence_of_runs_holds_approves_and_discards_keeps_the_visible_kb_exact() -> None:
    _run_machine(Operations, 60)


@pytest.mark.postgres
@pytest.mark.timeout(600)
def test_any_sequence_of_runs_holds_approves_and_discards_on_postgresql(
    postgres_server: PostgresServer,
) -> None:
    class OnPostgres(Operations):
        new_uri = staticmethod(postgres_server.database)

    _run_machine(OnPostgres, 10)
