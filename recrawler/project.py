"""The project around a run: its settings module, its data directory and the database it writes.

Low on purpose: the add-on, the CLI and ``open_kb()`` all find the same database through here.
Scrapy loads when a function here needs it: a search outside a project never imports it.
"""

from __future__ import annotations

import os
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING

from recrawler.exceptions import ConfigurationError

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings, Settings

#: settings a deployment may set in the environment; ``-s`` still wins, the project's file does not
ENVIRONMENT_SETTINGS = (
    "RECRAWLER_DB_URI",
    "RECRAWLER_EVENTS_URI",
    "RECRAWLER_WEBHOOK_URL",
    "RECRAWLER_WEBHOOK_SECRET",
    "RECRAWLER_AUTH_USER",
    "RECRAWLER_AUTH_PASSWORD",
    "RECRAWLER_AUTH_HEADERS",
    "RECRAWLER_AUTH_COOKIES_FILE",
)
#: other ``RECRAWLER_*`` environment variables recrawler reads (the log level of its settings
#: module, an embedder's key)
OTHER_ENVIRONMENT = ("RECRAWLER_LOG_LEVEL", "RECRAWLER_EMBEDDER_API_KEY")
#: the database file when ``RECRAWLER_DB_URI`` is not set, in Scrapy's project data directory
DEFAULT_DB_FILE = "recrawler.db"
#: the settings module used outside a Scrapy project
FALLBACK_SETTINGS_MODULE = "recrawler.settings"


def project_data_path(name: str, *, create: bool = False) -> Path:
    """*name* in Scrapy's project data directory, as deltafetch and httpcache keep theirs
    (``.scrapy`` beside ``scrapy.cfg``, or a ``[datadir]`` of Scrapy's config); with *create*, its
    directory is created when missing."""
    from scrapy.exceptions import NotConfigured
    from scrapy.utils.project import data_path

    try:
        path = Path(data_path(name))
    except NotConfigured:
        # a settings module but no scrapy.cfg (a Scrapyd job, `recrawler crawl` from anywhere):
        # Scrapy's data directory outside a project, .scrapy in the working directory
        path = Path(".scrapy", name)
    path = path.resolve()
    if create:
        path.parent.mkdir(parents=True, exist_ok=True)
    return path


def project_db_uri(*, create: bool = False) -> str:
    """``sqlite:///`` + ``recrawler.db`` in Scrapy's project data directory (:func:`project_data_path`);
    with *create*, its directory is created when missing."""
    return f"sqlite:///{project_data_path(DEFAULT_DB_FILE, create=create)}"


def project_dir() -> Path | None:
    """The Scrapy project's directory (where its ``scrapy.cfg`` is), or None outside a project."""
    from scrapy.utils.conf import closest_scrapy_cfg

    cfg = closest_scrapy_cfg()
    return Path(cfg).resolve().parent if cfg else None


def resolve_project_db(settings: BaseSettings) -> None:
    """A relative SQLite ``RECRAWLER_DB_URI`` the project's code sets (its settings module or a
    spider's ``custom_settings``: ``sqlite:///state.db``) names a file in the project directory,
    as the default database is in its data directory: the same database from any folder of the
    project (a command line's ``-s``/``--db`` or the environment stay relative to the working
    directory, as any command's paths are)."""
    from scrapy.settings import SETTINGS_PRIORITIES

    priority = settings.getpriority("RECRAWLER_DB_URI") or 0
    uri = settings.get("RECRAWLER_DB_URI")
    if priority not in (SETTINGS_PRIORITIES["project"], SETTINGS_PRIORITIES["spider"]) or not uri:
        return
    root = project_dir()
    uri = str(uri)
    # the backend a store_from_uri would choose: SQLite for sqlite://, file:// and a bare path
    if root is None or ("://" in uri and uri.split("://", 1)[0].lower() not in ("sqlite", "file")):
        return
    from recrawler.state.sqlite.versions import sqlite_target

    path, readonly = sqlite_target(uri)
    if path == ":memory:" or Path(path).is_absolute():
        return
    absolute = f"sqlite:///{root / path}" + ("?mode=ro" if readonly else "")
    settings.set("RECRAWLER_DB_URI", absolute, priority=priority)


def apply_environment(settings: BaseSettings) -> None:
    """A deployment's environment (:data:`ENVIRONMENT_SETTINGS`) over the project's settings file,
    not over ``-s``."""
    from scrapy.settings import SETTINGS_PRIORITIES

    for name in ENVIRONMENT_SETTINGS:
        value = os.environ.get(name)
        if value and (settings.getpriority(name) or 0) <= SETTINGS_PRIORITIES["project"]:
            settings.set(name, value, priority="project")


def unknown_environment() -> list[str]:
    """The ``RECRAWLER_*`` environment variables recrawler does not read (a misspelled
    ``RECRAWLER_DB_URL`` would do nothing), tests' own ``RECRAWLER_TEST_*`` aside."""
    read = {*ENVIRONMENT_SETTINGS, *OTHER_ENVIRONMENT}
    return sorted(
        name
        for name in os.environ
        if name.startswith("RECRAWLER_") and not name.startswith("RECRAWLER_TEST_") and name not in read
    )


def project_settings() -> Settings:
    """The Scrapy project's settings when run inside one, else recrawler's own ``recrawler.settings``."""
    from scrapy.settings import Settings
    from scrapy.utils.project import ENVVAR, get_project_settings, inside_project

    module = os.environ.get(ENVVAR)
    if module:
        try:
            import_module(module)
        except ImportError as exc:
            raise ConfigurationError(f"{ENVVAR}: cannot import {module!r}: {exc}") from exc
    if inside_project():
        return get_project_settings()
    settings = Settings()
    settings.setmodule(FALLBACK_SETTINGS_MODULE, priority="project")
    return settings


def project_database(settings: Settings | None = None) -> str:
    """The database a crawl from the working directory writes: ``RECRAWLER_DB_URI`` from the
    environment or the project's settings (*settings*, else :func:`project_settings`), else
    ``recrawler.db`` in the project data directory."""
    from scrapy.settings import SETTINGS_PRIORITIES

    if settings is None:
        settings = project_settings()
    resolve_project_db(settings)
    apply_environment(settings)
    if (settings.getpriority("RECRAWLER_DB_URI") or 0) <= SETTINGS_PRIORITIES["default"]:
        return project_db_uri()
    uri = settings.get("RECRAWLER_DB_URI")
    if not uri:
        raise ConfigurationError("RECRAWLER_DB_URI: empty; set a database URI such as sqlite:///recrawler.db")
    return str(uri)
