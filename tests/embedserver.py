"""A local ``/v1/embeddings`` server on 127.0.0.1 (threaded stdlib), scriptable per test."""

from __future__ import annotations

import hashlib
import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import TracebackType
    from typing import Self

__all__ = ["EmbedServer", "Recorded", "Reply", "vector_for"]


def vector_for(text: str, dim: int) -> list[float]:
    """Return the server's deterministic, deliberately unnormalised vector for ``text``."""
    digest = hashlib.shake_256(text.encode("utf-8")).digest(dim)
    return [(b - 127.5) / 10 for b in digest]


@dataclass(frozen=True, slots=True)
class Reply:
    """A scripted answer, used once in queue order before the server's normal behaviour.

    ``status`` with optional ``headers`` and a JSON ``body``; ``drop`` closes the connection
    without answering; ``delay_secs`` stalls first (to trigger client timeouts).
    """

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None
    drop: bool = False
    delay_secs: float = 0.0


@dataclass(frozen=True, slots=True)
class Recorded:
    """One request as received: path, headers (lowercased names) and the decoded JSON body."""

    path: str
    headers: dict[str, str]
    body: Any


class EmbedServer:
    """Serves POST ``/v1/embeddings`` with :func:`vector_for` vectors (data in reverse order).

    Use as a context manager; ``url`` is the base URL (``http://127.0.0.1:PORT/v1``). With
    ``api_key`` set, requests without ``Authorization: Bearer <api_key>`` get a 401. With
    ``echo_auth``, every request gets a 401 whose message echoes the credentials it carried
    (a server that leaks them back).
    """

    def __init__(self, dim: int = 8, api_key: str | None = None, echo_auth: bool = False) -> None:
        self.dim = dim
        self.api_key = api_key
        self.echo_auth = echo_auth
        self.requests: list[Recorded] = []
        #: set as each request is recorded (clear it to wait for the next one)
        self.requested = threading.Event()
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        # A short poll interval keeps shutdown (each test's teardown) quick.
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def script(self, *replies: Reply) -> None:
        """Queue replies for the next requests, in order."""
        with self._lock:
            self._replies.extend(replies)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def _next_reply(self) -> Reply | None:
        with self._lock:
            return self._replies.popleft() if self._replies else None

    def _answer(self, path: str, headers: dict[str, str], raw: bytes) -> Reply:
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        with self._lock:
            self.requests.append(Recorded(path=path, headers=headers, body=body))
            self.requested.set()
        scripted = self._next_reply()
        if scripted is not None:
            return scripted
        if self.echo_auth:
            auth = headers.get("authorization", "")
            token = auth.partition(" ")[2]
            return _error(401, f"Incorrect API key provided: {token}. Request had Authorization: {auth}")
        if path != "/v1/embeddings":
            return _error(404, f"no route {path}")
        if self.api_key is not None and headers.get("authorization") != f"Bearer {self.api_key}":
            return _error(401, "Incorrect API key provided")
        texts = body.get("input") if isinstance(body, dict) else None
        if not isinstance(body, dict) or not body.get("model") or not isinstance(texts, list):
            return _error(400, "'model' and a list 'input' are required")
        data = [
            {"object": "embedding", "index": i, "embedding": vector_for(text, self.dim)}
            for i, text in enumerate(texts)
        ]
        # Reverse order: clients must sort by index.
        return Reply(body={"object": "list", "data": data[::-1], "model": body["model"]})

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k.lower(): v for k, v in self.headers.items()}
                reply = server._answer(self.path, headers, raw)
                if reply.delay_secs:
                    server._closing.wait(reply.delay_secs)
                if reply.drop:
                    self.close_connection = True
                    return
                payload = json.dumps(reply.body).encode() if reply.body is not None else b""
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    # The client gave up first (a timeout test).
                    self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:
                """Keep test output quiet."""

        return Handler


def _error(status: int, message: str) -> Reply:
    return Reply(status=status, body={"error": {"message": message, "type": "invalid_request_error"}})
