"""The detection benchmark's synthetic site: pages planned from word pools, edits of every kind,
served over HTTP."""

from __future__ import annotations

import datetime as dt
import random
import threading
import uuid
from collections import Counter
from dataclasses import dataclass
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import unquote, urlsplit

from benchmarks.lib.detect_runs import (
    ROBOTS,
)

T0 = dt.datetime(2026, 1, 5, 9, 0, tzinfo=dt.UTC).timestamp()


_NOUNS = (
    "upload",
    "backup",
    "cache",
    "session",
    "webhook",
    "export",
    "import",
    "mirror",
    "queue",
    "report",
    "archive",
    "invoice",
    "snapshot",
    "token",
    "tenant",
    "bucket",
    "schedule",
    "audit",
    "search",
    "index",
    "stream",
    "ledger",
    "profile",
    "gateway",
    "worker",
)


_OBJECTS = (
    "client",
    "server",
    "agent",
    "proxy",
    "runner",
    "scheduler",
    "collector",
    "replica",
    "broker",
    "indexer",
    "uploader",
    "watcher",
)


_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


RELATED_POOL = tuple(
    f"{a.capitalize()} {b}"
    for a, b in zip(
        (
            "migrating",
            "scaling",
            "securing",
            "monitoring",
            "debugging",
            "tuning",
            "testing",
            "deploying",
            "backing up",
            "observing",
        )
        * 3,
        (
            "your first project",
            "large teams",
            "multi-region setups",
            "the CLI",
            "webhooks at scale",
            "the API quotas",
            "on Kubernetes",
            "with Terraform",
            "in CI pipelines",
            "a legacy setup",
            "storage costs",
            "cold starts",
            "for compliance",
            "with SSO",
            "from v1 to v2",
        ),
        strict=False,
    )
)[:30]


APPENDED = " Running jobs keep their old settings until they finish."


EDIT_KINDS = (
    "number",
    "identifier-list",
    "identifier-prose",
    "appended",
    "number-near-counter-word",
    "date",
    "removed-paragraph",
    "number",
    "appended",
    "removed-paragraph",
)


@dataclass(slots=True)
class SynthPage:
    """One generated page: its facts (edited between runs) and its Last-Modified time."""

    path: str
    title: str
    noun: str
    obj: str
    seconds: int
    keep: int
    comments: int
    month: int
    day: int
    ident: str
    options: list[tuple[str, str]] | None
    appended: bool = False
    removed: bool = False
    mtime: float = T0


