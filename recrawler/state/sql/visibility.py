"""Which chunk rows the bot sees: added by a published run of their site, retired by none (pure SQL).

Each site publishes on its own: a run is visible once it, or a later run of its site, was
published (a run left unpublished by an error is published by the site's next run), and held or
discarded runs never are. Runs of no site (a spider's own lease) are one group of their own; a
run id with no row (a damaged database) is judged by the last published run of any site.
"""

from __future__ import annotations

__all__ = [
    "BEFORE_COLUMNS",
    "PAGE_COLUMNS",
    "PUBLISHED_EMBEDDER",
    "PUBLISHED_RUN",
    "WATERMARKS",
    "published_pages",
    "unpublished_runs",
    "visible_from",
    "visible_run",
    "visible_where",
]

#: the last published run of each site
WATERMARKS = (
    "SELECT COALESCE(site, '') AS site, MAX(id) AS p FROM runs WHERE state = 'published' "
    "GROUP BY COALESCE(site, '')"
)
#: the last published run's id (0: none yet), as search reads it
PUBLISHED_RUN = "SELECT COALESCE(MAX(id), 0) FROM runs WHERE state = 'published'"
_ANY = f"({PUBLISHED_RUN})"
#: the embedder the last published run that names one indexed with
PUBLISHED_EMBEDDER = (
    "SELECT embedder FROM runs WHERE state = 'published' AND embedder IS NOT NULL ORDER BY id DESC LIMIT 1"
)


def visible_from(c: str = "c") -> str:
    """Joins giving the chunk rows aliased *c* the watermarks of the runs that added and retired them."""
    added, retired = f"{c}_ra", f"{c}_rr"
    return f"""LEFT JOIN runs {added} ON {added}.id = {c}.added_run
        LEFT JOIN ({WATERMARKS}) {c}_wa ON {added}.id IS NOT NULL AND {c}_wa.site = COALESCE({added}.site, '')
        LEFT JOIN runs {retired} ON {retired}.id = {c}.retired_run
        LEFT JOIN ({WATERMARKS}) {c}_wr
          ON {retired}.id IS NOT NULL AND {c}_wr.site = COALESCE({retired}.site, '')"""


def visible_where(c: str = "c") -> str:
    """The condition (over :func:`visible_from`'s joins) that the bot sees the chunk row *c*."""
    return f"""{c}.added_run <= COALESCE({c}_wa.p, CASE WHEN {c}_ra.id IS NULL THEN {_ANY} ELSE 0 END)
        AND COALESCE({c}_ra.state, '') NOT IN ('held', 'discarded')
        AND ({c}.retired_run IS NULL
             OR {c}.retired_run > COALESCE({c}_wr.p, CASE WHEN {c}_rr.id IS NULL THEN {_ANY} ELSE 0 END)
             OR COALESCE({c}_rr.state, '') IN ('held', 'discarded'))"""


def visible_run(column: str) -> str:
    """The condition that the run named in *column* is visible: a published run of its site, or
    one a later publication of its site covers, never held or discarded (NULL: from before runs
    were named, visible). History rows and events are read and delivered under it."""
    return f"""({column} IS NULL OR {column} IN (
        SELECT r.id FROM runs r JOIN ({WATERMARKS}) w ON w.site = COALESCE(r.site, '')
        WHERE r.id <= w.p AND r.state NOT IN ('held', 'discarded')))"""


def unpublished_runs(site: str) -> str:
    """The runs of the site given by the parameter *site* (``:site`` or ``?``) that no
    publication covers yet: held ones, and every run after the site's last published one."""
    same = f"COALESCE(site, '') = COALESCE(CAST({site} AS TEXT), '')"
    return f"""(SELECT id FROM runs WHERE {same} AND (state = 'held' OR id > COALESCE(
        (SELECT MAX(id) FROM runs WHERE {same} AND state = 'published'), 0)))"""


#: the columns of a page row, in their order; those the knowledge base shows from ``page_before``
#: while the page is pending
PAGE_COLUMNS = (
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
    "pending",
    "version",
    "lang",
)
BEFORE_COLUMNS = (
    "url",
    "etag",
    "last_modified",
    "lastmod",
    "content_hash",
    "fuzzy_hash",
    "title",
    "status",
    "misses",
    "last_checked",
    "last_changed",
    "changed_run",
    "chunks",
    "noise_key",
    "found_depth",
    "moved_to",
)


def published_pages() -> str:
    """The pages as the knowledge base shows them (a subquery to alias): a pending page's state
    before its change, and no page that no publication has brought in yet."""
    cols = []
    for c in PAGE_COLUMNS:
        if c == "pending":
            cols.append("CAST(NULL AS TEXT) AS pending")
        elif c in BEFORE_COLUMNS:
            cols.append(f"CASE WHEN b.key IS NULL THEN p.{c} ELSE b.{c} END AS {c}")
        else:
            cols.append(f"p.{c}")
    return f"""(SELECT {", ".join(cols)} FROM pages p
        LEFT JOIN page_before b ON b.key = p.key AND b.kind = 'changed'
        WHERE p.pending IS NULL OR p.pending != 'new')"""
