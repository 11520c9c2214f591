"""Which chunk rows the bot sees: added by a published run of their site, retired by none (pure SQL).

Each site publishes on its own: a run is visible once it, or a later run of its site, was
published (a run left unpublished by an error is published by the site's next run), and held or
discarded runs never are. Runs of no site (a spider's own lease) are one group of their own; a
run id with no row (a damaged database) is judged by the last published run of any site.
"""

from __future__ import annotations

__all__ = ["WATERMARKS", "visible_from", "visible_where"]

#: the last published run of each site
WATERMARKS = (
    "SELECT COALESCE(site, '') AS site, MAX(id) AS p FROM runs WHERE state = 'published' "
    "GROUP BY COALESCE(site, '')"
)
_ANY = "(SELECT COALESCE(MAX(id), 0) FROM runs WHERE state = 'published')"


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
