"""Pages that need JavaScript: rendered in a real headless Chromium (scrapy-playwright) when a
pattern opts them in, their DOM through the same extraction; a 304 costs no browser."""

from __future__ import annotations

import html
import json
import shutil
from typing import TYPE_CHECKING

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.kb.reader import open_kb
from tests import docsite

if TYPE_CHECKING:
    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

pytestmark = pytest.mark.skipif(
    not any(shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome")),
    reason="needs a Chromium (apt-get install chromium)",
)

T0 = 1_760_000_000.0
N_STATIC = 40
N_APP = 20
# the site's one renderer: the page's main content is built from data, by a script
RENDER_JS = """
async function render() {
  const app = document.getElementById("app");
  let doc = window.DOC;
  if (app.dataset.src) {
    doc = await (await fetch(app.dataset.src)).json();
  }
  const parts = [`<h1>${doc.title}</h1>`];
  for (const s of doc.sections) {
    parts.push(`<h2 id="${s.id}">${s.title}</h2><p>${s.text}</p>`);
    if (s.code) parts.push(`<pre><code>${s.code}</code></pre>`);
  }
  app.innerHTML = parts.join("");
}
render();
"""


def doc(i: int, word: str = "queue") -> dict[str, object]:
    return {
        "title": f"App guide {i}",
        "sections": [
            {"id": "start", "title": "Start", "text": f"Open the {word} view of app {i} and press Start."},
            {
                "id": "limits",
                "title": "Limits",
                "text": f"App {i} keeps {i + 10} jobs at most.",
                "code": f"app{i} run",
            },
        ],
    }


def app_page(i: int, word: str = "queue") -> str:
    """A page with no content of its own: a script renders it from the data it carries."""
    data = html.escape(json.dumps(doc(i, word)), quote=False)
    return (
        f"<!DOCTYPE html><html><head><title>App guide {i}</title></head><body>"
        '<nav><a href="/">Home</a></nav><main id="app"></main>'
        f"<script>window.DOC = {data};</script><script src='render.js'></script></body></html>"
    )


def remote_page() -> str:
    """A page whose script fetches its content (as docsify and its kind do)."""
    return (
        "<!DOCTYPE html><html><head><title>Remote</title></head><body>"
        "<main id='app' data-src='remote.json'></main><script src='render.js'></script></body></html>"
    )


def build_site(site: Site) -> str:
    for i in range(N_STATIC):
        site.write(
            f"guide/{i}.html", docsite.page(f"Guide {i}", [("Intro", [f"Static guide {i}."])]), mtime=T0
        )
    for i in range(N_APP):
        site.write(f"app/{i}.html", app_page(i), mtime=T0)
    site.write("app/render.js", RENDER_JS, mtime=T0)
    site.write("app/remote.html", remote_page(), mtime=T0)
    site.write("app/remote.json", json.dumps(doc(99, "remote")), mtime=T0)
    pages = [
        *(f"guide/{i}.html" for i in range(N_STATIC)),
        *(f"app/{i}.html" for i in range(N_APP)),
        "app/remote.html",
    ]
    return site.write_sitemap(pages)


def app_requests(site: Site) -> list[dict[str, object]]:
    return [r for r in site.requests() if str(r["path"]).startswith("app/")]


@deferred_f_from_coro_f
async def test_script_rendered_pages_go_through_the_browser_and_304s_never_do(
    site: Site, crawls: Crawls
) -> None:
    sitemap = build_site(site)
    # without rendering, a page whose content a script builds has no text
    plain = await crawls.crawl(sitemap, RECRAWLER_DRY_RUN=True)
    assert plain.stats["recrawler/page/error/empty_content"] == N_APP + 1

    render = {"RECRAWLER_RENDER_PATTERNS": [r"/app/"]}
    site.clear_requests()
    r1 = await crawls.crawl(sitemap, **render)
    assert {k: r1.counts[k] for k in ("new", "errors")} == {"new": N_STATIC + N_APP + 1, "errors": 0}
    assert r1.stats["recrawler/render/pages"] == N_APP + 1
    assert r1.exit_code == 0
    # the rendered DOM went through the same extraction: headings, anchors, code, chunks
    with open_kb(crawls.db_uri, embedder="hashing") as kb:
        chunks = {(c.url.split("/", 4)[-1], c.heading): c.text for c in kb.chunks()}
    assert chunks[("app/7.html#limits", "App guide 7 > Limits")] == (
        "## Limits\n\nApp 7 keeps 17 jobs at most.\n\n```\napp7 run\n```"
    )
    assert chunks[("app/remote.html#start", "App guide 99 > Start")] == (
        "## Start\n\nOpen the remote view of app 99 and press Start."
    )
    # each app page: asked once plainly, once by the browser (which also fetched its script)
    assert len(site.requests("app/3.html")) == 2
    assert site.requests("app/render.js")
    assert not site.requests("guide/3.html")[0]["if_none_match"]

    # nothing changed: every page answers its conditional request with a 304, no browser runs
    site.clear_requests()
    r2 = await crawls.crawl(sitemap, **render)
    assert r2.counts["unchanged"] == N_STATIC + N_APP + 1
    assert "recrawler/render/pages" not in r2.stats
    assert r2.stats["recrawler/conditional/not_modified"] == N_STATIC + N_APP + 1
    asked = app_requests(site)
    assert len(asked) == N_APP + 1
    assert {(bool(r["if_none_match"]), r["status"]) for r in asked} == {(True, 304)}
    assert site.requests("app/render.js") == []

    # one page's data changes: its 200 goes to the browser, the edit is found in the rendered text
    site.write("app/5.html", app_page(5, word="backlog"), mtime=T0 + 60)
    site.clear_requests()
    r3 = await crawls.crawl(sitemap, **render)
    assert (r3.counts["changed"], r3.counts["unchanged"]) == (1, N_STATIC + N_APP)
    assert r3.stats["recrawler/render/pages"] == 1
    assert r3.actions() == {"app/5.html": "changed"}
    with open_kb(crawls.db_uri) as kb:
        hit = kb.search("backlog view of app 5", k=1)[0]
    assert hit.url.endswith("app/5.html#start")
