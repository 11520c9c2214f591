"""Settings that did nothing: a misspelled name is said (with the setting meant), and a list given as
JSON text on the command line is that list, not one regular expression matching every URL."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import TYPE_CHECKING

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler import default_settings
from recrawler.cli.settings import build_settings
from tests import docsite, shell
from tests.conftest_mockserver import REPO_ROOT
from tests.test_render import N_APP, build_site

if TYPE_CHECKING:
    from pathlib import Path

    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0
LISTS = sorted(
    name
    for name in dir(default_settings)
    if name.startswith("RECRAWLER_") and isinstance(getattr(default_settings, name), list)
)


def warnings_about(stderr: str, name: str) -> list[str]:
    return [line for line in stderr.splitlines() if f"{name} is not a recrawler" in line]


def test_a_misspelled_setting_or_variable_is_said_once_with_the_one_meant(site: Site, tmp_path: Path) -> None:
    for i in range(100):
        site.write(f"p{i}.html", docsite.feature_page(i), mtime=T0)
    sitemap = site.write_sitemap([f"p{i}.html" for i in range(100)])
    env = {**os.environ, "RECRAWLER_DB_URL": f"sqlite:///{tmp_path / 'meant.db'}"}
    argv = shell.scrapy_crawl_argv(
        sitemap, f"RECRAWLER_DB_URI=sqlite:///{tmp_path / 'state.db'}", "RECRAWLER_SCHEDUEL=all"
    )
    done = subprocess.run(
        argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (schedule,) = warnings_about(done.stderr, "RECRAWLER_SCHEDUEL")
    assert " WARNING: " in schedule
    assert schedule.endswith(
        "RECRAWLER_SCHEDUEL is not a recrawler setting (did you mean RECRAWLER_SCHEDULE?): it does nothing"
    )
    (variable,) = warnings_about(done.stderr, "RECRAWLER_DB_URL")
    assert variable.endswith(
        "RECRAWLER_DB_URL is not a recrawler environment variable (did you mean RECRAWLER_DB_URI?): "
        "it does nothing"
    )
    # the commands say it too
    pages = shell.recrawler_process(
        "-s", "RECRAWLER_DB_URL=x", "pages", "--db", f"sqlite:///{tmp_path / 'state.db'}"
    )
    assert pages.returncode == 0
    assert pages.stderr.splitlines() == [
        "RECRAWLER_DB_URL is not a recrawler setting (did you mean RECRAWLER_DB_URI?): it does nothing"
    ]


@pytest.mark.parametrize("name", LISTS)
def test_every_list_setting_takes_a_json_list_given_as_text(name: str) -> None:
    value = [410, 404] if name.endswith("_STATUSES") else ["/guide/", "/api/"]
    settings = build_settings(set=[(name, json.dumps(value))])
    assert settings.getlist(name) == value
    # comma-separated text, as Scrapy reads it, still is
    settings = build_settings(set=[(name, ",".join(str(v) for v in value))])
    assert [type(value[0])(v) for v in settings.getlist(name)] == value


def test_a_regular_expression_that_starts_with_a_bracket_stays_one() -> None:
    settings = build_settings(set=[("RECRAWLER_IMMUTABLE_PATTERNS", r"[0-9]+\.html$")])
    assert settings.getlist("RECRAWLER_IMMUTABLE_PATTERNS") == [r"[0-9]+\.html$"]


def test_immutable_patterns_as_json_text_skip_only_what_they_name(site: Site, tmp_path: Path) -> None:
    paths = [*(f"v1/p{i}.html" for i in range(60)), *(f"latest/p{i}.html" for i in range(60))]
    for i, path in enumerate(paths):
        site.write(path, docsite.feature_page(i), mtime=T0)
    sitemap = site.write_sitemap(paths)
    db = f"RECRAWLER_DB_URI=sqlite:///{tmp_path / 'state.db'}"
    settings = (db, "RECRAWLER_SCHEDULE=all", 'RECRAWLER_IMMUTABLE_PATTERNS=["/v1/"]')
    assert shell.scrapy_crawl(sitemap, *settings).returncode == 0
    site.clear_requests()
    again = shell.scrapy_crawl(sitemap, *settings)
    assert again.returncode == 0
    asked = {r["path"].split("/")[0] for r in site.requests() if r["path"].endswith(".html")}
    # the versioned pages are fetched once; before, ["/v1/"] was one character class: every page
    assert asked == {"latest"}
    assert "skipped_deltafetch: 60 " in again.stderr


@pytest.mark.skipif(
    not any(shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome")),
    reason="needs a Chromium (apt-get install chromium)",
)
@deferred_f_from_coro_f
async def test_the_readmes_render_patterns_render_only_what_they_name(site: Site, crawls: Crawls) -> None:
    sitemap = build_site(site)
    # as `-s 'RECRAWLER_RENDER_PATTERNS=["/app/"]'` gives it: text
    r = await crawls.crawl(sitemap, RECRAWLER_RENDER_PATTERNS='["/app/"]')
    assert r.stats["recrawler/render/pages"] == N_APP + 1
