"""docs/deploy.md's "In your own Scrapy project", followed as written in a project `scrapy startproject`
made: the run's outcome is `scrapy crawl`'s exit code, and errors are one line."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import pytest

from tests import docsite, shell
from tests.conftest_mockserver import REPO_ROOT
from tests.test_trust_runs import build

if TYPE_CHECKING:
    from pathlib import Path

    from tests.conftest_mockserver import Site

GUIDE = REPO_ROOT / "docs" / "deploy.md"
T0 = 1_760_000_000.0


def guide_section() -> str:
    """The guide's "In your own Scrapy project", up to its first subsection."""
    section = GUIDE.read_text(encoding="utf-8").split("## In your own Scrapy project", 1)[1]
    return section.split("\n## ", 1)[0].split("\n### ", 1)[0]


def guide_snippet() -> tuple[str, str]:
    """The guide's settings lines and its spiders module, as a reader copies them."""
    code = re.search(r"```python\n(.*?)```", guide_section(), re.DOTALL)
    assert code is not None
    settings, spiders = code.group(1).split("# spiders/mysite.py\n", 1)
    return settings.removeprefix("# settings.py\n"), spiders


def guide_commands() -> list[list[str]]:
    """The guide's shell lines, in order (each ``a && b`` as two), as a reader types them."""
    blocks = re.findall(r"```sh\n(.*?)```", guide_section(), re.DOTALL)
    return [
        shlex.split(command)
        for block in blocks
        for line in block.splitlines()
        for command in line.split("&&")
        if command.strip()
    ]


#: the template's pace, which the guide says to delete for your own docs site
TEMPLATE_PACE = ("CONCURRENT_REQUESTS_PER_DOMAIN = 1", "DOWNLOAD_DELAY = 1")


def make_project(tmp_path: Path, *, keep_template_pace: bool = False) -> Path:
    """A project as the guide makes it: `scrapy startproject` (its first command), the template's
    pace deleted (unless kept), the guide's settings added and its spiders module written."""
    startproject, cd, *_ = guide_commands()
    assert startproject[:2] == ["scrapy", "startproject"]
    assert cd == ["cd", startproject[2]]
    name = startproject[2]
    subprocess.run(
        [sys.executable, "-m", *startproject],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    root = tmp_path / name
    module = root / name
    text = (module / "settings.py").read_text(encoding="utf-8")
    for line in TEMPLATE_PACE:
        assert f"\n{line}\n" in text, line
        if not keep_template_pace:
            text = text.replace(f"\n{line}\n", "\n")
    settings, spiders = guide_snippet()
    (module / "settings.py").write_text(text + "\n" + settings, encoding="utf-8")
    (module / "spiders" / "mysite.py").write_text(spiders, encoding="utf-8")
    return root


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path)


def project_env() -> dict[str, str]:
    # the project's scrapy.cfg decides, not a settings module another Scrapy call put in the environment
    drop = ("SCRAPY_SETTINGS_MODULE", "SCRAPY_PROJECT", "RECRAWLER_DB_URI")
    return {k: v for k, v in os.environ.items() if k not in drop}


