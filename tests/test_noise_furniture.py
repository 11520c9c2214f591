"""Boilerplate is the site's furniture, never a page's own content: end-to-end recrawls of a site
where about half the pages share a feature list, every page shares a note, and every page carries
an "Edit this page" line and a "Was this page helpful?" run inside ``<main>``."""

from __future__ import annotations

import asyncio
import dataclasses
import html
import random
from collections import Counter
from itertools import pairwise
from typing import TYPE_CHECKING

from scrapy.utils.defer import deferred_f_from_coro_f

from recrawler.detect.boilerplate import EDGE, block_pairs
from recrawler.detect.hashing import block_hash, pack_blocks, page_hash, unpack_blocks
from recrawler.detect.noise import fingerprint
from recrawler.detect.verdict import REBASELINED, Verdict, decide
from recrawler.items import Page, PageStatus
from recrawler.learning import NoiseRegistry
from recrawler.state import FieldsRow
from recrawler.state.sqlite import SCHEMA_VERSION, SQLiteStateStore
from tests import statedb
from tests.state_sqlite import SITE, T0, opened, query, rec

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    import pytest

    from recrawler.state import Run
    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

MTIME = 1_760_000_000.0
PAGES = [f"p{i:02d}.html" for i in range(20)]
WITH_LIST = PAGES[:11]  # just over half the site: every pair of the list is boilerplate-grade
FEATURES = (
    "Builds in seconds, not minutes.",
    "Works offline once installed.",
    "Ships as a single binary with no runtime dependencies.",
    "Plugins can be written in any language.",
    "The same inputs give the same output on every machine.",
    "Free for open-source projects.",
)
NOTE = "Every example on this page assumes Acme 3 or later."
EDIT = "Edit this page"
HELPFUL = ("Was this page helpful?", "Yes / No")
TOPICS = (
    "install", "configure", "upload", "download", "sync", "share", "backup", "restore", "audit",
    "export", "import", "migrate", "monitor", "notify", "schedule", "search", "tag", "archive",
    "purge", "report",
)  # fmt: skip


def own(i: int, n: int) -> str:
    topic = TOPICS[i]
    return (
        f"Paragraph {n} of the {topic} guide: run acme {topic} with the options described here, "
        f"then check the output of acme {topic} --status before you go on."
    )


def body(
    i: int,
    features: Sequence[str] | None = None,
    *,
    list_after: int = 1,
    note: bool = True,
    bullet: str | None = None,
    edit: str = EDIT,
    helpful: tuple[str, str] = HELPFUL,
) -> str:
    """Page ``i``: furniture at the top and bottom of ``<main>``, the page's own paragraphs, and
    (where given) the shared feature list after paragraph ``list_after``."""
    if features is None and PAGES[i] in WITH_LIST:
        features = FEATURES
    listing = "<ul>" + "".join(f"<li>{html.escape(f)}</li>" for f in features or ()) + "</ul>"
    parts = [f"<p>{html.escape(own(i, 1))}</p>"]
    if list_after == 1 and features:
        parts.append(listing)
    if bullet is not None:
        parts.append(f"<ul><li>{html.escape(bullet)}</li></ul>")
    parts.append(f"<p>{html.escape(own(i, 2))}</p>")
    if note:
        parts.append(f'<div class="admonition note"><p>{html.escape(NOTE)}</p></div>')
    parts.append(f"<p>{html.escape(own(i, 3))}</p>")
    if list_after == 3 and features:
        parts.append(listing)
    content = "\n".join(parts)
    return f"""<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>Acme {TOPICS[i]} | Acme Docs</title></head>
<body>
<header class="site-header"><a class="logo" href="/">Acme Docs</a></header>
<main>
<p class="edit-link"><a href="https://git.example.com/acme/docs/edit/{PAGES[i]}">{html.escape(edit)}</a></p>
<h1>Acme {TOPICS[i]}</h1>
{content}
<div class="feedback"><p>{html.escape(helpful[0])}</p><p>{html.escape(helpful[1])}</p></div>
</main>
<footer class="site-footer"><p>Acme Inc.</p></footer>
</body>
</html>
"""


def write(site: Site, page: str, text: str, mtime: float) -> None:
    # no validators: every request is a 200, so the content hash decides on every run
    site.write(page, text, mtime=mtime, validators="none")


