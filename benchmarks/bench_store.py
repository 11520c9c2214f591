"""The state store's hot path, raw sqlite3 (today's store) against SQLAlchemy Core, side by side.

    python -m benchmarks.bench_store [--pages 2000] [--chunks 6] [--batch 200] [--repeat 3] [--json out.json]

Both sides run the same statements on one worker thread, the way a crawl drives the store: page
writes as savepoints inside a group transaction committed every ``--batch`` pages
(``RECRAWLER_DB_BATCH_SIZE``), each awaited from an asyncio loop. Three phases per round, each on
a fresh database per side: a first run (``record`` of a new page with its chunks, field record,
block statistics and one outbox event), the per-request read (``get``), and an unchanged rerun
(``record`` without chunks). The raw side is ``SQLiteStateStore`` itself; the Core side executes
statements built once from ``recrawler.state.schema`` (``sqlalchemy.dialects.sqlite.insert`` for
the upserts). Ratios use each phase's median over ``--repeat`` interleaved rounds; the extra cost
per page is also shown against a crawl's whole per-page time (2-9 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import bindparam, create_engine, event, func, select, update
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from benchmarks.lib.results import add_json_option, write_json
from recrawler.detect.boilerplate import PAGE_BLOCKS, block_pairs
from recrawler.detect.hashing import pack_blocks, unpack_blocks
from recrawler.kb.chunking import Chunk
from recrawler.state import Event, FieldsRow, PageRecord, Run
from recrawler.state import schema as s
from recrawler.state.sqlite import SQLiteStateStore

T0 = datetime(2026, 3, 1, 6, 0, tzinfo=UTC)
PHASES = ("first_run", "get", "rerun")


def make_pages(n: int, n_chunks: int, seed: int) -> list[tuple[PageRecord, list[Chunk], FieldsRow, Event]]:
    rng = random.Random(seed)
    shared = [rng.getrandbits(62) for _ in range(12)]
    out = []
    for i in range(n):
        key = f"docs.example.com/docs/s{i % 20}/page-{i:05d}.html"
        url = "https://" + key
        rec = PageRecord(
            key=key,
            site="docs.example.com",
            url=url,
            etag=f'"{i:x}-2200"',
            last_modified="Sun, 01 Mar 2026 06:00:00 GMT",
            lastmod="2026-03-01",
            content_hash=f"{rng.getrandbits(128):032x}",
            fuzzy_hash="T1" + f"{rng.getrandbits(280):070X}",
            title=f"Page {i}",
            first_seen=T0,
            last_checked=T0,
            last_changed=T0,
            chunks=n_chunks,
            noise_key="n1",
        )
        words = " ".join(rng.choice(("alpha", "beta", "gamma", "delta", "config")) for _ in range(140))
        chunks = [
            Chunk(
                key=key,
                url=f"{url}#s{c}",
                chunk_index=c,
                heading=f"Page {i} > Section {c}",
                text=f"## Section {c}\n\n{words}",
                chunk_hash=f"{rng.getrandbits(128):032x}",
            )
            for c in range(n_chunks)
        ]
        blocks = shared[:6] + [rng.getrandbits(62) for _ in range(30)] + shared[6:]
        fields = FieldsRow(
            title=rec.title or "",
            headings=[f"Section {c}" for c in range(n_chunks)],
            code=["pip install example"],
            links=[[f"https://docs.example.com/docs/page-{(i + 1) % n:05d}.html", "next"]],
            text=words * 3,
            blocks=pack_blocks(blocks),
            samples={b: f"sample {b}" for b in blocks[:3]},
        )
        ev = Event(
            run_id=1, action="new", url=url, key=key, content_hash=rec.content_hash, status="new", at=T0
        )
        out.append((rec, chunks, fields, ev))
    return out


class _NullSink:
    """Outbox rows are written (as in a crawl with an events URI); delivery is not measured."""

    immediate = True
    batch_size = 1000

    def deliver(self, lines: Any) -> None:
        pass

    def close(self) -> None:
        pass


class CoreStore:
    """The hot path of ``SQLiteStateStore`` on SQLAlchemy Core: same statements, same batching."""

    def __init__(self, path: str, batch_size: int) -> None:
        # called as the state store's pages role is: store.pages.record(...), store.pages.get(...)
        self.pages = self
        self.batch_size = batch_size
        self.engine = create_engine(f"sqlite+pysqlite:///{path}")
        event.listen(self.engine, "connect", _on_connect)
        # the pysqlite recipe: the driver's own transaction handling off, BEGIN IMMEDIATE ours
        event.listen(self.engine, "begin", lambda conn: conn.exec_driver_sql("BEGIN IMMEDIATE"))
        self.executor = ThreadPoolExecutor(max_workers=1)
        self.conn: Any = None
        self.txn: Any = None
        self.pending = 0
        p, c = s.pages, s.chunks
        ins = sqlite_insert(p)
        keep = {"key", "first_seen", "verify_run", "chunks"}
        self.upsert_page = ins.on_conflict_do_update(
            index_elements=[p.c.key],
            set_={col: ins.excluded[col] for col in _PAGE_FIELDS if col not in keep},
        )
        self.drop_miss = s.run_misses.delete().where(
            s.run_misses.c.run_id == bindparam("run"), s.run_misses.c.key == bindparam("k")
        )
        self.retire = (
            update(c)
            .where(c.c.key == bindparam("k"), c.c.retired_run.is_(None))
            .values(retired_run=bindparam("run"), retired_why=0)
        )
        self.add_chunk = c.insert()
        self.set_chunks = update(p).where(p.c.key == bindparam("k")).values(chunks=bindparam("n"))
        self.old_blocks = select(s.page_fields.c.blocks).where(s.page_fields.c.key == bindparam("k"))
        sb = s.site_blocks
        self.block_down = (
            update(sb)
            .where(sb.c.site == bindparam("st"), sb.c.block == bindparam("b"))
            .values(pages=func.max(sb.c.pages - 1, 0))
        )
        bins = sqlite_insert(sb)
        self.block_up = bins.on_conflict_do_update(
            index_elements=[sb.c.site, sb.c.block], set_={"pages": sb.c.pages + 1}
        )
        sp = s.site_pairs
        pins = sqlite_insert(sp)
        self.pair_up = pins.on_conflict_do_update(
            index_elements=[sp.c.site, sp.c.prev, sp.c.block], set_={"pages": sp.c.pages + 1}
        )
        self.pair_down = (
            update(sp)
            .where(sp.c.site == bindparam("st"), sp.c.prev == bindparam("pv"), sp.c.block == bindparam("b"))
            .values(pages=func.max(sp.c.pages - 1, 0))
        )
        fins = sqlite_insert(s.page_fields)
        self.upsert_fields = fins.on_conflict_do_update(
            index_elements=[s.page_fields.c.key],
            set_={k: fins.excluded[k] for k in ("title", "headings", "code", "links", "text", "blocks")},
        )
        self.add_event = s.outbox.insert()
        self.get_page = select(*[p.c[k] for k in _PAGE_FIELDS]).where(p.c.key == bindparam("k"))

    async def call(self, fn: Any, *args: Any) -> Any:
        return await asyncio.wrap_future(self.executor.submit(fn, *args))

    def open(self) -> None:
        # the raw store created the schema already (its migrations); this side only connects
        self.conn = self.engine.connect()

    def close(self) -> None:
        if self.txn is not None:
            self.txn.commit()
            self.txn = None
        self.conn.close()
        self.engine.dispose()

    def page_txn(self, work: Any) -> None:
        conn = self.conn
        if self.txn is None:
            # a read since the last commit autobegan the group transaction already
            self.txn = conn.get_transaction() or conn.begin()
            self.pending = 0
        sp = conn.begin_nested()
        try:
            work(conn)
        except BaseException:
            sp.rollback()
            raise
        sp.commit()
        self.pending += 1
        if self.pending >= self.batch_size:
            self.txn.commit()
            self.txn = None

    async def record(
        self, run: Run, rec: PageRecord, events: list[Event], *, chunks: Any = None, fields: Any = None
    ) -> None:
        def work(conn: Any) -> None:
            row = {k: getattr(rec, k, None) for k in _PAGE_FIELDS}
            for k in ("first_seen", "last_checked", "last_changed"):
                row[k] = _ts(row[k])
            row["last_seen_run"] = run.id
            conn.execute(self.upsert_page, row)
            conn.execute(self.drop_miss, {"run": run.id, "k": rec.key})
            if chunks is not None:
                conn.execute(self.retire, {"run": run.id, "k": rec.key})
                conn.execute(
                    self.add_chunk,
                    [
                        {
                            "key": rec.key,
                            "chunk_index": c.chunk_index,
                            "chunk_hash": c.chunk_hash,
                            "url": c.url,
                            "heading": c.heading,
                            "text": c.text,
                            "added_run": run.id,
                        }
                        for c in chunks
                    ],
                )
                conn.execute(self.set_chunks, {"n": len(chunks), "k": rec.key})
            if fields is not None:
                self.write_fields(conn, rec.key, rec.site, fields)
            if events:
                conn.execute(self.add_event, [{"payload": e.to_json()} for e in events])

        await self.call(self.page_txn, work)

    def write_fields(self, conn: Any, key: str, site: str, fields: FieldsRow) -> None:
        blob = conn.execute(self.old_blocks, {"k": key}).scalar()
        old_blocks = unpack_blocks(blob) if blob is not None else []
        new_blocks = unpack_blocks(fields.blocks)
        old, new = set(old_blocks), set(new_blocks)
        if old - new:
            conn.execute(self.block_down, [{"st": site, "b": b} for b in old - new])
        if new - old:
            conn.execute(
                self.block_up,
                [
                    {"site": site, "block": b, "pages": 1, "sample": fields.samples.get(b, "")[:200]}
                    for b in new - old
                ],
            )
        old_pairs, new_pairs = block_pairs(old_blocks), block_pairs(new_blocks)
        if old_pairs - new_pairs:
            conn.execute(self.pair_down, [{"st": site, "pv": a, "b": b} for a, b in old_pairs - new_pairs])
        if new_pairs - old_pairs:
            conn.execute(
                self.pair_up,
                [{"site": site, "prev": a, "block": b, "pages": 1} for a, b in new_pairs - old_pairs],
            )
        conn.execute(
            self.upsert_fields,
            {
                "key": key,
                "title": fields.title,
                "headings": json.dumps(fields.headings),
                "code": json.dumps(fields.code),
                "links": json.dumps(fields.links),
                "text": zlib.compress(fields.text.encode("utf-8")),
                "blocks": fields.blocks,
            },
        )

    async def get(self, key: str) -> PageRecord | None:
        def work() -> PageRecord | None:
            row = self.conn.execute(self.get_page, {"k": key}).mappings().first()
            if row is None:
                return None
            data = dict(row)
            for k in ("first_seen", "last_checked", "last_changed"):
                data[k] = datetime.fromisoformat(data[k]) if data[k] else None
            data["found_depth"] = data["found_depth"] or 0
            return PageRecord(**data)

        result: PageRecord | None = await self.call(work)
        return result


_PAGE_FIELDS = [
    "key",
    "site",
    "url",
    "etag",
    "last_modified",
    "lastmod",
    "content_hash",
    "fuzzy_hash",
    "title",
    "status",
    "misses",
    "first_seen",
    "last_checked",
    "last_changed",
    "last_seen_run",
    "chunks",
    "noise_key",
    "found_depth",
    "moved_to",
    "changed_run",
]


def _on_connect(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.isolation_level = None
    dbapi_conn.execute("PRAGMA foreign_keys = ON")
    dbapi_conn.execute("PRAGMA journal_mode = WAL")
    dbapi_conn.execute("PRAGMA synchronous = NORMAL")


def _ts(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


async def _phases(side: str, path: str, data: list[Any], batch: int) -> dict[str, float]:
    """Seconds per phase for one side on a fresh database at *path*."""
    raw = SQLiteStateStore(
        f"sqlite:///{path}", batch_size=batch, commit_secs=3600, deliver_on_commit=False, blocks=PAGE_BLOCKS
    )
    raw.sink = _NullSink()
    await raw.open()
    run = await raw.runs.begin_run("docs", "docs.example.com", T0)
    store: Any = raw
    if side == "core":
        await raw.close()
        store = CoreStore(path, batch)
        await store.call(store.open)
    out: dict[str, float] = {}
    t = time.perf_counter()
    for rec, chunks, fields, ev in data:
        await store.pages.record(run, rec, [ev], chunks=chunks, fields=fields)
    await _call(store, _commit, store)
    out["first_run"] = time.perf_counter() - t
    t = time.perf_counter()
    for rec, *_ in data:
        got = await store.pages.get(rec.key)
        assert got is not None
        assert got.content_hash == rec.content_hash
    out["get"] = time.perf_counter() - t
    later = T0 + timedelta(days=1)
    t = time.perf_counter()
    for rec, *_ in data:
        await store.pages.record(run, replace(rec, last_checked=later), [])
    await _call(store, _commit, store)
    out["rerun"] = time.perf_counter() - t
    if side == "core":
        await store.call(store.close)
        store.executor.shutdown()
    else:
        await raw.close()
    return out


async def _call(store: Any, fn: Any, *args: Any) -> Any:
    if isinstance(store, SQLiteStateStore):
        return await store._call(fn, *args)
    return await store.call(fn, *args)


def _commit(store: Any) -> None:
    if isinstance(store, SQLiteStateStore):
        store._commit()
    else:
        txn = store.txn or store.conn.get_transaction()
        if txn is not None:
            txn.commit()
        store.txn = None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=2000)
    ap.add_argument("--chunks", type=int, default=6)
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    add_json_option(ap, "bench_store")
    args = ap.parse_args(argv)
    data = make_pages(args.pages, args.chunks, args.seed)
    runs: dict[str, dict[str, list[float]]] = {side: {p: [] for p in PHASES} for side in ("raw", "core")}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeat):
            for side in ("raw", "core") if r % 2 == 0 else ("core", "raw"):
                secs = asyncio.run(_phases(side, str(Path(tmp) / f"{side}{r}.db"), data, args.batch))
                for p in PHASES:
                    runs[side][p].append(secs[p])
                print(
                    f"round {r + 1} {side}: " + " ".join(f"{p}={secs[p]:.3f}s" for p in PHASES),
                    file=sys.stderr,
                )
    result: dict[str, Any] = {"pages": args.pages, "chunks": args.chunks, "batch": args.batch, "phases": {}}
    print(
        f"{'phase':<10} {'raw ops/s':>10} {'core ops/s':>11} {'ratio':>6} "
        f"{'+us/page':>9} {'of 2ms':>7} {'of 9ms':>7}"
    )
    for p in PHASES:
        raw_s, core_s = statistics.median(runs["raw"][p]), statistics.median(runs["core"][p])
        extra_us = (core_s - raw_s) / args.pages * 1e6
        row = {
            "raw_ops_per_sec": args.pages / raw_s,
            "core_ops_per_sec": args.pages / core_s,
            "ratio": core_s / raw_s,
            "extra_us_per_page": extra_us,
            "share_of_2ms_page": extra_us / 2000,
            "share_of_9ms_page": extra_us / 9000,
            "raw_secs": runs["raw"][p],
            "core_secs": runs["core"][p],
        }
        result["phases"][p] = row
        print(
            f"{p:<10} {row['raw_ops_per_sec']:>10.0f} {row['core_ops_per_sec']:>11.0f} {row['ratio']:>6.2f} "
            f"{extra_us:>9.0f} {row['share_of_2ms_page']:>7.1%} {row['share_of_9ms_page']:>7.1%}"
        )
    # a crawled page costs one read (the request) and one write (the item)
    for label, write in (("first run page", "first_run"), ("rerun page", "rerun")):
        raw_s = statistics.median(runs["raw"][write]) + statistics.median(runs["raw"]["get"])
        core_s = statistics.median(runs["core"][write]) + statistics.median(runs["core"]["get"])
        extra_us = (core_s - raw_s) / args.pages * 1e6
        result[label.replace(" ", "_")] = {
            "ratio": core_s / raw_s,
            "extra_us_per_page": extra_us,
            "share_of_2ms_page": extra_us / 2000,
            "share_of_9ms_page": extra_us / 9000,
        }
        print(
            f"{label} (get + record): store ratio {core_s / raw_s:.2f}, +{extra_us:.0f} us/page = "
            f"{extra_us / 2000:.1%} of a 2 ms page, {extra_us / 9000:.1%} of a 9 ms page"
        )
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
