"""Rows to records and back, column lists, and the block-pair statistics' helpers (every dialect)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from recrawler.intervals import Revisit
from recrawler.state.records import (
    PageRecord,
    ScheduledPage,
    SiteBuild,
    TrustRecord,
    unpack_blocks,
)
from recrawler.state.sql.dialect import count, many, rows, values

if TYPE_CHECKING:
    from typing import Any

    from recrawler.state.roles.blocks import BlockModel
    from recrawler.state.sql.dialect import Dialect, Work


# why a chunk row was retired
_RETIRED_REPLACED, _RETIRED_QUARANTINED, _RETIRED_GONE = 0, 1, 2

# the schedule's view of a page: a stored page checked before schema 4 uses last_checked
_SCHEDULE_COLUMNS = (
    "key, url, status, lastmod, listed_run, listed_skip, audit_run, "
    "COALESCE(last_check_at, last_checked) AS last_check_at, "
    "next_check_at, check_interval, check_count, change_count, checked_secs, change_rate, "
    # a change or a removal of the page waits for a decision: check it again (later evidence)
    "(pending = 'changed' OR key IN (SELECT m.key FROM run_misses m WHERE m.kept = 1)) AS waiting, "
    # what verified it last, and whether its changes come on their own (schema 18)
    "solo, verified_at, verified_by"
)
#: the columns of schema 18 the schedule reads, as a reader of an older database finds them
_SCHEDULE_BEFORE_18 = (
    "solo, verified_at, verified_by",
    "0 AS solo, NULL AS verified_at, NULL AS verified_by",
)
_SITE_BUILD_COLUMNS = "site, fingerprint, noise, lastmod_noise, deploy_at, deploy_run, deploy_reason"
_TRUST_COLUMNS = "host, signal, checks, lies, trusted, last_lie_at, last_lie_url"
_PAGE_COLUMNS = (
    "key, site, url, etag, last_modified, lastmod, content_hash, fuzzy_hash, title, status, "
    "misses, first_seen, last_checked, last_changed, last_seen_run, chunks, noise_key, "
    "found_depth, moved_to, changed_run, pending, version, lang"
)
#: a page row as read: with, for a pending page the knowledge base shows live, the content hash it shows
_PAGE_SELECT = (
    f"{_PAGE_COLUMNS}, CASE WHEN pending = 'changed' THEN "
    "(SELECT b.content_hash FROM page_before b WHERE b.key = pages.key AND b.status = 'live') "
    "END AS published_hash"
)


# TLSH distance within which two pages changed in one run count as the same text, and beyond
# which a page's change replaced its content rather than edited it
_SAME_CONTENT_DISTANCE, _REPLACED_DISTANCE = 30, 100


def gone_case(d: Dialect) -> str:
    """The staged miss of row ``m`` makes page ``p`` gone: a "gone" status, or enough misses."""
    return f"(m.http_status {d.in_list(':codes', sql_type='INTEGER')} OR p.misses + 1 >= :after)"


def _ts(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _dt(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _at(value: datetime | None) -> str | None:
    """A schedule time: UTC, fixed width, so text order is time order in SQL comparisons."""
    return value.astimezone(UTC).isoformat(timespec="microseconds") if value is not None else None


def _row_to_revisit(row: Any) -> Revisit:
    return Revisit(
        last_check_at=_dt(row["last_check_at"]),
        next_check_at=_dt(row["next_check_at"]),
        interval=row["check_interval"],
        checks=row["check_count"],
        changes=row["change_count"],
        checked_secs=row["checked_secs"],
        rate=row["change_rate"],
    )


def _row_to_scheduled(row: Any) -> ScheduledPage:
    return ScheduledPage(
        key=row["key"],
        url=row["url"],
        status=row["status"],
        lastmod=row["lastmod"],
        revisit=_row_to_revisit(row),
        listed_run=row["listed_run"],
        listed_skip=row["listed_skip"],
        audit_run=row["audit_run"],
        waiting=bool(row["waiting"]),
        solo=bool(row["solo"]),
        verified_at=_dt(row["verified_at"]),
        verified_by=row["verified_by"],
    )


def _row_to_site_build(row: Any) -> SiteBuild:
    return SiteBuild(
        site=row["site"],
        fingerprint=dict(json.loads(row["fingerprint"] or "{}")),
        noise=tuple(json.loads(row["noise"] or "[]")),
        lastmod_noise=bool(row["lastmod_noise"]),
        deploy_at=_dt(row["deploy_at"]),
        deploy_run=row["deploy_run"],
        deploy_reason=row["deploy_reason"],
    )


def _row_to_trust(row: Any) -> TrustRecord:
    return TrustRecord(
        host=row["host"],
        signal=row["signal"],
        checks=row["checks"],
        lies=row["lies"],
        trusted=bool(row["trusted"]),
        last_lie_at=_dt(row["last_lie_at"]),
        last_lie_url=row["last_lie_url"],
    )


def _row_to_record(row: Any) -> PageRecord:
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
        pending=row["pending"],
        version=row["version"],
        lang=row["lang"],
        published_hash=row["published_hash"] if "published_hash" in row.keys() else None,  # noqa: SIM118 (rows are not dicts)
    )


def _count_pairs(d: Dialect, site: str, pairs: set[tuple[int, int]], delta: int) -> Work[None]:
    """Add *delta* (1 or -1) to the page counts of a site's block pairs (counting stored pages
    once, when a database from before schema 6 is first opened)."""
    params = [(site, prev, block) for prev, block in sorted(pairs)]
    if not params:
        return
    if delta > 0:
        yield many(
            """INSERT INTO site_pairs (site, prev, block, pages) VALUES (?, ?, ?, 1)
               ON CONFLICT (site, prev, block) DO UPDATE SET pages = site_pairs.pages + 1""",
            params,
        )
    else:
        yield many(
            f"UPDATE site_pairs SET pages = {d.greatest}(pages - 1, 0) "
            "WHERE site = ? AND prev = ? AND block = ?",
            params,
        )


def _block_delta(site: str, old: bytes, new: bytes, samples: str | None) -> Work[None]:
    """Leave a page write's change of its block set (packed *old* and *new* blocks, the
    :func:`~recrawler.state.records.samples_json` of the blocks it added) for the next fold: one
    row, appended, in the page's own transaction."""
    if old == new:
        return
    yield count(
        "INSERT INTO block_deltas (site, old_blocks, new_blocks, samples) VALUES (?, ?, ?, ?)",
        (site, old, new, samples),
    )


