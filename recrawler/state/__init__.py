"""Crawl state: the StateStore contract, its records, and the crawler's single store."""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol
from weakref import WeakKeyDictionary

from scrapy.utils.misc import load_object

from recrawler.exceptions import ConfigurationError

if TYPE_CHECKING:
    from collections import Counter
    from collections.abc import Callable, Iterator, Sequence

    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

    from recrawler.kb.chunking import Chunk
    from recrawler.schedule import Revisit

__all__ = [
    "MOVED",
    "RUN_ABORTED",
    "Event",
    "PageRecord",
    "ReconcileResult",
    "RemovalPlan",
    "Run",
    "ScheduledPage",
    "StateStore",
    "TrustRecord",
    "begin_run_now",
    "store_for",
    "store_from_uri",
    "utcnow",
]

LIVE, QUARANTINED, GONE, MOVED = "live", "quarantined", "gone", "moved"
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
    #: live or quarantined pages of the site stored before the run (0: a first run)
    prior_pages: int = 0
    #: live pages of the site stored before the run
    prior_live: int = 0
    #: how many pages the listing of the site's last finished run named (None: unknown)
    last_listed: int | None = None
    #: the site's previous run did not complete its writes (aborted, or a write failed): pages it
    #: left unstored come back as new, and do not count toward a change spike
    backfill: bool = False


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


