"""Fixtures for the local site server: ``mockserver`` (per session) and ``site`` (per test)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from recrawler.notfound import PROBE_NAME
from tests.docsite import gzip_bytes, sitemap
from tests.mockserver import META, REQUESTS

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from tests.docsite import Entry

__all__ = ["mockserver", "mockserver_other_host", "mockserver_other_port", "other_host", "other_port", "site"]

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True, slots=True)
class MockServer:
    """A running ``python -m tests.mockserver`` serving ``root`` at ``url`` (no trailing slash)."""

    root: Path
    url: str
    process: subprocess.Popen[bytes] = field(repr=False)


class Site:
    """One test's folder ``mockserver.root/<name>``, served at ``mockserver.url/<name>/``.

    Paths are relative to the site; a path ending in ``/`` means its ``index.html``. Options
    (see ``tests.mockserver.OPTIONS``) are stored per path in the site's ``_meta.json``.
    """

    def __init__(self, server: MockServer, name: str) -> None:
        self.name = name
        self.root = server.root / name
        self.base_url = f"{server.url}/{name}/"
        self.root.mkdir(exist_ok=True)

    def url(self, path: str = "") -> str:
        """Return the full URL of ``path`` (which may carry a query string)."""
        return self.base_url + path.removeprefix("/")

    def write(self, path: str, body: str | bytes, mtime: float | None = None, **options: Any) -> None:
        """Write a file (str as UTF-8), set its mtime if given and replace its options."""
        key = self._key(path)
        file = self.root / key
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(body.encode() if isinstance(body, str) else body)
        if mtime is not None:
            os.utime(file, (mtime, mtime))
        meta = self._meta()
        meta.pop(key, None)
        if options:
            meta[key] = options
        self._save_meta(meta)

    def options(self, path: str, **options: Any) -> None:
        """Update the options of ``path``; an option set to None is removed."""
        key = self._key(path)
        meta = self._meta()
        merged = {**meta.get(key, {}), **options}
        meta[key] = {name: value for name, value in merged.items() if value is not None}
        if not meta[key]:
            del meta[key]
        self._save_meta(meta)

    def remove(self, path: str, gone: bool = False) -> None:
        """Delete a file: it then answers 404, or 410 with ``gone=True``."""
        (self.root / self._key(path)).unlink(missing_ok=True)
        if gone:
            self.options(path, gone=True)

    def requests(self, path: str | None = None, *, probes: bool = False) -> list[dict[str, Any]]:
        """Return the logged requests, oldest first, optionally only those for exactly ``path``.
        The soft-404 probes (a path no site has, asked once per run: what the site answers there)
        are left out unless *probes*."""
        log = self.root / REQUESTS
        if not log.exists():
            return []
        entries = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
        return [
            entry
            for entry in entries
            if (path is None or entry["path"] == path) and (probes or PROBE_NAME not in entry["path"])
        ]

    def clear_requests(self) -> None:
        (self.root / REQUESTS).unlink(missing_ok=True)

    def write_sitemap(self, entries: Iterable[Entry], name: str = "sitemap.xml") -> str:
        """Write a urlset of site paths or ``(path, lastmod)`` tuples as full URLs; return its URL.

        A ``name`` ending in ``.gz`` is written gzipped.
        """
        urls: list[Entry] = [
            self.url(entry) if isinstance(entry, str) else (self.url(entry[0]), entry[1]) for entry in entries
        ]
        text = sitemap(urls)
        self.write(name, gzip_bytes(text) if name.endswith(".gz") else text)
        return self.url(name)

    @staticmethod
    def _key(path: str) -> str:
        path = path.removeprefix("/")
        return path + "index.html" if not path or path.endswith("/") else path

    def _meta(self) -> dict[str, dict[str, Any]]:
        meta = self.root / META
        return json.loads(meta.read_bytes()) if meta.exists() else {}

    def _save_meta(self, meta: dict[str, dict[str, Any]]) -> None:
        # Replace atomically: the server re-reads _meta.json on every request.
        tmp = self.root / f"{META}.tmp"
        tmp.write_text(json.dumps(meta, indent=1, sort_keys=True), encoding="utf-8")
        tmp.replace(self.root / META)


@contextmanager
def serve(root: Path, interface: str = "127.0.0.1") -> Iterator[MockServer]:
    """Run ``python -m tests.mockserver root`` for the block; its stderr goes to _server.log.

    The server also stops when its stdin closes, so it does not outlive a killed pytest.
    """
    server_log = root / "_server.log"
    command = [sys.executable, "-m", "tests.mockserver", "--stop-on-eof", "--interface", interface, str(root)]
    with server_log.open("ab") as stderr:
        process = subprocess.Popen(
            command, cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr
        )
    with process:
        try:
            assert process.stdout is not None
            url = process.stdout.readline().decode().strip()
            if not url.startswith("http://"):
                msg = f"mockserver did not start:\n{server_log.read_text()}"
                raise RuntimeError(msg)
            yield MockServer(root=root, url=url, process=process)
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture(scope="session")
def mockserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MockServer]:
    with serve(tmp_path_factory.mktemp("mockserver")) as server:
        yield server


@pytest.fixture(scope="session")
def mockserver_other_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MockServer]:
    """A second server on the site's host, another port: another origin of the same host name."""
    with serve(tmp_path_factory.mktemp("mockserver-port")) as server:
        yield server


@pytest.fixture(scope="session")
def mockserver_other_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MockServer]:
    """A server on 127.0.0.2: another host (loopback too), never the site's."""
    with serve(tmp_path_factory.mktemp("mockserver-host"), interface="127.0.0.2") as server:
        yield server


def _site(server: MockServer, request: pytest.FixtureRequest) -> Site:
    prefix = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name)[:40].strip("-")
    name = Path(tempfile.mkdtemp(prefix=f"{prefix}-", dir=server.root)).name
    return Site(server, name)


@pytest.fixture
def site(mockserver: MockServer, request: pytest.FixtureRequest) -> Site:
    return _site(mockserver, request)


@pytest.fixture
def other_port(mockserver_other_port: MockServer, request: pytest.FixtureRequest) -> Site:
    """A site on the test site's host name, served from another port."""
    return _site(mockserver_other_port, request)


@pytest.fixture
def other_host(mockserver_other_host: MockServer, request: pytest.FixtureRequest) -> Site:
    """A site on another host (127.0.0.2)."""
    return _site(mockserver_other_host, request)
