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
from recrawler.detect.guard import critical_changes, fields_from_text
from recrawler.redact import redact_url
from recrawler.reports.charts import Chart, bar_chart
from recrawler.reports.diffs import DiffLine, diff_lines
from recrawler.reports.freshness import ago, duration, freshness_view
from recrawler.reports.netdiff import net_diff
from recrawler.reports.summary import deploy_line
from recrawler.state import RUN_HELD, RUN_PUBLISHED

if TYPE_CHECKING:
    from datetime import datetime

    from recrawler.state import Readers

__all__ = ["collect_digest", "render_digest", "write_digest"]

#: what the digest shows in full, so that a busy week stays a short page: cards of changed pages
#: (each with its net diff, at most MAX_DIFF_CHARS of it drawn), rows of a list before it folds,
#: rows a folded list holds; the rest is counted, with the command that lists it
MAX_CARDS, MAX_DIFF_CHARS, SHOWN_ROWS, MAX_ROWS = 15, 2500, 10, 200
#: the stored history is read for this many changed pages at most (their cards and folded rows)
MAX_CHANGED = MAX_CARDS + MAX_ROWS
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


def _first_crawl_runs(store: Readers, site: str | None) -> set[int]:
    """The runs of each site up to its first publication: the pages they made new are its first
    crawl, not pages the docs gained."""
    firsts: dict[str, int] = {}
    runs: list[tuple[int, str]] = []
    for run in store.iter_runs():
        if site is not None and run["site"] != site:
            continue
        runs.append((int(run["id"]), str(run["site"])))
        if run["state"] == RUN_PUBLISHED:
            firsts[str(run["site"])] = int(run["id"])  # newest first: the last one kept is the earliest
    return {rid for rid, s in runs if rid <= firsts.get(s, -1)}


def _page_outcomes(
    events: list[dict[str, Any]], first_crawl: set[int]
) -> tuple[dict[str, dict[str, Any]], int]:
    """Each page once, by what the period did to it in the end: ``left`` (its last event took it
    out: gone, quarantined or moved), ``new``, ``changed``; a page that only came back (restored)
    is none of them. The pages a site's first crawl stored are counted apart (the second value),
    and only what happened to them since counts."""
    pages: dict[str, list[dict[str, Any]]] = {}
    crawled_first: set[str] = set()
    for event in events:
        if event["action"] == "new" and event["run_id"] in first_crawl:
            crawled_first.add(event["key"])
            continue
        pages.setdefault(event["key"], []).append(event)
    out: dict[str, dict[str, Any]] = {}
    for key, page in pages.items():
        first, last = page[0], page[-1]
        changes = [e for e in page if e["action"] == "changed"]
        if last["action"] in LEFT:
            kind = "left"
        elif first["action"] == "new":
            kind = "new"
        elif changes:
            kind = "changed"
        else:
            continue
        title = next((e.get("title") for e in reversed(page) if e.get("title")), None)
        out[key] = {
            **last,
            "kind": kind,
            "left_as": last["action"] if kind == "left" else None,
            "title": title,
            "times": len(changes),
            "runs": sorted({int(e["run_id"]) for e in changes}),
            "first_at": (changes or page)[0]["at"],
            "changed_fields": sorted({f for e in changes for f in e.get("changed_fields") or ()}),
        }
    return out, len(crawled_first)


def _card(store: Readers, page: dict[str, Any], since: datetime) -> dict[str, Any]:
    """A changed page's card: its net diff over the period (its text before the first change to
    its text now) and the guard's findings on it; the last change's diff when the stored history
    cannot be taken back (a diff cut short)."""
    rows = [
        r
        for r in store.iter_changes(key=page["key"])
        if r["verdict"] == "changed" and str(r["at"]) >= since.isoformat()
    ]
    state = store.page_state(page["key"]) or {}
    text = state.get("text")
    net = net_diff(text, [r["diff"] or "" for r in rows], limit=MAX_DIFF_CHARS * 4) if text and rows else None
    if net is not None:
        before, diff = net
        critical = critical_changes(fields_from_text("\n".join(before)), fields_from_text(text or ""))
        whole = True
    else:
        diff = rows[0]["diff"] or "" if rows else ""
        critical = list(rows[0]["critical"]) if rows else []
        whole = False
    lines, hidden = _capped(diff_lines(diff, critical))
    return {
        **page,
        "times": max(page["times"], len(rows)),
        "net": whole,
        "reverted": whole and not diff,
        "critical": critical,
        "lines": lines,
        "hidden_lines": hidden,
    }


def _capped(lines: list[DiffLine]) -> tuple[list[DiffLine], int]:
    """The diff's lines up to MAX_DIFF_CHARS characters, and how many were left out."""
    shown: list[DiffLine] = []
    size = 0
    for line in lines:
        size += sum(len(text) for text, _ in line.parts)
        if size > MAX_DIFF_CHARS and shown:
            break
        shown.append(line)
    return shown, len(lines) - len(shown)


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

    Pages are counted once each, by what the period did to them in the end; a page changed several
    times is one card with its net diff; the pages a site's first crawl stored are its first crawl,
    not new pages. *bound_secs* is the staleness bound (``RECRAWLER_MAX_INTERVAL_SECS``); *site*
    None covers every site; *db* is the database URI the approve and discard commands name
    (password redacted).
    """
    from recrawler.reports import LAYERS, _hold_reasons

    period, published = _runs(store, since, site)
    rows = [_run_row(store, r) for r in period]
    events = list(store.iter_events(site=site, since=since))
    outcomes, first_crawl = _page_outcomes(events, _first_crawl_runs(store, site))
    by_kind: dict[str, list[dict[str, Any]]] = {k: [] for k in ("new", "changed", *LEFT)}
    for page in sorted(outcomes.values(), key=lambda p: p["url"]):
        by_kind[page["left_as"] or page["kind"]].append(page)
    totals = {k: len(v) for k, v in by_kind.items()} | {"first_crawl": first_crawl}
    changed = by_kind["changed"][:MAX_CHANGED]
    cards = [_card(store, page, since) for page in changed[:MAX_CARDS]]
    # the pages whose edits the guard calls critical first
    cards.sort(key=lambda c: (not c["critical"], c["url"]))
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
    since_flag = f" --since {since:%Y-%m-%dT%H:%M}"
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
        "pages": {k: v[:MAX_ROWS] for k, v in by_kind.items()},
        "totals": totals,
        "left": left,
        "cards": cards,
        "changed_rows": changed[MAX_CARDS:],
        "shown_rows": SHOWN_ROWS,
        "list_command": f"recrawler events list{since_flag}{db_flag}",
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
