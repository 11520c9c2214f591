"""A site's noise model (token patterns, learned regions, boilerplate) and page fingerprints under it."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lxml.cssselect import CSSSelector

from recrawler.detect.boilerplate import kept_blocks
from recrawler.detect.hashing import block_hash, fuzzy_hash, page_hash
from recrawler.detect.text import TEXT_FORMAT, blocks

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from recrawler.detect.tokens import Normalizer


@dataclass(frozen=True, slots=True, kw_only=True)
class SiteNoise:
    """How one site's pages are read: token patterns, learned regions, boilerplate block pairs.

    ``key`` identifies the configuration a hash was computed with (extraction settings and text
    format, patterns, regions; boilerplate aside: pages are re-hashed when it moves); a page stored
    under another key is re-baselined, not "changed", when the only difference is removed noise or
    whitespace.
    """

    site: str
    normalizer: Normalizer
    regions: tuple[str, ...]
    regions_css: CSSSelector | None
    #: adjacent block pairs on a large share of the site's pages (see ``kept_blocks``)
    boilerplate: frozenset[tuple[int, int]]
    key: str

    @classmethod
    def build(
        cls,
        site: str,
        normalizer: Normalizer,
        *,
        regions: Iterable[str] = (),
        boilerplate: frozenset[tuple[int, int]] = frozenset(),
        base: str = "[]",
    ) -> SiteNoise:
        """The model of *site*; *base* names the extraction settings (content and noise selectors)."""
        # sorted: the key must not depend on the order regions were learned in
        learned = tuple(sorted(set(regions)))
        key_src = json.dumps(
            [base, [p.name for p in normalizer.patterns], list(learned), TEXT_FORMAT], sort_keys=True
        )
        key = hashlib.sha256(key_src.encode()).hexdigest()[:16]
        return _rebuilt(site, normalizer, learned, boilerplate, key)

    def __reduce__(self) -> tuple[Any, ...]:
        # for the CPU worker processes: the compiled region selector is compiled again there
        return (_rebuilt, (self.site, self.normalizer, self.regions, self.boilerplate, self.key))


def _rebuilt(  # the model from its parts (also how a CPU worker process unpickles it)
    site: str,
    normalizer: Normalizer,
    regions: tuple[str, ...],
    boilerplate: frozenset[tuple[int, int]],
    key: str,
) -> SiteNoise:
    return SiteNoise(
        site=site,
        normalizer=normalizer,
        regions=regions,
        regions_css=regions_selector(regions),
        boilerplate=boilerplate,
        key=key,
    )


def regions_selector(regions: Sequence[str]) -> CSSSelector | None:
    """One compiled selector for a site's learned volatile regions (None when it has none)."""
    return CSSSelector(", ".join(regions), translator="html") if regions else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Fingerprint:
    """A page's fingerprints under its site's noise model."""

    content_hash: str
    fuzzy_hash: str | None
    blocks: list[int]
    #: what the hash covers: blocks without the site's furniture, shared runs as one mark each
    kept: list[int]
    samples: dict[int, str]


def fingerprint(text: str, noise: SiteNoise) -> Fingerprint:
    """Normalise each block of *text*, take out the site's furniture, hash what is left."""
    hashes: list[int] = []
    texts: dict[int, str] = {}
    samples: dict[int, str] = {}
    # the whole text at once: a label and its date may sit in two blocks (<dt>/<dd>)
    for block in blocks(noise.normalizer.normalize(text)):
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
    )


__all__ = ["Fingerprint", "SiteNoise", "fingerprint", "regions_selector"]
