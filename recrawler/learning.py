"""What a site's pages say once noise is taken out: per-site noise models and page fingerprints."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from lxml.cssselect import CSSSelector

from recrawler.chunking import blocks_of
from recrawler.exceptions import ConfigurationError
from recrawler.fingerprint import block_hash, fuzzy_hash, page_hash
from recrawler.noise import DEFAULT_PATTERNS, Normalizer, VolatilePattern

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

    from recrawler.state import StateStore


#: Cheap necessary conditions for the default patterns, as substring tests on the lowercased page:
#: a pattern whose trigger is absent cannot match, so it is not run (running all of them costs
#: ~10 ms on an 8 KB page, most of it in patterns that cannot match).
_DATE_WORDS = ("updat", "modif", "edit", "generat", "built", "publish", "render", "as of", "chang", "review")
_ICONS = (
    "\U0001f441",
    "\U0001f440",
    "\U0001f44d",
    "\U0001f44e",
    "\u2764",
    "\u2665",
    "\u2605",
    "\u2b50",
    "\U0001f4ac",
)
_DIGIT = re.compile(r"\d")


def _any(words: Sequence[str], low: str) -> bool:
    return any(w in low for w in words)


_COUNTED = (
    "views?|comments?|likes?|downloads?|stars?|forks?|reads?|reactions?|repl(?:y|ies)|visits?|votes?"
    "|upvotes?|followers?|watchers?|subscribers?|shares?|clicks?|answers?"
)
_NUMBER_THEN_WORD = re.compile(rf"\d[\d,.]*\s?[kKmM]?\s+(?i:{_COUNTED})\b")
_LABEL_THEN_NUMBER = re.compile(r"[:(|]\s*\d")
_LABELS = (
    *(w + s for w in ("view", "comment", "like", "download", "star", "fork") for s in ("", "s")),
    *("reads", "reactions", "replies", "visits", "votes", "upvotes", "followers", "watchers"),
    *("subscribers", "shares", "clicks", "answers"),
)


def _counter(text: str, low: str, digit: bool) -> bool:
    """A number next to a counted word ("1,234 views", "Views: 12"): the counter pattern's core."""
    if not digit:
        return False
    if _NUMBER_THEN_WORD.search(text):
        return True
    return any(
        low[max(0, m.start() - 14) : m.start()].rstrip().endswith(_LABELS)
        for m in _LABEL_THEN_NUMBER.finditer(text)
    )


_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-")
_HEX16 = re.compile(r"[0-9A-Fa-f]{16}")
_CLOCK = re.compile(r"\d:[0-5]\d")
_DATE_NUMBERS = re.compile(r"\d[-/.]\d")
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_BUILD_ID = re.compile(r"(?i:build)(?:[ _-]?(?i:id|number|no)|\s*[:#])")
_BUILD_NUMBER = re.compile(r"Build\s+#?[A-Za-z0-9.-]*\d")
_AFTER_REVISION = re.compile(r"[a-z]*[\s:#@]*[0-9a-f]*\d")
_AFTER_REQUEST = re.compile(r"[ _-]?id\b")


def _word_then(low: str, words: Sequence[str], after: re.Pattern[str]) -> bool:
    """Some *word* occurs in *low* with *after* matching right behind it (str.find, no regex scan)."""
    for word in words:
        i = low.find(word)
        while i >= 0:
            if after.match(low, i + len(word)):
                return True
            i = low.find(word, i + 1)
    return False


_IN_AMOUNT = re.compile(
    r"\sin\s+(?:\d|an?\s|one\s|two\s|three\s|four\s|five\s|six\s|seven\s|eight\s|nine\s|ten\s"
    r"|(?:a\s+)?few\s|several\s|some\s)"
)
_COUNTDOWN_VERBS = (
    "refresh",
    "reload",
    "updates",
    "updating",
    "retrying",
    "resets",
    "next",
    "starts",
    "ends",
    "closes",
)


def _countdown(text: str, low: str, digit: bool) -> bool:
    """ "refreshes in 5 minutes": an amount of time after "in", a countdown verb just before."""
    return any(
        _any(_COUNTDOWN_VERBS, low[max(0, m.start() - 24) : m.start()]) for m in _IN_AMOUNT.finditer(low)
    )


def _date(text: str, low: str, digit: bool) -> bool:
    if not _any(_DATE_WORDS, low):
        return False
    if "today" in low or "yesterday" in low:
        return True
    return digit and (_DATE_NUMBERS.search(text) is not None or _any(_MONTHS, low))


