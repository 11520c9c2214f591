"""The slice of the published chunks a search or a changes listing reads: a site, a version and a
language, and the SQL conditions that keep only those chunks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from recrawler.facets import ANY, lang_filter, normal_version

__all__ = ["Slice"]


@dataclass(frozen=True, slots=True)
class Slice:
    """The chunks a search or a changes listing may return: of a site, of a version and of a
    language (None: any). A page with no version (or language) is in every one; a language finds
    its regional tags too (``en``: ``en-us``)."""

    site: str | None = None
    version: str | None = None
    lang: str | None = None

    @classmethod
    def of(
        cls, site: str | None, version: str | None, lang: str | None, default_version: str | None = None
    ) -> Slice:
        """The slice a reader's arguments name: *version* None is *default_version*, ``"*"`` any
        (and so is *lang* None or ``"*"``); a *lang* that is no language tag is a
        ConfigurationError."""
        chosen = default_version if version is None else version
        return cls(
            site=site,
            version=None if chosen in (None, ANY) else normal_version(chosen),
            lang=None if lang in (None, ANY) else lang_filter(str(lang)),
        )

    def where(self, c: str) -> tuple[str, list[Any]]:
        """``AND ...`` conditions over the chunk rows aliased *c* (``?`` parameters, in order)."""
        sql, params = "", []
        if self.version is not None:
            sql += f" AND ({c}.version IS NULL OR {c}.version = ?)"
            params.append(self.version)
        if self.lang is not None:
            sql += f" AND ({c}.lang IS NULL OR {c}.lang = ? OR {c}.lang LIKE ?)"
            params += [self.lang, f"{self.lang}-%"]
        return sql, params

    def where_named(self, c: str, mark: str = ":{}") -> tuple[str, dict[str, Any]]:
        """:meth:`where` with named parameters, each written as *mark* makes it (``:{}``, or
        psycopg's ``%({})s``)."""
        sql, params = "", {}
        v, lang, region = (mark.format(n) for n in ("slice_version", "slice_lang", "slice_lang_region"))
        if self.version is not None:
            sql += f" AND ({c}.version IS NULL OR {c}.version = {v})"
            params["slice_version"] = self.version
        if self.lang is not None:
            sql += f" AND ({c}.lang IS NULL OR {c}.lang = {lang} OR {c}.lang LIKE {region})"
            params.update(slice_lang=self.lang, slice_lang_region=f"{self.lang}-%")
        return sql, params