class StateStore(Protocol):
    """The contract every backend keeps. All methods are coroutines except the CLI readers.

    Guarantees: each ``record*`` call is atomic (its page state and its events land together or
    not at all); nothing is durable until ``flush()`` or a group commit; ``reconcile`` is one
    transaction of set statements; stores are never recreated or migrated downwards.
    """

    uri: str
    #: outcome labels of page writes that committed this session, and of those a failed commit lost
    outcomes: Counter[str]
    lost: Counter[str]

    async def open(self) -> None:
        """Connect and migrate; idempotent. Raises StateStoreError subclasses."""

    def open_sync(self) -> None:
        """Blocking open, used once at startup so a bad database stops the crawl before it begins."""

    async def close(self) -> None:
        """Commit what is pending, deliver events, disconnect."""

    async def flush(self) -> None:
        """Commit pending page writes now and deliver their events."""

    async def begin_run(
        self,
        spider: str,
        site: str | None,
        started_at: datetime,
        *,
        embedder: str | None = None,
        publish_each_page: bool = False,
        holder: str = "",
        lease_secs: float = 60.0,
    ) -> Run:
        """Take the site's lease and start a run (published at once when each page publishes
        itself). Raises RunRefused while another live run holds the lease or a held run waits."""

    def begin_run_sync(
        self,
        spider: str,
        site: str | None,
        started_at: datetime,
        *,
        embedder: str | None = None,
        publish_each_page: bool = False,
        holder: str = "",
        lease_secs: float = 60.0,
    ) -> Run:
        """Blocking :meth:`begin_run`, used once before the crawl's first request."""

    async def heartbeat(self, run: Run) -> bool:
        """Renew the run's lease; False when another run took it over."""

    async def get(self, key: str) -> PageRecord | None:
        """Return the stored record of *key*, or None."""

    async def record(
        self,
        run: Run,
        rec: PageRecord,
        events: Sequence[Event],
        *,
        chunks: Sequence[Chunk] | None = None,
        restore: bool = False,
        embeddings: Sequence[tuple[str, str, bytes]] = (),
        fields: FieldsRow | None = None,
        change: ChangeRow | None = None,
        outcome: Sequence[str] = (),
    ) -> None:
        """Write a page's new state, events, knowledge-base rows, fields and history in one
        transaction; its *outcome* labels count in :attr:`outcomes` once it is durable (in
        :attr:`lost` when its commit fails)."""

    async def record_error(self, run: Run, key: str | None, events: Sequence[Event]) -> None:
        """Note that a page was reached with an error: state untouched, events written."""

    async def record_miss(self, run: Run, key: str, http_status: int) -> str:
        """Stage a 404/410 answer of a stored page: ``staged``, ``tombstone`` or ``unknown``."""

    def unseen_sync(
        self, run: Run, limit: int, *, due_at: datetime | None = None
    ) -> list[tuple[str, str, int]]:
        """Blocking :meth:`unseen`, for ``spider_idle`` handlers (sync signals, nothing in flight)."""

    async def unseen(
        self, run: Run, limit: int, *, due_at: datetime | None = None
    ) -> list[tuple[str, str, int]]:
        """Return up to *limit* (key, url, link depth) of the run's site not reached yet, marking them.

        Pages this run's listing decided are not unseen; with *due_at*, only pages due by then
        (and quarantined or audited ones) are.
        """

    async def record_moves(self, run: Run, keys: Sequence[str], target: str, *, http_status: int) -> int:
        """Stage a permanent redirect of stored pages *keys* to page *target* (applied when the
        run reconciles, if *target* is live by then)."""

    async def removal_plan(self, run: Run, *, gone_after: int, gone_statuses: Sequence[int]) -> RemovalPlan:
        """What applying the run's staged misses and moves would do; nothing is changed."""

    async def reconcile(
        self,
        run: Run,
        *,
        apply: bool,
        gone_after: int,
        gone_statuses: Sequence[int],
        at: datetime,
        keep: bool = False,
    ) -> ReconcileResult:
        """Apply the run's staged misses and moves (quarantine, gone, moved, with their events),
        drop them, or keep them for ``runs approve`` (*keep*)."""

    async def apply_held(
        self, run_id: int, *, gone_after: int, gone_statuses: Sequence[int], at: datetime
    ) -> ReconcileResult:
        """Apply the misses and moves a held run kept."""

    async def largest_same_content(self, run: Run) -> tuple[int, str] | None:
        """The largest group of pages the run made new or changed that now say the same thing."""

    async def finish_run(
        self,
        run: Run,
        *,
        reason: str,
        at: datetime,
        report: dict[str, Any],
        reasons: Sequence[str] = (),
        listed: int | None = None,
        exit_code: int | None = None,
    ) -> None:
        """Record how the run ended and release the site's lease."""

    # --- knowledge base ---------------------------------------------------------------------

    async def missing_embeddings(
        self, embedder: str, limit: int, *, include_run: int | None = None, after: str = ""
    ) -> list[tuple[str, str]]:
        """Up to *limit* (text hash, text) of current, not-held chunks with no embedding."""

    async def count_missing(self, embedder: str) -> int:
        """How many distinct current chunk texts (held runs aside) have no embedding."""

    async def missing_for(self, embedder: str, hashes: Sequence[str]) -> list[str]:
        """Those of *hashes* that have no embedding for *embedder*, in the given order."""

    async def store_embeddings(self, rows: Sequence[tuple[str, str, bytes]]) -> None:
        """Add (embedder, text hash, vector) rows to the embedding cache, committed."""

    async def run_index_counts(self, run_id: int, embedder: str) -> dict[str, int]:
        """Chunks a run added and retired; its distinct texts and how many are embedded."""

    async def set_run_state(self, run_id: int, state: str) -> None:
        """Set a run's state (``RUN_*``)."""

    async def publish(self, run_id: int, at: datetime) -> dict[str, int]:
        """Make a run visible to search in one statement; garbage-collect what no one can see."""

    async def discard(self, run_id: int) -> dict[str, int]:
        """Drop a held run's knowledge-base changes; its pages are checked again next run."""

    async def run_info(self, run_id: int) -> dict[str, Any] | None:
        """A run's row, or None."""

    # --- change detection ---------------------------------------------------------------------

    async def get_fields(self, key: str) -> FieldsRow | None:
        """The page's field-level record, or None."""

    async def load_regions(self) -> dict[str, list[str]]:
        """Every site's learned volatile regions."""

    async def add_regions(
        self, site: str, selectors: Sequence[str], *, source: str, learned_from: str, at: datetime
    ) -> int:
        """Learn volatile regions for a site; returns how many are new."""

    async def load_boilerplate(self, site: str) -> frozenset[tuple[int, int]]:
        """The site's boilerplate block pairs: (previous block, block), a page edge as ``EDGE``."""

    async def update_boilerplate(
        self, site: str, *, enter_share: float, exit_share: float, min_pages: int
    ) -> dict[str, int]:
        """Re-decide a site's boilerplate block pairs and re-hash the pages they move."""

    async def take_back_boilerplate_changes(self, run: Run, site: str) -> list[str]:
        """Call unchanged the pages whose only change this run is now boilerplate."""

    async def deliver(self) -> None:
        """Commit and deliver every committed event now."""

    def noise_report(self) -> dict[str, dict[str, list[dict[str, Any]]]]:
        """What is being ignored, per site (synchronous; for the CLI)."""

    def iter_changes(
        self, *, key: str | None = None, site: str | None = None, limit: int | None = None
    ) -> Iterator[dict[str, Any]]:
        """History rows, newest first (synchronous; for the CLI)."""

    # --- schedule, trust and immutable pages ------------------------------------------------

    async def scheduled(self, keys: Sequence[str]) -> dict[str, ScheduledPage]:
        """The schedule's view of the stored pages among *keys*, in one round trip."""

    async def mark_listed(self, run: Run, decided: Sequence[tuple[str, str | None]]) -> None:
        """Note that this run's listing decided (key, skipping layer or None) pairs (not unseen)."""

    async def revisit(self, key: str) -> Revisit | None:
        """A page's revisit state, or None."""

    async def record_revisit(
        self, key: str, revisit: Revisit, *, found_via: str | None = None, found_from: str | None = None
    ) -> None:
        """Store a page's revisit state after a check (after its page write, never before)."""

    async def update_revisit(
        self,
        key: str,
        update: Callable[[Revisit | None], Revisit],
        *,
        found_via: str | None = None,
        found_from: str | None = None,
    ) -> tuple[Revisit | None, Revisit]:
        """Replace a page's revisit state by ``update(state)`` in one round trip; (before, after)."""

    async def audit_sample(self, run: Run, sample: float) -> list[str]:
        """Draw the run's random self-audit sample (a share below 1, else a count); return keys."""

    async def trust(self) -> list[TrustRecord]:
        """Every host's trust records."""

    async def record_trust(
        self, host: str, signal: str, *, lied: bool, url: str, at: datetime, distrust_after: int
    ) -> TrustRecord:
        """Count one audited claim; the signal is switched off after *distrust_after* lies."""

    async def reset_trust(self, host: str | None = None, signal: str | None = None) -> int:
        """Trust signals again; return how many records were reset."""

    async def immutable_seen(self, spider: str, keys: Sequence[str]) -> set[str]:
        """Those deltafetch *keys* that *spider* already fetched."""

    async def immutable_add(
        self, spider: str, key: str, *, url: str, page_key: str | None, at: datetime
    ) -> None:
        """Remember a fetched deltafetch key."""

    async def immutable_reset(self, spider: str | None = None, pattern: str | None = None) -> int:
        """Forget deltafetch keys (of *spider*, whose URL matches *pattern*); return how many."""

    def iter_pages(self, status: str | None = None) -> Iterator[PageRecord]:
        """Yield stored pages ordered by key (synchronous; for the CLI)."""

    def iter_runs(self) -> Iterator[dict[str, Any]]:
        """Yield runs, newest first (synchronous; for the CLI)."""

    def iter_schedule(self, site: str | None = None) -> Iterator[ScheduledPage]:
        """Yield the schedule's view of live and quarantined pages, soonest due first (CLI)."""

    def iter_trust(self) -> Iterator[TrustRecord]:
        """Yield trust records by host and signal (CLI)."""

    def iter_immutable(self) -> Iterator[dict[str, Any]]:
        """Yield stored deltafetch keys (CLI)."""


