"""The verdict for one page: new, changed or unchanged, and how, from its stored and fetched state."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from recrawler.detect.boilerplate import without_furniture
from recrawler.detect.guard import critical_changes, fields_from_text
from recrawler.detect.hashing import fuzzy_distance, unpack_blocks
from recrawler.items import PageStatus

if TYPE_CHECKING:
    from collections.abc import Sequence

    from recrawler.detect.guard import Fields
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

    @property
    def guarded(self) -> bool:
        """Changed because the critical-token guard tripped where a fuzzy match was possible."""
        return bool(self.critical) and self.status == PageStatus.CHANGED and self.distance is not None


def is_pure_deletion(old: Sequence[int], new: Sequence[int]) -> bool:
    """True when *new* is *old* with some blocks removed and nothing added or reordered."""
    if len(new) >= len(old):
        return False
    it = iter(old)
    return all(any(h == o for o in it) for h in new)


def deleted_runs(old: Sequence[int], new: Sequence[int]) -> int:
    """In how many contiguous places blocks of *old* are missing from *new* (a pure deletion)."""
    runs, j, gap = 0, 0, False
    for h in old:
        if j < len(new) and new[j] == h:
            j += 1
            gap = False
        elif not gap:
            runs += 1
            gap = True
    return runs


def guard_fields(text: str, code: Sequence[str], noise: SiteNoise) -> Fields:
    """What the critical-token guard compares: normalised text (volatile tokens do not trip it)."""
    normalize = noise.normalizer.normalize
    return fields_from_text(normalize(text), [normalize(c) for c in code])


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
    if old is not None and rec.noise_key != noise.key:
        old_blocks = without_furniture(unpack_blocks(old.blocks), noise.boilerplate)
        new_blocks = without_furniture(fp.blocks, noise.boilerplate)
        # the noise model changed since (a region learned): blocks went, nothing came in, and they
        # went in no more places than the learned regions cut from this very page (a paragraph
        # deleted elsewhere is still a change)
        if (
            is_pure_deletion(old_blocks, new_blocks)
            and deleted_runs(old_blocks, new_blocks) <= page.region_hits
        ):
            return Verdict(status=PageStatus.UNCHANGED, how=REBASELINED)
    distance = None
    if fp.fuzzy_hash and rec.fuzzy_hash:
        distance = fuzzy_distance(rec.fuzzy_hash, fp.fuzzy_hash)
    critical = []
    if old is not None:
        new_fields = guard_fields(page.text or "", page.code, noise)
        critical = critical_changes(guard_fields(old.text, old.code, noise), new_fields)
    if threshold is not None and distance is not None and distance <= threshold and not critical:
        return Verdict(
            status=PageStatus.UNCHANGED, how=BY_FUZZY, distance=distance, critical=critical, advance=False
        )
    return Verdict(status=PageStatus.CHANGED, distance=distance, critical=critical)


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
    "deleted_runs",
    "guard_fields",
    "is_pure_deletion",
]
