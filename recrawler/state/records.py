"""The records the state store reads and writes: frozen dataclasses with timezone-aware UTC times."""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from recrawler.intervals import Revisit

__all__ = [
    "DECISION_APPROVED",
    "DECISION_DISCARDED",
    "GONE",
    "LIVE",
    "MOVED",
    "PENDING_CHANGED",
    "PENDING_NEW",
    "QUARANTINED",
    "RUN_ABORTED",
    "RUN_DISCARDED",
    "RUN_FINISHED",
    "RUN_HELD",
    "RUN_PUBLISHED",
    "RUN_RUNNING",
    "RUN_SUPERSEDED",
    "SETTLE_APPLY",
    "SETTLE_DROP",
    "SETTLE_KEEP",
    "SETTLE_KEEP_LISTED",
    "TRUST_SIGNALS",
    "ChangeRow",
    "Chunk",
    "Event",
    "FieldsRow",
    "Freshness",
    "HeldRun",
    "PageRecord",
    "ReconcileResult",
    "RemovalPlan",
    "RevisitUpdate",
    "Run",
    "ScheduledPage",
    "SiteBuild",
    "TrustRecord",
    "pack_blocks",
    "unpack_blocks",
    "utcnow",
]


def pack_blocks(hashes: Sequence[int]) -> bytes:
    """Pack block hashes in page order: 8 bytes each (big-endian, signed), as ``blocks`` is stored."""
    return struct.pack(f">{len(hashes)}q", *hashes)


def unpack_blocks(blob: bytes | None) -> list[int]:
    """The block hashes of :func:`pack_blocks`."""
    if not blob:
        return []
    n = len(blob) // 8
    return list(struct.unpack(f">{n}q", bytes(blob[: n * 8])))


LIVE, QUARANTINED, GONE, MOVED = "live", "quarantined", "gone", "moved"
#: a page's state not published yet: not in the knowledge base at all, or changed since
PENDING_NEW, PENDING_CHANGED = "new", "changed"
# run states: published runs are what search reads; held runs wait for a person; aborted runs
# died without finishing (their lease was taken over)
RUN_RUNNING, RUN_FINISHED, RUN_HELD, RUN_PUBLISHED, RUN_DISCARDED, RUN_ABORTED = (
    "running",
    "finished",
    "held",
    "published",
    "discarded",
    "aborted",
)
#: a held run whose decision a later run of its site carries (published or held with it)
RUN_SUPERSEDED = "superseded"
#: the decision an operator took on a run that waited for one (``runs.decision``)
DECISION_APPROVED, DECISION_DISCARDED = "approved", "discarded"
#: what a run's end does with its staged misses (``settle_misses``): apply them when it publishes,
#: keep them for a decision (all, or those of pages its listing still names), or drop its own
#: (the outage guard: its moves still apply, and misses kept before wait on)
SETTLE_APPLY, SETTLE_KEEP, SETTLE_KEEP_LISTED, SETTLE_DROP = "apply", "keep", "keep_listed", "drop"


@dataclass(frozen=True, slots=True, kw_only=True)
class Chunk:
    """One searchable piece of a page: its text, where it lives and the hash that keys its embedding."""

    key: str
    url: str
    chunk_index: int
    heading: str
    text: str
    chunk_hash: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RevisitUpdate:
    """A page's next revisit state, written with the page: ``update(state before)`` (quick and
    pure: it runs where the database work runs), and how the page was found if not known yet."""

    update: Callable[[Revisit | None], Revisit]
    found_via: str | None = None
    found_from: str | None = None


def utcnow() -> datetime:
    """Return the current time, timezone-aware UTC."""
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True, kw_only=True)
class PageRecord:
    """A page's stored state: one row per page key."""

    key: str
    site: str
    url: str
    etag: str | None = None
    last_modified: str | None = None
    lastmod: str | None = None
    content_hash: str | None = None
    fuzzy_hash: str | None = None
    title: str | None = None
    status: str = LIVE
    misses: int = 0
    first_seen: datetime
    last_checked: datetime | None = None
    last_changed: datetime | None = None
    last_seen_run: int | None = None
    #: current knowledge-base chunks of the page (0: none yet, e.g. stored before indexing)
    chunks: int = 0
    #: the noise configuration its content hash was computed with (None: before schema 3)
    noise_key: str | None = None
    #: how many links away from a listed page discovery found it (0: listed)
    found_depth: int = 0
    #: the key a permanent redirect moved the page to (status ``moved``)
    moved_to: str | None = None
    #: the run that last made the page new or changed
    changed_run: int | None = None
    #: not published yet: :data:`PENDING_NEW` (not in the knowledge base at all) or
    #: :data:`PENDING_CHANGED` (the knowledge base shows its state before); None: published
    pending: str | None = None
    #: the page's version and language (schema 13; None: none known), copied onto its chunks
    version: str | None = None
    lang: str | None = None
    #: with ``pending`` changed: the content hash the knowledge base shows (read, never written)
    published_hash: str | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class FieldsRow:
    """A page's field-level record: what it says, field by field, and its normalised blocks."""

    title: str
    headings: list[str]
    code: list[str]
    links: list[list[str]]
    text: str
    #: packed 8-byte hashes of the normalised blocks, in page order
    blocks: bytes
    #: a readable sample of each block, for ``recrawler noise``
    samples: dict[int, str] = field(default_factory=dict)
    #: stored forms made beside the page's extraction (a CPU worker), so the write does not make
    #: them: the text compressed as ``page_fields`` keeps it, and :func:`samples_json` of every
    #: block (what a page with no blocks stored yet leaves for the fold). None: made at the write
    packed_text: bytes | None = field(default=None, compare=False, repr=False)
    samples_json: str | None = field(default=None, compare=False, repr=False)