TRIGGERS: dict[str, Callable[[str, str, bool], bool]] = {
    "uuid": lambda t, low, d: d and _UUID.search(t) is not None,
    "hex-id": lambda t, low, d: d and _HEX16.search(t) is not None,
    "revision": lambda t, low, d: d and _word_then(low, ("commit", "build", "rev"), _AFTER_REVISION),
    "build-id": lambda t, low, d: d and "build" in low and _BUILD_ID.search(t) is not None,
    "build-number": lambda t, low, d: d and _BUILD_NUMBER.search(t) is not None,
    "request-id": lambda t, low, d: (
        d and _word_then(low, ("request", "trace", "correlation", "span", "ray"), _AFTER_REQUEST)
    ),
    "date": _date,
    "time": lambda t, low, d: d and _CLOCK.search(t) is not None and _any(_DATE_WORDS, low),
    "relative-time": lambda t, low, d: "ago" in low or "just now" in low or "yesterday" in low,
    "countdown": _countdown,
    "render-time": lambda t, low, d: d and _any(("generated in", "rendered in", "served in"), low),
    "counter": _counter,
    "counter-times": lambda t, low, d: d and "times" in low,
    "counter-helpful": lambda t, low, d: "found this" in low,
    "counter-icon": lambda t, low, d: d and _any(_ICONS, t),
    "copyright-year": lambda t, low, d: d and ("\u00a9" in t or "(c)" in low or "copyright" in low),
    "object-address": lambda t, low, d: "0x" in low,
}


class FastNormalizer:
    """Runs a Normalizer's patterns only on pages where their trigger occurs (same output)."""

    def __init__(self, normalizer: Normalizer) -> None:
        self.normalizer = normalizer
        compiled = normalizer._compiled  # the same package's patterns, compiled once
        self._items = [
            (c, TRIGGERS.get(p.name) if p in DEFAULT_PATTERNS else None)
            for p, c in zip(normalizer.patterns, compiled, strict=True)
        ]

    def active(self, text: str) -> list[Any]:
        """The compiled patterns that can match *text*."""
        low = text.lower()
        digit = _DIGIT.search(text) is not None
        return [c for c, trigger in self._items if trigger is None or trigger(text, low, digit)]

    @staticmethod
    def apply(active: list[Any], text: str) -> str:
        """Normalise *text* with the *active* patterns, in order."""
        for c in active:
            text = c.sub(text)
        return text

    def normalize(self, text: str) -> str:
        """Same as ``Normalizer.normalize``, faster."""
        return self.apply(self.active(text), text)


@dataclass(frozen=True, slots=True, kw_only=True)
class SiteNoise:
    """How one site's pages are read: token patterns, learned regions, boilerplate blocks.

    ``key`` identifies the configuration a hash was computed with (boilerplate aside: pages are
    re-hashed when it moves); a page stored under another key is re-baselined, not "changed",
    when the only difference is removed noise.
    """

    site: str
    normalizer: Normalizer
    fast: FastNormalizer
    regions: tuple[str, ...]
    regions_css: CSSSelector | None
    boilerplate: frozenset[int]
    key: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Fingerprint:
    """A page's fingerprints under its site's noise model."""

    content_hash: str
    fuzzy_hash: str | None
    blocks: list[int]
    kept: list[int]
    samples: dict[int, str]
    normalized_text: str


def fingerprint(text: str, noise: SiteNoise) -> Fingerprint:
    """Normalise each block of *text*, drop boilerplate blocks, hash what is left."""
    hashes: list[int] = []
    kept: list[int] = []
    kept_text: list[str] = []
    samples: dict[int, str] = {}
    active = noise.fast.active(text)
    for block in blocks_of(text):
        normalized = " ".join(noise.fast.apply(active, block).split()) if active else " ".join(block.split())
        if not normalized:
            continue
        h = block_hash(normalized)
        hashes.append(h)
        samples.setdefault(h, block[:200])
        if h not in noise.boilerplate:
            kept.append(h)
            kept_text.append(normalized)
    normalized_text = "\n\n".join(kept_text)
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
        self._boiler: dict[str, frozenset[int]] = {}
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
        """The site's model, reading its boilerplate blocks on first use."""
        if self.boilerplate and site not in self._boiler:
            self._boiler[site] = await store.load_boilerplate(site)
            self._models.pop(site, None)
        return self.site(site)

    def site(self, site: str) -> SiteNoise:
        """The site's model from what is loaded (no database access)."""
        model = self._models.get(site)
        if model is None:
            regions = tuple(self._regions.get(site, ()))
            normalizer = self._normalizer(site)
            key_src = json.dumps(
                [self._base, [p.name for p in normalizer.patterns], list(regions)], sort_keys=True
            )
            model = SiteNoise(
                site=site,
                normalizer=normalizer,
                fast=FastNormalizer(normalizer),
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


_registries: WeakKeyDictionary[Crawler, NoiseRegistry] = WeakKeyDictionary()


def noise_for(crawler: Crawler) -> NoiseRegistry:
    """The crawler's noise registry, built on first use."""
    registry = _registries.get(crawler)
    if registry is None:
        registry = _registries[crawler] = NoiseRegistry.from_settings(crawler.settings)
    return registry


__all__ = ["Fingerprint", "NoiseRegistry", "SiteNoise", "fingerprint", "noise_for"]
