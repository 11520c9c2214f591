"""Start and stop a standalone nginx that serves one directory on 127.0.0.1, for benchmarks."""

from __future__ import annotations

import grp
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Self

if TYPE_CHECKING:
    from types import TracebackType

NGINX_BIN = "/usr/sbin/nginx"

# Tab-separated; nginx escapes tabs and control characters inside variable values, so splitting
# on "\t" is safe. $body_bytes_sent excludes headers, $bytes_sent includes them.
LOG_FIELDS = (
    "msec",
    "status",
    "body_bytes_sent",
    "bytes_sent",
    "request_method",
    "request_uri",
    "http_if_none_match",
    "http_if_modified_since",
    "request_time",
)
LOG_FORMAT = "\\t".join(f"${name}" for name in LOG_FIELDS)

# (directive, module) pairs; a module built out with --without-<module> has no such directive.
TEMP_PATHS = (
    ("client_body_temp_path", None),
    ("proxy_temp_path", "http_proxy_module"),
    ("fastcgi_temp_path", "http_fastcgi_module"),
    ("uwsgi_temp_path", "http_uwsgi_module"),
    ("scgi_temp_path", "http_scgi_module"),
)

CONFIG_TEMPLATE = """\
{user}worker_processes 1;
daemon off;
master_process on;
pid {prefix}/nginx.pid;
error_log {prefix}/logs/error.log warn;

events {{
    worker_connections 1024;
}}

http {{
    types {{
        text/html html htm;
        text/css css;
        text/plain txt;
        application/xml xml;
        application/javascript js;
        application/json json;
    }}
    default_type application/octet-stream;

{temp_paths}
    log_format bench '{log_format}';
    access_log {access_log} bench;

    sendfile on;
    tcp_nodelay on;
    keepalive_timeout 65;
    server_tokens off;
    gzip off;
    etag on;

    server {{
        listen 127.0.0.1:{port};
        server_name localhost;
        root {root};
        index index.html;
{locations}
    }}
}}
"""


_ESCAPE = re.compile(r"\\x([0-9A-Fa-f]{2})")


def _unescape(value: str) -> str:
    """Undo nginx's log escaping (``"`` as ``\\x22``); ``-`` means empty."""
    if value == "-":
        return ""
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), value)


