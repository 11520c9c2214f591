"""Local HTTP server for crawl tests: ``ROOT/<site>/<path>`` with validators and a request log.

Paths map to files as nginx maps them: empty segments merged (``//``), dot segments resolved.

Run ``python -m tests.mockserver ROOT``; the first stdout line is the base URL. Per-path options
come from ``ROOT/<site>/_meta.json`` (see ``OPTIONS``) and each request is appended as one JSON
line to ``ROOT/<site>/_requests.jsonl`` (requests outside a site go to ``ROOT/_requests.jsonl``).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import itertools
import json
import os
import posixpath
import re
import secrets
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import formatdate, parsedate_to_datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Site

if TYPE_CHECKING:
    from twisted.web import http
    from twisted.web.server import Request

# _meta.json: {"<path>": {option: value}}, keyed by the served file's path within the site.
OPTIONS = {
    "validators": '"strong" (default), "weak", "lm" (Last-Modified only), "mtime" (nginx\'s: an ETag of '
    'mtime and size, so a redeploy with new mtimes gives every file new validators) or "none"',
    "status": "force this status with a small body and no validators",
    "gone": "true answers 410 Gone",
    "noise": "true substitutes {{NOW}}, {{TOKEN}} and {{WIDGET}} on every request",
    "hang": "true never answers",
    "delay": "seconds to wait before answering (whatever the path answers)",
    "no304": "true sends validators but ignores them in requests (never 304)",
    "redirect": "answers 301 (or redirect_status) to /<site>/<value>",
    "redirect_status": "the status of a redirect: 301, 302, 303, 307 or 308",
    "location": "answers 301 (or redirect_status) with this Location, verbatim (another host, a loop)",
    "trap": 'on a folder ("cal/"): any page under it links to the next one, forever (a link trap)',
    "lie304": "true answers 304 to any request with If-None-Match or If-Modified-Since, changed or not",
    "content_type": "send this Content-Type instead of the one the file's suffix gives",
    "status_times": 'with "status": only the first N requests of the path get it, then it is served',
    "headers": "extra response headers (a dict), on whatever the path answers",
    "content_encoding": "send the file's bytes as they are with this Content-Encoding (gzip)",
    "require": 'on "*" (every path of the site): {header: value} each request must carry (a Cookie '
    "header must hold the value among its cookies), else 401, or a 302 to the login page",
    "login": 'on "*": the path a request without the required credentials is redirected to (302)',
    "public": "true: this path answers without the site's required credentials",
    "not_found": 'on "*": the file a missing path answers with (nginx\'s error_page): its body, with '
    '"{path}" replaced by the path asked for, and the status not_found_status (default 404)',
    "not_found_status": 'on "*": the status of the not_found page (200: the site answers soft 404s)',
    "*": "options every path of the site takes unless its own say otherwise (validators, noise, status)",
}
#: request headers that carry credentials: logged when a request has them
CREDENTIAL_HEADERS = ("Authorization", "Cookie", "X-Api-Key")
META = "_meta.json"
REQUESTS = "_requests.jsonl"
ROBOTS = b"User-agent: *\nAllow: /\n"
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".xml": "application/xml",
    ".gz": "application/gzip",
    ".txt": "text/plain",
    ".json": "application/json",
    ".pdf": "application/pdf",
    ".js": "text/javascript",
    ".md": "text/markdown; charset=utf-8",
}
VALIDATORS = ("strong", "weak", "lm", "mtime", "none")
WIDGETS = tuple(
    f'<div class="related"><h3>Related articles</h3><ul>{items}</ul></div>'
    for items in (
        '<li><a href="/blog/launch">We launched v2</a></li>',
        '<li><a href="/blog/pricing">New pricing</a></li><li><a href="/blog/faq">FAQ</a></li>',
        '<li><a href="/blog/webinar">Join our webinar</a></li>',
        '<li><a href="/blog/case-study">Case study: ACME</a></li>',
        '<li><a href="/blog/roadmap">2026 roadmap</a></li><li><a href="/blog/jobs">Jobs</a></li>',
    )
)
_WIDGET_TURN = itertools.count()
_ENTITY_TAG = re.compile(r'(?:W/)?"[^"]*"')
_REASONS = {
    301: "Moved Permanently",
    302: "Found",
    303: "See Other",
    307: "Temporary Redirect",
    308: "Permanent Redirect",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    410: "Gone",
}


@dataclass(slots=True)
class Reply:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    #: seconds to wait before answering
    delay: float = 0.0


def error(status: int, **headers: str) -> Reply:
    reason = _REASONS.get(status, "Error")
    body = f"<html><body><h1>{status} {reason}</h1></body></html>\n".encode()
    return Reply(status, body, {"Content-Type": CONTENT_TYPES[".html"], **headers})


def trap_page(folder: str, key: str) -> Reply:
    """A calendar-like page: ``<folder>N.html`` links to ``<folder>N+1.html``, with no end."""
    name = key[len(folder) :].removesuffix(".html")
    n = int(name) if name.isdigit() else 0
    body = (
        f"<html><head><title>Month {n}</title></head><body><main><h1>Month {n}</h1>"
        f"<p>Nothing happens in month {n}.</p><p><a href='{n + 1}.html'>Next month</a></p>"
        "</main></body></html>"
    ).encode()
    return Reply(200, body, {"Content-Type": CONTENT_TYPES[".html"]})


def credentials(request: Request) -> dict[str, str]:
    """The credentials a request carried, for the request log (lower-case header names)."""
    return {
        name.lower(): value for name in CREDENTIAL_HEADERS if (value := request.getHeader(name)) is not None
    }


def add_noise(body: bytes) -> bytes:
    now = datetime.now(UTC).isoformat(timespec="microseconds")
    body = body.replace(b"{{NOW}}", now.encode())
    body = body.replace(b"{{TOKEN}}", secrets.token_hex(16).encode())
    # round robin, not random: two fetches in a row always show different widgets
    return body.replace(b"{{WIDGET}}", WIDGETS[next(_WIDGET_TURN) % len(WIDGETS)].encode())


def not_modified(request: Request, etag: str | None, mtime: float | None) -> bool:
    """Evaluate If-None-Match, else If-Modified-Since (RFC 9110 §13.2.2 order)."""
    if_none_match = request.getHeader("If-None-Match")
    if if_none_match is not None:
        # RFC 9110 §13.1.2: "*" matches any current representation, tags use weak comparison.
        if if_none_match.strip() == "*":
            return True
        tags = {tag.removeprefix("W/") for tag in _ENTITY_TAG.findall(if_none_match)}
        return etag is not None and etag.removeprefix("W/") in tags
    if_modified_since = request.getHeader("If-Modified-Since")
    if if_modified_since is None or mtime is None:
        return False
    try:
        since = parsedate_to_datetime(if_modified_since)
    except (TypeError, ValueError):
        # RFC 9110 §13.1.3: an invalid HTTP-date is ignored.
        return False
    if since.tzinfo is None:
        since = since.replace(tzinfo=UTC)
    return since.timestamp() >= int(mtime)


class SiteTree(Resource):
    """Serve ``ROOT/<site>/<path>`` for GET and HEAD, following each site's ``_meta.json``."""

    isLeaf = True

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root
        #: requests per (site, path) so far, for "status_times"
        self.seen: dict[tuple[str, str], int] = {}

    def render(self, request: Request) -> bytes | int:
        # as nginx maps a path: empty segments merged (merge_slashes), dot segments resolved
        path = posixpath.normpath(unquote(request.path.decode("ascii", "replace")))
        path = ("/" + path.lstrip("/")) + ("/" if request.path.endswith(b"/") and path != "/" else "")
        raw_query = request.uri.partition(b"?")[2]
        query = "?" + raw_query.decode("ascii", "replace") if raw_query else ""
        site, _, rest = path.removeprefix("/").partition("/")
        if site and not site.startswith(("_", ".")) and (self.root / site).is_dir():
            log_dir, logged = self.root / site, rest + query
        else:
            site, log_dir, logged = "", self.root, path + query

        if request.method not in (b"GET", b"HEAD"):
            reply: Reply | None = error(405, Allow="GET, HEAD")
        elif site:
            reply = self.refused(request, site, rest) or self.reply(request, site, rest)
        elif path == "/robots.txt":
            robots = self.root / "robots.txt"
            body = robots.read_bytes() if robots.is_file() else ROBOTS
            reply = Reply(200, body, {"Content-Type": CONTENT_TYPES[".txt"]})
        else:
            reply = error(404)

        sent = len(reply.body) if reply and reply.status != 304 and request.method != b"HEAD" else 0
        entry = {
            "path": logged,
            "method": request.method.decode("ascii", "replace"),
            **credentials(request),
            "if_none_match": request.getHeader("If-None-Match"),
            "if_modified_since": request.getHeader("If-Modified-Since"),
            "status": None if reply is None else reply.status,
            "bytes": sent,
            "at": time.time(),
        }
        with (log_dir / REQUESTS).open("a", encoding="utf-8") as log:
            log.write(json.dumps(entry) + "\n")

        if reply is None:
            # "hang": keep the connection open and never answer.
            return NOT_DONE_YET
        if reply.delay > 0:
            from twisted.internet import reactor

            reactor.callLater(reply.delay, self._answer_later, request, reply)  # type: ignore[attr-defined]
            return NOT_DONE_YET
        return self._answer(request, reply)

    def _answer_later(self, request: Request, reply: Reply) -> None:
        if request.finished or request.channel is None:
            return
        body = self._answer(request, reply)
        if isinstance(body, bytes):
            request.setHeader("Content-Length", str(len(body)))
            if request.method != b"HEAD":
                request.write(body)
            request.finish()

    @staticmethod
    def _answer(request: Request, reply: Reply) -> bytes | int:
        request.setResponseCode(reply.status)
        for name, value in reply.headers.items():
            request.setHeader(name, value)
        if reply.status == 304:
            # Finish by hand: returning bytes would add "Content-Length: 0" (RFC 9110 §8.6).
            request.finish()
            return NOT_DONE_YET
        return reply.body

    def reply(self, request: Request, site: str, rest: str) -> Reply | None:
        """Build the reply for ``rest`` within ``site``; None means never answer."""
        key = rest + "index.html" if not rest or rest.endswith("/") else rest
        parts = key.split("/")
        if any(part in ("", ".", "..") or part.startswith("_") for part in parts):
            return error(404)
        all_options = self.options(site)
        # "*": the site's defaults (its "require", "login" and "not_found" rules are read apart)
        defaults = {
            k: v
            for k, v in all_options.get("*", {}).items()
            if k not in ("require", "login", "not_found", "not_found_status")
        }
        options: dict[str, Any] = {**defaults, **all_options.get(key, {})}
        reply = self._reply(request, site, key, parts, options, all_options)
        if reply is not None:
            reply.headers.update(options.get("headers") or {})
            reply.delay = float(options.get("delay") or 0)
        return reply

    def _reply(
        self,
        request: Request,
        site: str,
        key: str,
        parts: list[str],
        options: dict[str, Any],
        all_options: dict[str, dict[str, Any]],
    ) -> Reply | None:
        seen = self.seen[site, key] = self.seen.get((site, key), 0) + 1
        if options.get("hang"):
            return None
        if options.get("gone"):
            return error(410)
        if "status" in options and seen <= int(options.get("status_times", seen)):
            return error(int(options["status"]))
        redirect_status = int(options.get("redirect_status", 301))
        if "redirect" in options:
            return error(redirect_status, Location=f"/{site}/{options['redirect']}")
        if "location" in options:
            return error(redirect_status, Location=str(options["location"]))
        # a trap is set on a folder: its options live under the folder's index.html
        folders = [p.removesuffix("index.html") for p, o in all_options.items() if o.get("trap")]
        trap = next((f for f in folders if key.startswith(f)), None)
        if trap is not None:
            return trap_page(trap, key)
        file = self.root.joinpath(site, *parts)
        if not file.is_file():
            return self.not_found(request, site, all_options.get("*", {}))
        body, mtime = file.read_bytes(), file.stat().st_mtime
        if options.get("noise"):
            body = add_noise(body)

        validators = options.get("validators", "strong")
        if validators not in VALIDATORS:
            msg = f"{site}/{META}: {key}: validators must be in {VALIDATORS}, not {validators!r}"
            raise ValueError(msg)
        headers: dict[str, str] = {}
        etag = None
        if validators in ("strong", "weak"):
            etag = f'"{hashlib.sha256(body).hexdigest()[:16]}"'
            etag = headers["ETag"] = etag if validators == "strong" else f"W/{etag}"
        elif validators == "mtime":
            # nginx's own: the file's mtime and size, whatever its bytes say
            etag = headers["ETag"] = f'"{int(mtime):x}-{len(body):x}"'
        if validators != "none":
            headers["Last-Modified"] = formatdate(mtime, usegmt=True)
        if options.get("lie304") and (
            request.getHeader("If-None-Match") is not None
            or request.getHeader("If-Modified-Since") is not None
        ):
            # a broken cache in front of the site: "not modified", whatever changed
            return Reply(304, b"", headers)
        if not options.get("no304") and not_modified(request, etag, mtime if validators != "none" else None):
            # RFC 9110 §15.4.5: a 304 carries the validators a 200 would have sent.
            return Reply(304, b"", headers)
        headers["Content-Type"] = options.get("content_type") or CONTENT_TYPES.get(
            file.suffix, "application/octet-stream"
        )
        if options.get("content_encoding"):
            headers["Content-Encoding"] = str(options["content_encoding"])
        return Reply(200, body, headers)

    def not_found(self, request: Request, site: str, rules: dict[str, Any]) -> Reply:
        """A missing path's answer: the site's own not-found page (``not_found``), else a bare 404."""
        page = self.root / site / str(rules.get("not_found") or "_none_")
        if not rules.get("not_found") or not page.is_file():
            return error(404)
        asked = unquote(request.path.decode("ascii", "replace"))
        body = page.read_bytes().replace(b"{path}", asked.encode("utf-8", "replace"))
        return Reply(int(rules.get("not_found_status", 404)), body, {"Content-Type": CONTENT_TYPES[".html"]})

    def refused(self, request: Request, site: str, rest: str) -> Reply | None:
        """The reply to a request without the credentials the site requires (None: it may pass)."""
        key = rest + "index.html" if not rest or rest.endswith("/") else rest
        all_options = self.options(site)
        rules = all_options.get("*", {})
        required: dict[str, str] = rules.get("require") or {}
        login = rules.get("login")
        if not required or key == login or all_options.get(key, {}).get("public"):
            return None
        for name, value in required.items():
            sent = request.getHeader(name) or ""
            ok = value in {c.strip() for c in sent.split(";")} if name.lower() == "cookie" else sent == value
            if not ok:
                if login:
                    return error(302, Location=f"/{site}/{login}")
                return error(401, **{"WWW-Authenticate": 'Basic realm="docs"'})
        return None

    def options(self, site: str) -> dict[str, dict[str, Any]]:
        meta = self.root / site / META
        return json.loads(meta.read_bytes()) if meta.is_file() else {}


