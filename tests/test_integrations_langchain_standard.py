"""LangChain's own standard retriever tests (langchain-tests), on SQLite and on PostgreSQL."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

pytest.importorskip("langchain_tests")

from langchain_tests.integration_tests import RetrieversIntegrationTests

from recrawler.integrations.langchain import RecrawlerRetriever
from tests.kbfill import fill_sync

if TYPE_CHECKING:
    from pathlib import Path

#: a few pages about retries among others: more than 3 chunks match the example query
PAGES = {
    "uploads": [
        f"Uploads retry {n} times when the network fails; set retry_limit to change it." for n in (3, 5)
    ],
    "downloads": ["Downloads retry failed transfers with backoff.", "A download resumes where it stopped."],
    "config": ["retry_limit in acme.toml sets how often a failed upload is retried.", "Other settings."],
    "install": ["Install acme with pip.", "Upgrade with pip install -U acme."],
}


class _Standard(RetrieversIntegrationTests):
    uri = ""

    @property
    def retriever_constructor(self) -> type[RecrawlerRetriever]:
        return RecrawlerRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"uri": self.uri}

    @property
    def retriever_query_example(self) -> str:
        return "how often do failed uploads retry?"


class TestSQLiteRetrieverStandard(_Standard):
    @pytest.fixture(autouse=True)
    def knowledge_base(self, tmp_path: Path) -> None:
        self.uri = f"sqlite:///{tmp_path / 'kb.db'}"
        fill_sync(self.uri, PAGES)


@pytest.mark.postgres
class TestPostgreSQLRetrieverStandard(_Standard):
    @pytest.fixture(autouse=True)
    def knowledge_base(self, postgres_uri: str) -> None:
        self.uri = postgres_uri
        fill_sync(self.uri, PAGES)


@pytest.mark.postgres
def test_no_password_in_repr_str_or_model_dump(postgres_uri: str) -> None:
    fill_sync(postgres_uri, PAGES)
    scheme, _, rest = postgres_uri.partition("://")
    userinfo, _, where = rest.partition("@")
    user, _, password = userinfo.partition(":")
    if not password:
        # a cluster that trusts local logins (CI's) ignores the password: give the URI one to hide
        password = "pg-s3cret-for-the-test"
        postgres_uri = f"{scheme}://{user}:{password}@{where}"
    retriever = RecrawlerRetriever(uri=postgres_uri, k=2, embedder_options={"api_key": "sk-secret"})
    try:
        for shown in (
            repr(retriever),
            str(retriever),
            str(retriever.model_dump()),
            retriever.model_dump_json(),
        ):
            assert password not in shown
            assert "sk-secret" not in shown
        # the retriever still reaches the database with the password it was given
        assert len(retriever.invoke("failed uploads retry")) == 2
    finally:
        retriever.close()
