"""The statements of a unit of page writes: the pages' rows, chunks, field records and block
deltas, history, events and revisit states, each page as its own write would leave it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from recrawler.state.records import packed_text, samples_json, unpack_blocks
from recrawler.state.sql.dialect import count, many, rows, values
from recrawler.state.sql.pending import keep_published, revert_page
from recrawler.state.sql.rows import _PAGE_COLUMNS, _RETIRED_QUARANTINED, _RETIRED_REPLACED, _ts
from recrawler.state.sql.schedule import revisit_updates

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Sequence

    from recrawler.intervals import Revisit
    from recrawler.state.records import ChangeRow, Chunk, Event, FieldsRow, PageRecord, RevisitUpdate, Run
    from recrawler.state.sql.database import Database
    from recrawler.state.sql.dialect import Dialect, Work


def _page_upsert_sql(replaced: bool) -> str:
    """The page row's upsert; its chunk count changes only with its chunks (*replaced*)."""
    chunks = ", chunks = excluded.chunks" if replaced else ""
    return f"""ON CONFLICT (key) DO UPDATE SET noise_key = excluded.noise_key,
      url = excluded.url, site = excluded.site, etag = excluded.etag,
      last_modified = excluded.last_modified, lastmod = excluded.lastmod,
      content_hash = excluded.content_hash, fuzzy_hash = excluded.fuzzy_hash,
      title = excluded.title, status = excluded.status, misses = excluded.misses,
      last_checked = excluded.last_checked, last_changed = excluded.last_changed,
      last_seen_run = excluded.last_seen_run, found_depth = excluded.found_depth,
      moved_to = excluded.moved_to, changed_run = excluded.changed_run,
      pending = excluded.pending, version = excluded.version, lang = excluded.lang{chunks}"""


def _page_params(run: Run, rec: PageRecord) -> tuple[Any, ...]:
    return (
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
        rec.pending,
        rec.version,
        rec.lang,
    )


_FIELDS_UPSERT = """ON CONFLICT (key) DO UPDATE SET title = excluded.title, headings = excluded.headings,
  code = excluded.code, links = excluded.links, text = excluded.text, blocks = excluded.blocks"""


def _fields_params(key: str, fields: FieldsRow) -> tuple[Any, ...]:
    return (
        key,
        fields.title,
        json.dumps(fields.headings),
        json.dumps(fields.code),
        json.dumps(fields.links),
        fields.packed_text if fields.packed_text is not None else packed_text(fields.text),
        fields.blocks,
    )


def _delta_samples(old: bytes, fields: FieldsRow) -> str | None:
    """The samples a page's block delta keeps: of the blocks it added to its stored *old* set."""
    if not old and fields.samples_json is not None:
        return fields.samples_json  # every block is added: made with the fingerprint
    added = set(unpack_blocks(fields.blocks)) - set(unpack_blocks(old))
    return samples_json({b: text for b in added if (text := fields.samples.get(b))})


@dataclass(slots=True, kw_only=True)
class _PageWrite:
    """One :meth:`SQLPages.record` call, queued."""

    run: Run
    rec: PageRecord
    events: Sequence[Event]
    chunks: Sequence[Chunk] | None
    restore: bool
    revert: bool
    embeddings: Sequence[tuple[str, str, bytes]]
    fields: FieldsRow | None
    change: ChangeRow | None
    outcome: Sequence[str]
    revisit: RevisitUpdate | None
    done: asyncio.Future[Revisit | None]


