"""docs/deploy.md's "In your own Scrapy project", followed as written in a project `scrapy startproject`
made: the run's outcome is `scrapy crawl`'s exit code, and errors are one line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from tests import shell
from tests.conftest_mockserver import REPO_ROOT
from tests.test_trust_runs import build

if TYPE_CHECKING:
    from pathlib import Path

    from tests.conftest_mockserver import Site

GUIDE = REPO_ROOT / "docs" / "deploy.md"


def guide_snippet() -> tuple[str, str]:
    """The guide's settings lines and its spiders module, as a reader copies them."""
    section = GUIDE.read_text(encoding="utf-8").split("## In your own Scrapy project", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert code is not None
    settings, spiders = code.group(1).split("# spiders/mysite.py\n", 1)
    return settings.removeprefix("# settings.py\n"), spiders


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project as `scrapy startproject` makes it, with the guide's lines added."""
    subprocess.run(
        [sys.executable, "-m", "scrapy", "startproject", "myproject", str(tmp_path / "myproject")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    root = tmp_path / "myproject"
    settings, spiders = guide_snippet()
    module = root / "myproject"
    with (module / "settings.py").open("a", encoding="utf-8") as f:
        f.write("\n" + settings)
    (module / "spiders" / "mysite.py").write_text(spiders, encoding="utf-8")
    return root


def crawl(project: Path, sitemap: str, *settings: str) -> subprocess.CompletedProcess[str]:
    argv = shell.scrapy_crawl_argv(sitemap, "RETRY_TIMES=0", *settings, spider="mysitemap")
    # the project's scrapy.cfg decides, not a settings module another Scrapy call put in the environment
    env = {k: v for k, v in os.environ.items() if k not in ("SCRAPY_SETTINGS_MODULE", "SCRAPY_PROJECT")}
    return subprocess.run(
        argv, cwd=project, env=env, capture_output=True, text=True, timeout=120, check=False
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