class NginxError(RuntimeError):
    """nginx could not be started or stopped."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AccessLogEntry:
    """One line of the access log written with the ``bench`` log format."""

    msec: float
    status: int
    body_bytes_sent: int
    bytes_sent: int
    method: str
    uri: str
    if_none_match: str
    if_modified_since: str
    request_time: float

    @classmethod
    def parse(cls, line: str) -> Self:
        """Parse one log line; nginx writes ``-`` for an empty variable."""
        f = line.rstrip("\n").split("\t")
        if len(f) != len(LOG_FIELDS):
            msg = f"unexpected access log line: {line!r}"
            raise ValueError(msg)
        return cls(
            msec=float(f[0]),
            status=int(f[1]),
            body_bytes_sent=int(f[2]),
            bytes_sent=int(f[3]),
            method=f[4],
            uri=f[5],
            if_none_match=_unescape(f[6]),
            if_modified_since=_unescape(f[7]),
            request_time=float(f[8]),
        )


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _built_without(nginx_bin: str) -> set[str]:
    """Modules this nginx binary was built without (from ``nginx -V``)."""
    out = subprocess.run([nginx_bin, "-V"], capture_output=True, text=True, check=True)
    text = out.stdout + out.stderr
    return {arg.removeprefix("--without-") for arg in text.split() if arg.startswith("--without-")}


class NginxServer:
    """A standalone nginx serving ``root`` on ``127.0.0.1:<free port>``.

    Everything nginx writes (config, pid, logs, temp dirs) lives under ``prefix``, a fresh
    temporary directory unless one is given. nginx runs in the foreground as our child
    (``daemon off``), so its PID is ours to stop. Use as a context manager, or call
    :meth:`start` and :meth:`stop`.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        prefix: str | os.PathLike[str] | None = None,
        port: int | None = None,
        nginx_bin: str = NGINX_BIN,
        startup_timeout: float = 10.0,
        locations: str = "",
    ) -> None:
        self.root: Path = Path(root).resolve()
        self._own_prefix: bool = prefix is None
        self.prefix: Path = (
            Path(tempfile.mkdtemp(prefix="bench-nginx-")) if prefix is None else Path(prefix)
        ).resolve()
        self.port: int | None = port
        self.nginx_bin: str = nginx_bin
        self.startup_timeout: float = startup_timeout
        #: extra ``location`` blocks for the server (e.g. one file answering a million URLs)
        self.locations: str = locations
        self.access_log: Path = self.prefix / "logs" / "access.log"
        self.error_log: Path = self.prefix / "logs" / "error.log"
        self.conf_path: Path = self.prefix / "nginx.conf"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Base URL without a trailing slash, e.g. ``http://127.0.0.1:41234``."""
        if self.port is None:
            msg = "nginx has no port until started"
            raise NginxError(msg)
        return f"http://127.0.0.1:{self.port}"

    def write_config(self, port: int) -> None:
        """Write ``nginx.conf`` and create the directories it names."""
        (self.prefix / "logs").mkdir(parents=True, exist_ok=True)
        without = _built_without(self.nginx_bin)
        lines = []
        for directive, module in TEMP_PATHS:
            if module is not None and module in without:
                continue
            name = directive.removesuffix("_path")
            (self.prefix / name).mkdir(exist_ok=True)
            lines.append(f"    {directive} {self.prefix / name};")
        self.conf_path.write_text(
            CONFIG_TEMPLATE.format(
                user=self._user_directive(),
                prefix=self.prefix,
                temp_paths="\n".join(lines),
                log_format=LOG_FORMAT,
                access_log=self.access_log,
                port=port,
                root=self.root,
                locations=self.locations,
            ),
            encoding="utf-8",
        )

    def _user_directive(self) -> str:
        # As root, nginx drops its workers to "nobody", who cannot read a 0700 temp dir; run them
        # as the served directory's owner instead. Otherwise workers keep our own user.
        if os.geteuid() != 0:
            return ""
        st = self.root.stat()
        user = pwd.getpwuid(st.st_uid).pw_name
        group = grp.getgrgid(st.st_gid).gr_name
        return f"user {user} {group};\n"

    def _command(self, *extra: str) -> list[str]:
        return [
            self.nginx_bin,
            "-p",
            str(self.prefix),
            "-c",
            str(self.conf_path),
            "-e",
            str(self.error_log),
            *extra,
        ]

    def start(self) -> Self:
        """Start nginx and wait until it accepts connections; retry on a port race."""
        if self.proc is not None:
            msg = "nginx already started"
            raise NginxError(msg)
        attempts = 1 if self.port is not None else 5
        last_error = ""
        for _ in range(attempts):
            port = self.port if self.port is not None else free_port()
            self.write_config(port)
            self.proc = subprocess.Popen(
                self._command(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            if self._wait_ready(port):
                self.port = port
                return self
            self.proc.kill()
            self.proc.wait()
            self.proc = None
            last_error = self.error_log.read_text(encoding="utf-8", errors="replace")
            if "Address already in use" not in last_error:
                break
        msg = f"nginx did not start (prefix {self.prefix}):\n{last_error}"
        raise NginxError(msg)

    def _wait_ready(self, port: int) -> bool:
        assert self.proc is not None
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    return True
            except OSError:
                # Not listening yet: poll again shortly.
                time.sleep(0.02)
        return False

    def stop(self, timeout: float = 10.0) -> None:
        """Stop gracefully (``-s quit``), fall back to SIGTERM then SIGKILL on our PID, and wait."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            subprocess.run(
                self._command("-s", "quit"),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=False,
            )
            for sig in (None, signal.SIGTERM, signal.SIGKILL):
                if sig is not None:
                    proc.send_signal(sig)
                try:
                    proc.wait(timeout=timeout)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if self._own_prefix:
            shutil.rmtree(self.prefix, ignore_errors=True)

    def truncate_access_log(self) -> None:
        """Empty the access log. nginx appends (O_APPEND), so its next line lands at offset 0."""
        with self.access_log.open("w", encoding="utf-8"):
            pass

    def read_access_log(self) -> list[AccessLogEntry]:
        """All entries written since start or the last :meth:`truncate_access_log`."""
        if not self.access_log.exists():
            return []
        with self.access_log.open(encoding="utf-8", errors="replace") as f:
            return [AccessLogEntry.parse(line) for line in f if line.strip()]

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