_stores: WeakKeyDictionary[Crawler, StateStore] = WeakKeyDictionary()


def store_from_uri(uri: str, settings: BaseSettings) -> StateStore:
    """Build (not open) the backend for *uri*, chosen by its scheme."""
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else "sqlite"
    backends = settings.getdict("RECRAWLER_STATE_BACKENDS")
    if scheme not in backends:
        msg = f"RECRAWLER_DB_URI: no backend for scheme {scheme!r} in {uri!r} (known: {sorted(backends)})"
        raise ConfigurationError(msg)
    cls = load_object(backends[scheme])
    store: StateStore = cls.from_settings(uri, settings)
    return store


def store_for(crawler: Crawler) -> StateStore:
    """Return the crawler's single store, built on first use from ``RECRAWLER_DB_URI``."""
    store = _stores.get(crawler)
    if store is None:
        uri = crawler.settings.get("RECRAWLER_DB_URI")
        if not uri:
            raise ConfigurationError(
                "RECRAWLER_DB_URI: empty; set a database URI such as sqlite:///recrawler.db"
            )
        store = store_from_uri(str(uri), crawler.settings)
        _stores[crawler] = store
    return store


class RecordHints:
    """Records the middleware read for in-flight requests, so the pipeline does not read again.

    Bounded (oldest dropped first); a miss only costs the pipeline one more read.
    """

    MISSING: Any = object()

    def __init__(self, maxsize: int = 10_000) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[str, PageRecord | None] = OrderedDict()

    def put(self, key: str, rec: PageRecord | None) -> None:
        """Remember what the store held for *key* when its request was sent."""
        self._data[key] = rec
        if len(self._data) > self.maxsize:
            self._data.popitem(last=False)

    def pop(self, key: str) -> PageRecord | Any | None:
        """Return and forget the hint for *key*, or ``MISSING``."""
        return self._data.pop(key, self.MISSING)

    def peek(self, key: str) -> PageRecord | Any | None:
        """Return the hint for *key* (kept), or ``MISSING``."""
        return self._data.get(key, self.MISSING)

    def __len__(self) -> int:
        return len(self._data)