def write_pages(db: Database, batch: list[_PageWrite]) -> Work[list[Revisit | None]]:
    """The writes of *batch* (distinct pages), statement by statement for all of them; each
    page as :meth:`SQLPages.record` describes, its revisit state before the write returned."""
    d = db.dialect
    runs = sorted({w.run.id for w in batch})
    for run_id in runs:
        # the published state of each page this write makes pending, before it goes
        becoming = [
            (w.rec.key, w.rec.site) for w in batch if w.run.id == run_id and w.rec.pending is not None
        ]
        if becoming:
            yield from keep_published(d, run_id, becoming)
    for replaced in (False, True):
        yield from values(
            f"INSERT INTO pages ({_PAGE_COLUMNS})",
            [_page_params(w.run, w.rec) for w in batch if (w.chunks is not None) is replaced],
            f" {_page_upsert_sql(replaced)}",
        )
    for w in batch:
        if w.revert:
            yield from revert_page(w.rec.key, w.rec.site)
    for run_id in runs:
        keys = [w.rec.key for w in batch if w.run.id == run_id]
        # an answer lifts the run's staged miss of the page, and any a hold keeps
        yield count(
            f"DELETE FROM run_misses WHERE (run_id = ? OR kept = 1) AND key {d.in_list('?')}",
            (run_id, d.list_param(keys)),
        )
        # the current version is superseded by this run's version. A row already retired
        # keeps the run that retired it: moving that to this run would make it visible again
        # while this run is held. Rows a quarantine kept are collected when the run publishes.
        replacing = [w.rec.key for w in batch if w.run.id == run_id and w.chunks is not None]
        if replacing:
            yield count(
                "UPDATE chunks SET retired_run = ?, retired_why = ? "
                f"WHERE key {d.in_list('?')} AND retired_run IS NULL",
                (run_id, _RETIRED_REPLACED, d.list_param(replacing)),
            )
    columns = (
        f"key, chunk_index, chunk_hash, url, heading, text, added_run, version, lang{d.chunk_extra_columns}"
    )
    yield from values(
        f"INSERT INTO chunks ({columns})",
        [
            (
                w.rec.key,
                c.chunk_index,
                c.chunk_hash,
                c.url,
                c.heading,
                c.text,
                w.run.id,
                w.rec.version,
                w.rec.lang,
                *d.chunk_extra(c.heading, c.text),
            )
            for w in batch
            if w.chunks is not None
            for c in w.chunks
        ],
        row=f"(?, ?, ?, ?, ?, ?, ?, ?, ?{d.chunk_extra_values})",
        types=("text", "int8", "text", "text", "text", "text", "int8", "text", "text", *d.chunk_extra_types),
    )
    for w in batch:
        if w.chunks is None and w.restore:
            yield from _restore_chunks(d, w.run, w.rec.key)
    # a page's chunks carry its version and language: a page whose labels changed while its text
    # did not (a 304 a new RECRAWLER_VERSION_PATTERN names) relabels the rows it has
    relabel = [(w.rec.version, w.rec.lang, w.rec.key) for w in batch if w.chunks is None]
    if relabel:
        yield many(
            "UPDATE chunks SET version = ?, lang = ? WHERE key = ? "
            "AND (version IS DISTINCT FROM ? OR lang IS DISTINCT FROM ?)",
            [(v, lang, key, v, lang) for v, lang, key in relabel],
        )
    embeddings = [e for w in batch for e in w.embeddings]
    if embeddings:
        yield from db.embeddings_work(embeddings)
    with_fields = [w for w in batch if w.fields is not None]
    if with_fields:
        found = yield rows(
            f"SELECT key, blocks FROM page_fields WHERE key {d.in_list('?')}",
            (d.list_param([w.rec.key for w in with_fields]),),
        )
        stored = {r[0]: bytes(r[1] or b"") for r in found}
        deltas, fields_rows = [], []
        for w in with_fields:
            assert w.fields is not None
            old = stored.get(w.rec.key, b"")
            if old != w.fields.blocks:
                deltas.append((w.rec.site, old, w.fields.blocks, _delta_samples(old, w.fields)))
            fields_rows.append(_fields_params(w.rec.key, w.fields))
        yield from values("INSERT INTO block_deltas (site, old_blocks, new_blocks, samples)", deltas)
        yield from values(
            "INSERT INTO page_fields (key, title, headings, code, links, text, blocks)",
            fields_rows,
            f" {_FIELDS_UPSERT}",
        )
    for w in batch:
        if w.change is not None:
            yield from _write_change(w.run, w.change)
    yield from db._outbox([e for w in batch for e in w.events])
    befores: list[Revisit | None] = [None] * len(batch)
    revisited = [(i, w.rec.key, w.revisit) for i, w in enumerate(batch) if w.revisit is not None]
    done = yield from revisit_updates(d, [(key, u) for _, key, u in revisited])
    for (i, _, _), (before, _) in zip(revisited, done, strict=True):
        befores[i] = before
    return befores


def _write_change(run: Run, change: ChangeRow) -> Work[None]:
    yield count(
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


def _restore_chunks(d: Dialect, run: Run, key: str) -> Work[None]:
    # copies of the rows the last quarantine kept become current in this run; same texts, so
    # same embeddings. The kept rows stay as they are (collected when the run publishes).
    extra = d.chunk_extra_columns
    n = yield count(
        f"""INSERT INTO chunks (key, chunk_index, chunk_hash, url, heading, text, added_run, version,
             lang{extra})
           SELECT key, chunk_index, chunk_hash, url, heading, text, :run, version, lang{extra} FROM chunks
           WHERE key = :key AND retired_why = :why AND retired_run = (
             SELECT MAX(retired_run) FROM chunks WHERE key = :key AND retired_why = :why)
           ORDER BY chunk_index""",
        {"run": run.id, "key": key, "why": _RETIRED_QUARANTINED},
    )
    yield count("UPDATE pages SET chunks = ? WHERE key = ?", (n, key))
