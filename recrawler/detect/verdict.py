"""The verdict for one page: new, changed or unchanged, and how, from its stored and fetched state."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from recrawler.detect.boilerplate import only_noise_removed
from recrawler.detect.guard import Fields, critical_changes
from recrawler.detect.hashing import fuzzy_distance, unpack_blocks
from recrawler.items import PageStatus

if TYPE_CHECKING:
    from collections.abc import Sequence

    from recrawler.detect.noise import Fingerprint, SiteNoise

#: how an unchanged verdict was reached (the ``recrawler/page/unchanged/<how>`` stats)
NOT_MODIFIED, BY_HASH, REBASELINED, BY_FUZZY, RESTORED = (
    "not_modified",
    "hash",
    "rebaseline",
    "fuzzy",
    "restored",
)
#: stored states of a page that is out of the knowledge base for good
REMOVED = (PageStatus.GONE, PageStatus.MOVED)


class Fetched(Protocol):
    """What :func:`decide` reads of the page just fetched (a ``Page``)."""

    @property
    def http_status(self) -> int: ...
    @property
    def text(self) -> str | None: ...
    @property
    def code(self) -> Sequence[str]: ...
    @property
    def content_hash(self) -> str | None: ...
    @property
    def region_hits(self) -> int: ...


class Stored(Protocol):
    """What :func:`decide` reads of the page's stored state (a ``PageRecord``)."""

    @property
    def status(self) -> str: ...
    @property
    def content_hash(self) -> str | None: ...
    @property
    def fuzzy_hash(self) -> str | None: ...
    @property
    def noise_key(self) -> str | None: ...


class StoredFields(Protocol):
    """What :func:`decide` reads of the page's stored field-level record (a ``FieldsRow``)."""

    @property
    def text(self) -> str: ...
    @property
    def code(self) -> Sequence[str]: ...
    @property
    def blocks(self) -> bytes: ...


@dataclass(slots=True, kw_only=True)
class Verdict:
    """A page's classification and the evidence for it."""

    status: PageStatus
    #: how an unchanged verdict was reached (:data:`BY_HASH`, ...), "" otherwise
    how: str = ""
    #: the TLSH distance between the stored and the new text, when both could be hashed
    distance: int | None = None
    #: why the edit is critical (see :func:`~recrawler.detect.guard.critical_changes`)
    critical: list[str] = field(default_factory=list)
    #: the new content becomes the stored baseline (hash, fields)
    advance: bool = True
    #: the text moved in whitespace only (a new extraction format): indexed again, no event
    reindex: bool = False

    @property
    def guarded(self) -> bool:
        """Changed because the critical-token guard tripped where a fuzzy match was possible."""
        return bool(self.critical) and self.status == PageStatus.CHANGED and self.distance is not None


def decide(
    page: Fetched,
    rec: Stored | None,
    fp: Fingerprint | None,
    noise: SiteNoise | None,
    old: StoredFields | None,
    *,
    threshold: int | None,
) -> Verdict:
    """The verdict for *page* given its stored state *rec* and field record *old* (None: none).

    *fp* is the page's :func:`~recrawler.detect.noise.fingerprint` under its site's *noise* model
    (both None for a 304). Default: changed if and only if the normalised main text differs. With
    a fuzzy *threshold*, a TLSH match within it counts as unchanged unless the critical-token guard
    trips; texts too short or too uniform for TLSH fall back to exact. Empty content is never
    unchanged.
    """
    if rec is None:
        return Verdict(status=PageStatus.NEW)
    # a body without text says nothing about the page (extraction makes it an error before this)
    empty = page.http_status != 304 and not (page.text or "").strip()
    if rec.status in REMOVED:
        # back with the content it had: restored, not new (it costs no embedding, and a site
        # recovering from a bad deploy is not a change spike)
        if fp is not None and rec.content_hash and fp.content_hash == rec.content_hash and not empty:
            return Verdict(status=PageStatus.UNCHANGED, how=RESTORED)
        return Verdict(status=PageStatus.NEW)
    if page.http_status == 304:
        return Verdict(status=PageStatus.UNCHANGED, how=NOT_MODIFIED)
    if empty:
        return Verdict(status=PageStatus.CHANGED)
    assert fp is not None
    assert noise is not None
    if fp.content_hash == rec.content_hash:
        return Verdict(status=PageStatus.UNCHANGED, how=BY_HASH, advance=rec.noise_key != noise.key)
    if rec.noise_key is None and page.content_hash == rec.content_hash:
        # stored before per-block hashing: the same cleaned text is the same page
        return Verdict(status=PageStatus.UNCHANGED, how=BY_HASH)
    # the cheap signals first, in the order the data flows: hashes, blocks, then the guard
    noise_changed = old is not None and rec.noise_key != noise.key
    old_blocks = unpack_blocks(old.blocks) if old is not None and noise_changed else []
    distance = None
    if fp.fuzzy_hash and rec.fuzzy_hash:
        distance = fuzzy_distance(rec.fuzzy_hash, fp.fuzzy_hash)
    # the noise model changed since (a region learned): only noise went
    if noise_changed and only_noise_removed(old_blocks, fp.blocks, noise.boilerplate, page.region_hits):
        return Verdict(status=PageStatus.UNCHANGED, how=REBASELINED)
    # the text format changed since (an upgrade spaced out glued words): the same characters in
    # the same order are the same page; the knowledge base takes the new text
    if noise_changed and old is not None and _same_but_spacing(old.text, page.text or ""):
        return Verdict(status=PageStatus.UNCHANGED, how=REBASELINED, reindex=True)
    critical = []
    if old is not None:
        # normalised texts: volatile tokens do not trip the guard
        normalize = noise.normalizer.normalize
        critical = critical_changes(
            Fields(text=normalize(old.text), code=tuple(normalize(c) for c in old.code)),
            Fields(text=normalize(page.text or ""), code=tuple(normalize(c) for c in page.code)),
        )
    if threshold is not None and distance is not None and distance <= threshold and not critical:
        return Verdict(
            status=PageStatus.UNCHANGED, how=BY_FUZZY, distance=distance, critical=critical, advance=False
        )
    return Verdict(status=PageStatus.CHANGED, distance=distance, critical=critical)


def _same_but_spacing(old: str, new: str) -> bool:
    return "".join(old.split()) == "".join(new.split())


__all__ = [
    "BY_FUZZY",
    "BY_HASH",
    "NOT_MODIFIED",
    "REBASELINED",
    "REMOVED",
    "RESTORED",
    "Fetched",
    "Stored",
    "StoredFields",
    "Verdict",
    "decide",
]
