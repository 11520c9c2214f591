"""The generated docs site: deterministic pages of realistic HTML, sitemap.xml and robots.txt."""

from __future__ import annotations

import datetime as dt
import os
import random
import re
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

PAGE_TARGET_BYTES = 8700  # mean page size; each page lands within +-500 bytes of it


SECTIONS = (
    "getting-started",
    "installation",
    "guides",
    "tutorials",
    "concepts",
    "configuration",
    "reference",
    "api",
    "cli",
    "integrations",
    "troubleshooting",
    "release-notes",
)

_WORDS_TEXT = (
    "access account action adapter agent alert api application archive argument attribute "
    "authentication authorization backend backup batch binary block boolean branch broker buffer "
    "build bundle cache callback certificate channel checksum client cluster column command "
    "commit component compression config connection consumer container context controller "
    "credential cursor daemon dashboard database dataset deadline default dependency deployment "
    "descriptor directory domain driver encoding endpoint engine environment error event "
    "exception export extension feature field filter fingerprint flag format framework function "
    "gateway handler hash header hook host identifier image index input instance integration "
    "interface job key latency layer library limit listener load lock log manifest mapping "
    "message metadata method metric middleware migration mode model module monitor namespace "
    "network node object operation option output package page parameter parser partition path "
    "payload permission pipeline plugin policy pool port process producer profile project "
    "protocol provider proxy query queue quota record redirect region registry release replica "
    "repository request resource response retry role route rule runtime schedule schema scope "
    "script secret selector server service session setting shard signal snapshot socket source "
    "spider stage state storage stream subscription table tag task template tenant thread "
    "timeout token topic trace transaction trigger type upload user validator value variable "
    "version volume webhook worker workflow workspace zone"
)
WORDS = _WORDS_TEXT.split()
_VERBS_TEXT = (
    "configure create delete deploy enable disable fetch install list load merge migrate "
    "monitor parse publish read register reload remove restart restore return rotate run scale "
    "send set start stop store sync update upgrade validate verify watch write"
)
VERBS = _VERBS_TEXT.split()
_GLUE_TEXT = (
    "the a an this each every your its our when if then so and or but with without for from "
    "to in on by after before during until unless because which that"
)
GLUE = _GLUE_TEXT.split()
IDENTS = (
    "client",
    "config",
    "session",
    "store",
    "pipeline",
    "worker",
    "request",
    "result",
    "index",
)


def _words(rng: random.Random, n: int) -> list[str]:
    pools = (WORDS, WORDS, GLUE, GLUE, VERBS)
    return [rng.choice(rng.choice(pools)) for _ in range(n)]


def _sentence(rng: random.Random) -> str:
    words = _words(rng, rng.randint(8, 20))
    if rng.random() < 0.25:
        i = rng.randrange(len(words))
        words[i] = f"<code>{rng.choice(IDENTS)}.{rng.choice(VERBS)}()</code>"
    text = " ".join(words)
    return text[0].upper() + text[1:] + rng.choice("........?")


def _paragraph(rng: random.Random) -> str:
    return "<p>" + " ".join(_sentence(rng) for _ in range(rng.randint(3, 6))) + "</p>"


def _title(rng: random.Random, n: int) -> str:
    return " ".join(w.capitalize() for w in _words(rng, n) if w not in GLUE) or "Overview"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "page"


def _code_block(rng: random.Random) -> str:
    ident = rng.choice(IDENTS)
    lines = [f"from acme import {ident.capitalize()}", ""]
    lines.append(f"{ident} = {ident.capitalize()}(timeout={rng.randint(1, 60)})")
    lines.extend(
        f"{ident}.{rng.choice(VERBS)}({rng.choice(WORDS)!r}, {rng.choice(WORDS)}={rng.randint(0, 999)})"
        for _ in range(rng.randint(4, 9))
    )
    lines.append(f"print({ident}.{rng.choice(VERBS)}())")
    code = escape("\n".join(lines), quote=False)
    return f'<pre><code class="language-python">{code}</code></pre>'


