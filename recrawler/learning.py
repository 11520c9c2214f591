"""Per-crawl cache of the sites' noise models, loaded from the database once per run."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any, Self

from recrawler.detect.noise import SiteNoise
from recrawler.detect.tokens import DEFAULT_PATTERNS, Normalizer, VolatilePattern
from recrawler.exceptions import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

    from recrawler.state import History


def _patterns(value: Any) -> dict[str, list[str]]:
    if not value:
        return {}
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, dict) or not all(isinstance(v, list) for v in value.values()):
        msg = "RECRAWLER_VOLATILE_PATTERNS: expected {site or '*': [regex, ...]}, got " + repr(value)[:120]
        raise ConfigurationError(msg)
    return {str(k): [str(p) for p in v] for k, v in value.items()}


class NoiseRegistry:
    """Per-crawler cache of site noise models, loaded from the database once per run (an
    extension of the crawl: see :meth:`from_crawler`).

    Settings: ``RECRAWLER_VOLATILE_ENABLED``, ``RECRAWLER_VOLATILE_PATTERNS``,
    ``RECRAWLER_BOILERPLATE_ENABLED``, ``RECRAWLER_CONTENT_SELECTORS``,
    ``RECRAWLER_CONTENT_NOISE_SELECTORS``.
    """

    def __init__(
        self,
        *,
        volatile: bool = True,
        patterns: Mapping[str, Sequence[str]] | None = None,
        boilerplate: bool = True,
        base: Iterable[str] = (),
    ) -> None:
        self.volatile = volatile
        self.patterns = dict(patterns or {})
        self.boilerplate = boilerplate
        self._base = json.dumps(list(base))
        self._regions: dict[str, list[str]] = {}
        self._boiler: dict[str, frozenset[tuple[int, int]]] = {}
        self._loading: dict[str, asyncio.Future[frozenset[tuple[int, int]]]] = {}
        self._models: dict[str, SiteNoise] = {}
        self._normalizers: dict[str, Normalizer] = {}
        for site in self.patterns:
            self._normalizer(site)  # a bad pattern stops the crawl before it starts

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """The run's one registry, placed by the add-on as an extension for a spider that opted in
        and found with ``crawler.get_extension``; the Runtime loads it when the run begins."""
        from recrawler.meta import require_opt_in

        require_opt_in(crawler)
        return cls.from_settings(crawler.settings)

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> Self:
        """Build from settings (no database access yet)."""
        return cls(
            volatile=settings.getbool("RECRAWLER_VOLATILE_ENABLED"),
            patterns=_patterns(settings.get("RECRAWLER_VOLATILE_PATTERNS")),
            boilerplate=settings.getbool("RECRAWLER_BOILERPLATE_ENABLED"),
            base=[
                *settings.getlist("RECRAWLER_CONTENT_SELECTORS"),
                "|",
                *settings.getlist("RECRAWLER_CONTENT_NOISE_SELECTORS"),
            ],
        )

    def _normalizer(self, site: str) -> Normalizer:
        normalizer = self._normalizers.get(site)
        if normalizer is None:
            extra: list[VolatilePattern | str] = [*self.patterns.get("*", []), *self.patterns.get(site, [])]
            patterns = [*DEFAULT_PATTERNS, *extra] if self.volatile else extra
            normalizer = self._normalizers[site] = Normalizer(patterns)
        return normalizer

    async def load(self, history: History) -> None:
        """Read every site's learned regions (a small table) at the start of a run."""
        self._regions = await history.load_regions() if self.volatile else {}
        self._models.clear()

    async def ensure(self, site: str, history: History) -> SiteNoise:
        """The site's model, reading its boilerplate block pairs on first use.

        One read per site: the pages that arrive while it runs wait for the same read (one model
        object for all of them, so what a CPU worker fingerprinted under it stays usable). A read
        that fails is tried again by the next page."""
        if self.boilerplate and site not in self._boiler:
            loading = self._loading.get(site)
            if loading is None:
                loading = self._loading[site] = asyncio.ensure_future(history.load_boilerplate(site))
            try:
                pairs = await asyncio.shield(loading)
            finally:
                if loading.done() and self._loading.get(site) is loading:
                    del self._loading[site]
            if site not in self._boiler:
                self._boiler[site] = pairs
                self._models.pop(site, None)
        return self.site(site)

    def ready(self, site: str) -> SiteNoise | None:
        """The site's model once ``ensure`` has loaded it, else None (no database access)."""
        if self.boilerplate and site not in self._boiler:
            return None
        return self.site(site)

    def site(self, site: str) -> SiteNoise:
        """The site's model from what is loaded (no database access)."""
        model = self._models.get(site)
        if model is None:
            model = self._models[site] = SiteNoise.build(
                site,
                self._normalizer(site),
                regions=self._regions.get(site, ()),
                boilerplate=self._boiler.get(site, frozenset()),
                base=self._base,
            )
        return model

    def learned(self, site: str, selectors: Sequence[str]) -> None:
        """Take newly learned regions into account for the rest of the run."""
        known = self._regions.setdefault(site, [])
        known.extend(s for s in selectors if s not in known)
        self._models.pop(site, None)


__all__ = ["NoiseRegistry"]