def write_all(site: Site, mtime: float, *, edit: str = EDIT, helpful: tuple[str, str] = HELPFUL) -> None:
    for i, page in enumerate(PAGES):
        write(site, page, body(i, edit=edit, helpful=helpful), mtime)


def verdicts(crawls: Crawls) -> list[tuple[str, str]]:
    rows = statedb.rows(crawls.db_path, "SELECT url, verdict FROM page_changes ORDER BY id")
    return [(url.rsplit("/", 1)[-1], verdict) for url, verdict in rows]


SWAPPED = (FEATURES[0], FEATURES[2], FEATURES[1], *FEATURES[3:])


@deferred_f_from_coro_f
async def test_a_page_s_own_use_of_shared_blocks_is_content(site: Site, crawls: Crawls) -> None:
    write_all(site, MTIME)
    sitemap = site.write_sitemap(PAGES)
    r1 = await crawls.crawl(sitemap)
    assert r1.counts["new"] == 20
    assert r1.report["noise"]["boilerplate_on"] > 0

    # each edit moves, removes or adds shared blocks among one page's own content
    edits = {
        "p00.html": body(0, SWAPPED),  # two bullets swapped inside the list
        "p01.html": body(1, FEATURES[:3] + FEATURES[4:]),  # a bullet removed from the middle
        "p02.html": body(2, FEATURES[1:]),  # the first bullet removed
        "p03.html": body(3, FEATURES[:-1]),  # the last bullet removed
        "p04.html": body(4, ()),  # the whole list removed
        "p05.html": body(5, list_after=3),  # the list moved below the page's own paragraphs
        "p11.html": body(11, FEATURES),  # the whole list added to a page without it
        "p12.html": body(12, bullet=FEATURES[3]),  # one shared bullet added between own paragraphs
        "p13.html": body(13, note=False),  # the note every page shares removed from one page
    }
    for page, text in edits.items():
        write(site, page, text, MTIME + 10)
    r2 = await crawls.crawl(sitemap)
    assert r2.actions() == dict.fromkeys(edits, "changed")
    assert {k: v for k, v in r2.counts.items() if k in ("crawled", "changed", "unchanged")} == {
        "crawled": 20,
        "changed": 9,
        "unchanged": 11,
    }
    assert r2.stats["recrawler/page/unchanged/hash"] == 11
    assert r2.report["alert"] is None
    assert sorted(verdicts(crawls)) == sorted((page, "changed") for page in edits)

    # an untouched page stays unchanged, and a page that puts the list back as it was is changed
    write(site, "p04.html", body(4), MTIME + 20)
    r3 = await crawls.crawl(sitemap)
    assert r3.actions() == {"p04.html": "changed"}


@deferred_f_from_coro_f
async def test_furniture_changed_on_every_page_is_not_a_spike(site: Site, crawls: Crawls) -> None:
    write_all(site, MTIME)
    sitemap = site.write_sitemap(PAGES)
    await crawls.crawl(sitemap)
    r2 = await crawls.crawl(sitemap)
    assert r2.stats["recrawler/page/unchanged/hash"] == 20

    # new wording of the edit link and of the feedback run on all 20 pages, in one deploy
    edit, helpful = "Edit this page on GitHub", ("Did this page help you?", "Yes / No")
    write_all(site, MTIME + 10, edit=edit, helpful=helpful)
    r3 = await crawls.crawl(sitemap)
    assert r3.stats["recrawler/page/unchanged/boilerplate"] == 20
    assert {k: v for k, v in r3.counts.items() if k in ("crawled", "changed", "unchanged")} == {
        "crawled": 20,
        "changed": 0,
        "unchanged": 20,
    }
    assert r3.report["alert"] is None
    assert r3.report["index"]["state"] == "published"
    assert r3.events == []
    assert {v for _, v in verdicts(crawls)} == {"unchanged_boilerplate"}

    # the new furniture is learned: the next run is unchanged by hash, and a swap is still caught
    write(site, "p07.html", body(7, SWAPPED, edit=edit, helpful=helpful), MTIME + 20)
    r4 = await crawls.crawl(sitemap)
    assert r4.actions() == {"p07.html": "changed"}
    assert r4.stats["recrawler/page/unchanged/hash"] == 19


# --- the store: pair statistics, hysteresis, gone pages, and a database from before schema 6 ---