#: page deltas folded per transaction (what a fold holds in memory)
FOLD_BATCH = 1000


def _fold_block_deltas(d: Dialect, limit: int, model: BlockModel) -> Work[int]:
    """Fold up to *limit* page deltas, oldest first, into ``site_blocks`` and ``site_pairs``;
    returns how many were folded (0: none left).

    A block (or pair) counts the pages that hold it at least once: a delta adds one for each
    block its page gained and takes one off for each it lost. The batch's sums are written in
    key order (a few sorted upserts instead of two per block and page). A block's sample is kept
    once the block is on two pages. The rows are taken with ``skip_locked``: two folds at once
    (PostgreSQL) take different rows.
    """
    # taken and deleted in one statement (the fold's own transaction puts them back if it fails)
    taken = yield rows(
        f"""DELETE FROM block_deltas WHERE id IN (
              SELECT id FROM block_deltas ORDER BY id LIMIT ?{d.skip_locked})
            RETURNING id, site, old_blocks, new_blocks, samples""",
        (limit,),
    )
    if not taken:
        return 0
    found = sorted(taken, key=lambda r: r[0])
    blocks: defaultdict[str, Counter[int]] = defaultdict(Counter)
    pairs: defaultdict[str, Counter[tuple[int, int]]] = defaultdict(Counter)
    sample_objects: defaultdict[str, list[str]] = defaultdict(list)
    for _id, site, old_blob, new_blob, sample_json in found:
        new = unpack_blocks(new_blob)
        if old_blob:
            old = unpack_blocks(old_blob)
            old_set, new_set = set(old), set(new)
            blocks[site].update(new_set - old_set)
            blocks[site].subtract(old_set - new_set)
            old_pairs, new_pairs = model.pairs(old), model.pairs(new)
            pairs[site].update(new_pairs - old_pairs)
            pairs[site].subtract(old_pairs - new_pairs)
        else:
            # no blocks stored before (a new page): every block and pair is gained
            blocks[site].update(set(new))
            pairs[site].update(model.pairs(new))
        if sample_json:
            sample_objects[site].append(sample_json)
    for site in sorted(blocks):
        # each block's sample from the oldest delta that has one: merged newest first
        samples: dict[str, str] = {}
        for sample_json in reversed(sample_objects[site]):
            samples.update(json.loads(sample_json))
        yield from _fold_site(d, site, blocks[site], pairs[site], samples)
    return len(found)