_hints: WeakKeyDictionary[Crawler, RecordHints] = WeakKeyDictionary()


def hints_for(crawler: Crawler) -> RecordHints:
    """Return the crawler's record hints."""
    hints = _hints.get(crawler)
    if hints is None:
        hints = _hints[crawler] = RecordHints()
    return hints


_runs: WeakKeyDictionary[Crawler, Any] = WeakKeyDictionary()


async def run_for(crawler: Crawler) -> Run:
    """Open the crawler's store and begin its run once; every component awaits the same run."""
    import asyncio

    fut = _runs.get(crawler)
    if isinstance(fut, Run):
        # the hot path: every request and item after the first
        return fut
    if fut is None:
        fut = asyncio.ensure_future(_begin(crawler))
        _runs[crawler] = fut
    elif fut.done():
        done: Run = fut.result()
        return done
    run: Run = await asyncio.shield(fut)
    return run


def begin_run_now(crawler: Crawler) -> Run:
    """Open the store and begin the run before the crawl starts (blocking, once): a bad database or
    another run of the same site stops the crawl before its first request."""
    current = _runs.get(crawler)
    if isinstance(current, Run):
        return current
    store = store_for(crawler)
    store.open_sync()
    spider, site, kwargs = _run_args(crawler)
    run = store.begin_run_sync(spider, site, utcnow(), **kwargs)
    _runs[crawler] = run
    return run


async def _begin(crawler: Crawler) -> Run:
    store = store_for(crawler)
    await store.open()
    spider, site, kwargs = _run_args(crawler)
    return await store.begin_run(spider, site, utcnow(), **kwargs)


def _run_args(crawler: Crawler) -> tuple[str, str | None, dict[str, Any]]:
    from recrawler.state.sqlite import lease_holder

    spider = crawler.spider
    site = getattr(spider, "recrawler_site", None)
    settings = crawler.settings
    embedder = None
    if settings.getbool("RECRAWLER_INDEX_ENABLED"):
        from recrawler.pipelines.index import embedder_for
        from recrawler.redact import redact_url

        base_url = settings.get("RECRAWLER_EMBEDDER_BASE_URL")
        # what search and `runs approve` need to rebuild the same embedder (never a key or password)
        embedder = json.dumps(
            {
                "id": embedder_for(crawler).id,
                "spec": settings.get("RECRAWLER_EMBEDDER"),
                "base_url": redact_url(str(base_url)) if base_url else base_url,
            }
        )
    kwargs: dict[str, Any] = {
        "embedder": embedder,
        "publish_each_page": (
            embedder is not None
            and settings.get("RECRAWLER_PUBLISH") == "page"
            and not settings.getbool("RECRAWLER_DRY_RUN")
        ),
        "holder": lease_holder(),
        "lease_secs": settings.getfloat("RECRAWLER_LEASE_SECS") or 60.0,
    }
    return getattr(spider, "name", "?"), site, kwargs


def current_run(crawler: Crawler) -> Run | None:
    """Return the crawler's run if it has begun (without waiting)."""
    fut = _runs.get(crawler)
    if isinstance(fut, Run):
        return fut
    if fut is None or not fut.done() or fut.exception() is not None:
        return None
    run: Run = fut.result()
    return run
