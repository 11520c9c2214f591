"""Build markers and a site's build fingerprint (pure): what every page of one build shares, with
what varies per request learned as noise."""

from __future__ import annotations

from recrawler.detect.build import BuildFingerprint, build_markers, slot_of

URL = "https://docs.example.com/guide/install.html"


def head(*lines: str) -> bytes:
    return ("<!DOCTYPE html><html><head>" + "".join(lines) + "</head><body><p>Hi</p></body></html>").encode()


def test_markers_are_the_builds_assets_and_meta_on_the_sites_host() -> None:
    page = head(
        '<meta name="generator" content="Sphinx 7.2.6">',
        '<meta name="docsearch:version" content="3.1">',
        '<meta name="description" content="How to install">',
        '<link rel="stylesheet" href="../_static/styles.3f2a91c0.css">',
        '<link rel="canonical" href="/guide/install.html">',
        '<link rel="stylesheet" href="https://cdn.example.net/lib.css">',
        '<script src="/_static/app.js?v=20260301" nonce="r4nd0m"></script>',
    )
    assert build_markers(page, URL) == {
        "meta:generator": "Sphinx 7.2.6",
        "meta:docsearch:version": "3.1",
        "link:/_static/styles.#.css": "/_static/styles.3f2a91c0.css",
        "script:/_static/app.js?v=#": "/_static/app.js?v=20260301",
    }
    assert build_markers(b"not html at all \x00\x01", URL) == {}


def test_a_base_href_resolves_relative_assets() -> None:
    page = head('<base href="/docs/">', '<link rel="stylesheet" href="assets/site.css">')
    assert build_markers(page, URL) == {"link:/docs/assets/site.css": "/docs/assets/site.css"}
    assert slot_of("link", "/a/b.1234abcd.css?x=1&y=2") == "link:/a/b.#.css?x=#&y=#"


def test_slots_that_vary_between_pages_of_one_run_are_noise() -> None:
    build = {"meta:generator": "MkDocs 1.6", "link:/css/theme.#.css": "/css/theme.a1b2c3.css"}
    pages = [{**build, "script:/js/t.js?rid=#": f"/js/t.js?rid={token}"} for token in ("11", "22", "33")]
    fp = BuildFingerprint.combine(pages)
    assert fp.markers == build
    assert fp.noise == frozenset({"script:/js/t.js?rid=#"})
    # the next run, nothing deployed: the noise learned is never compared
    again = BuildFingerprint.combine([{**build, "script:/js/t.js?rid=#": "/js/t.js?rid=44"}] * 2, fp.noise)
    assert fp.moved(again, pages=2) == []


def test_a_new_build_moves_the_fingerprint_and_page_kinds_do_not() -> None:
    stored = BuildFingerprint(
        {"meta:generator": "MkDocs 1.6", "link:/css/theme.#.css": "/css/theme.a1b2c3.css"}
    )
    new = BuildFingerprint({"meta:generator": "MkDocs 1.6", "link:/css/theme.#.css": "/css/theme.d4e5f6.css"})
    assert stored.moved(new, pages=2) == ["link:/css/theme.#.css"]
    assert "a1b2c3.css -> /css/theme.d4e5f6.css" in stored.describe(new, ["link:/css/theme.#.css"])
    # a home page with scripts of its own, or without the theme's: no move
    home = BuildFingerprint({"meta:generator": "MkDocs 1.6", "script:/js/hero.js": "/js/hero.js"})
    assert stored.moved(home, pages=2) == []
    # a generator named on every page seen: a move (one page alone says nothing of the others)
    named = BuildFingerprint({**stored.markers, "meta:build-date": "2026-03-02"})
    assert stored.moved(named, pages=2) == ["meta:build-date"]
    assert stored.moved(named, pages=1) == []