class QuietSite(Site):
    """A Site without Twisted's access log: ``_requests.jsonl`` is the log."""

    def log(self, request: http.Request) -> None:
        pass


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.mockserver", description=__doc__)
    parser.add_argument("root", type=Path, help="directory holding one folder per site")
    parser.add_argument("--stop-on-eof", action="store_true", help="also stop when stdin closes")
    parser.add_argument(
        "--interface", default="127.0.0.1", help="loopback address to listen on (127.0.0.2: another host)"
    )
    args = parser.parse_args(argv)

    # Imported here so that importing this module never installs a reactor.
    from twisted.internet import reactor
    from twisted.internet.error import ReactorNotRunning
    from twisted.logger import globalLogBeginner, textFileLogObserver

    globalLogBeginner.beginLoggingTo([textFileLogObserver(sys.stderr)], redirectStandardIO=False)
    port = reactor.listenTCP(0, QuietSite(SiteTree(args.root.resolve())), interface=args.interface)
    address = port.getHost()
    print(f"http://{address.host}:{address.port}", flush=True)

    def stop() -> None:
        with contextlib.suppress(ReactorNotRunning):
            reactor.stop()

    def wait_for_eof() -> None:
        # The parent holds our stdin: EOF means it is gone, so do not outlive it. Raw reads,
        # because a daemon thread blocked in sys.stdin would abort interpreter shutdown.
        while os.read(0, 4096):
            pass
        reactor.callFromThread(stop)

    if args.stop_on_eof:
        threading.Thread(target=wait_for_eof, daemon=True).start()
    # reactor.run() installs SIGINT/SIGTERM handlers that stop the reactor.
    reactor.run()