def fields_of(names: str) -> FieldsRow:
    hashes = [block_hash(n) for n in names.split()]
    return FieldsRow(
        title="",
        headings=[],
        code=[],
        links=[],
        text="\n\n".join(names.split()),
        blocks=pack_blocks(hashes),
        samples=dict(zip(hashes, names.split(), strict=True)),
    )


def pairs_of(*chains: str) -> frozenset[tuple[int, int]]:
    """Block pairs along each chain; ``^`` and ``$`` are the page's start and end."""
    out = set()
    for chain in chains:
        seq = [EDGE if n in "^$" else block_hash(n) for n in chain.split()]
        out.update(pairwise(seq))
    return frozenset(out)


async def store_page(store: SQLiteStateStore, run: Run, name: str, names: str) -> None:
    blocks = unpack_blocks(fields_of(names).blocks)
    page = rec(name, content_hash=page_hash(blocks), noise_key="k")
    await store.record(run, page, [], fields=fields_of(names))


def count(db: Path, chain: str) -> int | None:
    ((prev, block),) = pairs_of(chain)
    rows = query(db, "SELECT pages FROM site_pairs WHERE prev = ? AND block = ?", (prev, block))
    return rows[0][0] if rows else None


@deferred_f_from_coro_f
async def test_pairs_enter_and_leave_with_hysteresis(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    async with opened(db) as store:
        run = await store.begin_run("docs", SITE, T0, lease_secs=0)
        for i in range(10):
            await store_page(store, run, f"p{i}", f"T own{i} F1 F2" if i < 6 else f"T own{i}")

        async def learn(min_pages: int = 10) -> dict[str, int]:
            return await store.update_boilerplate(SITE, enter_share=0.5, exit_share=0.35, min_pages=min_pages)

        assert (await learn())["boilerplate_on"] == 3
        assert await store.load_boilerplate(SITE) == pairs_of("^ T", "F1 F2 $")
        # the list's pages are re-hashed without their furniture: T at the top, the list at the end
        assert query(db, "SELECT content_hash FROM pages WHERE key = ?", (f"{SITE}/p0",)) == [
            (page_hash([block_hash("own0")]),)
        ]
        assert count(db, "T own0") == 1
        # 4 of 10 pages keep the list: above the exit share, the pairs stay
        for i in (0, 1):
            await store_page(store, run, f"p{i}", f"T own{i}")
        assert (await learn())["boilerplate_off"] == 0
        # 3 of 10: below it, they go; the pages' own lines are counted once each
        await store_page(store, run, "p2", "T own2")
        result = await learn()
        assert (result["boilerplate_on"], result["boilerplate_off"]) == (0, 2)
        assert await store.load_boilerplate(SITE) == pairs_of("^ T")
        assert count(db, "F1 F2") == 3
        assert count(db, "own0 F1") is None
        # fewer live pages than the minimum: no boilerplate at all
        assert (await learn(min_pages=11))["boilerplate_off"] == 1
        assert await store.load_boilerplate(SITE) == frozenset()


@deferred_f_from_coro_f
async def test_a_gone_page_no_longer_counts(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    async with opened(db) as store:
        run = await store.begin_run("docs", SITE, T0, lease_secs=0)
        for name in ("a", "b"):
            await store_page(store, run, name, f"T {name} F1 F2")
        # the page writes left their block sets for the fold (the run's reconciliation)
        assert count(db, "F1 F2") is None
        assert await store.fold_block_stats() == 2
        assert (count(db, "^ T"), count(db, "F1 F2"), count(db, "b F1")) == (2, 2, 1)
        run2 = await store.begin_run("docs", SITE, T0, lease_secs=0)
        assert await store.record_miss(run2, f"{SITE}/b", 410) == "staged"
        await store.publish_run(run2, at=T0, gone_after=2, gone_statuses=[410])
        # a removal leaves its block-set change for the fold too
        assert await store.fold_block_stats() == 1
        assert (count(db, "^ T"), count(db, "F1 F2"), count(db, "b F1")) == (1, 1, 0)
        # the noise report lists the blocks of boilerplate pairs
        await store.update_boilerplate(SITE, enter_share=0.5, exit_share=0.35, min_pages=1)
    report = SQLiteStateStore(str(db)).noise_report()
    # a block's sample is kept from its second page on ("a" was only ever on one page)
    samples = {b["sample"] for b in report[SITE]["boilerplate"]}
    assert samples == {"F1", "F2", "T", None}


def counted_from_scratch(db: Path) -> tuple[dict[int, int], dict[tuple[int, int], int]]:
    """Pages holding each block and each block pair, counted from the stored block sets."""
    blocks: Counter[int] = Counter()
    pairs: Counter[tuple[int, int]] = Counter()
    for (blob,) in query(db, "SELECT blocks FROM page_fields"):
        hashes = unpack_blocks(blob)
        blocks.update(set(hashes))
        pairs.update(block_pairs(hashes))
    return dict(blocks), dict(pairs)


def counters(db: Path) -> tuple[dict[int, int], dict[tuple[int, int], int]]:
    """The stored counters (rows at zero count no page)."""
    blocks = dict(query(db, "SELECT block, pages FROM site_blocks WHERE pages > 0"))
    pairs = {(p, b): n for p, b, n in query(db, "SELECT prev, block, pages FROM site_pairs WHERE pages > 0")}
    return blocks, pairs


@deferred_f_from_coro_f
async def test_folded_counters_equal_a_count_from_scratch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Page writes leave their block-set changes as deltas; folding them (in batches smaller
    than a run, at any point) gives exactly the counts of the stored pages."""
    monkeypatch.setattr("recrawler.state.sql.history.FOLD_BATCH", 7)
    db = tmp_path / "s.db"
    rng = random.Random(7)
    words = [f"w{i}" for i in range(12)]
    async with opened(db) as store:
        run = None
        for round_ in range(6):
            run = await store.begin_run("docs", SITE, T0, lease_secs=0)
            for i in rng.sample(range(40), 25):
                names = " ".join(rng.choice(words) for _ in range(rng.randint(1, 6)))
                await store_page(store, run, f"p{i}", names)
            if round_ % 2:
                for i in rng.sample(range(40), 3):
                    await store.record_miss(run, f"{SITE}/p{i}", 410)
                await store.publish_run(run, at=T0, gone_after=1, gone_statuses=[410])
            await store.flush()
            pending = query(db, "SELECT COUNT(*) FROM block_deltas")[0][0]
            assert pending > 0
            # the counters lag until the fold; the fold takes every delta once
            assert await store.fold_block_stats() == pending
            assert await store.fold_block_stats() == 0
            assert counters(db) == counted_from_scratch(db)
        assert query(db, "SELECT COUNT(*) FROM block_deltas") == [(0,)]


@deferred_f_from_coro_f
async def test_page_writes_fold_their_deltas_a_batch_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's page writes fold their block deltas as they go: the reconciliation is left only
    what the writes since the last fold added, however many pages the run wrote."""
    monkeypatch.setattr("recrawler.state.sql.pages.FOLD_EVERY", 10)
    db = tmp_path / "s.db"
    rng = random.Random(3)
    words = [f"w{i}" for i in range(12)]
    async with opened(db) as store:
        run = await store.begin_run("docs", SITE, T0, lease_secs=0)
        for i in range(25):
            await store_page(store, run, f"p{i}", " ".join(rng.choice(words) for _ in range(4)))
        await store.flush()
        # folded after the 10th and the 20th write: five wait
        assert query(db, "SELECT COUNT(*) FROM block_deltas") == [(5,)]
        assert await store.fold_block_stats() == 5
        assert counters(db) == counted_from_scratch(db)


PAIRS = "SELECT site, prev, block, pages, boilerplate FROM site_pairs ORDER BY site, prev, block"


def before_pairs(db: Path) -> None:
    """Leave the database as recrawler before schema 6 did: no pair counts; boilerplate blocks
    (on at least half the live pages) flagged in ``site_blocks`` and dropped from page hashes."""
    with statedb.editing(db) as conn:
        conn.execute("DROP TABLE site_pairs")
        conn.execute("DELETE FROM schema_version WHERE version = 6")
        live = conn.execute("SELECT COUNT(*) FROM pages WHERE status = 'live'").fetchone()[0]
        conn.execute("UPDATE site_blocks SET boilerplate = (pages * 2 >= ?)", (live,))
        boiler = {r[0] for r in conn.execute("SELECT block FROM site_blocks WHERE boilerplate = 1")}
        rows = conn.execute("SELECT key, blocks FROM page_fields").fetchall()
        conn.executemany(
            "UPDATE pages SET content_hash = ? WHERE key = ?",
            [(page_hash([b for b in unpack_blocks(blob) if b not in boiler]), key) for key, blob in rows],
        )


@deferred_f_from_coro_f
async def test_a_database_from_before_pairs_migrates_forward(site: Site, crawls: Crawls) -> None:
    write_all(site, MTIME)
    sitemap = site.write_sitemap(PAGES)
    await crawls.crawl(sitemap)
    learned = query(crawls.db_path, PAIRS)
    before_pairs(crawls.db_path)

    # counted from the stored blocks on open, once; every page re-hashed: nothing changed
    async with opened(crawls.db_path):
        pass
    assert query(crawls.db_path, PAIRS) == learned
    async with opened(crawls.db_path):
        pass
    assert query(crawls.db_path, "SELECT MAX(version) FROM schema_version") == [(SCHEMA_VERSION,)]
    r2 = await crawls.crawl(sitemap)
    assert r2.stats["recrawler/page/unchanged/hash"] == 20
    assert r2.report["noise"]["boilerplate_on"] == 0

    write(site, "p00.html", body(0, SWAPPED), MTIME + 10)
    r3 = await crawls.crawl(sitemap)
    assert r3.actions() == {"p00.html": "changed"}


# --- re-baselining after a learned region, when the cut blocks sat next to a shared run ---------

STORED = "# Guide 7\n\nLU\n\nED\n\nRID\n\n17 people are reading this page\n\n## Overview\n\nOwn words.\n\n"
STORED += "More own words.\n\n### Related\n\n- Launch post\n\n- Pricing"
# the same page once p.presence and div.related > ul are learned regions (2 elements cut)
CUT = "# Guide 7\n\nLU\n\nED\n\nRID\n\n## Overview\n\nOwn words.\n\nMore own words.\n\n### Related"
# learned by now: a meta run on every page, followed by "## Overview" once the presence line is
# gone, and "### Related" closing every page once its rotating list is gone
LEARNED = frozenset(
    pairwise([block_hash("LU"), block_hash("ED"), block_hash("RID"), block_hash("## Overview")])
) | {(block_hash("### Related"), EDGE)}


def verdict(stored: str, text: str, region_hits: int) -> Verdict:
    noise = dataclasses.replace(NoiseRegistry().site(SITE), boilerplate=LEARNED)
    old_fp = fingerprint(stored, noise)
    old = FieldsRow(title="", headings=[], code=[], links=[], text=stored, blocks=pack_blocks(old_fp.blocks))
    page = Page(url=f"https://{SITE}/g", key=f"{SITE}/g", http_status=200, text=text, region_hits=region_hits)
    stored_rec = rec("g", content_hash=old_fp.content_hash, noise_key="before the regions")
    return decide(page, stored_rec, fingerprint(text, noise), noise, old, threshold=None)


def test_noise_cut_next_to_a_shared_run_is_rebaselined() -> None:
    assert verdict(STORED, CUT, region_hits=2).how == REBASELINED
    # a paragraph gone as well, or more places cut than the regions account for: a change
    assert verdict(STORED, CUT.replace("\n\nOwn words.", ""), region_hits=2).status == PageStatus.CHANGED
    assert verdict(STORED, CUT, region_hits=1).status == PageStatus.CHANGED


@deferred_f_from_coro_f
async def test_pages_arriving_together_share_one_read_of_the_sites_boilerplate(tmp_path: Path) -> None:
    """The first pages of a run all ask for the site's model at once: one database read, one
    model object (what a CPU worker fingerprinted under it stays usable for each of them)."""
    async with opened(tmp_path / "s.db") as store:
        run = await store.begin_run("docs", SITE, T0, lease_secs=0)
        for i in range(4):
            await store_page(store, run, f"p{i}", f"T own{i} F1 F2")
        await store.update_boilerplate(SITE, enter_share=0.5, exit_share=0.35, min_pages=3)
        reads = 0
        load = store.load_boilerplate

        async def counted(site: str) -> frozenset[tuple[int, int]]:
            nonlocal reads
            reads += 1
            return await load(site)

        store.load_boilerplate = counted  # type: ignore[method-assign]
        registry = NoiseRegistry()
        models = await asyncio.gather(*(registry.ensure(SITE, store) for _ in range(25)))
        assert reads == 1
        assert len({id(m) for m in models}) == 1
        assert models[0].boilerplate == pairs_of("^ T", "F1 F2 $")
        assert registry.ready(SITE) is models[0]
