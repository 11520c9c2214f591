"""SQLite state store: one file, WAL, group commits on one dedicated worker thread."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import socket
import sqlite3
import threading
import time
import zlib
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, Self, TypeVar
from urllib.parse import unquote, urlsplit

from recrawler.detect.boilerplate import EDGE, block_pairs, kept_blocks
from recrawler.detect.hashing import fuzzy_distance, page_hash, unpack_blocks
from recrawler.events import EventSink, sink_from_uri
from recrawler.exceptions import RunRefused, SchemaVersionError, StateStoreError, StateStoreUnavailable
from recrawler.schedule import Revisit, audit_count
from recrawler.state import (
    GONE,
    LIVE,
    MOVED,
    QUARANTINED,
    RUN_ABORTED,
    RUN_DISCARDED,
    RUN_FINISHED,
    RUN_HELD,
    RUN_PUBLISHED,
    RUN_RUNNING,
    ChangeRow,
    FieldsRow,
    PageRecord,
    ReconcileResult,
    RemovalPlan,
    Run,
    ScheduledPage,
    TrustRecord,
)
from recrawler.state.sqlite_check import Finding, check, repair

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from scrapy.settings import BaseSettings

    from recrawler.kb.chunking import Chunk
    from recrawler.state import Event

logger = logging.getLogger(__name__)

_P = ParamSpec("_P")
# why a chunk row was retired
_RETIRED_REPLACED, _RETIRED_QUARANTINED, _RETIRED_GONE = 0, 1, 2

_T = TypeVar("_T")
_MIGRATION = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")
# the schedule's view of a page: a stored page checked before schema 4 uses last_checked
_SCHEDULE_COLUMNS = (
    "key, url, status, lastmod, listed_run, listed_skip, audit_run, "
    "COALESCE(last_check_at, last_checked) AS last_check_at, "
    "next_check_at, check_interval, check_count, change_count, checked_secs, change_rate"
)
_TRUST_COLUMNS = "host, signal, checks, lies, trusted, last_lie_at, last_lie_url"
_PAGE_COLUMNS = (
    "key, site, url, etag, last_modified, lastmod, content_hash, fuzzy_hash, title, status, "
    "misses, first_seen, last_checked, last_changed, last_seen_run, chunks, noise_key, "
    "found_depth, moved_to, changed_run"
)


# TLSH distance within which two pages changed in one run count as the same text, and beyond
# which a page's change replaced its content rather than edited it
_SAME_CONTENT_DISTANCE, _REPLACED_DISTANCE = 30, 100
# the staged miss of row ``m`` makes page ``p`` gone: a "gone" status, or enough consecutive misses
_GONE_CASE = "(m.http_status IN (SELECT value FROM json_each(:codes)) OR p.misses + 1 >= :after)"


def lease_holder() -> str:
    """Who holds a lease: this host and process (``host pid N``)."""
    return f"{socket.gethostname()} pid {os.getpid()}"


def _holder_alive(holder: str) -> bool:
    """False only when *holder* is a process of this host that no longer exists (a killed run):
    its lease is taken over at once. Anything else counts as alive until its heartbeats lapse."""
    host, _, pid = holder.rpartition(" pid ")
    if host != socket.gethostname() or not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _migrations() -> list[tuple[int, str]]:
    folder = resources.files("recrawler.state") / "migrations" / "sqlite"
    found = []
    for entry in folder.iterdir():
        m = _MIGRATION.match(entry.name)
        if m:
            found.append((int(m.group(1)), entry.read_text(encoding="utf-8")))
    return sorted(found)


SCHEMA_VERSION = max(v for v, _ in _migrations())


def path_from_uri(uri: str) -> str:
    """Map ``sqlite:///rel.db``, ``sqlite:////abs.db``, ``file:///abs.db`` or a bare path to a path."""
    if "://" not in uri:
        return uri
    parts = urlsplit(uri)
    path = unquote(parts.path)
    if parts.scheme == "sqlite":
        # sqlite:///rel.db -> "rel.db"; sqlite:////abs.db -> "/abs.db" (SQLAlchemy's convention)
        return path[1:] if path.startswith("/") else path
    return path


