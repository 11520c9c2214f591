"""Helpers shared by the PostgreSQL backend's end-to-end tests (``tests/test_state_postgres_*.py``)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from scrapy.settings import Settings

from recrawler import default_settings
from recrawler.kb.reader import open_kb
from recrawler.state import store_from_uri

T0 = 1_760_000_000.0
PASSWORD = "s3cret-pw-in-uri"


def with_password(uri: str) -> str:
    """*uri* with a password (the test server trusts its socket or loopback: any password logs in)."""
    parts = urlsplit(uri)
    user = parts.username or "postgres"
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit(parts._replace(netloc=f"{user}:{PASSWORD}@{parts.hostname or ''}{port}"))


def settings() -> Settings:
    s = Settings()
    s.setmodule(default_settings)
    return s


def state(uri: str) -> dict[str, object]:
    """What a database holds, backend-neutral: pages, published chunks and runs."""
    store = store_from_uri(uri, settings())
    pages = {
        p.key.split("/", 2)[-1]: (p.status, p.content_hash, p.chunks, p.misses)
        for p in store.readers.iter_pages()
    }
    with open_kb(uri, embedder="hashing") as kb:
        chunks = sorted((c.key.split("/", 2)[-1], c.chunk_index, c.text) for c in kb.chunks())
    runs = [(r["state"], r["finish_reason"]) for r in store.readers.iter_runs()]
    return {"pages": pages, "chunks": chunks, "runs": runs}


def without_bytes(counts: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in counts.items() if not k.startswith(("bytes", "recrawler/bytes"))}
