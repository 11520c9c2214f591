"""The digest of a period (``recrawler report --since 7d``): what changed on the docs, what left, what
waits for a decision and how fresh the knowledge base is; then the runs and their internals.

from recrawler.reports.digest import write_digest

write_digest(store, "week.html", since=since, now=now, bound_secs=86400.0)
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recrawler import __version__
from recrawler.redact import redact_url
from recrawler.reports.charts import Chart, bar_chart
from recrawler.reports.diffs import diff_lines
from recrawler.reports.freshness import ago, duration, freshness_view
from recrawler.reports.summary import deploy_line
from recrawler.state import RUN_FINISHED, RUN_HELD, RUN_PUBLISHED

if TYPE_CHECKING:
    from datetime import datetime

    from recrawler.state import Readers

__all__ = ["collect_digest", "render_digest", "write_digest"]

#: how many pages of one kind, and how many diffs, the digest shows in full
MAX_PAGES, MAX_DIFFS = 500, 200
#: what left the knowledge base, in the digest's order
LEFT = ("gone", "quarantined", "moved")
#: the requests a run did not have to make in full (as the run report's chart)
SAVED = ("not_modified", "skipped_schedule", "skipped_lastmod", "skipped_deltafetch")


def _runs(
    store: Readers, since: datetime, site: str | None
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The runs started in the period (oldest first), and the last published run of any age."""
    period: list[dict[str, Any]] = []
    published = None
    floor = since.isoformat()
    for run in store.iter_runs():
        if site is not None and run["site"] != site:
            continue
        if published is None and run["state"] == RUN_PUBLISHED:
            published = run
        if run["started_at"] >= floor:
            period.append(run)
        elif published is not None:
            break
    period.reverse()
    return period, published


def _run_row(store: Readers, run: dict[str, Any]) -> dict[str, Any]:
    """A run as the digest's table shows it, with whether it updated the knowledge base (and the
    deploy it detected, if any)."""
    full = store.run_report(int(run["id"])) or {}
    report: dict[str, Any] = full.get("report") or {}
    deploy = report.get("deploy") or {}
    index = report.get("index") or {}
    counts = run["counts"] or {}
    updated = run["state"] == RUN_PUBLISHED or index.get("state") == "disabled"
    if run["state"] == RUN_HELD:
        note = "held: waits for a decision"
    elif updated:
        note = ""
    elif run["state"] in ("running",):
        note = "running"
    else:
        why = index.get("reason") or run.get("finish_reason") or run["state"]
        note = f"knowledge base not updated ({why})"
    return {
        **run,
        "counts": counts,
        "updated": updated,
        "note": note,
        "texts_embedded": int(index.get("texts_embedded") or 0),
        "deploy": deploy_line(deploy) if deploy.get("detected") else None,
    }


def _charts(rows: list[dict[str, Any]]) -> list[Chart]:
    labels = [str(r["id"]) for r in rows]

    def column(name: str) -> list[float]:
        return [float(r["counts"].get(name, 0)) for r in rows]

    return [
        bar_chart(
            "Pages new, changed, quarantined and gone",
            labels,
            {k: column(k) for k in ("new", "changed", "quarantined", "gone")},
        ),
        bar_chart("Requests saved, by layer", labels, {k: column(k) for k in SAVED}, stacked=True),
        bar_chart(
            "Bytes downloaded (pages and sitemaps)",
            labels,
            {"bytes received": column("bytes_received")},
            note="A 304 or a skipped page downloads no body: the drop from a full fetch is what was saved.",
        ),
        bar_chart("Texts embedded", labels, {"texts embedded": [float(r["texts_embedded"]) for r in rows]}),
    ]