def packed_text(text: str) -> bytes:
    """A page's text as ``page_fields`` stores it (zlib)."""
    return zlib.compress(text.encode("utf-8"))


def samples_json(samples: dict[int, str]) -> str | None:
    """The block samples a page write leaves for the fold (at most 200 characters each; None:
    no sample)."""
    return json.dumps({str(b): t[:200] for b, t in samples.items() if t}) if any(samples.values()) else None


@dataclass(frozen=True, slots=True, kw_only=True)
class ChangeRow:
    """One entry of a page's append-only history."""

    key: str
    url: str
    at: datetime
    verdict: str
    old_hash: str | None
    new_hash: str | None
    changed_fields: list[str]
    distance: int | None = None
    critical: list[str] = field(default_factory=list)
    diff: str = ""
    old_blocks: bytes | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduledPage:
    """What the schedule needs of a stored page to decide whether a run requests it."""

    key: str
    url: str
    status: str
    lastmod: str | None
    revisit: Revisit
    #: the last run whose listing decided the page, and the last run that audited it
    listed_run: int | None = None
    #: the layer that skipped the page in ``listed_run`` (None: it was requested)
    listed_skip: str | None = None
    audit_run: int | None = None
    #: a change or removal of the page waits for a decision (a check brings new evidence)
    waiting: bool = False
    #: the page's changes come on their own: no sample of a deploy
    solo: bool = False
    #: when the page was last verified (run clock) and by what (``request``, ``lastmod``, ``feed``)
    verified_at: datetime | None = None
    verified_by: str | None = None


#: the signals a host's trust is kept for: sitemap lastmod, ETag (If-None-Match), Last-Modified
TRUST_SIGNALS = ("lastmod", "etag", "last_modified")


@dataclass(frozen=True, slots=True, kw_only=True)
class TrustRecord:
    """How one host's signal fared when audited; ``trusted`` False switches it off for the host."""

    host: str
    signal: str
    checks: int = 0
    lies: int = 0
    trusted: bool = True
    last_lie_at: datetime | None = None
    last_lie_url: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """One crawl run: its id numbers the run's events and its ``last_seen_run`` marks."""

    id: int
    spider: str
    site: str | None
    started_at: datetime
    #: live or quarantined pages of the site the knowledge base held before the run (0: a first
    #: run, or every earlier run was left unpublished)
    prior_pages: int = 0
    #: live pages of the site the knowledge base held before the run
    prior_live: int = 0
    #: how many pages the listing of the site's last finished run named (None: unknown)
    last_listed: int | None = None
    #: the site's previous run did not complete its writes (aborted, or a write failed): pages it
    #: left unstored come back as new, and do not count toward a change spike
    backfill: bool = False
    #: each page is published as it is written (``RECRAWLER_PUBLISH=page``, or no knowledge base):
    #: nothing the run writes is ever pending
    each_page: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """A page event, written to the outbox in the page's transaction and delivered afterwards."""

    run_id: int
    action: str
    url: str
    key: str
    content_hash: str | None
    status: str
    at: datetime
    reason: str | None = None
    http_status: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """Serialise as one JSON line (``at`` in ISO 8601)."""
        data = asdict(self)
        data["at"] = self.at.isoformat()
        extra = data.pop("extra")
        data.update(extra)
        if self.action != "error":
            # the page as published: `recrawler changes --since N --key KEY` (open_kb(...).changes)
            data["changes_since"] = self.run_id - 1
        return json.dumps({k: v for k, v in data.items() if v is not None or k in _KEEP_NULL})


_KEEP_NULL = frozenset({"content_hash"})