def _fold_site(
    d: Dialect, site: str, blocks: Counter[int], pairs: Counter[tuple[int, int]], samples: dict[str, str]
) -> Work[None]:
    """Add a batch's summed counts of one site to its block and pair counters, in key order, a few
    hundred rows a statement.

    A block's sample is written once the block is on two pages: with the batch's count when that
    makes two, else when the block is already counted (one query for the blocks the batch adds
    to one page). An upsert keeps a sample already stored. *samples* are keyed by the block's
    decimal text (as a delta's JSON keeps them).
    """
    gained = sorted(b for b, n in blocks.items() if n > 0)
    single = [b for b in gained if blocks[b] == 1]
    counted: set[int] = set()
    if single:
        found = yield rows(
            f"SELECT block FROM site_blocks WHERE site = ? AND pages > 0 "
            f"AND block {d.in_list('?', sql_type='BIGINT')}",
            (site, d.list_param(single)),
        )
        counted = {r[0] for r in found}
    yield from values(
        "INSERT INTO site_blocks (site, block, pages, sample)",
        [
            (site, b, n, samples.get(str(b)) if n >= 2 or b in counted else None)
            for b in gained
            if (n := blocks[b])
        ],
        """ ON CONFLICT (site, block) DO UPDATE SET pages = site_blocks.pages + excluded.pages,
              sample = COALESCE(site_blocks.sample, excluded.sample)""",
        types=("text", "int8", "int8", "text"),
    )
    lost = sorted(b for b, n in blocks.items() if n < 0)
    if lost:
        yield many(
            f"UPDATE site_blocks SET pages = {d.greatest}(pages + ?, 0) WHERE site = ? AND block = ?",
            [(blocks[b], site, b) for b in lost],
        )
    yield from values(
        "INSERT INTO site_pairs (site, prev, block, pages)",
        [(site, p, b, pairs[p, b]) for p, b in sorted(k for k, n in pairs.items() if n > 0)],
        " ON CONFLICT (site, prev, block) DO UPDATE SET pages = site_pairs.pages + excluded.pages",
        types=("text", "int8", "int8", "int8"),
    )
    lost_pairs = sorted(k for k, n in pairs.items() if n < 0)
    if lost_pairs:
        yield many(
            f"UPDATE site_pairs SET pages = {d.greatest}(pages + ?, 0) "
            "WHERE site = ? AND prev = ? AND block = ?",
            [(pairs[p, b], site, p, b) for p, b in lost_pairs],
        )


def _boilerplate_pairs(site: str) -> Work[set[tuple[int, int]]]:
    found = yield rows("SELECT prev, block FROM site_pairs WHERE site = ? AND boilerplate = 1", (site,))
    return {(r[0], r[1]) for r in found}


def _rehash(d: Dialect, site: str, model: BlockModel) -> Work[int]:
    """Re-hash the site's pages from their stored blocks under its boilerplate pairs, and mark the
    blocks of those pairs in ``site_blocks`` (what ``recrawler noise`` lists); returns how many
    page hashes moved. Pages are read in key order, a page of keys at a time."""
    boiler = yield from _boilerplate_pairs(site)
    yield many("UPDATE site_blocks SET boilerplate = 0 WHERE site = ? AND boilerplate = 1", [(site,)])
    marked = sorted({b for pair in boiler for b in pair} - {model.edge})
    if marked:
        yield many(
            "UPDATE site_blocks SET boilerplate = 1 WHERE site = ? AND block = ?", [(site, b) for b in marked]
        )
    moved = 0
    after = ""
    while True:
        batch = yield rows(
            """SELECT p.key, p.content_hash, f.blocks FROM pages p
               JOIN page_fields f ON f.key = p.key
               WHERE p.site = ? AND p.noise_key IS NOT NULL AND p.key > ?
               ORDER BY p.key LIMIT 2000""",
            (site, after),
        )
        if not batch:
            break
        updates = []
        for key, old_hash, blob in batch:
            new_hash = model.page_hash(unpack_blocks(blob), boiler)
            if new_hash != old_hash:
                updates.append((new_hash, key))
        if updates:
            yield many("UPDATE pages SET content_hash = ? WHERE key = ?", updates)
        moved += len(updates)
        after = batch[-1][0]
    # the published state of pending pages too: it is compared with like
    after = ""
    while True:
        batch = yield rows(
            """SELECT key, content_hash, f_blocks FROM page_before
               WHERE site = ? AND f_present = 1 AND noise_key IS NOT NULL AND key > ?
               ORDER BY key LIMIT 2000""",
            (site, after),
        )
        if not batch:
            break
        updates = [
            (new_hash, key)
            for key, old_hash, blob in batch
            if (new_hash := model.page_hash(unpack_blocks(blob or b""), boiler)) != old_hash
        ]
        if updates:
            yield many("UPDATE page_before SET content_hash = ? WHERE key = ?", updates)
        after = batch[-1][0]
    return moved