def _list(rng: random.Random) -> str:
    tag = rng.choice(("ul", "ol"))
    items = "".join(
        f"<li><strong>{_title(rng, 2)}</strong>: {' '.join(_words(rng, rng.randint(6, 14)))}.</li>"
        for _ in range(rng.randint(3, 7))
    )
    return f"<{tag}>{items}</{tag}>"


@dataclass(frozen=True, slots=True)
class PageSpec:
    """One generated page: its path on the site, its title and its lastmod."""

    index: int
    path: str
    section: str
    title: str
    lastmod: dt.datetime


def plan_site(pages: int, seed: int) -> list[PageSpec]:
    """Decide every page's path, title and lastmod (deterministic for a seed)."""
    rng = random.Random(f"{seed}:plan")
    base = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    specs = []
    for i in range(pages):
        section = SECTIONS[i % len(SECTIONS)]
        title = _title(rng, rng.randint(2, 5))
        lastmod = base + dt.timedelta(seconds=rng.randrange(600 * 86400))
        path = f"/docs/{section}/{_slug(title)}-{i:05d}.html"
        specs.append(PageSpec(i, path, section, title, lastmod))
    return specs


def render_page(spec: PageSpec, specs: Sequence[PageSpec], base_url: str, seed: int) -> str:
    """Render one docs page of about PAGE_TARGET_BYTES of realistic HTML."""
    rng = random.Random(f"{seed}:page:{spec.index}")
    target = PAGE_TARGET_BYTES + rng.randint(-500, 500)
    section_title = spec.section.replace("-", " ").title()
    top_nav = "".join(f'<li><a href="/docs/{s}/">{s.replace("-", " ").title()}</a></li>' for s in SECTIONS)
    siblings = list(specs[spec.index % len(SECTIONS) :: len(SECTIONS)])
    pos = spec.index // len(SECTIONS)
    near = siblings[max(0, pos - 6) : pos + 7]
    aside = "".join(
        f'<li{" class=active" if s is spec else ""}><a href="{s.path}">{escape(s.title)}</a></li>'
        for s in near
    )
    head = (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{escape(spec.title)} | {section_title} | Acme Docs</title>\n"
        f'<meta name="description" content="{escape(" ".join(_words(rng, 18)))}.">\n'
        f'<link rel="canonical" href="{base_url}{spec.path}">\n'
        '<link rel="stylesheet" href="/static/site.css">\n</head>\n<body>\n'
        '<header class="site-header">\n<a class="logo" href="/">Acme Docs</a>\n'
        f'<nav class="top-nav" aria-label="Sections"><ul>{top_nav}</ul></nav>\n'
        '<form class="search" action="/search" role="search">'
        '<input type="search" name="q" placeholder="Search the docs"></form>\n</header>\n'
        '<div class="layout">\n'
        f'<aside class="sidebar"><h2>{section_title}</h2><ul>{aside}</ul></aside>\n'
        '<main id="content">\n'
        f'<nav class="breadcrumbs"><a href="/">Docs</a> / <a href="/docs/{spec.section}/">'
        f"{section_title}</a></nav>\n"
        f"<h1>{escape(spec.title)}</h1>\n"
        f'<p class="lead">{_sentence(rng)} {_sentence(rng)}</p>\n'
    )
    prev_next = []
    if pos > 0:
        prev_next.append(f'<a rel="prev" href="{siblings[pos - 1].path}">Previous</a>')
    if pos + 1 < len(siblings):
        prev_next.append(f'<a rel="next" href="{siblings[pos + 1].path}">Next</a>')
    foot = (
        "\n</main>\n</div>\n"
        f'<footer class="site-footer">\n<nav class="pager">{" ".join(prev_next)}</nav>\n'
        '<ul class="footer-links"><li><a href="/about/">About</a></li>'
        '<li><a href="/privacy/">Privacy</a></li><li><a href="/status/">Status</a></li>'
        '<li><a href="https://github.com/acme/docs">Edit on GitHub</a></li></ul>\n'
        f"<p>Last updated {spec.lastmod:%B %d, %Y}. &copy; 2025 Acme, Inc.</p>\n</footer>\n"
        '<script src="/static/site.js" defer></script>\n</body>\n</html>\n'
    )
    body: list[str] = []
    size = len(head) + len(foot)
    n = 0
    while size < target - 300:
        n += 1
        heading = _title(rng, rng.randint(2, 4))
        parts = [f'<section id="{_slug(heading)}-{n}">', f"<h2>{heading}</h2>"]
        parts.append(_paragraph(rng))
        if n == 2:
            parts.append(_code_block(rng))
        elif rng.random() < 0.5:
            parts.append(_list(rng))
        parts.append("</section>")
        chunk = "\n".join(parts) + "\n"
        size += len(chunk)
        body.append(chunk)
    # Trim or pad the last section's tail to land near the target size.
    last = body[-1].removesuffix("</section>\n") if body else ""
    while size > target + 200 and len(last) > 400 and "</p>" in last:
        cut = last.rfind(". ", 0, last.rfind("</p>"))
        if cut < 0:
            break
        tail = last.rfind("</p>")
        size -= tail - cut - 1
        last = last[: cut + 1] + last[tail:]
    if body:
        body[-1] = last + "</section>\n"
    return head + "".join(body) + foot