@dataclass(frozen=True, slots=True, kw_only=True)
class RemovalPlan:
    """What applying a run's staged misses and moves would do, before anything is applied."""

    #: live or quarantined pages of the site before the run
    pages: int = 0
    #: live pages of the site before the run
    live: int = 0
    #: live pages that would leave the knowledge base: quarantined, gone or moved
    removals: int = 0
    quarantine: int = 0
    gone: int = 0
    moved: int = 0
    #: removals of pages this run's listing no longer names (two signals agree: listing and answer)
    delisted: int = 0
    #: misses earlier runs kept for a decision, carried into this run's plan
    carried: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ReconcileResult:
    """What the reconciliation did (or, when skipped, would have done)."""

    applied: bool
    quarantined: int = 0
    gone: dict[str, int] = field(default_factory=dict)
    moved: int = 0
    skipped_misses: int = 0
    #: the misses were kept for ``runs approve`` (the run is held)
    kept: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class SitemapFile:
    """A sitemap file as last read: the validators to send back and how many pages it listed."""

    url: str
    etag: str | None = None
    last_modified: str | None = None
    urls: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ListedEntry:
    """One entry of a sitemap file's stored listing: a page (with its lastmod) or a sitemap file."""

    url: str
    kind: str
    lastmod: str | None = None
    #: where in the file it stands (the listing comes back in the file's order)
    pos: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class SiteBuild:
    """A site's build as the deploy detection knows it: its fingerprint (slot -> marker), the slots
    learned to vary per request, whether its sitemap lastmods move on every read, and its last
    detected deploy (pages not checked since are due; None: none detected)."""

    site: str
    fingerprint: Mapping[str, str] = field(default_factory=dict)
    noise: tuple[str, ...] = ()
    lastmod_noise: bool = False
    deploy_at: datetime | None = None
    deploy_run: int | None = None
    deploy_reason: str | None = None


#: run reasons that say a run's listing is no evidence of what the site lists: it failed, a bound
#: cut it short, it shrank, the run did not finish reading it, or its listing marks may be unwritten
LISTING_FAILURES = ("sitemap_failed", "sitemap_incomplete", "listing_shrunk", "not_finished", "state_error")


@dataclass(frozen=True, slots=True, kw_only=True)
class Freshness:
    """How current the knowledge base is: are the live pages verified, and still listed?

    A page is *verified* when a run last checked it (``pages.verified_at``, run clock: a 200 or a
    304), or when the listing's lastmod or feed entry vouched for it (a host whose lastmods the
    self-audit trusts, not newer than the page's last check); *within the bound* when that was at
    most ``bound_secs`` before ``now`` and, after a detected deploy, a request checked it since.
    A live page is *delisted* when it was listed once (``pages.listed_run``) but not by
    ``listing_run``, the site's last finished run whose listing was complete.
    """

    #: the site (None: every site), the instant and the bound the figures are for
    site: str | None
    now: datetime
    bound_secs: float
    #: live pages, and those verified within the bound
    live: int = 0
    verified: int = 0
    #: the oldest verification of a live page and its URL (None: no live page was ever verified)
    oldest_checked: datetime | None = None
    oldest_url: str | None = None
    #: live pages missing from the last complete listing, and a few of their URLs (by URL)
    delisted: int = 0
    delisted_urls: tuple[str, ...] = ()
    #: the run whose listing is the reference (None: no complete listing finished yet)
    listing_run: int | None = None
    #: the verified live pages by what verified them last: a request, a trusted lastmod or feed entry
    by_request: int = 0
    by_lastmod: int = 0
    by_feed: int = 0
    #: the site's last detected deploy (None: none), why, and the live pages not checked since it
    #: (a deploy's check that did not finish: they are due, and not verified)
    deploy_at: datetime | None = None
    deploy_reason: str | None = None
    deploy_unchecked: int = 0

    @property
    def share(self) -> float | None:
        """The share of live pages verified within the bound (None: no live page)."""
        return self.verified / self.live if self.live else None

    @property
    def stale(self) -> int:
        """Live pages not verified within the bound."""
        return self.live - self.verified


@dataclass(frozen=True, slots=True, kw_only=True)
class HeldRun:
    """A run that waits for ``recrawler runs approve`` or ``discard`` (``runs.state = 'held'``)."""

    id: int
    site: str | None
    started_at: datetime
    finished_at: datetime | None
    #: why it is held (``change_spike``, ``mass_removal``, ``same_content``), with the alert's words
    holds: tuple[str, ...] = ()
    alert: str | None = None
    #: every reason stored with the run (the outage guard's too)
    reasons: tuple[str, ...] = ()
    #: removals it staged for approval
    staged_removals: int = 0
    #: ``held``: none of it is published; otherwise its removals alone wait (the rest is published)
    state: str = "held"
