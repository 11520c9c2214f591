"""``recrawler check``: the invariants of a state database, verified in SQL, and their repair."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from recrawler.state.sql.dialect import count, many, one
from recrawler.state.sql.runs import _holder_alive
from recrawler.state.sql.visibility import visible_from, visible_where

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from recrawler.state.sql.database import Reader
    from recrawler.state.sql.dialect import Work

__all__ = ["CHECKS", "UNREPAIRED", "Finding", "check", "repair"]

_PUBLISHED = "SELECT COALESCE(MAX(id), 0) FROM runs WHERE state = 'published'"
# the current chunk rows of a page: what its stored state says the bot should read
_CURRENT = "SELECT COUNT(*) FROM chunks c WHERE c.key = p.key AND c.retired_run IS NULL"

#: what each check verifies, and what ``--repair`` does about it
CHECKS = {
    "integrity": "SQLite finds the file damaged (PRAGMA integrity_check; not repaired: restore it "
    "from a backup; the other checks are not run, and a crawl refuses the file)",
    "chunk_hash": "a current chunk's text no longer matches its hash (repair: its page is fetched and "
    "indexed again next run)",
    "chunk_count": "a live page's chunk count disagrees with its current chunk rows (repair: recount)",
    "missing_chunks": "a live, indexed page has no current chunks (repair: fetched and indexed next run)",
    "stray_chunks": "current chunk rows of a page that is not live, or of no page (repair: retired)",
    "visible_duplicates": "the bot sees two versions of one chunk (repair: older versions retired)",
    "visible_not_live": "the bot sees chunks of a page that is not live (repair: retired)",
    "visible_mixed": "the bot sees chunks of two versions of one page (repair: the older retired, "
    "the page fetched and indexed again next run)",
    "refused_url": "a stored page whose URL is not http(s) without credentials (repair: marked gone)",
    "offsite_page": "a stored page on another host than the site of the run that stored it, which no "
    "listing or redirect of the site led to: a page a spider followed off the site; no run of the site "
    "publishes or reconciles it, yet the bot may see its chunks (repair: marked gone, its chunks retired)",
    "duplicate_key": "two stored pages are one page under the current URL rules (repair: the one "
    "stored under the other key is marked gone)",
    "duplicate_content": "one text is the live content of several page keys of a site, so search "
    "shows it twice (not repaired: which address is the page is the site's call; redirect the "
    "others, or list one)",
    "moved_dangling": "a moved page whose new address is not live (repair: checked again next run)",
    "stale_run": "a run left running whose lease is missing, lapsed or held by a process that is gone "
    "(repair: marked aborted, its lease released)",
}


#: checks ``--repair`` reports but leaves alone: the fix is a decision about the site
UNREPAIRED = frozenset({"duplicate_content", "integrity"})


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """One broken invariant: which check, the page key (or run id), and what is wrong."""

    check: str
    key: str
    detail: str


def _rows(conn: Reader, sql: str) -> Iterator[tuple[str, str]]:
    for row in conn.iter(sql):
        yield str(row[0]), str(row[1])


_VISIBLE = f"{visible_from('c')} WHERE {visible_where('c')}"


def check(
    conn: Reader,
    key_maker: Callable[[str], str],
    *,
    lease_secs: float,
    refusal: Callable[[str], str | None] | None = None,
    now: datetime | None = None,
    limit: int = 1000,
) -> list[Finding]:
    """Every broken invariant of the database (at most *limit* per check); empty: it is sound.

    *lease_secs* is ``RECRAWLER_LEASE_SECS``: a running run's lease without a heartbeat that long
    is stale (*now*: the time it is judged at, the wall clock by default). *refusal* says why
    recrawler would never fetch a URL (the URL policy's, or None); stored pages it refuses are
    ``refused_url`` findings (without it, none are looked for)."""
    found: list[Finding] = []

    def add(name: str, rows: Iterator[tuple[str, str]]) -> None:
        for n, (key, detail) in enumerate(rows):
            if n >= limit:
                break
            found.append(Finding(check=name, key=key, detail=detail))

    problems = conn.damage()
    if problems:
        # the other checks would read damaged pages (or fail on them): this is the finding
        add("integrity", (("-", problem) for problem in problems))
        return found
    add("chunk_hash", _chunk_hashes(conn))

    add(
        "chunk_count",
        _rows(
            conn,
            f"""SELECT key, 'pages.chunks ' || chunks || ', current rows ' || n FROM (
                  SELECT p.key, p.chunks, ({_CURRENT}) AS n FROM pages p WHERE p.status = 'live') AS counted
                WHERE chunks != n""",
        ),
    )
    add(
        "missing_chunks",
        _rows(
            conn,
            f"""SELECT p.key, 'no current chunks' FROM pages p
                WHERE p.status = 'live' AND p.content_hash IS NOT NULL AND ({_CURRENT}) = 0
                  AND EXISTS (SELECT 1 FROM chunks)""",
        ),
    )
    add(
        "stray_chunks",
        _rows(
            conn,
            """SELECT c.key, COUNT(*) || ' current rows, page ' || COALESCE(p.status, 'missing')
               FROM chunks c LEFT JOIN pages p ON p.key = c.key
               WHERE c.retired_run IS NULL AND (p.key IS NULL OR p.status != 'live')
               GROUP BY c.key, p.status""",
        ),
    )
    add(
        "visible_duplicates",
        _rows(
            conn,
            f"""SELECT c.key, 'chunk ' || c.chunk_index || ' visible ' || COUNT(*) || ' times'
                FROM chunks c {_VISIBLE} GROUP BY c.key, c.chunk_index HAVING COUNT(*) > 1""",
        ),
    )
    add(
        "visible_not_live",
        _rows(
            conn,
            f"""SELECT c.key, COUNT(*) || ' visible chunks, page ' || COALESCE(p.status, 'missing')
                FROM chunks c LEFT JOIN pages p ON p.key = c.key {visible_from("c")}
                WHERE {visible_where("c")} AND (p.key IS NULL OR p.status != 'live')
                GROUP BY c.key, p.status""",
        ),
    )
    add(
        "visible_mixed",
        _rows(
            conn,
            f"""SELECT c.key, 'the bot sees chunks of ' || COUNT(DISTINCT c.added_run) || ' versions'
                FROM chunks c {_VISIBLE} GROUP BY c.key HAVING COUNT(DISTINCT c.added_run) > 1""",
        ),
    )
    if refusal is not None:
        refused = (
            (key, f"{reason}: {url[:120]}")
            for key, url in conn.iter("SELECT key, url FROM pages WHERE status != 'gone'")
            if (reason := refusal(url)) is not None
        )
        add("refused_url", refused)
    add(
        "offsite_page",
        _rows(
            conn,
            """SELECT p.key, 'on ' || p.site || ', stored by run ' || r.id || ' of ' || r.site
               FROM pages p JOIN runs r ON r.id = p.last_seen_run
               WHERE p.status != 'gone' AND r.site IS NOT NULL AND p.site != r.site
                 AND COALESCE(p.found_via, '') NOT IN ('sitemap', 'feed', 'redirect')
               ORDER BY p.key""",
        ),
    )
    add("duplicate_key", _duplicate_keys(conn, key_maker))
    add(
        "duplicate_content",
        _rows(
            conn,
            f"""SELECT MIN(p.key), 'the same text under ' || COUNT(*) || ' keys: '
                  || {conn.dialect.group_concat}(p.key, ', ')
                FROM pages p WHERE p.status = 'live' AND p.content_hash IS NOT NULL AND p.chunks > 0
                GROUP BY p.site, p.content_hash HAVING COUNT(*) > 1""",
        ),
    )
    add(
        "moved_dangling",
        _rows(
            conn,
            """SELECT p.key,
                 'moved to ' || COALESCE(p.moved_to, '?') || ' (' || COALESCE(t.status, 'unknown') || ')'
               FROM pages p LEFT JOIN pages t ON t.key = p.moved_to
               WHERE p.status = 'moved' AND (t.key IS NULL OR t.status != 'live')""",
        ),
    )
    add("stale_run", _stale_runs(conn, lease_secs, now or datetime.now(UTC)))
    return found


def _chunk_hashes(conn: Reader) -> Iterator[tuple[str, str]]:
    """Current chunks whose text's sha256 is not their ``chunk_hash`` (bytes damaged on disk): the
    text is read as the bytes stored, so text that no longer decodes is found too."""
    text = "CAST(c.text AS BLOB)" if conn.dialect.name == "sqlite" else "convert_to(c.text, 'UTF8')"
    for key, index, stored, data in conn.iter(
        f"SELECT c.key, c.chunk_index, c.chunk_hash, {text} FROM chunks c WHERE c.retired_run IS NULL"
    ):
        if hashlib.sha256(bytes(data or b"")).hexdigest() != stored:
            yield str(key), f"chunk {index}: its text no longer matches its hash"


def _stale_runs(conn: Reader, lease_secs: float, now: datetime) -> Iterator[tuple[str, str]]:
    """Runs left ``running`` whose holder is gone: no lease, a lease whose heartbeats lapsed
    (``RECRAWLER_LEASE_SECS``), or one held by a process of this host that no longer exists (a
    killed run). The next crawl of the site would take such a lease over and abort the run."""
    for row in conn.iter(
        """SELECT r.id, COALESCE(r.site, r.spider), r.started_at, l.holder, l.heartbeat_at
           FROM runs r LEFT JOIN leases l ON l.run_id = r.id
           WHERE r.state = 'running' ORDER BY r.id"""
    ):
        run_id, site, started, holder, beat = row[0], row[1], row[2], row[3], row[4]
        what = f"run of {site} started {started}"
        if holder is None:
            yield str(run_id), f"{what}: no lease"
            continue
        age = (now - datetime.fromisoformat(beat)).total_seconds() if beat else None
        if age is None or age >= lease_secs:
            late = f"{age:.0f} s ago" if age is not None else "never"
            yield str(run_id), f"{what}: last heartbeat {late} (RECRAWLER_LEASE_SECS={lease_secs:g})"
        elif not _holder_alive(str(holder)):
            yield str(run_id), f"{what}: its process ({holder}) is gone"


def _duplicate_keys(conn: Reader, key_maker: Callable[[str], str]) -> Iterator[tuple[str, str]]:
    """Stored pages whose URLs are one page under the current key rules (a set operation in SQL:
    the keys are recomputed into a temporary table, batch by batch)."""
    d = conn.dialect
    conn.run(_ddl("CREATE TEMP TABLE IF NOT EXISTS check_keys (key TEXT PRIMARY KEY, computed TEXT)"))
    conn.run(_ddl("DELETE FROM check_keys"))
    batch: list[tuple[str, str]] = []
    for key, url in conn.iter("SELECT key, url FROM pages WHERE status IN ('live', 'quarantined')"):
        try:
            batch.append((key, key_maker(url)))
        except ValueError:
            continue
        if len(batch) >= 5000:
            conn.run(_insert_keys(batch))
            batch = []
    conn.run(_insert_keys(batch))
    try:
        yield from _rows(
            conn,
            f"""SELECT k.key, 'one page with ' || (SELECT {d.group_concat}(o.key, ', ') FROM check_keys o
                                                  WHERE o.computed = k.computed AND o.key != k.key)
               FROM check_keys k WHERE k.key != k.computed AND k.computed IN (
                 SELECT computed FROM check_keys GROUP BY computed HAVING COUNT(*) > 1)""",
        )
    finally:
        conn.run(_ddl("DROP TABLE IF EXISTS check_keys"))


def _ddl(sql: str) -> Work[None]:
    yield count(sql)


def _insert_keys(batch: list[tuple[str, str]]) -> Work[None]:
    if batch:
        yield many(
            """INSERT INTO check_keys (key, computed) VALUES (?, ?)
               ON CONFLICT (key) DO UPDATE SET computed = excluded.computed""",
            batch,
        )


def repair(findings: list[Finding], *, at: str) -> Work[dict[str, int]]:
    """Mend what *findings* report, in the caller's transaction; how many rows each check touched.

    Nothing is deleted: pages are re-queued (their next run fetches and indexes them again), chunk
    rows the bot must not see are retired by the last published run, runs left running are
    marked aborted.
    """
    done: dict[str, int] = {}
    keys: dict[str, list[str]] = {}
    for f in findings:
        keys.setdefault(f.check, []).append(f.key)
    published = int((yield one(_PUBLISHED))[0])

    def each(name: str) -> list[tuple[str]]:
        return [(k,) for k in keys.get(name, ())]

    # the next run fetches these pages in full (no validators, no hash to compare) and indexes them
    for name in ("missing_chunks", "visible_mixed", "moved_dangling", "chunk_hash"):
        done[name] = yield many(
            """UPDATE pages SET content_hash = NULL, fuzzy_hash = NULL, etag = NULL,
                 last_modified = NULL, noise_key = NULL, next_check_at = NULL WHERE key = ?""",
            each(name),
        )
    yield many("UPDATE pages SET status = 'live', moved_to = NULL WHERE key = ?", each("moved_dangling"))
    retire = "UPDATE chunks SET retired_run = ?, retired_why = 2 WHERE key = ? AND "
    done["stray_chunks"] = yield many(
        retire + "retired_run IS NULL", [(published, k) for k in keys.get("stray_chunks", ())]
    )
    done["visible_not_live"] = yield many(
        retire + f"id IN (SELECT c.id FROM chunks c {_VISIBLE} AND c.key = chunks.key)",
        [(published, k) for k in keys.get("visible_not_live", ())],
    )
    # of two visible versions of a page, the newest stays
    done["visible_duplicates"] = yield many(
        f"""UPDATE chunks SET retired_run = ?, retired_why = 0
            WHERE key = ? AND id IN (
              SELECT c.id FROM chunks c {_VISIBLE} AND c.key = chunks.key
                AND c.added_run < (SELECT MAX(d.added_run) FROM chunks d {visible_from("d")}
                                   WHERE d.key = c.key AND {visible_where("d")}))""",
        [
            (published, k)
            for k in sorted({*keys.get("visible_duplicates", ()), *keys.get("visible_mixed", ())})
        ],
    )
    for name in ("refused_url", "offsite_page", "duplicate_key"):
        done[name] = yield many(
            "UPDATE pages SET status = 'gone', last_checked = ? WHERE key = ?",
            [(at, k) for k in keys.get(name, ())],
        )
        yield many(retire + "retired_run IS NULL", [(published, k) for k in keys.get(name, ())])
    stale = [(int(k),) for k in keys.get("stale_run", ())]
    done["stale_run"] = yield many(
        "UPDATE runs SET state = 'aborted', finish_reason = COALESCE(finish_reason, 'aborted') WHERE id = ?",
        stale,
    )
    yield many("DELETE FROM run_misses WHERE run_id = ?", stale)
    yield many("DELETE FROM leases WHERE run_id = ?", stale)
    # last: every live page's count follows its current rows again
    done["chunk_count"] = yield count(
        f"""UPDATE pages SET chunks = (SELECT COUNT(*) FROM chunks c
                                       WHERE c.key = pages.key AND c.retired_run IS NULL)
            WHERE status = 'live' AND chunks != ({_CURRENT.replace("p.key", "pages.key")})"""
    )
    return {k: v for k, v in done.items() if v}
