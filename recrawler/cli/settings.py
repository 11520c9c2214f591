"""The CLI's one settings builder: every command decides with the settings a run would have."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from recrawler.exceptions import ConfigurationError
from recrawler.project import project_settings

if TYPE_CHECKING:
    import argparse
    from collections.abc import Awaitable, Callable

    from scrapy.settings import Settings

    from recrawler.state import Readers, StateStore
    from recrawler.urls import KeyMaker

# Scrapy, the add-on and the store load when a command builds its settings, not when the CLI
# starts: `recrawler search` outside a project reads the knowledge base without them

_T = TypeVar("_T")

#: command-line flags that stand for a setting: ``args`` attribute -> setting name
FLAG_SETTINGS = {
    "db": "RECRAWLER_DB_URI",
    "schedule": "RECRAWLER_SCHEDULE",
    "lastmod_mode": "RECRAWLER_LASTMOD_MODE",
    "drop": "RECRAWLER_URL_DROP_PARAMS",
    "keep": "RECRAWLER_URL_KEEP_PARAMS",
    "base_url": "RECRAWLER_EMBEDDER_BASE_URL",
    "min_similarity": "RECRAWLER_SEARCH_MIN_SIMILARITY",
}


def build_settings(args: argparse.Namespace | None = None, **flags: Any) -> Settings:
    """Return the frozen settings for a command, as a run would see them.

    Precedence, highest first: command-line flags (``--db``, ``--schedule``, ``-s NAME=VALUE``, ...,
    at ``cmdline`` priority), the environment (``RECRAWLER_DB_URI``, ``RECRAWLER_EVENTS_URI``, as
    the add-on honours them), the project's settings, recrawler's defaults. The defaults, the
    environment and the crawl profile are applied by ``RecrawlerAddon.update_settings`` itself.
    *flags* (same names as the ``args`` attributes) are for callers without a parser.
    """
    from recrawler.addon import RecrawlerAddon

    values = {**(vars(args) if args is not None else {}), **flags}
    settings = project_settings()
    # as `scrapy crawl`: -s first, then the named flags, then the add-ons (which respect both)
    # -s before the command, then after it (the later one wins)
    for name, value in (*(values.get("global_set") or ()), *(values.get("set") or ())):
        settings.set(name, value, priority="cmdline")
    for attr, name in FLAG_SETTINGS.items():
        value = values.get(attr)
        if value is not None:
            settings.set(name, value, priority="cmdline")
    RecrawlerAddon().update_settings(settings)
    settings.freeze()
    return settings


def setting_pair(text: str) -> tuple[str, str]:
    """Parse ``-s NAME=VALUE`` (argparse ``type``)."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        import argparse

        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name.strip(), value


def open_store(settings: Settings) -> StateStore:
    """Build (not open) the store ``RECRAWLER_DB_URI`` names, through ``RECRAWLER_STATE_BACKENDS``."""
    from recrawler.detect.boilerplate import PAGE_BLOCKS
    from recrawler.state import store_from_uri

    return store_from_uri(db_uri(settings), settings, blocks=PAGE_BLOCKS)


def db_uri(settings: Settings | dict[str, Any]) -> str:
    """The database URI of *settings* (crawl state and the knowledge base share the database)."""
    uri = settings.get("RECRAWLER_DB_URI")
    if not uri:
        raise ConfigurationError("RECRAWLER_DB_URI: empty; set a database URI such as sqlite:///recrawler.db")
    return str(uri)


def key_maker(settings: Settings) -> KeyMaker:
    """The page-key function of a run with *settings* (``RECRAWLER_URL_*_PARAMS``)."""
    from recrawler.urls import KeyMaker

    return KeyMaker(
        settings.getlist("RECRAWLER_URL_DROP_PARAMS"), settings.getlist("RECRAWLER_URL_KEEP_PARAMS")
    )


def require_database(readers: Readers) -> None:
    """Refuse a database that is missing, empty or unreadable before anything writes to it: a
    write opens the store, which would create (or migrate) one. The backend's readers raise."""
    next(iter(readers.iter_runs()), None)


async def write(settings: Settings, work: Callable[[StateStore], Awaitable[_T]]) -> _T:
    """Open the store of an existing database, run *work* on it, close it."""
    store = open_store(settings)
    require_database(store.readers)
    await store.open()
    try:
        return await work(store)
    finally:
        await store.close()
