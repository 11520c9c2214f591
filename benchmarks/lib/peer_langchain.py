"""The pipeline a bot team builds today with LangChain, run once (one update of its vector store):
``SitemapLoader`` -> ``RecursiveCharacterTextSplitter`` -> the indexing API
``index(..., cleanup="full")`` with a ``SQLRecordManager`` and a persistent Chroma collection.

``python -m benchmarks.lib.peer_langchain --sitemap URL --state DIR --out result.json``

Each call is a process of its own, as a cron job is: the record manager (SQLite) and the Chroma
collection persist in ``--state`` between calls. The embedder is recrawler's hashing embedder,
wrapped as LangChain ``Embeddings`` (the one recrawler itself uses by default), counted. What the
record manager held for each page before and after says which pages the update rewrote.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import time
import warnings
from pathlib import Path
from typing import Any

if not __package__:  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

#: the collection's name, and so the record manager's namespace
COLLECTION = "docs"


def record_keys(path: Path) -> dict[str, set[str]]:
    """The record manager's keys (one per chunk it indexed) by source URL."""
    if not path.exists():
        return {}
    with sqlite3.connect(path) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "upsertion_record" not in tables:
            return {}
        out: dict[str, set[str]] = {}
        for group, key in conn.execute(
            "SELECT group_id, key FROM upsertion_record WHERE namespace = ?", (f"chroma/{COLLECTION}",)
        ):
            out.setdefault(str(group), set()).add(str(key))
    return out


def run(
    sitemap: str, state: Path, *, chunk_size: int, chunk_overlap: int, concurrency: int
) -> dict[str, Any]:
    """One update: load every page the sitemap lists, split, index with full cleanup."""
    # the chroma client must not try to send telemetry anywhere
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    # WebBaseLoader warns without one
    os.environ.setdefault("USER_AGENT", "peer-langchain-benchmark")
    with warnings.catch_warnings():
        # langchain-community warns on import that it is being sunset; SitemapLoader lives there still
        warnings.simplefilter("ignore", DeprecationWarning)
        from langchain_community.document_loaders.sitemap import SitemapLoader
    import chromadb
    from langchain_chroma import Chroma
    from langchain_classic.indexes import SQLRecordManager
    from langchain_core.indexing import index
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    from recrawler.kb.sync import RecrawlerEmbeddings

    class CountedEmbeddings(RecrawlerEmbeddings):
        """recrawler's embedder as LangChain ``Embeddings``, counting the texts it embeds."""

        texts = 0

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            CountedEmbeddings.texts += len(texts)
            return super().embed_documents(texts)

    state.mkdir(parents=True, exist_ok=True)
    records_db = state / "records.db"
    before = record_keys(records_db)
    t0 = time.monotonic()
    loader = SitemapLoader(sitemap, requests_per_second=concurrency)
    docs = loader.load()
    t1 = time.monotonic()
    splitter = RecursiveCharacterTextSplitter(chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    chunks = splitter.split_documents(docs)
    t2 = time.monotonic()
    embeddings = CountedEmbeddings("hashing")
    store = Chroma(
        collection_name=COLLECTION,
        embedding_function=embeddings,
        persist_directory=str(state / "chroma"),
        client_settings=chromadb.Settings(anonymized_telemetry=False, is_persistent=True),
    )
    manager = SQLRecordManager(f"chroma/{COLLECTION}", db_url=f"sqlite:///{records_db}")
    manager.create_schema()
    # sha256 rather than the default SHA-1 (which warns): what a careful team writes
    result = index(chunks, manager, store, cleanup="full", source_id_key="source", key_encoder="sha256")
    t3 = time.monotonic()
    after = record_keys(records_db)
    return {
        "pages_loaded": len(docs),
        "chunks": len(chunks),
        "texts_embedded": CountedEmbeddings.texts,
        "num_added": result["num_added"],
        "num_updated": result["num_updated"],
        "num_skipped": result["num_skipped"],
        "num_deleted": result["num_deleted"],
        # a page is rewritten when the chunks indexed for it are not the ones it had
        "sources_new": sorted(set(after) - set(before)),
        "sources_changed": sorted(s for s in set(after) & set(before) if after[s] != before[s]),
        "sources_gone": sorted(set(before) - set(after)),
        "phases_s": {"load": t1 - t0, "split": t2 - t1, "index": t3 - t2},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sitemap", required=True)
    parser.add_argument("--state", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--chunk-size", type=int, default=1200)
    parser.add_argument("--chunk-overlap", type=int, default=150)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args(argv)
    result = run(
        args.sitemap,
        args.state,
        chunk_size=args.chunk_size,
        chunk_overlap=args.chunk_overlap,
        concurrency=args.concurrency,
    )
    args.out.write_text(json.dumps(result, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