def _ts(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _dt(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _at(value: datetime | None) -> str | None:
    """A schedule time: UTC, fixed width, so text order is time order in SQL comparisons."""
    return value.astimezone(UTC).isoformat(timespec="microseconds") if value is not None else None


def _row_to_revisit(row: sqlite3.Row) -> Revisit:
    return Revisit(
        last_check_at=_dt(row["last_check_at"]),
        next_check_at=_dt(row["next_check_at"]),
        interval=row["check_interval"],
        checks=row["check_count"],
        changes=row["change_count"],
        checked_secs=row["checked_secs"],
        rate=row["change_rate"],
    )


def _row_to_scheduled(row: sqlite3.Row) -> ScheduledPage:
    return ScheduledPage(
        key=row["key"],
        url=row["url"],
        status=row["status"],
        lastmod=row["lastmod"],
        revisit=_row_to_revisit(row),
        listed_run=row["listed_run"],
        listed_skip=row["listed_skip"],
        audit_run=row["audit_run"],
    )


def _row_to_trust(row: sqlite3.Row) -> TrustRecord:
    return TrustRecord(
        host=row["host"],
        signal=row["signal"],
        checks=row["checks"],
        lies=row["lies"],
        trusted=bool(row["trusted"]),
        last_lie_at=_dt(row["last_lie_at"]),
        last_lie_url=row["last_lie_url"],
    )


def _row_to_record(row: sqlite3.Row) -> PageRecord:
    first_seen = _dt(row["first_seen"])
    assert first_seen is not None  # NOT NULL column
    return PageRecord(
        key=row["key"],
        site=row["site"],
        url=row["url"],
        etag=row["etag"],
        last_modified=row["last_modified"],
        lastmod=row["lastmod"],
        content_hash=row["content_hash"],
        fuzzy_hash=row["fuzzy_hash"],
        title=row["title"],
        status=row["status"],
        misses=row["misses"],
        first_seen=first_seen,
        last_checked=_dt(row["last_checked"]),
        last_changed=_dt(row["last_changed"]),
        last_seen_run=row["last_seen_run"],
        chunks=row["chunks"],
        noise_key=row["noise_key"],
        found_depth=row["found_depth"] or 0,
        moved_to=row["moved_to"],
        changed_run=row["changed_run"],
    )


class SQLiteStateStore:
    """State in one SQLite file (WAL, ``synchronous=NORMAL``).

    Every call runs on one dedicated worker thread that owns the connection, so the reactor never
    blocks. Page writes are savepoints inside a group transaction committed every
    ``RECRAWLER_DB_BATCH_SIZE`` pages or ``RECRAWLER_DB_COMMIT_SECS`` seconds: each page is atomic,
    and a kill loses at most the uncommitted tail, which the next run simply checks again.
    """

    def __init__(
        self,
        uri: str,
        *,
        batch_size: int = 200,
        commit_secs: float = 2.0,
        timeout_secs: float = 10.0,
        sink: EventSink | None = None,
        dry_run: bool = False,
        deliver_on_commit: bool = True,
    ) -> None:
        self.uri = uri
        #: deliver events after each commit; off when the run publishes as a whole, so events go
        #: out with the run (and a change the run takes back is never announced)
        self.deliver_on_commit = deliver_on_commit
        self.path = path_from_uri(uri)
        self.dry_run = dry_run
        self.batch_size = max(1, batch_size)
        self.commit_secs = commit_secs
        self.timeout_secs = timeout_secs
        self.sink = sink
        self._conn: sqlite3.Connection | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._open_lock = threading.Lock()
        self._pending = 0
        self._txn_since = 0.0
        #: outcome labels of the page writes in the open group transaction
        self._group: list[str] = []
        #: outcome labels of page writes that committed, and of those a failed commit lost
        self.outcomes: Counter[str] = Counter()
        self.lost: Counter[str] = Counter()
        self._timer: asyncio.TimerHandle | None = None
        self._flipped_off: dict[str, set[tuple[int, int]]] = {}
        self._background: set[asyncio.Future[None]] = set()

    @classmethod
    def from_settings(cls, uri: str, settings: BaseSettings) -> Self:
        """Build the store from a crawler's settings."""
        dry_run = settings.getbool("RECRAWLER_DRY_RUN")
        return cls(
            uri,
            batch_size=settings.getint("RECRAWLER_DB_BATCH_SIZE"),
            commit_secs=settings.getfloat("RECRAWLER_DB_COMMIT_SECS"),
            timeout_secs=settings.getfloat("RECRAWLER_DB_TIMEOUT_SECS"),
            # a dry run writes nothing: no events either
            sink=None if dry_run else sink_from_uri(settings.get("RECRAWLER_EVENTS_URI")),
            dry_run=dry_run,
            deliver_on_commit=not (
                settings.getbool("RECRAWLER_INDEX_ENABLED") and settings.get("RECRAWLER_PUBLISH") == "run"
            ),
        )

    # --- plumbing ---------------------------------------------------------------------------

    async def _call(self, func: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="recrawler-sqlite")
        fut = self._executor.submit(func, *args, **kwargs)
        return await asyncio.wrap_future(fut)

    def call_sync(self, func: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """Run *func* on the worker thread and wait (for ``spider_idle``, where nothing else runs)."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="recrawler-sqlite")
        return self._executor.submit(func, *args, **kwargs).result()

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StateStoreError(f"state store {self.path!r} is not open")
        return self._conn

    def _connect(self, *, readonly: bool = False) -> sqlite3.Connection:
        path = self.path
        if path != ":memory:":
            parent = Path(path).resolve().parent
            if not parent.is_dir():
                msg = f"cannot open state database {path!r}: directory {str(parent)!r} does not exist"
                raise StateStoreUnavailable(msg)
            if readonly and not Path(path).exists():
                msg = f"no state database at {path!r} (run a crawl first, or pass --db)"
                raise StateStoreUnavailable(msg)
        try:
            # a read-only open needs a URI: quote the path so "?" or "#" in it stay part of it
            target = Path(path).resolve().as_uri() + "?mode=ro" if readonly else path
            conn = sqlite3.connect(
                target,
                timeout=self.timeout_secs,
                isolation_level=None,
                uri=readonly,
                check_same_thread=False,
            )
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.DatabaseError as exc:
            raise self._wrap_open_error(exc) from exc
        return conn

    def _wrap_open_error(self, exc: sqlite3.Error) -> StateStoreError:
        text = str(exc)
        if "locked" in text or "busy" in text:
            return StateStoreUnavailable(
                f"state database {self.path!r} is locked by another process ({text}); "
                "is another crawl running on it?"
            )
        if isinstance(exc, sqlite3.OperationalError) and "unable to open" in text:
            return StateStoreUnavailable(f"cannot open state database {self.path!r}: {text}")
        return SchemaVersionError(
            f"state database {self.path!r} is corrupt or not a recrawler database ({text}); "
            "it was left untouched: move it away or point RECRAWLER_DB_URI elsewhere"
        )

    def _schema_version(self, conn: sqlite3.Connection) -> int:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            return 0
        if "schema_version" not in tables:
            msg = (
                f"state database {self.path!r} is not a recrawler database (tables: "
                f"{', '.join(sorted(tables))}); it was left untouched"
            )
            raise SchemaVersionError(msg)
        row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
        return int(row[0] or 0)

    def _open(self) -> None:
        with self._open_lock:
            if self._conn is not None:
                return
            if self.dry_run and self.path != ":memory:" and not Path(self.path).exists():
                # a dry run against no database compares with empty state and creates no file
                self.path = ":memory:"
            conn = self._connect()
            try:
                # check the schema before anything writes: a refused file stays byte-identical
                self._schema_version_checked(conn)
                if self.dry_run:
                    # one transaction for the whole run, rolled back at close: nothing is written
                    conn.execute("BEGIN IMMEDIATE")
                else:
                    conn.execute("PRAGMA journal_mode = WAL")
                    # WAL + NORMAL: a commit is atomic and consistent; only the last commits
                    # before a power loss may roll back, which the next run re-checks.
                    conn.execute("PRAGMA synchronous = NORMAL")
                self._migrate(conn)
            except sqlite3.DatabaseError as exc:
                conn.close()
                raise self._wrap_open_error(exc) from exc
            except StateStoreError:
                conn.close()
                raise
            self._conn = conn
        self._deliver()

    def _schema_version_checked(self, conn: sqlite3.Connection) -> int:
        version = self._schema_version(conn)
        if version > SCHEMA_VERSION:
            msg = (
                f"state database {self.path!r} has schema version {version}, newer than this "
                f"recrawler's {SCHEMA_VERSION}; upgrade recrawler (the database was left untouched)"
            )
            raise SchemaVersionError(msg)
        return version

    def _migrate(self, conn: sqlite3.Connection) -> None:
        version = self._schema_version_checked(conn)
        # each applied number is a row: a migration numbered below one already applied (written
        # on another branch) is still applied once
        applied = {r[0] for r in conn.execute("SELECT version FROM schema_version")} if version else set()
        for number, sql in _migrations():
            if number in applied:
                continue
            if self.dry_run:
                conn.execute("SAVEPOINT migrate")
            else:
                conn.execute("BEGIN IMMEDIATE")
            try:
                if number == 1:
                    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
                for statement in _split_sql(sql):
                    conn.execute(statement)
                conn.execute("INSERT INTO schema_version (version) VALUES (?)", (number,))
                conn.execute("RELEASE migrate" if self.dry_run else "COMMIT")
            except BaseException:
                conn.execute("ROLLBACK TO migrate" if self.dry_run else "ROLLBACK")
                raise
            logger.info("state database %(path)s migrated to schema %(v)d", {"path": self.path, "v": number})
        self._fill_block_pairs(conn)

    def _fill_block_pairs(self, conn: sqlite3.Connection) -> None:
        """Count the block pairs of a database from before schema 6 from its stored blocks, once.

        Until the next run ends and re-decides them, a pair of two boilerplate blocks (a page edge
        counts as one) is a boilerplate pair; every page is re-hashed under those pairs, so the
        next run compares like with like (no false "changed"). One transaction: a crash leaves
        ``site_pairs`` empty and the next open counts again.
        """
        if conn.execute("SELECT EXISTS (SELECT 1 FROM site_pairs)").fetchone()[0]:
            return
        stored = conn.execute("SELECT EXISTS (SELECT 1 FROM page_fields WHERE blocks != x'')").fetchone()[0]
        if not stored:
            return
        conn.execute("SAVEPOINT migrate" if self.dry_run else "BEGIN IMMEDIATE")
        try:
            pages = 0
            for site, blob in conn.execute(
                "SELECT p.site, f.blocks FROM page_fields f JOIN pages p ON p.key = f.key"
            ):
                _count_pairs(conn, site, block_pairs(unpack_blocks(blob)), 1)
                pages += 1
            sites = [
                r[0] for r in conn.execute("SELECT DISTINCT site FROM site_blocks WHERE boilerplate = 1")
            ]
            for site in sites:
                conn.execute(
                    """UPDATE site_pairs SET boilerplate = 1 WHERE site = :site
                         AND (prev = :edge OR prev IN
                              (SELECT block FROM site_blocks WHERE site = :site AND boilerplate = 1))
                         AND (block = :edge OR block IN
                              (SELECT block FROM site_blocks WHERE site = :site AND boilerplate = 1))""",
                    {"site": site, "edge": EDGE},
                )
                _rehash(conn, site)
            conn.execute("RELEASE migrate" if self.dry_run else "COMMIT")
        except BaseException:
            conn.execute("ROLLBACK TO migrate" if self.dry_run else "ROLLBACK")
            raise
        logger.info(
            "state database %(path)s: block pairs counted from %(n)d stored pages",
            {"path": self.path, "n": pages},
        )

    def _begin(self) -> None:
        conn = self.conn
        if not conn.in_transaction:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise self._wrap_open_error(exc) from exc
            self._txn_since = time.monotonic()
            self._pending = 0

    def _maybe_commit(self) -> None:
        self._pending += 1
        if self._pending >= self.batch_size or time.monotonic() - self._txn_since >= self.commit_secs:
            self._commit()

    def _commit(self) -> None:
        conn = self.conn
        if self.dry_run:
            return
        if conn.in_transaction:
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                # the whole group is lost (a full disk): undo it for sure, and count it as lost, so
                # nothing claims pages that were never stored
                with contextlib.suppress(sqlite3.Error):
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                self.lost.update(self._group)
                self._group.clear()
                self._pending = 0
                raise StateStoreError(f"commit to {self.path!r} failed: {exc}") from exc
        self.outcomes.update(self._group)
        self._group.clear()
        self._pending = 0
        if self.deliver_on_commit:
            self._deliver()

    async def deliver(self) -> None:
        """Commit and deliver every committed event now (the end of a run published as a whole)."""

        def work() -> None:
            self._commit()
            self._deliver()

        await self._call(self._guard, work)

    def _deliver(self) -> None:
        """Send committed outbox events to the sink, then delete them (at-least-once)."""
        if self.sink is None:
            return
        conn = self.conn
        if conn.in_transaction:
            return
        while True:
            rows = conn.execute("SELECT id, payload FROM outbox ORDER BY id LIMIT 1000").fetchall()
            if not rows:
                return
            try:
                self.sink.deliver([r["payload"] for r in rows])
            except OSError as exc:
                # the pages are committed; their events wait in the outbox for the next delivery
                logger.error(
                    "event delivery to %(sink)s failed, kept in the outbox: %(exc)s",
                    {"sink": getattr(self.sink, "path", self.sink), "exc": exc},
                )
                return
            conn.execute("DELETE FROM outbox WHERE id <= ?", (rows[-1]["id"],))

    def _page_txn(self, work: Callable[[sqlite3.Connection], _T], outcome: Sequence[str] = ()) -> _T:
        """Run *work* as one atomic page write inside the group transaction; its *outcome* labels
        count as committed only once the group commits."""
        self._begin()
        conn = self.conn
        conn.execute("SAVEPOINT page")
        try:
            result = work(conn)
        except sqlite3.Error as exc:
            conn.execute("ROLLBACK TO page")
            conn.execute("RELEASE page")
            raise StateStoreError(f"page write to {self.path!r} failed: {exc}") from exc
        except BaseException:
            conn.execute("ROLLBACK TO page")
            conn.execute("RELEASE page")
            raise
        conn.execute("RELEASE page")
        if self.dry_run:
            # nothing is ever committed: count what would have been
            self.outcomes.update(outcome)
        else:
            self._group.extend(outcome)
        self._maybe_commit()
        return result

    def _outbox(self, conn: sqlite3.Connection, events: Sequence[Event]) -> None:
        if self.sink is not None and events:
            conn.executemany("INSERT INTO outbox (payload) VALUES (?)", [(e.to_json(),) for e in events])

    # --- contract ---------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect, enable WAL and apply migrations; refuse newer or foreign databases."""
        await self._call(self._open)

    def open_sync(self) -> None:
        """Blocking :meth:`open`, for startup checks before the crawl begins."""
        self.call_sync(self._open)

    async def flush(self) -> None:
        """Commit pending writes and deliver their events."""
        await self._call(self._flush)

    def _flush(self) -> None:
        if self._conn is not None:
            self._commit()

    async def _page_write(self, work: Callable[[sqlite3.Connection], _T], outcome: Sequence[str] = ()) -> _T:
        result = await self._call(self._page_txn, work, outcome)
        if self._timer is None and self._conn is not None and self._conn.in_transaction:
            # bound the wait of the group's last page: commit within commit_secs even if no
            # further write comes to trigger it
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self.commit_secs, self._timed_flush)
        return result

    def _timed_flush(self) -> None:
        self._timer = None
        if self._executor is not None:
            task = asyncio.ensure_future(self._call(self._guard, self._flush))
            self._background.add(task)
            task.add_done_callback(self._flush_done)

    def _flush_done(self, task: asyncio.Future[None]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error(
                "timed commit to %(path)s failed: %(exc)s", {"path": self.path, "exc": task.exception()}
            )

    async def close(self) -> None:
        """Commit, deliver events and close the connection and the worker thread."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._executor is None:
            return
        try:
            await self._call(self._close)
        finally:
            self._executor.shutdown(wait=True)
            self._executor = None

    def _close(self) -> None:
        if self._conn is None:
            return
        try:
            if self.dry_run and self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            else:
                self._commit()
                self._deliver()
        finally:
            self._conn.close()
            self._conn = None
            if self.sink is not None:
                self.sink.close()

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
        """Take the site's lease and insert a run row (published at once when each page publishes
        itself).

        One run at a time per site: a lease whose holder still beats (within *lease_secs*) refuses
        the run, as does a held run of the site that awaits ``runs approve`` or ``runs discard``.
        A lease whose holder stopped beating is taken over: that run is marked aborted and its
        staged misses are dropped.
        """
        return await self._call(
            self._guard,
            lambda: self._begin_run(
                spider, site, started_at, embedder, publish_each_page, holder, lease_secs
            ),
        )

    def _begin_run(
        self,
        spider: str,
        site: str | None,
        started_at: datetime,
        embedder: str | None,
        publish_each_page: bool,
        holder: str,
        lease_secs: float,
    ) -> Run:
        conn = self.conn
        self._commit()
        self._begin()
        try:
            lease_key = site if site is not None else f"spider:{spider}"
            if not self.dry_run:
                held = conn.execute(
                    "SELECT id, reasons FROM runs WHERE state = ? AND site IS ? ORDER BY id DESC LIMIT 1",
                    (RUN_HELD, site),
                ).fetchone()
                if held is not None:
                    why = ", ".join(json.loads(held["reasons"] or "[]")) or "held"
                    msg = (
                        f"run {held['id']} of {site or spider} is held ({why}): decide it first with "
                        f"`recrawler runs approve {held['id']}` or `recrawler runs discard {held['id']}`"
                    )
                    raise RunRefused(msg, held=True)
            lease = conn.execute(
                "SELECT run_id, holder, heartbeat_at FROM leases WHERE site = ?", (lease_key,)
            ).fetchone()
            now = datetime.now(UTC)
            if lease is not None:
                beat = _dt(lease["heartbeat_at"])
                age = (now - beat).total_seconds() if beat else lease_secs + 1
                if age < lease_secs and _holder_alive(lease["holder"]):
                    msg = (
                        f"{site or spider} is being crawled by run {lease['run_id']} ({lease['holder']}, "
                        f"heartbeat {age:.0f} s ago): one run at a time per site"
                    )
                    raise RunRefused(msg)
                conn.execute(
                    """UPDATE runs SET state = ?, finish_reason = COALESCE(finish_reason, 'aborted'),
                         finished_at = COALESCE(finished_at, ?) WHERE id = ? AND state = ?""",
                    (RUN_ABORTED, _ts(now), lease["run_id"], RUN_RUNNING),
                )
                conn.execute("DELETE FROM run_misses WHERE run_id = ?", (lease["run_id"],))
                logger.warning(
                    "run %(run)d of %(site)s stopped without finishing (%(holder)s, last heartbeat "
                    "%(age).0f s ago): marked aborted, its staged misses dropped",
                    {"run": lease["run_id"], "site": lease_key, "holder": lease["holder"], "age": age},
                )
            cur = conn.execute(
                "INSERT INTO runs (spider, site, started_at, state, published_at, embedder) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (
                    spider,
                    site,
                    _ts(started_at),
                    RUN_PUBLISHED if publish_each_page else RUN_RUNNING,
                    _ts(started_at) if publish_each_page else None,
                    embedder,
                ),
            )
            run_id = cur.lastrowid
            assert run_id is not None
            conn.execute(
                "INSERT OR REPLACE INTO leases (site, run_id, holder, acquired_at, heartbeat_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (lease_key, run_id, holder or "?", _ts(now), _ts(now)),
            )
            prior = live = 0
            last_listed = None
            backfill = False
            if site is not None:
                prior, live = conn.execute(
                    "SELECT COUNT(*), COALESCE(SUM(status = ?), 0) FROM pages "
                    "WHERE site = ? AND status IN (?, ?)",
                    (LIVE, site, LIVE, QUARANTINED),
                ).fetchone()
                row = conn.execute(
                    "SELECT listed FROM runs WHERE site = ? AND id < ? AND listed IS NOT NULL "
                    "AND state != ? ORDER BY id DESC LIMIT 1",
                    (site, run_id, RUN_ABORTED),
                ).fetchone()
                last_listed = row["listed"] if row is not None else None
                row = conn.execute(
                    "SELECT state, reasons FROM runs WHERE site = ? AND id < ? ORDER BY id DESC LIMIT 1",
                    (site, run_id),
                ).fetchone()
                if row is not None:
                    reasons = json.loads(row["reasons"] or "[]")
                    backfill = row["state"] == RUN_ABORTED or "state_error" in reasons
        except BaseException:
            if conn.in_transaction and not self.dry_run:
                conn.execute("ROLLBACK")
            raise
        self._commit()
        return Run(
            id=run_id,
            spider=spider,
            site=site,
            started_at=started_at,
            prior_pages=int(prior),
            prior_live=int(live),
            last_listed=last_listed,
            backfill=backfill,
        )

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
        """Blocking :meth:`begin_run`, used once at startup (before the crawl's first request)."""
        return self.call_sync(
            self._guard,
            lambda: self._begin_run(
                spider, site, started_at, embedder, publish_each_page, holder, lease_secs
            ),
        )

    async def heartbeat(self, run: Run) -> bool:
        """Renew the run's lease; False when another run has taken it over."""
        lease_key = run.site if run.site is not None else f"spider:{run.spider}"

        def work() -> bool:
            self._begin()
            n = self.conn.execute(
                "UPDATE leases SET heartbeat_at = ? WHERE site = ? AND run_id = ?",
                (_ts(datetime.now(UTC)), lease_key, run.id),
            ).rowcount
            self._commit()
            return bool(n)

        return await self._call(self._guard, work)

    def _guard(self, work: Callable[[], _T]) -> _T:
        try:
            return work()
        except sqlite3.Error as exc:
            text = str(exc)
            if "locked" in text or "busy" in text:
                raise self._wrap_open_error(exc) from exc
            raise StateStoreError(f"state database {self.path!r}: {exc}") from exc

    async def get(self, key: str) -> PageRecord | None:
        """Return the stored record of *key*."""
        return await self._call(self._guard, lambda: self._get(key))

    def _get(self, key: str) -> PageRecord | None:
        row = self.conn.execute(f"SELECT {_PAGE_COLUMNS} FROM pages WHERE key = ?", (key,)).fetchone()
        return _row_to_record(row) if row is not None else None

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
        """Upsert the page's new state, its events and its knowledge-base rows atomically.

        ``fields`` replaces the page's field-level record (and updates the site's block counts);
        ``change`` appends to the page's history. ``outcome`` labels (``new``, ``changed``, ...)
        are counted in :attr:`outcomes` once the write commits, or in :attr:`lost` if its group
        commit fails.

        ``chunks`` replaces the page's current chunks (old rows retired by this run, new rows
        added by it: search switches when the run publishes); ``restore`` brings back the rows a
        quarantine kept; ``embeddings`` are (embedder, text hash, vector) cache rows.
        Any staged miss of the page is lifted.
        """

        def work(conn: sqlite3.Connection) -> None:
            conn.execute(
                f"""INSERT INTO pages ({_PAGE_COLUMNS})
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (key) DO UPDATE SET noise_key = excluded.noise_key,
                      url = excluded.url, site = excluded.site, etag = excluded.etag,
                      last_modified = excluded.last_modified, lastmod = excluded.lastmod,
                      content_hash = excluded.content_hash, fuzzy_hash = excluded.fuzzy_hash,
                      title = excluded.title, status = excluded.status, misses = excluded.misses,
                      last_checked = excluded.last_checked, last_changed = excluded.last_changed,
                      last_seen_run = excluded.last_seen_run, found_depth = excluded.found_depth,
                      moved_to = excluded.moved_to, changed_run = excluded.changed_run""",
                (
                    rec.key,
                    rec.site,
                    rec.url,
                    rec.etag,
                    rec.last_modified,
                    rec.lastmod,
                    rec.content_hash,
                    rec.fuzzy_hash,
                    rec.title,
                    rec.status,
                    rec.misses,
                    _ts(rec.first_seen),
                    _ts(rec.last_checked),
                    _ts(rec.last_changed),
                    run.id,
                    rec.chunks,
                    rec.noise_key,
                    rec.found_depth,
                    rec.moved_to,
                    rec.changed_run,
                ),
            )
            conn.execute("DELETE FROM run_misses WHERE run_id = ? AND key = ?", (run.id, rec.key))
            if chunks is not None:
                self._replace_chunks(conn, run, rec.key, chunks)
            elif restore:
                self._restore_chunks(conn, run, rec.key)
            if embeddings:
                conn.executemany(
                    "INSERT OR IGNORE INTO embeddings (embedder, text_hash, vector) VALUES (?, ?, ?)",
                    embeddings,
                )
            if fields is not None:
                self._write_fields(conn, rec.key, rec.site, fields)
            if change is not None:
                self._write_change(conn, run, change)
            self._outbox(conn, events)

        await self._page_write(work, outcome)

    @staticmethod
    def _write_fields(conn: sqlite3.Connection, key: str, site: str, fields: FieldsRow) -> None:
        row = conn.execute("SELECT blocks FROM page_fields WHERE key = ?", (key,)).fetchone()
        old_blocks = unpack_blocks(row[0]) if row is not None else []
        new_blocks = unpack_blocks(fields.blocks)
        old, new = set(old_blocks), set(new_blocks)
        # the site's block statistics follow the page's block set, in the page's transaction
        conn.executemany(
            "UPDATE site_blocks SET pages = MAX(pages - 1, 0) WHERE site = ? AND block = ?",
            [(site, b) for b in old - new],
        )
        conn.executemany(
            """INSERT INTO site_blocks (site, block, pages, sample) VALUES (?, ?, 1, ?)
               ON CONFLICT (site, block) DO UPDATE SET pages = pages + 1""",
            [(site, b, fields.samples.get(b, "")[:200]) for b in new - old],
        )
        old_pairs, new_pairs = block_pairs(old_blocks), block_pairs(new_blocks)
        _count_pairs(conn, site, old_pairs - new_pairs, -1)
        _count_pairs(conn, site, new_pairs - old_pairs, 1)
        conn.execute(
            """INSERT INTO page_fields (key, title, headings, code, links, text, blocks)
               VALUES (?, ?, ?, ?, ?, ?, ?)
               ON CONFLICT (key) DO UPDATE SET title = excluded.title, headings = excluded.headings,
                 code = excluded.code, links = excluded.links, text = excluded.text,
                 blocks = excluded.blocks""",
            (
                key,
                fields.title,
                json.dumps(fields.headings),
                json.dumps(fields.code),
                json.dumps(fields.links),
                zlib.compress(fields.text.encode("utf-8")),
                fields.blocks,
            ),
        )

    @staticmethod
    def _write_change(conn: sqlite3.Connection, run: Run, change: ChangeRow) -> None:
        conn.execute(
            """INSERT INTO page_changes (key, url, run_id, at, verdict, old_hash, new_hash,
                 changed_fields, distance, critical, diff, old_blocks)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            (
                change.key,
                change.url,
                run.id,
                _ts(change.at),
                change.verdict,
                change.old_hash,
                change.new_hash,
                json.dumps(change.changed_fields),
                change.distance,
                json.dumps(change.critical),
                change.diff,
                change.old_blocks,
            ),
        )

    @staticmethod
    def _replace_chunks(conn: sqlite3.Connection, run: Run, key: str, chunks: Sequence[Chunk]) -> None:
        # the current version is superseded by this run's version. A row already retired keeps
        # the run that retired it: moving that to this run would make it visible again while this
        # run is held. Rows a quarantine kept are collected when the run publishes.
        conn.execute(
            "UPDATE chunks SET retired_run = ?, retired_why = ? WHERE key = ? AND retired_run IS NULL",
            (run.id, _RETIRED_REPLACED, key),
        )
        conn.executemany(
            """INSERT INTO chunks (key, chunk_index, chunk_hash, url, heading, text, added_run)
               VALUES (?, ?, ?, ?, ?, ?, ?)""",
            [(key, c.chunk_index, c.chunk_hash, c.url, c.heading, c.text, run.id) for c in chunks],
        )
        conn.execute("UPDATE pages SET chunks = ? WHERE key = ?", (len(chunks), key))

    @staticmethod
    def _restore_chunks(conn: sqlite3.Connection, run: Run, key: str) -> None:
        # copies of the rows the last quarantine kept become current in this run; same texts, so
        # same embeddings. The kept rows stay as they are (collected when the run publishes).
        n = conn.execute(
            """INSERT INTO chunks (key, chunk_index, chunk_hash, url, heading, text, added_run)
               SELECT key, chunk_index, chunk_hash, url, heading, text, ?1 FROM chunks
               WHERE key = ?2 AND retired_why = ?3 AND retired_run = (
                 SELECT MAX(retired_run) FROM chunks WHERE key = ?2 AND retired_why = ?3)
               ORDER BY chunk_index""",
            (run.id, key, _RETIRED_QUARANTINED),
        ).rowcount
        conn.execute("UPDATE pages SET chunks = ? WHERE key = ?", (n, key))

    async def record_error(self, run: Run, key: str | None, events: Sequence[Event]) -> None:
        """Mark a stored page as reached this run (state untouched) and write its error events."""

        def work(conn: sqlite3.Connection) -> None:
            if key is not None:
                conn.execute("UPDATE pages SET last_seen_run = ? WHERE key = ?", (run.id, key))
            self._outbox(conn, events)

        await self._page_write(work)

    async def record_miss(self, run: Run, key: str, http_status: int) -> str:
        """Stage a 404/410 of a stored page for the reconciliation.

        Returns ``"staged"`` (a live or quarantined page), ``"tombstone"`` (already gone) or
        ``"unknown"`` (no record).
        """

        def work(conn: sqlite3.Connection) -> str:
            row = conn.execute("SELECT status FROM pages WHERE key = ?", (key,)).fetchone()
            if row is None:
                return "unknown"
            conn.execute("UPDATE pages SET last_seen_run = ? WHERE key = ?", (run.id, key))
            if row["status"] == GONE:
                return "tombstone"
            conn.execute(
                "INSERT OR REPLACE INTO run_misses (run_id, key, http_status) VALUES (?, ?, ?)",
                (run.id, key, http_status),
            )
            return "staged"

        return await self._page_write(work)

    def _unseen(self, run: Run, limit: int, due_at: datetime | None = None) -> list[tuple[str, str, int]]:
        if run.site is None:
            return []
        self._begin()
        # Pages the run's listing decided (requested, or skipped by the schedule, lastmod or
        # deltafetch) are not unseen; with *due_at*, neither are pages not due by then.
        rows = self.conn.execute(
            """UPDATE pages SET verify_run = :run
               WHERE key IN (
                 SELECT key FROM pages
                 WHERE site = :site AND status IN (:live, :quarantined)
                   AND (last_seen_run IS NULL OR last_seen_run != :run)
                   AND (verify_run IS NULL OR verify_run != :run)
                   AND (listed_run IS NULL OR listed_run != :run)
                   AND (:due IS NULL OR status = :quarantined OR audit_run = :run
                        OR next_check_at IS NULL OR next_check_at <= :due)
                 ORDER BY key LIMIT :limit)
               RETURNING key, url, found_depth""",
            {
                "run": run.id,
                "site": run.site,
                "live": LIVE,
                "quarantined": QUARANTINED,
                "due": _at(due_at),
                "limit": limit,
            },
        ).fetchall()
        self._commit()
        return sorted((r["key"], r["url"], r["found_depth"] or 0) for r in rows)

    def unseen_sync(
        self, run: Run, limit: int, *, due_at: datetime | None = None
    ) -> list[tuple[str, str, int]]:
        """Return up to *limit* pages of the run's site not reached this run, marking them.

        Pages the run's listing decided are left out; with *due_at*, so are pages whose next check
        is later (quarantined and audited pages always count). Blocking: for ``spider_idle``
        handlers, which run when nothing else is in flight.
        """
        return self.call_sync(self._guard, lambda: self._unseen(run, limit, due_at))

    async def unseen(
        self, run: Run, limit: int, *, due_at: datetime | None = None
    ) -> list[tuple[str, str, int]]:
        """Async form of :meth:`unseen_sync`."""
        return await self._call(self._guard, lambda: self._unseen(run, limit, due_at))

    async def record_moves(self, run: Run, keys: Sequence[str], target: str, *, http_status: int) -> int:
        """Stage a permanent redirect of stored pages *keys* to page *target*; returns how many.

        The moves apply when the run reconciles, and only if *target* is a live page by then.
        """

        def work(conn: sqlite3.Connection) -> int:
            n = 0
            for key in keys:
                n += conn.execute(
                    """INSERT OR REPLACE INTO run_misses (run_id, key, http_status, moved_to)
                       SELECT ?, key, ?, ? FROM pages WHERE key = ? AND status IN (?, ?)""",
                    (run.id, http_status, target, key, LIVE, QUARANTINED),
                ).rowcount
                conn.execute("UPDATE pages SET last_seen_run = ? WHERE key = ?", (run.id, key))
            return n

        return await self._page_write(work)

    async def removal_plan(self, run: Run, *, gone_after: int, gone_statuses: Sequence[int]) -> RemovalPlan:
        """What applying the run's staged misses and moves would do (nothing is changed)."""

        def work() -> RemovalPlan:
            self._commit()
            row = self.conn.execute(
                f"""SELECT
                      COALESCE(SUM(m.moved_to IS NOT NULL AND t.status = :live), 0) AS moved,
                      COALESCE(SUM(m.moved_to IS NULL AND p.status != :gone
                                   AND ({_GONE_CASE})), 0) AS gone,
                      COALESCE(SUM(m.moved_to IS NULL AND p.status = :live
                                   AND NOT ({_GONE_CASE})), 0) AS quarantine,
                      COALESCE(SUM(p.status = :live AND (m.moved_to IS NULL
                                   OR t.status = :live)), 0) AS removals
                    FROM run_misses m JOIN pages p ON p.key = m.key
                    LEFT JOIN pages t ON t.key = m.moved_to
                    WHERE m.run_id = :run AND p.status IN (:live, :quarantined)""",
                {
                    "run": run.id,
                    "live": LIVE,
                    "gone": GONE,
                    "quarantined": QUARANTINED,
                    "codes": json.dumps(list(gone_statuses)),
                    "after": gone_after,
                },
            ).fetchone()
            return RemovalPlan(
                pages=run.prior_pages,
                live=run.prior_live,
                removals=int(row["removals"]),
                quarantine=int(row["quarantine"]),
                gone=int(row["gone"]),
                moved=int(row["moved"]),
            )

        return await self._call(self._guard, work)

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
        """Apply the run's staged misses and moves in one transaction; or, when not *apply*, drop
        them (the outage guard), or keep them for ``runs approve`` (*keep*: the run is held)."""

        def work() -> ReconcileResult:
            conn = self.conn
            self._commit()
            self._begin()
            conn.execute("SAVEPOINT reconcile")
            try:
                result = self._reconcile(conn, run, apply, gone_after, list(gone_statuses), at, keep)
                conn.execute("RELEASE reconcile")
            except BaseException:
                conn.execute("ROLLBACK TO reconcile")
                conn.execute("RELEASE reconcile")
                raise
            self._commit()
            return result

        return await self._call(self._guard, work)

    def _reconcile(
        self,
        conn: sqlite3.Connection,
        run: Run,
        apply: bool,
        gone_after: int,
        gone_statuses: list[int],
        at: datetime,
        keep: bool = False,
    ) -> ReconcileResult:
        if not apply:
            if keep:
                n = conn.execute("SELECT COUNT(*) FROM run_misses WHERE run_id = ?", (run.id,)).fetchone()[0]
                return ReconcileResult(applied=False, skipped_misses=int(n), kept=True)
            n = conn.execute("DELETE FROM run_misses WHERE run_id = ?", (run.id,)).rowcount
            return ReconcileResult(applied=False, skipped_misses=n)
        from recrawler.state import Event

        batch: list[tuple[str]] = []
        # Moves first: a page moves only to a live page (one key live, never two); a move whose
        # target is not live is dropped and the source stays as it is.
        moved_rows = conn.execute(
            """UPDATE pages SET status = :moved, misses = 0, last_checked = :at,
                 moved_to = (SELECT m.moved_to FROM run_misses m WHERE m.run_id = :run AND m.key = pages.key)
               WHERE status IN (:live, :quarantined) AND key IN (
                 SELECT m.key FROM run_misses m JOIN pages t ON t.key = m.moved_to
                 WHERE m.run_id = :run AND m.moved_to IS NOT NULL AND t.status = :live)
               RETURNING key, url, content_hash, moved_to,
                 (SELECT t.url FROM pages t WHERE t.key = pages.moved_to) AS moved_url""",
            {"run": run.id, "moved": MOVED, "at": _ts(at), "live": LIVE, "quarantined": QUARANTINED},
        ).fetchall()
        for r in moved_rows:
            if self.sink is not None:
                ev = Event(
                    run_id=run.id,
                    action=MOVED,
                    url=r["url"],
                    key=r["key"],
                    content_hash=r["content_hash"],
                    status=MOVED,
                    at=at,
                    reason="http_301",
                    extra={"moved_to": r["moved_url"], "moved_to_key": r["moved_to"]},
                )
                batch.append((ev.to_json(),))
        conn.execute(
            "DELETE FROM run_misses WHERE run_id = ? AND moved_to IS NOT NULL AND key NOT IN "
            "(SELECT key FROM pages WHERE status = ?)",
            (run.id, MOVED),
        )
        codes = json.dumps(gone_statuses)
        # Decide every staged miss in one statement: gone (gone status, or enough consecutive
        # misses) or quarantined. RETURNING gives the counts without loading the rows' state.
        rows = conn.execute(
            """UPDATE pages SET
                 misses = misses + 1,
                 last_checked = :at,
                 status = CASE
                   WHEN (SELECT m.http_status FROM run_misses m
                         WHERE m.run_id = :run AND m.key = pages.key)
                        IN (SELECT value FROM json_each(:codes)) THEN :gone
                   WHEN misses + 1 >= :after THEN :gone
                   ELSE :quarantined END
               WHERE status IN (:live, :quarantined)
                 AND key IN (SELECT key FROM run_misses WHERE run_id = :run AND moved_to IS NULL)
               RETURNING key, url, status, content_hash,
                 (SELECT m.http_status FROM run_misses m
                  WHERE m.run_id = :run AND m.key = pages.key) AS http_status""",
            {
                "at": _ts(at),
                "run": run.id,
                "codes": codes,
                "gone": GONE,
                "live": LIVE,
                "quarantined": QUARANTINED,
                "after": gone_after,
            },
        ).fetchall()
        quarantined = 0
        gone: dict[str, int] = {}
        for r in rows:
            action = r["status"]
            reason = f"http_{r['http_status']}"
            if action == GONE:
                gone[reason] = gone.get(reason, 0) + 1
            else:
                quarantined += 1
            if self.sink is not None:
                ev = Event(
                    run_id=run.id,
                    action=action,
                    url=r["url"],
                    key=r["key"],
                    content_hash=r["content_hash"],
                    status=action,
                    at=at,
                    reason=reason,
                    http_status=r["http_status"],
                )
                batch.append((ev.to_json(),))
        if batch:
            conn.executemany("INSERT INTO outbox (payload) VALUES (?)", batch)
        # The knowledge base follows in the same transaction: quarantined pages' chunks are
        # retired but kept (restored without re-embedding), gone and moved pages' chunks are
        # retired for good (a moved page's text lives on under its new key).
        for statuses, why in (((QUARANTINED,), _RETIRED_QUARANTINED), ((GONE, MOVED), _RETIRED_GONE)):
            conn.execute(
                """UPDATE chunks SET retired_run = :run, retired_why = :why
                   WHERE retired_run IS NULL
                     AND key IN (SELECT m.key FROM run_misses m JOIN pages p ON p.key = m.key
                                 WHERE m.run_id = :run
                                   AND p.status IN (SELECT value FROM json_each(:statuses)))""",
                {"run": run.id, "why": why, "statuses": json.dumps(statuses)},
            )
        conn.execute(
            "UPDATE pages SET chunks = 0 WHERE key IN (SELECT key FROM run_misses WHERE run_id = ?)",
            (run.id,),
        )
        # a gone page no longer counts towards its site's boilerplate statistics
        for key, site, blob in conn.execute(
            """SELECT p.key, p.site, f.blocks FROM run_misses m JOIN pages p ON p.key = m.key
               JOIN page_fields f ON f.key = p.key WHERE m.run_id = ? AND p.status IN (?, ?)""",
            (run.id, GONE, MOVED),
        ).fetchall():
            blocks = unpack_blocks(blob)
            conn.executemany(
                "UPDATE site_blocks SET pages = MAX(pages - 1, 0) WHERE site = ? AND block = ?",
                [(site, b) for b in set(blocks)],
            )
            _count_pairs(conn, site, block_pairs(blocks), -1)
            conn.execute("DELETE FROM page_fields WHERE key = ?", (key,))
        conn.execute("DELETE FROM run_misses WHERE run_id = ?", (run.id,))
        return ReconcileResult(applied=True, quarantined=quarantined, gone=gone, moved=len(moved_rows))

    async def largest_same_content(self, run: Run) -> tuple[int, str] | None:
        """The largest group of pages this run made new or changed that now say the same thing:
        the same text once noise is taken out, or (for pages whose content was replaced rather
        than edited, TLSH distance over 100) texts within TLSH distance 30 of each other.
        Returns (size, a sample URL), or None."""

        def work() -> tuple[int, str] | None:
            conn = self.conn
            self._commit()
            row = conn.execute(
                """SELECT COUNT(*) AS n, MIN(url) AS url FROM pages
                   WHERE changed_run = ? AND site IS ? AND status = ? AND content_hash IS NOT NULL
                   GROUP BY content_hash ORDER BY n DESC LIMIT 1""",
                (run.id, run.site, LIVE),
            ).fetchone()
            best = (int(row["n"]), str(row["url"])) if row is not None else None
            # near-identical replacements (a maintenance page that names each page): greedy
            # clusters around representatives, over at most a few thousand pages
            reps: list[tuple[str, list[str]]] = []
            for url, digest in conn.execute(
                """SELECT p.url, p.fuzzy_hash FROM page_changes c JOIN pages p ON p.key = c.key
                   WHERE c.run_id = ? AND c.verdict = 'changed' AND c.distance > ?
                     AND p.site IS ? AND p.status = ? AND p.fuzzy_hash IS NOT NULL
                   ORDER BY p.key LIMIT 5000""",
                (run.id, _REPLACED_DISTANCE, run.site, LIVE),
            ):
                for rep, members in reps:
                    if fuzzy_distance(rep, digest) <= _SAME_CONTENT_DISTANCE:
                        members.append(url)
                        break
                else:
                    if len(reps) < 200:
                        reps.append((digest, [url]))
            for _, members in reps:
                if best is None or len(members) > best[0]:
                    best = (len(members), members[0])
            return best

        return await self._call(self._guard, work)

    async def apply_held(
        self, run_id: int, *, gone_after: int, gone_statuses: Sequence[int], at: datetime
    ) -> ReconcileResult:
        """Apply the misses and moves a held run kept (``runs approve`` of a mass removal)."""

        def work() -> ReconcileResult:
            conn = self.conn
            row = conn.execute(
                "SELECT id, spider, site, started_at FROM runs WHERE id = ?", (run_id,)
            ).fetchone()
            if row is None:
                raise StateStoreError(f"no run {run_id} in {self.path!r}")
            started = _dt(row["started_at"]) or at
            run = Run(id=run_id, spider=row["spider"], site=row["site"], started_at=started)
            self._commit()
            self._begin()
            result = self._reconcile(conn, run, True, gone_after, list(gone_statuses), at)
            self._commit()
            return result

        return await self._call(self._guard, work)

    # --- change detection: fields, history, boilerplate, learned regions ----------------------

    async def get_fields(self, key: str) -> FieldsRow | None:
        """The page's stored field-level record, or None."""

        def work() -> FieldsRow | None:
            row = self.conn.execute(
                "SELECT title, headings, code, links, text, blocks FROM page_fields WHERE key = ?", (key,)
            ).fetchone()
            if row is None:
                return None
            return FieldsRow(
                title=row["title"] or "",
                headings=json.loads(row["headings"] or "[]"),
                code=json.loads(row["code"] or "[]"),
                links=json.loads(row["links"] or "[]"),
                text=zlib.decompress(row["text"]).decode("utf-8") if row["text"] else "",
                blocks=row["blocks"] or b"",
            )

        return await self._call(self._guard, work)

    async def load_regions(self) -> dict[str, list[str]]:
        """Every site's learned volatile regions (CSS selectors); a small table."""

        def work() -> dict[str, list[str]]:
            out: dict[str, list[str]] = {}
            for r in self.conn.execute("SELECT site, selector FROM site_regions ORDER BY site, selector"):
                out.setdefault(r[0], []).append(r[1])
            return out

        return await self._call(self._guard, work)

    async def add_regions(
        self, site: str, selectors: Sequence[str], *, source: str, learned_from: str, at: datetime
    ) -> int:
        """Learn volatile regions for *site*; returns how many are new."""

        def work() -> int:
            conn = self.conn
            self._begin()
            before = conn.total_changes
            for sel in selectors:
                conn.execute(
                    """INSERT INTO site_regions (site, selector, source, learned_from, first_seen)
                       VALUES (?, ?, ?, ?, ?)
                       ON CONFLICT (site, selector) DO UPDATE SET hits = hits + 1""",
                    (site, sel, source, learned_from, _ts(at)),
                )
            new = conn.execute(
                "SELECT COUNT(*) FROM site_regions WHERE site = ? AND hits = 1 AND selector IN "
                "(SELECT value FROM json_each(?))",
                (site, json.dumps(list(selectors))),
            ).fetchone()[0]
            self._commit()
            return int(new) if conn.total_changes > before else 0

        return await self._call(self._guard, work)

    async def load_boilerplate(self, site: str) -> frozenset[tuple[int, int]]:
        """The site's boilerplate block pairs."""

        def work() -> frozenset[tuple[int, int]]:
            return frozenset(_boilerplate_pairs(self.conn, site))

        return await self._call(self._guard, work)

    async def update_boilerplate(
        self, site: str, *, enter_share: float, exit_share: float, min_pages: int
    ) -> dict[str, int]:
        """Re-decide the site's boilerplate block pairs (with hysteresis) and re-hash affected pages.

        A pair of adjacent blocks (a page's start and end count as blocks) becomes boilerplate when
        it is on at least *enter_share* of the site's live pages and stops being one below
        *exit_share*; sites with fewer than *min_pages* pages have none. What a page's hash keeps
        under those pairs is :func:`~recrawler.detect.boilerplate.kept_blocks`. Pages whose hash moves
        because of a flip are re-hashed from their stored blocks, so the next run compares like
        with like (no false "changed").
        """

        def work() -> dict[str, int]:
            conn = self.conn
            self._commit()
            self._begin()
            live = conn.execute(
                "SELECT COUNT(*) FROM pages WHERE site = ? AND status = ?", (site, LIVE)
            ).fetchone()[0]
            # pairs that stop being boilerplate this run (kept for taking back changes below)
            self._flipped_off[site] = {
                (r[0], r[1])
                for r in conn.execute(
                    "SELECT prev, block FROM site_pairs WHERE site = ? AND boilerplate = 1 AND pages < ? * ?",
                    (site, exit_share if live >= min_pages else 2.0, max(live, 1)),
                )
            }
            if live < min_pages:
                on = 0
                off = conn.execute(
                    "UPDATE site_pairs SET boilerplate = 0 WHERE site = ? AND boilerplate = 1", (site,)
                ).rowcount
            else:
                on = conn.execute(
                    "UPDATE site_pairs SET boilerplate = 1 WHERE site = ? AND boilerplate = 0 "
                    "AND pages >= ? * ?",
                    (site, enter_share, live),
                ).rowcount
                off = conn.execute(
                    "UPDATE site_pairs SET boilerplate = 0 WHERE site = ? AND boilerplate = 1 "
                    "AND pages < ? * ?",
                    (site, exit_share, live),
                ).rowcount
            conn.execute("DELETE FROM site_pairs WHERE site = ? AND pages <= 0", (site,))
            conn.execute("DELETE FROM site_blocks WHERE site = ? AND pages <= 0", (site,))
            rehashed = _rehash(conn, site) if on or off else 0
            self._commit()
            return {"boilerplate_on": on, "boilerplate_off": off, "rehashed": rehashed}

        return await self._call(self._guard, work)

    async def take_back_boilerplate_changes(self, run: Run, site: str) -> list[str]:
        """Pages this run called changed whose only difference is now boilerplate: call them
        unchanged after all. Their chunk swap and their undelivered events are taken back.

        Returns the page keys taken back.
        """

        def work() -> list[str]:
            conn = self.conn
            self._commit()
            self._begin()
            # a pair that was boilerplate when the run started still counts as noise here
            boiler = self._flipped_off.get(site, set()) | _boilerplate_pairs(conn, site)
            rows = conn.execute(
                """SELECT c.id, c.key, c.old_blocks, f.blocks FROM page_changes c
                   JOIN page_fields f ON f.key = c.key JOIN pages p ON p.key = c.key
                   WHERE c.run_id = ? AND c.verdict = 'changed' AND p.site = ?
                     AND c.old_blocks IS NOT NULL""",
                (run.id, site),
            ).fetchall()
            taken: list[str] = []
            for change_id, key, old_blob, new_blob in rows:
                old = kept_blocks(unpack_blocks(old_blob), boiler)
                new = kept_blocks(unpack_blocks(new_blob), boiler)
                if old != new:
                    continue
                taken.append(key)
                conn.execute(
                    "UPDATE page_changes SET verdict = 'unchanged_boilerplate' WHERE id = ?", (change_id,)
                )
                conn.execute("UPDATE pages SET changed_run = NULL WHERE key = ?", (key,))
                conn.execute("DELETE FROM chunks WHERE key = ? AND added_run = ?", (key, run.id))
                conn.execute(
                    "UPDATE chunks SET retired_run = NULL "
                    "WHERE key = ? AND retired_run = ? AND retired_why = ?",
                    (key, run.id, _RETIRED_REPLACED),
                )
                conn.execute(
                    "UPDATE pages SET chunks = "
                    "(SELECT COUNT(*) FROM chunks WHERE key = ?1 AND retired_run IS NULL) WHERE key = ?1",
                    (key,),
                )
                conn.execute(
                    """DELETE FROM outbox WHERE json_extract(payload, '$.key') = ?
                         AND json_extract(payload, '$.run_id') = ?
                         AND json_extract(payload, '$.action') = 'changed'""",
                    (key, run.id),
                )
            self._commit()
            return taken

        return await self._call(self._guard, work)

    def noise_report(self) -> dict[str, dict[str, list[dict[str, Any]]]]:
        """What is being ignored, per site: boilerplate blocks and learned regions (for the CLI)."""
        conn = self._reader()
        try:
            out: dict[str, dict[str, list[dict[str, Any]]]] = {}
            for r in conn.execute(
                "SELECT site, block, pages, sample FROM site_blocks WHERE boilerplate = 1 "
                "ORDER BY site, pages DESC"
            ):
                out.setdefault(r[0], {"boilerplate": [], "regions": []})["boilerplate"].append(
                    {"block": r[1], "pages": r[2], "sample": r[3]}
                )
            for r in conn.execute(
                "SELECT site, selector, source, learned_from, first_seen, hits FROM site_regions "
                "ORDER BY site, selector"
            ):
                out.setdefault(r[0], {"boilerplate": [], "regions": []})["regions"].append(
                    {"selector": r[1], "source": r[2], "learned_from": r[3], "first_seen": r[4], "hits": r[5]}
                )
            return out
        finally:
            conn.close()

    def iter_changes(
        self, *, key: str | None = None, site: str | None = None, limit: int | None = None
    ) -> Iterator[dict[str, Any]]:
        """History rows, newest first, for one page or one site (for the CLI)."""
        conn = self._reader()
        try:
            where, params = [], []
            if key is not None:
                where.append("key = ?")
                params.append(key)
            if site is not None:
                where.append("(key = ? OR key LIKE ? || '/%' OR key LIKE ? || '?%')")
                params.extend([site, site, site])
            sql = "SELECT * FROM page_changes"
            if where:
                sql += " WHERE " + " AND ".join(where)
            sql += " ORDER BY id DESC"
            if limit:
                sql += f" LIMIT {int(limit)}"
            for row in conn.execute(sql, params):
                data = dict(row)
                data["changed_fields"] = json.loads(data["changed_fields"] or "[]")
                data["critical"] = json.loads(data["critical"] or "[]")
                yield data
        finally:
            conn.close()

    # --- knowledge base: embedding, holding and publishing runs --------------------------------

    def _held_ids(self, conn: sqlite3.Connection) -> list[int]:
        return [
            r[0] for r in conn.execute("SELECT id FROM runs WHERE state IN (?, ?)", (RUN_HELD, RUN_DISCARDED))
        ]

    async def missing_embeddings(
        self, embedder: str, limit: int, *, include_run: int | None = None, after: str = ""
    ) -> list[tuple[str, str]]:
        """Return up to *limit* distinct (text hash, text) of current chunks with no embedding,
        in text-hash order from *after* on (keyset pages: each call costs its page, not the table).

        Chunks of held runs are left out (nothing is paid for a held run) unless
        *include_run* names the held run being approved.
        """

        def work() -> list[tuple[str, str]]:
            conn = self.conn
            excluded = [r for r in self._held_ids(conn) if r != include_run]
            rows = conn.execute(
                """SELECT c.chunk_hash, MIN(c.text) AS text FROM chunks c INDEXED BY chunks_hash
                   WHERE c.chunk_hash > ? AND c.retired_run IS NULL
                     AND c.added_run NOT IN (SELECT value FROM json_each(?))
                     AND NOT EXISTS (SELECT 1 FROM embeddings e
                                     WHERE e.embedder = ? AND e.text_hash = c.chunk_hash)
                   GROUP BY c.chunk_hash ORDER BY c.chunk_hash LIMIT ?""",
                (after, json.dumps(excluded), embedder, limit),
            ).fetchall()
            return [(r[0], r[1]) for r in rows]

        return await self._call(self._guard, work)

    async def count_missing(self, embedder: str) -> int:
        """How many distinct current chunk texts (held runs aside) have no embedding."""

        def work() -> int:
            conn = self.conn
            row = conn.execute(
                """SELECT COUNT(DISTINCT c.chunk_hash) FROM chunks c
                   WHERE c.retired_run IS NULL
                     AND c.added_run NOT IN (SELECT value FROM json_each(?))
                     AND NOT EXISTS (SELECT 1 FROM embeddings e
                                     WHERE e.embedder = ? AND e.text_hash = c.chunk_hash)""",
                (json.dumps(self._held_ids(conn)), embedder),
            ).fetchone()
            return int(row[0])

        return await self._call(self._guard, work)

    async def missing_for(self, embedder: str, hashes: Sequence[str]) -> list[str]:
        """Those of *hashes* with no embedding for *embedder*, in the given order."""

        def work() -> list[str]:
            have = {
                r[0]
                for r in self.conn.execute(
                    "SELECT text_hash FROM embeddings WHERE embedder = ? "
                    "AND text_hash IN (SELECT value FROM json_each(?))",
                    (embedder, json.dumps(list(hashes))),
                )
            }
            return [h for h in hashes if h not in have]

        return await self._call(self._guard, work)

    async def store_embeddings(self, rows: Sequence[tuple[str, str, bytes]]) -> None:
        """Add (embedder, text hash, vector) rows to the cache and commit them (a paid cache)."""

        def work() -> None:
            self._begin()
            self.conn.executemany(
                "INSERT OR IGNORE INTO embeddings (embedder, text_hash, vector) VALUES (?, ?, ?)", rows
            )
            self._commit()

        await self._call(self._guard, work)

    async def run_index_counts(self, run_id: int, embedder: str) -> dict[str, int]:
        """Chunks a run added and retired, and how many of its texts are already embedded."""

        def work() -> dict[str, int]:
            conn = self.conn
            added = conn.execute("SELECT COUNT(*) FROM chunks WHERE added_run = ?", (run_id,)).fetchone()[0]
            retired = conn.execute("SELECT COUNT(*) FROM chunks WHERE retired_run = ?", (run_id,)).fetchone()[
                0
            ]
            texts = conn.execute(
                "SELECT COUNT(DISTINCT chunk_hash) FROM chunks WHERE added_run = ?", (run_id,)
            ).fetchone()[0]
            cached = conn.execute(
                """SELECT COUNT(DISTINCT c.chunk_hash) FROM chunks c
                   JOIN embeddings e ON e.embedder = ? AND e.text_hash = c.chunk_hash
                   WHERE c.added_run = ?""",
                (embedder, run_id),
            ).fetchone()[0]
            return {"chunks_added": added, "chunks_retired": retired, "texts": texts, "texts_cached": cached}

        return await self._call(self._guard, work)

    async def set_run_state(self, run_id: int, state: str) -> None:
        """Mark a run running / finished / held (held runs stay invisible to search)."""

        def work() -> None:
            self._begin()
            self.conn.execute("UPDATE runs SET state = ? WHERE id = ?", (state, run_id))
            self._commit()

        await self._call(self._guard, work)

    async def publish(self, run_id: int, at: datetime) -> dict[str, int]:
        """Make a run's changes visible to search in one statement, then drop what no one can see.

        Returns counts of chunk rows and embeddings garbage-collected.
        """

        def work() -> dict[str, int]:
            conn = self.conn
            self._commit()
            self._begin()
            conn.execute(
                "UPDATE runs SET state = ?, published_at = COALESCE(published_at, ?) WHERE id = ?",
                (RUN_PUBLISHED, _ts(at), run_id),
            )
            result = self._gc(conn)
            self._commit()
            return result

        return await self._call(self._guard, work)

    def _gc(self, conn: sqlite3.Connection) -> dict[str, int]:
        watermark = conn.execute(
            "SELECT COALESCE(MAX(id), 0) FROM runs WHERE state = ?", (RUN_PUBLISHED,)
        ).fetchone()[0]
        held = json.dumps(self._held_ids(conn))
        # rows retired by a published run are invisible for good; quarantine-kept rows stay
        n = conn.execute(
            """DELETE FROM chunks
               WHERE retired_run IS NOT NULL AND retired_run <= ?1
                 AND retired_run NOT IN (SELECT value FROM json_each(?3))
                 AND (retired_why != ?2
                      -- rows a quarantine kept, once their page is no longer quarantined
                      OR key NOT IN (SELECT key FROM pages WHERE status = 'quarantined'))""",
            (watermark, _RETIRED_QUARANTINED, held),
        ).rowcount
        # Embeddings stay in the cache (keyed by text hash; they hold no text): a replaced version
        # that comes back, a moved page's text under its new key and a removed page that returns
        # with the content it had cost no embedding.
        return {"chunks_deleted": n}

    async def discard(self, run_id: int) -> dict[str, int]:
        """Drop a held run's knowledge-base changes; its pages are checked again next run."""

        def work() -> dict[str, int]:
            conn = self.conn
            row = conn.execute("SELECT state FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                raise StateStoreError(f"no run {run_id} in {self.path!r}")
            if row[0] != RUN_HELD:
                raise StateStoreError(f"run {run_id} is {row[0]}, not held: only held runs can be discarded")
            self._commit()
            self._begin()
            later = "NOT EXISTS (SELECT 1 FROM chunks c2 WHERE c2.key = chunks.key AND c2.added_run > :run)"
            touched = [
                r[0]
                for r in conn.execute(
                    f"""SELECT DISTINCT key FROM chunks
                        WHERE (added_run = :run OR retired_run = :run) AND {later}""",
                    {"run": run_id},
                )
            ]
            dropped = conn.execute("DELETE FROM chunks WHERE added_run = ?", (run_id,)).rowcount
            conn.execute(
                f"UPDATE chunks SET retired_run = NULL, retired_why = 0 WHERE retired_run = :run AND {later}",
                {"run": run_id},
            )
            # pages the run saw first have no rows left: forget them, so the next run finds them new;
            # the others lose hash and validators, so the next run fetches and re-indexes them
            conn.executemany(
                "DELETE FROM pages WHERE key = ?1 AND NOT EXISTS (SELECT 1 FROM chunks WHERE key = ?1)",
                [(k,) for k in touched],
            )
            conn.executemany(
                """UPDATE pages SET content_hash = NULL, fuzzy_hash = NULL, etag = NULL,
                     last_modified = NULL, status = 'live', misses = 0,
                     chunks = (SELECT COUNT(*) FROM chunks c WHERE c.key = ?1 AND c.retired_run IS NULL)
                   WHERE key = ?1""",
                [(k,) for k in touched],
            )
            # checked again next run: due now, whatever their schedule said
            conn.executemany("UPDATE pages SET next_check_at = NULL WHERE key = ?", [(k,) for k in touched])
            # removals a mass-removal hold kept for approval are dropped with the run
            conn.execute("DELETE FROM run_misses WHERE run_id = ?", (run_id,))
            conn.execute("UPDATE runs SET state = ? WHERE id = ?", (RUN_DISCARDED, run_id))
            self._commit()
            return {"pages": len(touched), "chunks_dropped": dropped}

        return await self._call(self._guard, work)

    async def run_info(self, run_id: int) -> dict[str, Any] | None:
        """Return a run's row (id, state, embedder, site, counts) or None."""

        def work() -> dict[str, Any] | None:
            row = self.conn.execute(
                "SELECT id, spider, site, state, embedder, started_at, finished_at, published_at, counts "
                "FROM runs WHERE id = ?",
                (run_id,),
            ).fetchone()
            return dict(row) if row is not None else None

        return await self._call(self._guard, work)

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
        """Store the run's end, counts, report and outcome, and release the site's lease."""
        lease_key = run.site if run.site is not None else f"spider:{run.spider}"

        def work() -> None:
            self._commit()
            self._begin()
            self.conn.execute(
                """UPDATE runs SET finished_at = ?, finish_reason = ?, counts = ?, report = ?,
                     reasons = ?, listed = ?, exit_code = ?,
                     state = CASE WHEN state = ? THEN ? ELSE state END
                   WHERE id = ?""",
                (
                    _ts(at),
                    reason,
                    json.dumps(report.get("counts", {})),
                    json.dumps(report),
                    json.dumps(list(reasons)),
                    listed,
                    exit_code,
                    RUN_RUNNING,
                    RUN_FINISHED,
                    run.id,
                ),
            )
            self.conn.execute("DELETE FROM leases WHERE site = ? AND run_id = ?", (lease_key, run.id))
            self._commit()

        await self._call(self._guard, work)

    # --- schedule, trust and immutable pages (schema 4) ----------------------------------------

    async def scheduled(self, keys: Sequence[str]) -> dict[str, ScheduledPage]:
        """The schedule's view of the stored pages among *keys* (one query for the batch)."""

        def work() -> dict[str, ScheduledPage]:
            rows = self.conn.execute(
                f"SELECT {_SCHEDULE_COLUMNS} FROM pages WHERE key IN (SELECT value FROM json_each(?))",
                (json.dumps(list(keys)),),
            ).fetchall()
            return {r["key"]: _row_to_scheduled(r) for r in rows}

        return await self._call(self._guard, work)

    async def mark_listed(self, run: Run, decided: Sequence[tuple[str, str | None]]) -> None:
        """Note that this run's listing decided these (key, skipping layer or None: requested)."""

        def work(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "UPDATE pages SET listed_run = ?, listed_skip = ? WHERE key = ?",
                [(run.id, skip, key) for key, skip in decided],
            )

        if decided:
            await self._page_write(work)

    async def revisit(self, key: str) -> Revisit | None:
        """The revisit state of *key*, or None for an unknown page."""

        return await self._call(self._guard, lambda: self._revisit(key))

    async def update_revisit(
        self,
        key: str,
        update: Callable[[Revisit | None], Revisit],
        *,
        found_via: str | None = None,
        found_from: str | None = None,
    ) -> tuple[Revisit | None, Revisit]:
        """Read a page's revisit state, store ``update(state)`` in its place; one round trip.

        Returns (before, after). *update* runs on the worker thread: it must be quick and pure.
        """

        def work(conn: sqlite3.Connection) -> tuple[Revisit | None, Revisit]:
            before = self._revisit(key)
            after = update(before)
            self._write_revisit(conn, key, after, found_via, found_from)
            return before, after

        return await self._page_write(work)

    def _revisit(self, key: str) -> Revisit | None:
        # the schedule's own clock only: a page checked before schema 4 starts a fresh history
        row = self.conn.execute(
            "SELECT last_check_at, next_check_at, check_interval, check_count, change_count, "
            "checked_secs, change_rate FROM pages WHERE key = ?",
            (key,),
        ).fetchone()
        return _row_to_revisit(row) if row is not None else None

    async def record_revisit(
        self, key: str, revisit: Revisit, *, found_via: str | None = None, found_from: str | None = None
    ) -> None:
        """Store a page's revisit state after a check (and how it was found, if not known yet)."""

        def work(conn: sqlite3.Connection) -> None:
            self._write_revisit(conn, key, revisit, found_via, found_from)

        await self._page_write(work)

    @staticmethod
    def _write_revisit(
        conn: sqlite3.Connection, key: str, revisit: Revisit, found_via: str | None, found_from: str | None
    ) -> None:
        conn.execute(
            """UPDATE pages SET last_check_at = ?3, next_check_at = ?4, check_interval = ?5,
                 check_count = ?6, change_count = ?7, checked_secs = ?8, change_rate = ?9,
                 found_via = COALESCE(found_via, ?1),
                 found_from = CASE WHEN found_via IS NULL AND ?1 IS NOT NULL THEN ?2 ELSE found_from END
               WHERE key = ?10""",
            (
                found_via,
                found_from,
                _at(revisit.last_check_at),
                _at(revisit.next_check_at),
                revisit.interval,
                revisit.checks,
                revisit.changes,
                revisit.checked_secs,
                revisit.rate,
                key,
            ),
        )

    async def audit_sample(self, run: Run, sample: float) -> list[str]:
        """Draw this run's self-audit sample among the site's live pages; return their keys.

        A ``float`` ``sample`` is a share, an ``int`` a count. Immutable pages are left out.
        """

        def work() -> list[str]:
            conn = self.conn
            where = """site = :site AND status = :live AND content_hash IS NOT NULL
                       AND key NOT IN (SELECT page_key FROM deltafetch WHERE page_key IS NOT NULL)"""
            params = {"site": run.site, "live": LIVE, "run": run.id}
            population = conn.execute(f"SELECT COUNT(*) FROM pages WHERE {where}", params).fetchone()[0]
            n = audit_count(sample, int(population))
            if not n:
                return []
            self._begin()
            rows = conn.execute(
                f"""UPDATE pages SET audit_run = :run WHERE key IN (
                      SELECT key FROM pages WHERE {where} ORDER BY random() LIMIT :n)
                    RETURNING key""",
                {**params, "n": n},
            ).fetchall()
            self._commit()
            return sorted(r[0] for r in rows)

        if run.site is None or sample <= 0:
            return []
        return await self._call(self._guard, work)

    async def trust(self) -> list[TrustRecord]:
        """Every host's trust records."""

        def work() -> list[TrustRecord]:
            rows = self.conn.execute(f"SELECT {_TRUST_COLUMNS} FROM trust ORDER BY host, signal").fetchall()
            return [_row_to_trust(r) for r in rows]

        return await self._call(self._guard, work)

    async def record_trust(
        self, host: str, signal: str, *, lied: bool, url: str, at: datetime, distrust_after: int
    ) -> TrustRecord:
        """Count one audited claim of *signal* on *host*; *distrust_after* lies switch it off."""

        def work(conn: sqlite3.Connection) -> TrustRecord:
            row = conn.execute(
                f"""INSERT INTO trust (host, signal, checks, lies, trusted, last_lie_at, last_lie_url,
                                       updated_at)
                    VALUES (:host, :signal, 1, :lied, :lied < :after, :lie_at, :lie_url, :at)
                    ON CONFLICT (host, signal) DO UPDATE SET
                      checks = trust.checks + 1,
                      lies = trust.lies + :lied,
                      trusted = CASE WHEN trust.lies + :lied >= :after THEN 0 ELSE trust.trusted END,
                      last_lie_at = COALESCE(:lie_at, trust.last_lie_at),
                      last_lie_url = COALESCE(:lie_url, trust.last_lie_url),
                      updated_at = :at
                    RETURNING {_TRUST_COLUMNS}""",
                {
                    "host": host,
                    "signal": signal,
                    "lied": int(lied),
                    "after": distrust_after,
                    "lie_at": _ts(at) if lied else None,
                    "lie_url": url if lied else None,
                    "at": _ts(at),
                },
            ).fetchone()
            return _row_to_trust(row)

        return await self._page_write(work)

    async def reset_trust(self, host: str | None = None, signal: str | None = None) -> int:
        """Trust *host*'s *signal* again (None: every host, every signal); return the records reset."""

        def work() -> int:
            self._begin()
            n = self.conn.execute(
                """UPDATE trust SET trusted = 1, lies = 0
                   WHERE (:host IS NULL OR host = :host) AND (:signal IS NULL OR signal = :signal)""",
                {"host": host, "signal": signal},
            ).rowcount
            self._commit()
            return int(n)

        return await self._call(self._guard, work)

    async def immutable_seen(self, spider: str, keys: Sequence[str]) -> set[str]:
        """Those of *keys* (deltafetch keys) that *spider* stored on an earlier fetch."""

        def work() -> set[str]:
            rows = self.conn.execute(
                "SELECT key FROM deltafetch WHERE spider = ? AND key IN (SELECT value FROM json_each(?))",
                (spider, json.dumps(list(keys))),
            )
            return {r[0] for r in rows}

        return await self._call(self._guard, work)

    async def immutable_add(
        self, spider: str, key: str, *, url: str, page_key: str | None, at: datetime
    ) -> None:
        """Remember that *spider* fetched *key*: later runs skip it."""

        def work(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT OR IGNORE INTO deltafetch (spider, key, url, page_key, stored_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (spider, key, url, page_key, _ts(at)),
            )

        await self._page_write(work)

    async def immutable_reset(self, spider: str | None = None, pattern: str | None = None) -> int:
        """Forget stored deltafetch keys of *spider* (None: all) whose URL matches *pattern*
        (a regular expression searched in the URL; None: all); return how many."""
        regex = re.compile(pattern) if pattern else None

        def work() -> int:
            conn = self.conn
            conn.create_function(
                "recrawler_search",
                1,
                lambda url: regex is None or bool(regex.search(url)),
                deterministic=True,
            )
            self._begin()
            n = conn.execute(
                "DELETE FROM deltafetch "
                "WHERE (:spider IS NULL OR spider = :spider) AND recrawler_search(url)",
                {"spider": spider},
            ).rowcount
            self._commit()
            return int(n)

        return await self._call(self._guard, work)

    # --- the database's invariants (recrawler check) -------------------------------------------

    def check_sync(self, key_maker: Callable[[str], str]) -> list[Finding]:
        """Every broken invariant of the database, read-only (see ``recrawler.state.sqlite_check``)."""
        conn = self._reader()
        try:
            return check(conn, key_maker)
        except sqlite3.Error as exc:
            raise StateStoreError(f"state database {self.path!r}: {exc}") from exc
        finally:
            conn.close()

    async def repair(self, findings: Sequence[Finding]) -> dict[str, int]:
        """Mend what :meth:`check_sync` found, in one transaction (re-queue, retire, abort)."""

        def work() -> dict[str, int]:
            self._commit()
            return repair(self.conn, list(findings), at=_ts(datetime.now(UTC)) or "")

        return await self._call(self._guard, work)

    # --- synchronous readers for the CLI ----------------------------------------------------

    def _reader(self) -> sqlite3.Connection:
        conn = self._connect(readonly=True)
        try:
            version = self._schema_version(conn)
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise self._wrap_open_error(exc) from exc
        if version > SCHEMA_VERSION:
            conn.close()
            msg = (
                f"state database {self.path!r} has schema version {version}, newer than this "
                f"recrawler's {SCHEMA_VERSION}; upgrade recrawler"
            )
            raise SchemaVersionError(msg)
        return conn

    def iter_pages(self, status: str | None = None) -> Iterator[PageRecord]:
        """Yield pages ordered by key, streaming (never all in memory)."""
        conn = self._reader()
        try:
            if status:
                cur = conn.execute(
                    f"SELECT {_PAGE_COLUMNS} FROM pages WHERE status = ? ORDER BY key", (status,)
                )
            else:
                cur = conn.execute(f"SELECT {_PAGE_COLUMNS} FROM pages ORDER BY key")
            for row in cur:
                yield _row_to_record(row)
        finally:
            conn.close()

    def iter_runs(self) -> Iterator[dict[str, Any]]:
        """Yield runs newest first."""
        conn = self._reader()
        try:
            for row in conn.execute(
                "SELECT id, spider, site, started_at, finished_at, finish_reason, state, published_at, "
                "counts, reasons, listed, exit_code FROM runs ORDER BY id DESC"
            ):
                data = dict(row)
                data["counts"] = json.loads(data["counts"]) if data["counts"] else None
                data["reasons"] = json.loads(data["reasons"]) if data["reasons"] else []
                yield data
        finally:
            conn.close()

    def iter_schedule(self, site: str | None = None) -> Iterator[ScheduledPage]:
        """Yield the schedule's view of every live or quarantined page, soonest due first."""
        conn = self._reader()
        try:
            if not self._has_table(conn, "trust"):
                msg = (
                    f"state database {self.path!r} predates schedules: run a crawl with this recrawler first"
                )
                raise StateStoreError(msg)
            for row in conn.execute(
                f"""SELECT {_SCHEDULE_COLUMNS} FROM pages
                    WHERE status != ? AND (? IS NULL OR site = ?)
                    ORDER BY next_check_at IS NOT NULL, next_check_at, key""",
                (GONE, site, site),
            ):
                yield _row_to_scheduled(row)
        finally:
            conn.close()

    def iter_trust(self) -> Iterator[TrustRecord]:
        """Yield trust records by host and signal."""
        conn = self._reader()
        try:
            if not self._has_table(conn, "trust"):
                return
            for row in conn.execute(f"SELECT {_TRUST_COLUMNS} FROM trust ORDER BY host, signal"):
                yield _row_to_trust(row)
        finally:
            conn.close()

    def iter_immutable(self) -> Iterator[dict[str, Any]]:
        """Yield stored deltafetch keys (spider, key, url, page_key, stored_at) by URL."""
        conn = self._reader()
        try:
            if not self._has_table(conn, "deltafetch"):
                return
            for row in conn.execute(
                "SELECT spider, key, url, page_key, stored_at FROM deltafetch ORDER BY spider, url"
            ):
                yield dict(row)
        finally:
            conn.close()

    @staticmethod
    def _has_table(conn: sqlite3.Connection, name: str) -> bool:
        return (
            conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone()
            is not None
        )


def _count_pairs(conn: sqlite3.Connection, site: str, pairs: set[tuple[int, int]], delta: int) -> None:
    """Add *delta* (1 or -1) to the page counts of a site's block pairs."""
    if delta > 0:
        conn.executemany(
            """INSERT INTO site_pairs (site, prev, block, pages) VALUES (?, ?, ?, 1)
               ON CONFLICT (site, prev, block) DO UPDATE SET pages = pages + 1""",
            [(site, prev, block) for prev, block in pairs],
        )
    else:
        conn.executemany(
            "UPDATE site_pairs SET pages = MAX(pages - 1, 0) WHERE site = ? AND prev = ? AND block = ?",
            [(site, prev, block) for prev, block in pairs],
        )


def _boilerplate_pairs(conn: sqlite3.Connection, site: str) -> set[tuple[int, int]]:
    return {
        (r[0], r[1])
        for r in conn.execute(
            "SELECT prev, block FROM site_pairs WHERE site = ? AND boilerplate = 1", (site,)
        )
    }


def _rehash(conn: sqlite3.Connection, site: str) -> int:
    """Re-hash the site's pages from their stored blocks under its boilerplate pairs, and mark the
    blocks of those pairs in ``site_blocks`` (what ``recrawler noise`` lists); returns how many
    page hashes moved."""
    boiler = _boilerplate_pairs(conn, site)
    conn.execute("UPDATE site_blocks SET boilerplate = 0 WHERE site = ? AND boilerplate = 1", (site,))
    conn.executemany(
        "UPDATE site_blocks SET boilerplate = 1 WHERE site = ? AND block = ?",
        [(site, b) for b in {b for pair in boiler for b in pair} - {EDGE}],
    )
    cur = conn.execute(
        """SELECT p.key, p.content_hash, f.blocks FROM pages p
           JOIN page_fields f ON f.key = p.key
           WHERE p.site = ? AND p.noise_key IS NOT NULL""",
        (site,),
    )
    updates = []
    for key, old_hash, blob in cur:
        new_hash = page_hash(kept_blocks(unpack_blocks(blob), boiler))
        if new_hash != old_hash:
            updates.append((new_hash, key))
    conn.executemany("UPDATE pages SET content_hash = ? WHERE key = ?", updates)
    return len(updates)


def _split_sql(sql: str) -> list[str]:
    """Split a migration file into statements (no semicolons inside our literals)."""
    lines = [line for line in sql.splitlines() if not line.lstrip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


__all__ = ["LIVE", "SCHEMA_VERSION", "SQLiteStateStore", "path_from_uri"]