def collect_digest(
    store: Readers,
    *,
    since: datetime,
    now: datetime,
    bound_secs: float,
    site: str | None = None,
    db: str = "",
) -> dict[str, Any]:
    """Everything the digest of *since* to *now* shows, read through *store*'s readers.

    *bound_secs* is the staleness bound (``RECRAWLER_MAX_INTERVAL_SECS``); *site* None covers every
    site; *db* is the database URI the approve and discard commands name (password redacted).
    """
    from recrawler.reports import LAYERS, _hold_reasons

    period, published = _runs(store, since, site)
    rows = [_run_row(store, r) for r in period]
    # what changed and what left, as the runs that updated the knowledge base did it
    pages: dict[str, list[dict[str, Any]]] = {k: [] for k in ("new", "changed", *LEFT)}
    totals = dict.fromkeys(pages, 0)
    for event in store.iter_events(site=site, since=since):
        action = event["action"]
        if action not in pages:
            continue
        totals[action] = totals.get(action, 0) + 1
        if len(pages.setdefault(action, [])) < MAX_PAGES:
            pages[action].append(event)
    for events in pages.values():
        events.sort(key=lambda e: (e["run_id"], e["url"]))
    changes: list[dict[str, Any]] = []
    for run in reversed(period):
        if run["state"] not in (RUN_PUBLISHED, RUN_FINISHED):
            continue
        for row in store.iter_changes(run_id=int(run["id"])):
            if row["verdict"] == "changed" and len(changes) < MAX_DIFFS:
                changes.append({**row, "lines": diff_lines(row["diff"] or "", row["critical"])})
    titles = {e["key"]: e.get("title") for e in pages["changed"]}
    for change in changes:
        change["title"] = titles.get(change["key"])
    db_flag = f" --db {shlex.quote(redact_url(db))}" if db else ""
    held = [
        {
            "run": h,
            "reasons": _hold_reasons({"held": list(h.holds), "alert": h.alert}) or list(h.holds or h.reasons),
            "commands": [f"recrawler runs {action} {h.id}{db_flag}" for action in ("approve", "discard")],
            "since": (h.finished_at or h.started_at).strftime("%Y-%m-%d %H:%M"),
        }
        for h in store.iter_held_runs(site)
    ]
    sites = sorted({str(r["site"]) for r in store.iter_runs() if r["site"]}) if site is None else [site]
    # one site in the database: its freshness (with its last complete listing), not every site's
    fresh = freshness_view(
        store.freshness(sites[0] if len(sites) == 1 else site, bound_secs=bound_secs, now=now)
    )
    per_site = (
        [freshness_view(store.freshness(s, bound_secs=bound_secs, now=now)) for s in sites]
        if len(sites) > 1
        else []
    )
    layers = [(k, sum(int(r["counts"].get(k, 0)) for r in rows), text) for k, text in LAYERS.items()]
    left = sum(totals[k] for k in LEFT)
    return {
        "site": site,
        "since": since,
        "now": now,
        "period": f"{since:%Y-%m-%d %H:%M} to {now:%Y-%m-%d %H:%M} UTC",
        "span": duration((now - since).total_seconds()),
        "runs": rows,
        # deploys lead: the runs that detected one, newest first
        "deploys": [{"run": r["id"], "line": r["deploy"]} for r in reversed(rows) if r["deploy"]],
        "published": published,
        "published_ago": ago(_published_at(published), now) if published else None,
        "unpublished": [r for r in rows if not r["updated"] and r["state"] != RUN_HELD],
        "pages": pages,
        "totals": totals,
        "left": left,
        "changes": changes,
        "changes_more": max(totals["changed"] - len(changes), 0),
        "max_pages": MAX_PAGES,
        "held": held,
        "fresh": fresh,
        "per_site": per_site,
        "bound_setting": "RECRAWLER_MAX_INTERVAL_SECS",
        "layers": layers,
        "charts": _charts(rows),
        "generated_at": now.isoformat(timespec="seconds"),
        "version": __version__,
    }


def _published_at(run: dict[str, Any]) -> datetime | None:
    from datetime import datetime

    value = run.get("published_at") or run.get("finished_at")
    return datetime.fromisoformat(value) if value else None


def render_digest(context: dict[str, Any]) -> str:
    """The digest as one HTML document (styles and charts inline: it opens with no network)."""
    from recrawler.reports import _environment

    return _environment().get_template("digest.html.j2").render(**context)


def write_digest(
    store: Readers,
    path: str | Path,
    *,
    since: datetime,
    now: datetime,
    bound_secs: float,
    site: str | None = None,
    db: str = "",
) -> Path:
    """Write the digest of *since* to *now* to *path* (``{date}``: the period's last day); the file
    is replaced atomically. Returns the path written."""
    context = collect_digest(store, since=since, now=now, bound_secs=bound_secs, site=site, db=db)
    target = Path(str(path).replace("{date}", f"{now:%Y-%m-%d}"))
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(render_digest(context), encoding="utf-8")
    tmp.replace(target)
    return target
