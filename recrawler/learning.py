"""What a site's pages say once noise is taken out: per-site noise models and page fingerprints."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lxml.cssselect import CSSSelector

from recrawler.chunking import blocks_of
from recrawler.exceptions import ConfigurationError
from recrawler.fingerprint import block_hash, fuzzy_hash, kept_blocks, page_hash
from recrawler.noise import DEFAULT_PATTERNS, Normalizer, VolatilePattern

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from scrapy.settings import BaseSettings

    from recrawler.state import StateStore


@dataclass(frozen=True, slots=True, kw_only=True)
class SiteNoise:
    """How one site's pages are read: token patterns, learned regions, boilerplate block pairs.

    ``key`` identifies the configuration a hash was computed with (boilerplate aside: pages are
    re-hashed when it moves); a page stored under another key is re-baselined, not "changed",
    when the only difference is removed noise.
    """

    site: str
    normalizer: Normalizer
    regions: tuple[str, ...]
    regions_css: CSSSelector | None
    #: adjacent block pairs on a large share of the site's pages (see ``kept_blocks``)
    boilerplate: frozenset[tuple[int, int]]
    key: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Fingerprint:
    """A page's fingerprints under its site's noise model."""

    content_hash: str
    fuzzy_hash: str | None
    blocks: list[int]
    #: what the hash covers: blocks without the site's furniture, shared runs as one mark each
    kept: list[int]
    samples: dict[int, str]
    normalized_text: str


def fingerprint(text: str, noise: SiteNoise) -> Fingerprint:
    """Normalise each block of *text*, take out the site's furniture, hash what is left."""
    hashes: list[int] = []
    texts: dict[int, str] = {}
    samples: dict[int, str] = {}
    # the whole text at once: a label and its date may sit in two blocks (<dt>/<dd>)
    for block in blocks_of(noise.normalizer.normalize(text)):
        normalized = " ".join(block.split())
        if not normalized:
            continue
        h = block_hash(normalized)
        hashes.append(h)
        texts.setdefault(h, normalized)
        samples.setdefault(h, block[:200])
    kept = kept_blocks(hashes, noise.boilerplate)
    # a shared run's mark has no text of its own
    normalized_text = "\n\n".join(texts[h] for h in kept if h in texts)
    return Fingerprint(
        content_hash=page_hash(kept),
        fuzzy_hash=fuzzy_hash(normalized_text),
        blocks=hashes,
        kept=kept,
        samples=samples,
        normalized_text=normalized_text,
    )


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
    """Per-crawler cache of site noise models, loaded from the database once per run.

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
        self._models: dict[str, SiteNoise] = {}
        self._normalizers: dict[str, Normalizer] = {}
        for site in self.patterns:
            self._normalizer(site)  # a bad pattern stops the crawl before it starts

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> NoiseRegistry:
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

    async def load(self, store: StateStore) -> None:
        """Read every site's learned regions (a small table) at the start of a run."""
        self._regions = await store.load_regions() if self.volatile else {}
        self._models.clear()

    async def ensure(self, site: str, store: StateStore) -> SiteNoise:
        """The site's model, reading its boilerplate block pairs on first use."""
        if self.boilerplate and site not in self._boiler:
            self._boiler[site] = await store.load_boilerplate(site)
            self._models.pop(site, None)
        return self.site(site)

    def site(self, site: str) -> SiteNoise:
        """The site's model from what is loaded (no database access)."""
        model = self._models.get(site)
        if model is None:
            # sorted: the key must not depend on the order regions were learned in
            regions = tuple(sorted(set(self._regions.get(site, ()))))
            normalizer = self._normalizer(site)
            key_src = json.dumps(
                [self._base, [p.name for p in normalizer.patterns], list(regions)], sort_keys=True
            )
            model = SiteNoise(
                site=site,
                normalizer=normalizer,
                regions=regions,
                regions_css=CSSSelector(", ".join(regions), translator="html") if regions else None,
                boilerplate=self._boiler.get(site, frozenset()),
                key=hashlib.sha256(key_src.encode()).hexdigest()[:16],
            )
            self._models[site] = model
        return model

    def learned(self, site: str, selectors: Sequence[str]) -> None:
        """Take newly learned regions into account for the rest of the run."""
        known = self._regions.setdefault(site, [])
        known.extend(s for s in selectors if s not in known)
        self._models.pop(site, None)


__all__ = ["Fingerprint", "NoiseRegistry", "SiteNoise", "fingerprint"]
