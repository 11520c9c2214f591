"""SQLiteStateStore tests' shared records, readers and fixtures (``tests/test_state_sqlite_*.py``)."""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest

from recrawler.detect.boilerplate import PAGE_BLOCKS
from recrawler.state import Event, PageRecord, Run
from recrawler.state.sqlite import SQLiteStateStore
from tests import statedb

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence
    from pathlib import Path

    from recrawler.exceptions import StateStoreError


SITE = "example.com"
T0 = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
EVENT_KEYS = {"run_id", "action", "url", "key", "content_hash", "status", "at"}


def rec(name: str, site: str = SITE, **fields: Any) -> PageRecord:
    return PageRecord(key=f"{site}/{name}", site=site, url=f"https://{site}/{name}", first_seen=T0, **fields)


def event(run: Run, page: PageRecord, action: str = "new") -> Event:
    return Event(
        run_id=run.id, action=action, url=page.url, key=page.key,
        content_hash=page.content_hash, status=page.status, at=T0,
    )  # fmt: skip


def query(path: Path, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Read through a separate connection: sees only what the store committed."""
    return statedb.rows(path, sql, params)


def pages(path: Path) -> dict[str, tuple[str, int]]:
    return {k: (s, m) for k, s, m in query(path, "SELECT key, status, misses FROM pages")}


def lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def snapshot(path: Path) -> dict[str, bytes]:
    """The bytes of every file in the database's folder (the db and any -wal/-shm/-journal)."""
    return {f.name: f.read_bytes() for f in sorted(path.parent.iterdir())}


@asynccontextmanager
async def opened(path: Path, **kwargs: Any) -> AsyncIterator[SQLiteStateStore]:
    # opened as a crawl opens it: with change detection's block arithmetic
    store = SQLiteStateStore(str(path), **{"blocks": PAGE_BLOCKS, **kwargs})
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def refuse(path: Path, exc_type: type[StateStoreError], **kwargs: Any) -> StateStoreError:
    store = SQLiteStateStore(str(path), **kwargs)
    try:
        with pytest.raises(exc_type) as exc_info:
            await store.open()
    finally:
        await store.close()
    return exc_info.value


@pytest.fixture
def db(tmp_path: Path) -> Path:
    folder = tmp_path / "db"
    folder.mkdir()
    return folder / "state.db"


@pytest.fixture
def events_path(tmp_path: Path) -> Path:
    return tmp_path / "events.jsonl"
