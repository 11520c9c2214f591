"""Pages that need JavaScript: rendered in a real headless Chromium (scrapy-playwright) when a
pattern opts them in, their DOM through the same extraction; a 304 costs no browser."""

from __future__ import annotations

import base64
import html
import json
import shutil
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest
from scrapy.http.headers import Headers
from scrapy.utils.defer import deferred_f_from_coro_f
from scrapy.utils.test import get_crawler

from recrawler.downloadermiddlewares.render import BrowserGuard
from recrawler.kb.reader import open_kb
from recrawler.spiders.docs import DocsSpider
from recrawler.urls import UrlPolicy
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


# --- the browser keeps to the site ------------------------------------------------------------

PASSWORD = "render-pass-5521"
API_KEY = "render-key-77aa"
N_GUARDED = 30
FOREIGN = "Foreign vendor console: rotate the master key now."


def leaving_pages(there: str) -> dict[str, str]:
    """Rendered pages that send the browser to *there* (another host): by script, by a meta
    refresh, and by an iframe."""
    return {
        "app/leave-script.html": app_page(901).replace(
            "</body>", f"<script>setTimeout(() => {{ location.href = '{there}'; }}, 50);</script></body>"
        ),
        "app/leave-refresh.html": app_page(902).replace(
            "</title>", f"</title><meta http-equiv='refresh' content='0; url={there}'>"
        ),
        "app/leave-frame.html": app_page(903).replace("</main>", f"</main><iframe src='{there}'></iframe>"),
    }