def plan_pages(n: int, seed: int) -> list[SynthPage]:
    """Deterministic pages; every third one has an options list of linked identifiers."""
    rng = random.Random(seed)
    pages = []
    for i in range(n):
        noun, obj = _NOUNS[i % len(_NOUNS)], _OBJECTS[(i // len(_NOUNS)) % len(_OBJECTS)]
        ident = f"{noun}_{obj}_retries"
        options = None
        if i % 3 == 0:
            options = [
                (f"{noun}_{obj}_timeout", f"seconds before a {noun} request to the {obj} gives up"),
                (f"{noun}_{obj}_workers", f"how many {obj} workers handle {noun} jobs at once"),
                (f"{noun}_{obj}_dir", f"where the {obj} keeps {noun} files"),
            ]
        pages.append(
            SynthPage(
                path=f"docs/{noun}-{obj}-{i:03d}.html",
                title=f"{noun.capitalize()} {obj} guide {i}",
                noun=noun,
                obj=obj,
                seconds=rng.randrange(5, 120),
                keep=rng.randrange(2, 50),
                comments=rng.choice((20, 50, 100, 200)),
                month=rng.randrange(12),
                day=rng.randrange(1, 28),
                ident=ident,
                options=options,
            )
        )
    return pages


class SynthSite:
    """The site's pages, rendered with fresh noise on every request (thread-safe reads)."""

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.seed = n, seed
        self.pages: dict[str, SynthPage] = {}
        self.requests: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._views = 10_000
        self.reset()

    def reset(self) -> None:
        """Back to the unedited site (each configuration starts from it)."""
        self.pages = {p.path: p for p in plan_pages(self.n, self.seed)}

    def edit(self, step: int) -> dict[str, str]:
        """Give 5% of the pages a real edit; return {path: edit kind}. Deterministic per step."""
        rng = random.Random(self.seed * 1000 + step)
        count = max(1, round(self.n * 0.05))
        kinds = [EDIT_KINDS[k % len(EDIT_KINDS)] for k in range(count)]
        edited: dict[str, str] = {}
        with_list = [p for p in self.pages.values() if p.options and not p.appended and not p.removed]
        plain = [p for p in self.pages.values() if not p.appended and not p.removed]
        for kind in kinds:
            pool = with_list if kind == "identifier-list" else plain
            page = rng.choice([p for p in pool if p.path not in edited])
            edited[page.path] = kind
            self._apply(page, kind, step)
        return edited

    @staticmethod
    def _apply(page: SynthPage, kind: str, step: int) -> None:
        if kind == "number":
            page.seconds += 15
        elif kind == "identifier-list":
            assert page.options is not None
            old, desc = page.options[0]
            page.options[0] = (old.replace("_timeout", "_deadline"), desc)
        elif kind == "identifier-prose":
            page.ident = page.ident.replace("_retries", "_retry_limit")
        elif kind == "appended":
            page.appended = True
        elif kind == "number-near-counter-word":
            page.comments *= 2
        elif kind == "date":
            page.month = (page.month + 3) % 12
        elif kind == "removed-paragraph":
            page.removed = True
        page.mtime = T0 + step * 86_400

    def sitemap(self, base: str) -> bytes:
        urls = "".join(f"  <url><loc>{base}/{p}</loc></url>\n" for p in self.pages)
        return (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n{urls}</urlset>\n'
        ).encode()

    def render(self, path: str) -> tuple[bytes, float] | None:
        page = self.pages.get(path)
        if page is None:
            return None
        with self._lock:
            self.requests[path] += 1
            self._views += 1
            views = self._views
        now = dt.datetime.now(dt.UTC)
        p = page
        related = "".join(
            f'<li><a href="/blog/{i}.html">{RELATED_POOL[i]}</a></li>'
            for i in random.sample(range(len(RELATED_POOL)), 3)
        )
        options = ""
        if p.options:
            items = "".join(
                f'<li><a href="#opt-{name}"><code>{name}</code></a>: {desc}.</li>' for name, desc in p.options
            )
            options = f"<h2>Options</h2>\n<ul>{items}</ul>\n"
        when = f"{_MONTHS[now.month - 1]} {now.day}, {now.year}, {now:%H:%M:%S} UTC"
        extra = APPENDED if p.appended else ""
        fallback = (
            ""
            if p.removed
            else f"<p>If the {p.obj} is unreachable, {p.noun} jobs fall back to the local cache "
            f"and a warning is logged once per hour.</p>\n"
        )
        html = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{p.title} - Acme Docs</title></head>
<body>
<header class="site-header"><a href="/">Acme Docs</a> <nav><a href="/docs/">Guides</a></nav></header>
<main>
<article>
<h1>{p.title}</h1>
<div class="page-meta">
<p>Last updated: {when}</p>
<p>Edited {random.randint(1, 23)} hours ago · {views:,} views</p>
<p>Request ID: {uuid.uuid4()}</p>
</div>
<p class="presence">{random.randint(2, 60)} people are reading this page right now</p>
<h2>Overview</h2>
<p>This guide explains how {p.noun} jobs run on the {p.obj} and how to configure them.</p>
<p>By default the {p.obj} waits {p.seconds} seconds before it retries a failed {p.noun} request.{extra}</p>
{fallback}<h2>Configuration</h2>
<p>Set <code>{p.ident}</code> in <code>acme.toml</code> to change how often a {p.noun} request is retried;
the {p.obj} keeps the last {p.keep} attempts in its log.</p>
<p>The {p.noun} API returns up to {p.comments} comments per page; use the cursor to read the rest.</p>
<pre><code>acme {p.noun} sync --{p.obj}-timeout {p.seconds}
acme {p.noun} status</code></pre>
{options}<h2>Support</h2>
<p>Support for the legacy {p.noun} format ends on {_MONTHS[p.month]} {p.day}, 2027.</p>
<div class="related"><h3>Related articles</h3><ul>{related}</ul></div>
</article>
</main>
<footer>&copy; 2026 Acme Inc.</footer>
</body></html>
"""
        return html.encode(), p.mtime


class _Handler(BaseHTTPRequestHandler):
    """Pages always answer 200 with a stable Last-Modified (no ETag) and ignore If-Modified-Since,
    like a CMS that renders every request: the recheck path of volatility learning."""

    protocol_version = "HTTP/1.1"
    site: ClassVar[SynthSite]
    base: ClassVar[str]

    def do_GET(self) -> None:
        path = unquote(urlsplit(self.path).path).lstrip("/")
        if path == "robots.txt":
            self._send(200, ROBOTS.encode(), "text/plain")
        elif path == "sitemap.xml":
            self._send(200, self.site.sitemap(self.base), "application/xml")
        elif (rendered := self.site.render(path)) is not None:
            body, mtime = rendered
            last_modified = {"Last-Modified": formatdate(mtime, usegmt=True)}
            self._send(200, body, "text/html; charset=utf-8", last_modified)
        else:
            self._send(404, b"<html><body><h1>404 Not Found</h1></body></html>", "text/html")

    def _send(self, status: int, body: bytes, ctype: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the site counts requests itself."""


def serve_synthetic(site: SynthSite) -> tuple[ThreadingHTTPServer, str]:
    """Start the synthetic site on 127.0.0.1 in a daemon thread; return (server, base URL)."""

    class Handler(_Handler):
        pass

    Handler.site = site
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    base = f"http://127.0.0.1:{server.server_address[1]}"
    Handler.base = base
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, base