def generate_site(root: Path, base_url: str, pages: int, seed: int) -> list[PageSpec]:
    """Write pages, sitemap.xml and robots.txt under root; page mtimes equal their lastmod."""
    specs = plan_site(pages, seed)
    for spec in specs:
        path = root / spec.path.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_page(spec, specs, base_url, seed), encoding="utf-8")
        ts = spec.lastmod.timestamp()
        os.utime(path, (ts, ts))
    _write_sitemap(root, base_url, specs)
    return specs


def corpus_site(root: Path, base_url: str, pages: int, tarball: Path) -> list[PageSpec]:
    """Serve a real documentation site: the corpus tarball's HTML pages, copied under
    ``/docs/copyN/`` until there are *pages* of them (real page sizes and markup, for
    extraction's true cost), plus sitemap.xml and robots.txt; mtimes equal the lastmod."""
    import tarfile

    with tarfile.open(tarball) as tar:
        sources = sorted(
            (m.name, tar.extractfile(m).read())  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile() and m.name.endswith(".html")
        )
    if not sources:
        raise ValueError(f"no HTML pages in {tarball}")
    base = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    specs = []
    for i in range(pages):
        name, body = sources[i % len(sources)]
        spec = PageSpec(
            index=i,
            path=f"/docs/copy{i // len(sources)}/{Path(name).name}",
            section="corpus",
            title=Path(name).stem,
            lastmod=base + dt.timedelta(hours=i),
        )
        path = root / spec.path.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
        ts = spec.lastmod.timestamp()
        os.utime(path, (ts, ts))
        specs.append(spec)
    _write_sitemap(root, base_url, specs)
    return specs


def _write_sitemap(root: Path, base_url: str, specs: Sequence[PageSpec]) -> None:
    """sitemap.xml listing every page with its lastmod, and a robots.txt that allows all."""
    entries = "".join(
        f"<url><loc>{base_url}{s.path}</loc><lastmod>{s.lastmod:%Y-%m-%dT%H:%M:%S+00:00}</lastmod></url>\n"
        for s in specs
    )
    (root / "sitemap.xml").write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
        f"{entries}</urlset>\n",
        encoding="utf-8",
    )
    (root / "robots.txt").write_text("User-agent: *\nAllow: /\n", encoding="utf-8")