@deferred_f_from_coro_f
async def test_the_browser_sends_no_credentials_off_site_and_never_stores_another_hosts_page(
    site: Site, other_host: Site, crawls: Crawls, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With basic auth and an API key header, a rendered page that navigated, refreshed or framed
    another host (127.0.0.2) made Chromium send both there (scrapy-playwright's navigations carry
    the Scrapy request's headers), and the other host's page was stored under the docs page's key."""
    other_host.write("console.html", docsite.page("Console", [("Keys", [FOREIGN])]), mtime=T0)
    there = other_host.url("console.html")
    for i in range(N_GUARDED):
        site.write(
            f"guide/{i}.html", docsite.page(f"Guide {i}", [("Intro", [f"Guarded guide {i}."])]), mtime=T0
        )
    for i in range(N_APP):
        site.write(f"app/{i}.html", app_page(i), mtime=T0)
    leaving = leaving_pages(there)
    for path, body in leaving.items():
        site.write(path, body, mtime=T0)
    site.write("app/render.js", RENDER_JS, mtime=T0)
    basic = "Basic " + base64.b64encode(f"support:{PASSWORD}".encode()).decode()
    site.options("*", require={"Authorization": basic, "X-Api-Key": API_KEY})
    # the site's script is public: the browser's own requests for it carry no credentials
    site.options("app/render.js", public=True)
    sitemap = site.write_sitemap(
        [*(f"guide/{i}.html" for i in range(N_GUARDED)), *(f"app/{i}.html" for i in range(N_APP)), *leaving]
    )
    monkeypatch.setenv("RECRAWLER_AUTH_USER", "support")
    monkeypatch.setenv("RECRAWLER_AUTH_PASSWORD", PASSWORD)
    monkeypatch.setenv("RECRAWLER_AUTH_HEADERS", json.dumps({"X-Api-Key": API_KEY}))

    result = await crawls.crawl(sitemap, RECRAWLER_RENDER_PATTERNS=[r"/app/"])
    assert result.exit_code == 0
    # nothing went to the other host: no password, no key, no request at all
    assert other_host.requests() == []
    assert result.stats["recrawler/render/refused"] >= len(leaving)
    # every page of the site was asked with both, by Scrapy and by the browser alike
    pages = [r for r in site.requests() if r["path"].endswith(".html")]
    assert {(r.get("authorization"), r.get("x-api-key")) for r in pages} == {(basic, API_KEY)}
    # a page whose main frame was sent away ended on the browser's error page: refused, a page
    # error; the framing page is indexed with its own text, without the frame
    assert result.actions() == {
        **dict.fromkeys(leaving, "new"),
        **{f"app/{i}.html": "new" for i in range(N_APP)},
        **{f"guide/{i}.html": "new" for i in range(N_GUARDED)},
        "app/leave-script.html": "error",
        "app/leave-refresh.html": "error",
    }
    assert result.stats["recrawler/page/error/render_offsite"] == 2
    with open_kb(crawls.db_uri, embedder="hashing") as kb:
        texts = {c.url.split("/", 4)[-1].split("#")[0]: c.text for c in kb.chunks()}
        hits = kb.search("vendor console master key", k=5)
    assert not [url for url, text in texts.items() if "vendor console" in text]
    assert all("vendor console" not in h.text for h in hits)
    assert "App 903 keeps 913 jobs at most." in texts["app/leave-frame.html"]
    assert not {"app/leave-script.html", "app/leave-refresh.html"} & texts.keys()


# --- the guard's decisions, request by request ------------------------------------------------

SITE_URL = "https://docs.example.com/app/1.html"


@dataclass
class Frame:
    """What the guard reads of a Playwright frame."""

    url: str
    parent_frame: Frame | None = None


@dataclass
class BrowserRequest:
    """What the guard reads of a Playwright request (Chromium's own are made only in a browser)."""

    url: str
    frame: Frame = field(default_factory=lambda: Frame(SITE_URL))
    navigation: bool = True
    resource_type: str = "document"
    redirected_from: BrowserRequest | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def is_navigation_request(self) -> bool:
        return self.navigation

    async def all_headers(self) -> dict[str, str]:
        return dict(self.headers)


def guard(**kwargs: Any) -> BrowserGuard:
    policy = UrlPolicy.for_urls(["https://docs.example.com/sitemap.xml"], any_host=True)
    crawler = SimpleNamespace(spider=SimpleNamespace(recrawler_url_policy=policy))
    return BrowserGuard(crawler, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("request_", "aborted"),
    [
        # on the site: a navigation, a frame, a script elsewhere (not a navigation)
        (BrowserRequest("https://docs.example.com/app/2.html"), False),
        (
            BrowserRequest(
                "https://docs.example.com/embed.html", frame=Frame("about:blank", Frame(SITE_URL))
            ),
            False,
        ),
        (BrowserRequest("https://cdn.example.net/app.js", navigation=False, resource_type="script"), False),
        # off the site: a script's location, a meta refresh, a frame, the same host over http
        (BrowserRequest("http://127.0.0.2:8000/console.html"), True),
        (BrowserRequest("https://evil.example/x", frame=Frame("about:blank", Frame(SITE_URL))), True),
        (BrowserRequest("http://docs.example.com/app/2.html"), True),
        # a page of an allowed host: its own first load is the Scrapy request, its hops stay home
        (BrowserRequest("https://other.example.org/p.html", frame=Frame("about:blank")), False),
        (
            BrowserRequest(
                "https://evil.example/p.html",
                frame=Frame("about:blank"),
                redirected_from=BrowserRequest(
                    "https://other.example.org/p.html", frame=Frame("about:blank")
                ),
            ),
            True,
        ),
        # images are never fetched (the default hook still applies)
        (BrowserRequest("https://docs.example.com/logo.png", navigation=False, resource_type="image"), True),
    ],
    ids=["site", "site-frame", "cdn-script", "location", "frame", "http", "allowed-page", "hop", "image"],
)
@deferred_f_from_coro_f
async def test_the_guard_aborts_navigations_off_the_site(request_: BrowserRequest, aborted: bool) -> None:
    assert await guard().abort_request(request_) is aborted


@deferred_f_from_coro_f
async def test_the_guard_keeps_credentials_to_the_sites_origins_and_wraps_the_projects_hooks() -> None:
    seen: list[str] = []

    def project_abort(request: Any) -> bool:
        seen.append(request.url)
        return False

    async def project_headers(**kwargs: Any) -> dict[str, str]:
        return {"x-project": "1", **kwargs["scrapy_request_data"]["headers"].to_unicode_dict()}

    g = guard(
        abort=project_abort,
        headers=project_headers,
        credential_headers=frozenset({"authorization", "cookie", "proxy-authorization", "x-api-key"}),
    )
    scrapy_headers = Headers({"Authorization": "Basic c2VjcmV0", "X-Api-Key": "k", "User-Agent": "recrawler"})
    browser = {"cookie": "session=s", "authorization": "Basic c2VjcmV0", "accept": "*/*", "x-api-key": "k"}
    data = {"url": SITE_URL, "headers": scrapy_headers}

    async def headers_for(url: str) -> dict[str, str]:
        req = BrowserRequest(url, navigation=False, resource_type="script", headers=browser)
        return await g.request_headers(
            browser_type_name="chromium", playwright_request=req, scrapy_request_data=data
        )

    elsewhere = await headers_for("http://127.0.0.2:8000/x.js")
    assert elsewhere == {"accept": "*/*", "user-agent": "recrawler"}
    assert await headers_for("https://docs.example.com:8443/x.js") == elsewhere
    home = await headers_for("https://docs.example.com/x.js")
    assert home["x-project"] == "1"
    assert home["Authorization"] == "Basic c2VjcmV0"
    # the project's abort hook still decides what is not a navigation off the site
    assert not await g.abort_request(BrowserRequest("https://docs.example.com/a.js", navigation=False))
    assert seen == ["https://docs.example.com/a.js"]


def project_abort(request: Any) -> bool:
    """A project's own PLAYWRIGHT_ABORT_REQUEST: no stylesheets."""
    return bool(request.resource_type == "stylesheet")


@deferred_f_from_coro_f
async def test_a_projects_own_browser_hooks_run_behind_the_guard() -> None:
    crawler = get_crawler(
        DocsSpider,
        {
            "ADDONS": {"recrawler.addon.RecrawlerAddon": 0},
            "RECRAWLER_RENDER_PATTERNS": ["/app/"],
            "PLAYWRIGHT_ABORT_REQUEST": "tests.test_render.project_abort",
        },
    )
    abort = crawler.settings["PLAYWRIGHT_ABORT_REQUEST"]
    assert isinstance(abort.__self__, BrowserGuard)
    assert isinstance(crawler.settings["PLAYWRIGHT_PROCESS_REQUEST_HEADERS"].__self__, BrowserGuard)
    assert await abort(
        BrowserRequest("https://x.example/a.css", navigation=False, resource_type="stylesheet")
    )
    # the project's hook replaced the default one: images are fetched again
    assert not await abort(BrowserRequest("https://x.example/a.png", navigation=False, resource_type="image"))
