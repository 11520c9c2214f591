"""docs/reference.md and the components' docstrings name everything a user can set: every setting the
package reads (its own, Scrapy's and the environment's) and every command-line option."""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
from fnmatch import fnmatchcase

import pytest

from recrawler.cli import build_parser
from tests.conftest_mockserver import REPO_ROOT

PACKAGE = REPO_ROOT / "recrawler"
REFERENCE = (REPO_ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
#: a setting read from settings or from the environment, as the code spells it
READ = re.compile(r"""\.get(?:int|float|bool|list|dict)?\(\s*["']([A-Z][A-Z0-9_]+)["']""")
#: the components the add-on places, and the extension it adds
COMPONENTS = [
    "recrawler.runtime.Runtime",
    "recrawler.intervals.SchedulePolicy",
    "recrawler.learning.NoiseRegistry",
    "recrawler.auditor.Auditor",
    "recrawler.kb.embedders.RunEmbedder",
    "recrawler.extensions.reconcile.Reconciler",
    "recrawler.extensions.logs.DownloadFailureLog",
    "recrawler.downloadermiddlewares.conditional.ConditionalRequestMiddleware",
    "recrawler.downloadermiddlewares.redirect.PageRedirectMiddleware",
    "recrawler.downloadermiddlewares.urlpolicy.UrlPolicyMiddleware",
    "recrawler.downloadermiddlewares.audit.AuditMiddleware",
    "recrawler.spidermiddlewares.listing.ListingMiddleware",
    "recrawler.spidermiddlewares.links.LinkListingMiddleware",
    "recrawler.spidermiddlewares.deltafetch.DeltaFetchMiddleware",
    "recrawler.spidermiddlewares.schedule.ScheduleMiddleware",
    "recrawler.scheduler.FrontierScheduler",
    "recrawler.pipelines.classify.ClassifyPipeline",
    "recrawler.pipelines.index.IndexPipeline",
]
#: settings the reference names by a pattern
PATTERNS = ("RECRAWLER_URL_*_PARAMS",)


def read_anywhere() -> set[str]:
    names: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        names.update(READ.findall(text))
        names.update(re.findall(r'"(RECRAWLER_[A-Z0-9_]+)"', text))
    # the literal check a prefix is made with is no setting
    return {n for n in names if not n.endswith("_")}


def documented(name: str, text: str) -> bool:
    return f"`{name}`" in text or any(fnmatchcase(name, p) and f"`{p}`" in text for p in PATTERNS)


def test_every_setting_the_package_reads_is_in_the_reference() -> None:
    missing = sorted(n for n in read_anywhere() if not documented(n, REFERENCE))
    assert missing == []


@pytest.mark.parametrize("path", COMPONENTS)
def test_a_components_docstring_names_every_setting_it_reads(path: str) -> None:
    module, _, name = path.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    doc = cls.__doc__ or ""
    named = set(re.findall(r"``([A-Z][A-Z0-9_*]+)``", doc))
    read = set(READ.findall(inspect.getsource(cls)))
    missing = sorted(n for n in read if not any(fnmatchcase(n, d) for d in named))
    assert missing == []


def subcommands(
    parser: argparse.ArgumentParser, prefix: str = "recrawler"
) -> list[tuple[str, argparse.ArgumentParser]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append((f"{prefix} {name}", sub))
                found.extend(subcommands(sub, f"{prefix} {name}"))
    return found


def test_every_command_line_option_is_in_the_reference() -> None:
    cli = REFERENCE.split("## CLI", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in cli.splitlines() if line.startswith("| `recrawler")]
    assert "`recrawler --version`" in cli
    missing = []
    for command, parser in subcommands(build_parser()):
        text = " ".join(row for row in rows if row.startswith(f"| `{command}"))
        if not text:
            # an action documented in its command's rows (`recrawler runs [list]`)
            text = " ".join(row for row in rows if row.startswith(f"| `{command.rsplit(' ', 1)[0]}"))
        for action in parser._actions:
            for option in action.option_strings:
                if option in ("-h", "--help", "--db", "-s"):
                    continue  # every command's, documented once below the table
                if option.startswith("--") and option not in text:
                    missing.append(f"{command} {option}")
    assert missing == []


def reference_rows() -> dict[str, str]:
    """The settings table's rows: each setting it names (a row may name two) -> its Default cell."""
    rows: dict[str, str] = {}
    # recrawler's own table: the first after the heading (the next is Scrapy's and the environment's)
    table = REFERENCE.split("## Settings", 1)[1].strip().split("\n\n", 1)[0]
    for line in table.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 4 or not cells[1].startswith("`RECRAWLER_"):
            continue
        for name in re.findall(r"`(RECRAWLER_[A-Z0-9_*]+)`", cells[1]):
            rows.setdefault(name, cells[2])
    return rows


def shown(value: object) -> str | None:
    """How the reference writes a scalar default (None for the rest, and for None: a default the
    table may describe in words, as the database's place)."""
    if isinstance(value, bool | int | float):
        return f"`{value}`"
    return None


def test_the_settings_table_is_default_settings() -> None:
    from recrawler import default_settings

    defaults = {n: getattr(default_settings, n) for n in dir(default_settings) if n.startswith("RECRAWLER_")}
    rows = reference_rows()
    # every setting recrawler defines has its row, and every row is a setting recrawler defines
    assert sorted(n for n in defaults if not documented(n, REFERENCE) or n not in rows) == []
    assert sorted(n for n in rows if n not in defaults and not any(fnmatchcase(n, p) for p in PATTERNS)) == []
    # and a number or a switch is the default the table gives (words may follow it)
    wrong = {
        n: (rows[n], want)
        for n, v in defaults.items()
        if (want := shown(v)) is not None and not rows[n].startswith(want)
    }
    assert wrong == {}


def layout_rows() -> list[list[str]]:
    """The code-layout table's rows: the paths each row's Where cell names."""
    table = REFERENCE.split("## Code layout", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) >= 4 and cells[1].startswith("`"):
            rows.append(re.findall(r"`([^`]+)`", cells[1]))
    return rows


def test_the_code_layout_table_is_the_package() -> None:
    rows = layout_rows()
    # one row per module or package, each named once; and every path it names is there
    assert [paths for paths in rows if len(paths) != 1] == []
    named = [paths[0] for paths in rows]
    assert sorted(n for n in set(named) if named.count(n) > 1) == []
    assert sorted(n for n in named if not (REPO_ROOT / n).exists()) == []
    rooms = {
        f"recrawler/{path.name}/" if path.is_dir() else f"recrawler/{path.name}"
        for path in PACKAGE.iterdir()
        if (path.suffix == ".py" and path.name != "__init__.py") or (path / "__init__.py").is_file()
    }
    assert len(rooms) > 40
    assert sorted(rooms - set(named)) == []


def test_the_summary_line_keeps_its_head_and_the_reference_explains_the_rest() -> None:
    from recrawler.reports.summary import summary_line

    counts = {name: n for n, name in enumerate(("new", "changed", "unchanged", "gone", "errors"), 1)}
    report = {
        "counts": {"crawled": sum(counts.values()), **counts},
        "index": {"state": "published", "chunks_added": 7, "texts_embedded": 5},
        "reconcile": {"skipped": ["error_ratio"]},
        "held": ["mass_removal"],
        "outcome": {"exit_code": 3},
    }
    line = summary_line(report)
    # what users grep for: byte for byte, then " | "
    assert line.startswith("crawled: 15 new: 1 changed: 2 unchanged: 3 gone: 4 errors: 5 | ")
    section = REFERENCE.split("## Summary line", 1)[1].split("\n## ", 1)[0]
    rows = set(re.findall(r"^\| `([a-z_]+)[`:]", section, re.MULTILINE))
    names = set(re.findall(r"\b([a-z_]+): ", line)) - {"chunks_added", "texts_embedded"}
    assert sorted(names - rows - {"index", "reconcile skipped", "skipped"}) == []
    # and each part after the counts has its row
    for part in ("index: <state>", "reconcile skipped: <reasons>", "HELD: <reasons>", "exit N"):
        assert f"| `{part}" in section
