"""Real LangChain vector stores for the sink's tests, built from the environment so that a
`recrawler sync --store tests.stores.NAME` process builds the same one: Chroma and Qdrant in
process (files under $RECRAWLER_TEST_STORE_DIR), PGVector on $RECRAWLER_TEST_STORE_PG."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recrawler.kb.sync import RecrawlerEmbeddings

if TYPE_CHECKING:
    from langchain_core.vectorstores import VectorStore

COLLECTION = "docs"


def _dir() -> Path:
    return Path(os.environ["RECRAWLER_TEST_STORE_DIR"])


def chroma() -> VectorStore:
    import chromadb
    from chromadb.config import Settings
    from langchain_chroma import Chroma

    client = chromadb.PersistentClient(
        path=str(_dir() / "chroma"), settings=Settings(anonymized_telemetry=False)
    )
    return Chroma(COLLECTION, embedding_function=RecrawlerEmbeddings("hashing"), client=client)


def qdrant() -> VectorStore:
    from langchain_qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient
    from qdrant_client.models import Distance, VectorParams

    client = QdrantClient(path=str(_dir() / "qdrant"))
    if not client.collection_exists(COLLECTION):
        client.create_collection(COLLECTION, vectors_config=VectorParams(size=384, distance=Distance.COSINE))
    return QdrantVectorStore(client, COLLECTION, RecrawlerEmbeddings("hashing"))


def pgvector() -> VectorStore:
    from langchain_postgres import PGVector

    uri = os.environ["RECRAWLER_TEST_STORE_PG"].replace("postgresql://", "postgresql+psycopg://", 1)
    return PGVector(
        RecrawlerEmbeddings("hashing"), collection_name=COLLECTION, connection=uri, use_jsonb=True
    )


class Slow:
    """A store that hangs in its first add, before adding, until its process is killed: a sync of
    it is half way (the stale chunks deleted, a batch of new ones pending) when it is killed."""

    #: at most this long (the test kills the process first)
    HANG_SECS = 120.0

    def __init__(self, store: VectorStore) -> None:
        self.store = store
        self.never = threading.Event()

    def add_documents(self, documents: Any, **kwargs: Any) -> Any:
        self.never.wait(self.HANG_SECS)
        raise RuntimeError("the slow store was not killed while it hung")

    def delete(self, ids: Any = None, **kwargs: Any) -> Any:
        return self.store.delete(ids, **kwargs)


def slow_chroma() -> Any:
    return Slow(chroma())


def slow_qdrant() -> Any:
    return Slow(qdrant())


def slow_pgvector() -> Any:
    return Slow(pgvector())


def contents(name: str, store: Any) -> dict[str, str]:
    """Every document in *store*: id -> text (a duplicate id would show as a lost document)."""
    if name == "chroma":
        got = store.get()
        assert len(got["ids"]) == len(set(got["ids"]))
        return dict(zip(got["ids"], got["documents"], strict=True))
    if name == "qdrant":
        points, _ = store.client.scroll(COLLECTION, limit=100_000, with_payload=True)
        return {str(p.id): p.payload["page_content"] for p in points}
    import psycopg

    uri = os.environ["RECRAWLER_TEST_STORE_PG"]
    with psycopg.connect(uri) as conn:
        rows = conn.execute(
            "SELECT e.id, e.document FROM langchain_pg_embedding e JOIN langchain_pg_collection c "
            "ON c.uuid = e.collection_id WHERE c.name = %s",
            (COLLECTION,),
        ).fetchall()
    assert len(rows) == len({r[0] for r in rows})
    return {str(r[0]): r[1] for r in rows}


def close(name: str, store: Any) -> None:
    """Release what a store holds (Qdrant's file lock, PGVector's pooled connections)."""
    store = getattr(store, "store", store)
    if name == "qdrant":
        store.client.close()
    elif name == "pgvector":
        store._engine.dispose()


# --- stores that are down: a server that does not answer on $RECRAWLER_TEST_DOWN_PORT ------------


def _down_port() -> int:
    return int(os.environ["RECRAWLER_TEST_DOWN_PORT"])


def chroma_down() -> VectorStore:
    import chromadb
    from chromadb.config import Settings
    from langchain_chroma import Chroma

    client = chromadb.HttpClient(
        host="127.0.0.1", port=_down_port(), settings=Settings(anonymized_telemetry=False)
    )
    return Chroma(COLLECTION, embedding_function=RecrawlerEmbeddings("hashing"), client=client)


def qdrant_down() -> VectorStore:
    from langchain_qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient

    client = QdrantClient(url=f"http://127.0.0.1:{_down_port()}", timeout=5, check_compatibility=False)
    embeddings = RecrawlerEmbeddings("hashing")
    return QdrantVectorStore(client, COLLECTION, embeddings, validate_collection_config=False)


def pgvector_down() -> VectorStore:
    from langchain_postgres import PGVector

    uri = f"postgresql+psycopg://bot:secret@127.0.0.1:{_down_port()}/docs"
    return PGVector(
        RecrawlerEmbeddings("hashing"), collection_name=COLLECTION, connection=uri, use_jsonb=True
    )


class _Refusing:
    """A store of your own whose server refuses every call, as a client library reports it."""

    def add_documents(self, documents: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"server at 127.0.0.1:{_down_port()} refused the connection")

    def delete(self, ids: Any = None, **kwargs: Any) -> Any:
        raise RuntimeError(f"server at 127.0.0.1:{_down_port()} refused the connection")


def own_down() -> Any:
    return _Refusing()
