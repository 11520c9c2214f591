"""The CLI decides with a run's settings: flags > environment > project settings > recrawler defaults."""

from __future__ import annotations

import asyncio
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from scrapy.settings import Settings

from recrawler import default_settings
from recrawler.cli import build_settings
from recrawler.state import store_from_uri
from tests import shell

if TYPE_CHECKING:
    from collections.abc import Callable

URL = "https://docs.example.com/guide?session=abc&page=2"
SECRET_URI = "postgresql://bot:hunter2@db.internal/recrawler"

# A backend registered under its own scheme by a project: it subclasses the SQLite store and leaves
# a marker file next to the database, so a test sees which class the CLI built.
PROBE_BACKEND = """
from pathlib import Path

from recrawler.state.sqlite import SQLiteStateStore


class ProbeStateStore(SQLiteStateStore):
    @classmethod
    def from_settings(cls, uri, settings):
        path = uri.split("://", 1)[1].removeprefix("/")
        Path(path + ".probe").write_text(settings.get("RECRAWLER_STATE_BACKENDS")["probe"])
        return super().from_settings("sqlite:///" + path, settings)
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Path]:
    """Write a Scrapy project (scrapy.cfg + settings module) with the given settings; chdir into it."""
    # set, then delete: monkeypatch restores the variable, which get_project_settings() sets
    for name in ("SCRAPY_SETTINGS_MODULE", "SCRAPY_PROJECT", "RECRAWLER_DB_URI", "RECRAWLER_EVENTS_URI"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setattr(sys, "path", list(sys.path))
    root = tmp_path / "project"
    root.mkdir()
    # one module name per test: sys.modules caches settings modules
    module = f"cliproj_{tmp_path.name.replace('-', '_')}"

    def write(**settings: Any) -> Path:
        lines = [f"{name} = {value!r}" for name, value in settings.items()]
        (root / f"{module}.py").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (root / f"{module}_backend.py").write_text(PROBE_BACKEND, encoding="utf-8")
        (root / "scrapy.cfg").write_text(f"[settings]\ndefault = {module}\n", encoding="utf-8")
        monkeypatch.chdir(root)
        monkeypatch.delitem(sys.modules, module, raising=False)
        return root

    return write


def make_db(path: Path) -> str:
    """An empty state database (the schema, no pages): what `recrawler` reads."""
    uri = f"sqlite:///{path}"
    settings = Settings()
    settings.setmodule(default_settings, priority="default")
    store = store_from_uri(uri, settings)

    async def create() -> None:
        await store.open()
        await store.close()

    # the test runs inside the reactor's event loop: the store is created on a thread of its own
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, create()).result()
    return uri


def due_modes(*argv: str) -> str:
    code, out = shell.run_cli("due", *argv)
    assert code == 0, out
    return out.rsplit("(", 1)[1].split(")", 1)[0]


def test_due_honours_the_projects_schedule_and_lastmod_mode(
    project: Callable[..., Path], tmp_path: Path
) -> None:
    project(RECRAWLER_SCHEDULE="all", RECRAWLER_LASTMOD_MODE="skip")
    assert due_modes("--db", make_db(tmp_path / "state.db")) == "schedule all, lastmod skip"


def test_due_without_a_project_override_uses_recrawlers_defaults(
    project: Callable[..., Path], tmp_path: Path
) -> None:
    project(BOT_NAME="plain")
    expected = (
        f"schedule {default_settings.RECRAWLER_SCHEDULE}, lastmod {default_settings.RECRAWLER_LASTMOD_MODE}"
    )
    assert due_modes("--db", make_db(tmp_path / "state.db")) == expected


def test_flags_beat_the_project(project: Callable[..., Path], tmp_path: Path) -> None:
    project(RECRAWLER_SCHEDULE="all", RECRAWLER_LASTMOD_MODE="skip")
    db = make_db(tmp_path / "state.db")
    assert due_modes("--db", db, "--schedule", "adaptive", "--lastmod-mode", "ignore") == (
        "schedule adaptive, lastmod ignore"
    )
    # -s before or after the command, at the same (command-line) priority as the named flags
    assert due_modes("--db", db, "-s", "RECRAWLER_LASTMOD_MODE=hint") == "schedule all, lastmod hint"
    assert shell.run_cli("-s", "RECRAWLER_SCHEDULE=adaptive", "due", "--db", db)[1].endswith(
        "(schedule adaptive, lastmod skip); URLs new to the sitemap or a feed are due at once too\n"
    )


def test_diff_and_normalize_honour_the_projects_url_parameters(
    project: Callable[..., Path], tmp_path: Path
) -> None:
    project(RECRAWLER_URL_DROP_PARAMS=["session"])
    db = make_db(tmp_path / "state.db")
    assert shell.run_cli("diff", "--db", db, URL) == (
        1,
        "no page docs.example.com/guide?page=2 stored (see `recrawler pages`)\n",
    )
    assert shell.run_cli("normalize", URL) == (0, f"docs.example.com/guide?page=2\t{URL}\n")
    # the flag replaces the project's list, as -s would
    assert shell.run_cli("normalize", "--drop", "page", URL) == (
        0,
        f"docs.example.com/guide?session=abc\t{URL}\n",
    )


def test_normalize_honours_the_projects_keep_list(project: Callable[..., Path]) -> None:
    project(RECRAWLER_URL_KEEP_PARAMS=["page"])
    assert shell.run_cli("normalize", URL) == (0, f"docs.example.com/guide?page=2\t{URL}\n")


def test_the_store_comes_from_the_projects_state_backends(
    project: Callable[..., Path], tmp_path: Path
) -> None:
    root = project()
    module = next(root.glob("*_backend.py")).stem
    backends = {**default_settings.RECRAWLER_STATE_BACKENDS, "probe": f"{module}.ProbeStateStore"}
    project(RECRAWLER_STATE_BACKENDS=backends)
    db = tmp_path / "state.db"
    make_db(db)
    for argv in (["pages"], ["runs"], ["due"], ["trust"], ["immutable"], ["check"], ["diff", URL]):
        marker = Path(f"{db}.probe")
        marker.unlink(missing_ok=True)
        code, _ = shell.run_cli(*argv, "--db", f"probe:///{db}")
        assert code in (0, 1), argv
        assert marker.read_text() == f"{module}.ProbeStateStore", argv


def test_an_unknown_scheme_is_one_line_and_exit_2(
    project: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    project()
    assert shell.run_cli("pages", "--db", "probe:///nowhere.db")[0] == 2
    err = capsys.readouterr().err
    assert err.startswith("recrawler: error: RECRAWLER_DB_URI: no backend for scheme 'probe'")
    assert err.count("\n") == 1


def test_environment_beats_the_project_and_flags_beat_the_environment(
    project: Callable[..., Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    project(RECRAWLER_DB_URI=f"sqlite:///{tmp_path / 'project.db'}")
    assert shell.run_cli("pages")[0] == 2
    assert "project.db" in capsys.readouterr().err
    monkeypatch.setenv("RECRAWLER_DB_URI", f"sqlite:///{tmp_path / 'env.db'}")
    assert shell.run_cli("pages")[0] == 2
    assert "env.db" in capsys.readouterr().err
    assert shell.run_cli("pages", "--db", make_db(tmp_path / "flag.db")) == (0, "no pages stored\n")
    assert shell.run_cli("--db", f"sqlite:///{tmp_path / 'flag2.db'}", "pages")[0] == 2
    assert "flag2.db" in capsys.readouterr().err


def test_the_builder_layers_the_sources(
    project: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    project(RECRAWLER_EVENTS_URI="file:///project.jsonl", RECRAWLER_GONE_AFTER_MISSES=7, DOWNLOAD_DELAY=3)
    monkeypatch.setenv("RECRAWLER_EVENTS_URI", "file:///env.jsonl")
    settings = build_settings(db="sqlite:///flag.db", lastmod_mode="ignore")
    assert settings["RECRAWLER_DB_URI"] == "sqlite:///flag.db"
    assert settings.getpriority("RECRAWLER_DB_URI") == settings.getpriority("RECRAWLER_LASTMOD_MODE")
    assert settings["RECRAWLER_LASTMOD_MODE"] == "ignore"
    assert settings["RECRAWLER_EVENTS_URI"] == "file:///env.jsonl"
    assert settings.getint("RECRAWLER_GONE_AFTER_MISSES") == 7
    # the add-on's defaults and profile, under the project's own values
    assert settings["RECRAWLER_SCHEDULE"] == default_settings.RECRAWLER_SCHEDULE
    assert settings.getint("CONCURRENT_REQUESTS") == 32
    assert settings.getfloat("DOWNLOAD_DELAY") == 3


def test_outside_a_project_recrawlers_settings_apply(
    project: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    settings = build_settings()
    assert settings["BOT_NAME"] == "recrawler"
    # Scrapy's data directory outside a project: .scrapy in the working directory
    assert settings["RECRAWLER_DB_URI"] == f"sqlite:///{elsewhere.resolve() / '.scrapy' / 'recrawler.db'}"


def test_a_missing_settings_module_is_one_line_and_exit_2(
    project: Callable[..., Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project()
    monkeypatch.setenv("SCRAPY_SETTINGS_MODULE", "no_such_settings_module")
    assert shell.run_cli("normalize", URL)[0] == 2
    err = capsys.readouterr().err
    assert err.startswith("recrawler: error: SCRAPY_SETTINGS_MODULE: cannot import 'no_such_settings_module'")
    assert err.count("\n") == 1


def test_credentials_in_the_uri_are_masked(
    project: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    project(RECRAWLER_STATE_BACKENDS={"sqlite": "recrawler.state.sqlite.SQLiteStateStore"})
    assert shell.run_cli("pages", "--db", SECRET_URI)[0] == 2
    err = capsys.readouterr().err
    assert "hunter2" not in err
    assert err.count("\n") == 1


def test_the_search_cache_setting_reaches_search_and_open_kb(
    project: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``RECRAWLER_SEARCH_CACHE_MB`` from the project's settings and from ``-s`` reaches
    ``recrawler search``, and the project's reaches ``open_kb()``: a bad value is refused in one
    line naming the setting, a good one sizes the SQLite knowledge base's column cache."""
    from recrawler.kb import open_kb

    db = tmp_path / "state.db"
    uri = make_db(db)
    project(RECRAWLER_SEARCH_CACHE_MB=-1)
    assert shell.run_cli("search", "retry uploads", "--db", uri)[0] == 2
    err = capsys.readouterr().err
    assert err.startswith("recrawler: error: RECRAWLER_SEARCH_CACHE_MB: expected 0 or more"), err
    assert err.count("\n") == 1
    project(RECRAWLER_SEARCH_CACHE_MB=3)
    assert shell.run_cli("-s", "RECRAWLER_SEARCH_CACHE_MB=-2", "search", "retry uploads", "--db", uri)[0] == 2
    assert "got -2" in capsys.readouterr().err
    code, out = shell.run_cli("search", "retry uploads", "--db", uri)
    assert code == 0, out
    assert "no run has published yet" in out
    project(RECRAWLER_SEARCH_CACHE_MB=3, RECRAWLER_DB_URI=uri)
    with open_kb() as kb:
        assert kb._scan.cache_bytes == 3 * 2**20  # type: ignore[attr-defined]
    with open_kb(cache_mb=0) as kb:
        assert kb._scan.cache_bytes == 0  # type: ignore[attr-defined]