def crawl(
    project: Path, sitemap: str, *settings: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    argv = shell.scrapy_crawl_argv(sitemap, "RETRY_TIMES=0", *settings, spider="mysitemap")
    return subprocess.run(
        argv, cwd=cwd or project, env=project_env(), capture_output=True, text=True, timeout=180, check=False
    )


def test_the_guide_sets_commands_module() -> None:
    settings, _ = guide_snippet()
    assert 'COMMANDS_MODULE = "recrawler.commands"' in settings


def test_exit_codes_in_a_project_that_follows_the_guide(site: Site, project: Path) -> None:
    sitemap = build(site, 3)
    ok = crawl(project, sitemap)
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert "crawled: 3 new: 3 changed: 0 unchanged: 0 gone: 0 errors: 0" in ok.stderr
    assert (project / "state.db").exists()

    # a setting that is not a number, and one that is not a JSON object: one line each, exit 2
    for setting, name in (
        ("RECRAWLER_CHUNK_SIZE=large", "RECRAWLER_CHUNK_SIZE"),
        ("RECRAWLER_INTERVAL_OVERRIDES={bad json", "RECRAWLER_INTERVAL_OVERRIDES"),
    ):
        bad = crawl(project, sitemap, setting)
        assert bad.returncode == 2, bad.stderr[-3000:]
        assert "Traceback" not in bad.stderr
        assert "Task exception was never retrieved" not in bad.stderr
        assert len([line for line in bad.stderr.splitlines() if name in line]) == 1

    # a corrupt database: refused in one line, left as it is, exit 5
    db = project / "state.db"
    for path in project.glob("state.db-*"):
        path.unlink()
    db.write_bytes(b"this is not a database" * 200)
    site.clear_requests()
    corrupt = crawl(project, sitemap)
    assert corrupt.returncode == 5, corrupt.stderr[-3000:]
    assert "Traceback" not in corrupt.stderr
    errors = [line for line in corrupt.stderr.splitlines() if re.search(r"\] (ERROR|CRITICAL): ", line)]
    assert len(errors) == 1
    assert db.read_bytes() == b"this is not a database" * 200
    assert site.requests() == []


def test_the_guides_project_crawls_from_any_folder_at_the_profiles_pace(site: Site, project: Path) -> None:
    """The guide's steps as a reader runs them, on 200 pages: the crawl takes seconds (with the
    template's pace, minutes), from a folder inside the project it writes the project's database
    (a relative path is the project's, as the default database is), its DEBUG log names each page
    in one short line, never its text, and `recrawler search` there finds what it published."""
    sentinel = "Quokka sentinel text that only the page body has"
    for i in range(200):
        extra = f"{sentinel} {i}. Failed uploads of feature {i} are retried three times."
        site.write(f"p{i}.html", docsite.feature_page(i, extra), mtime=T0)
    sitemap = site.write_sitemap([f"p{i}.html" for i in range(200)])
    inside = project / project.name / "spiders"
    commands = guide_commands()
    scrapy_crawl = next(c for c in commands if c[:2] == ["scrapy", "crawl"])
    assert scrapy_crawl == ["scrapy", "crawl", "mysitemap"]
    started = time.monotonic()
    done = crawl(project, sitemap, cwd=inside)
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    assert "crawled: 200 new: 200" in done.stderr
    # the template's one request a second would take 200 s and more
    assert elapsed < 100
    assert (project / "state.db").exists()
    assert not (inside / "state.db").exists()
    assert "override recrawler's" not in done.stderr
    # DEBUG (the template's level): each page one short line, no page's text
    assert sentinel not in done.stderr
    scraped = [line for line in done.stderr.splitlines() if "Scraped from" in line]
    assert len(scraped) == 200
    assert all(re.search(r"<Page new 200 \S+/p\d+\.html \([\d,]+ chars\)>$", line) for line in scraped)
    assert len(done.stderr) < 400_000
    # the guide's search, from the folder inside the project: the project's database
    search = next(c for c in commands if c[:2] == ["recrawler", "search"])
    found = subprocess.run(
        [sys.executable, "-m", "recrawler.cli", *search[1:], "-k", "1"],
        cwd=inside,
        env=project_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert found.returncode == 0, found.stderr[-2000:]
    assert "/p" in found.stdout


def test_the_templates_pace_is_said_in_one_line_with_its_cost(site: Site, tmp_path: Path) -> None:
    project = make_project(tmp_path, keep_template_pace=True)
    sitemap = build(site, 3)
    done = crawl(project, sitemap)
    assert done.returncode == 0, done.stderr[-3000:]
    said = [line for line in done.stderr.splitlines() if "override recrawler's fast profile" in line]
    assert len(said) == 1
    assert " WARNING: " in said[0]
    assert "DOWNLOAD_DELAY = 1 (settings.py; profile: 0)" in said[0]
    assert "CONCURRENT_REQUESTS_PER_DOMAIN = 1 (settings.py; profile: 32)" in said[0]
    assert "1,000 pages take 17 min or more" in said[0]
    # the user's settings still win
    assert "'DOWNLOAD_DELAY': 1" in done.stderr
