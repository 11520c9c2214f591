"""The HTML run report: one self-contained page per run (counts, diffs, pages, holds, trends).

from recrawler.reports import write_report

write_report(store, "report.html", run_id=None, runs=20)  # None: the latest run
"""

from __future__ import annotations

import logging
import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recrawler import __version__, default_settings
from recrawler.exceptions import ConfigurationError, RecrawlerError
from recrawler.redact import redact_url
from recrawler.reports.charts import Chart, bar_chart
from recrawler.reports.diffs import diff_lines
from recrawler.reports.freshness import freshness_as_stored, freshness_view
from recrawler.state import RUN_HELD, RUN_PUBLISHED, utcnow
from recrawler.state.records import RUN_SUPERSEDED

if TYPE_CHECKING:
    from datetime import datetime

    from jinja2 import Environment
    from scrapy.settings import BaseSettings

    from recrawler.state import Readers

__all__ = ["collect", "render", "totals_line", "write_after_run", "write_report"]

logger = logging.getLogger(__name__)

#: the report's "what each layer saved" table: count name -> what it means
LAYERS = {
    "skipped_schedule": "not requested: not due yet (adaptive schedule)",
    "skipped_lastmod": "not requested: sitemap lastmod unchanged",
    "skipped_deltafetch": "not requested: an immutable page already fetched (deltafetch)",
    "not_modified": "requested with validators, answered 304: no body downloaded",
    "unchanged_by_hash": "downloaded, same content hash: nothing re-parsed or re-embedded",
    "unchanged_by_fuzzy": "downloaded, within the fuzzy threshold and no critical token changed",
    "verified": "stored pages the listing missed, checked with a direct request",
    "missing_held": "missing pages kept as they were (outage guard or held run)",
    "refused_urls": "URLs refused (not http(s) on an allowed host)",
    "audited": "pages re-fetched without validators to audit the site's signals",
    "lies": "signals the audit caught lying (a 304 or lastmod for changed content)",
}
#: the report's first table
HEAD = ("crawled", "new", "changed", "unchanged", "gone", "quarantined", "moved", "errors")
#: how many pages of one kind, and how many diffs, a report shows in full
MAX_PAGES, MAX_DIFFS = 500, 200
#: the requests a run did not have to make in full, per layer (the "requests saved" chart)
SAVED = ("not_modified", "skipped_schedule", "skipped_lastmod", "skipped_deltafetch")
#: events of iter_run_pages, in the report's order
PAGE_EVENTS = ("new", "moved", "quarantined", "gone", "held")


def _environment() -> Environment:
    # jinja2 loads with the first report, not with every crawl (most write none)
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    # page text is untrusted: everything the template prints is escaped
    return Environment(
        loader=PackageLoader("recrawler.reports", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def _latest_run_id(store: Readers) -> int:
    for run in store.iter_runs():
        return int(run["id"])
    raise ConfigurationError("no runs in the database yet: crawl first")


def _history(store: Readers, run: dict[str, Any], limit: int) -> list[dict[str, Any]]:
    """The site's runs up to *run*, oldest first, at most *limit*, with each one's index figures."""
    rows: list[dict[str, Any]] = []
    for row in store.iter_runs():
        if row["id"] > run["id"] or row["site"] != run["site"]:
            continue
        rows.append(row)
        if len(rows) >= limit:
            break
    rows.reverse()
    for row in rows:
        full = store.run_report(row["id"]) if row["id"] != run["id"] else run
        index = ((full or {}).get("report") or {}).get("index") or {}
        row["texts_embedded"] = int(index.get("texts_embedded") or 0)
    return rows


def _charts(history: list[dict[str, Any]]) -> list[Chart]:
    labels = [str(r["id"]) for r in history]
    counts = [r["counts"] or {} for r in history]

    def column(name: str) -> list[float]:
        return [float(c.get(name, 0)) for c in counts]

    return [
        bar_chart(
            "Pages new, changed, quarantined and gone",
            labels,
            {k: column(k) for k in ("new", "changed", "quarantined", "gone")},
        ),
        bar_chart(
            "Requests saved, by layer",
            labels,
            {k: column(k) for k in SAVED},
            stacked=True,
        ),
        bar_chart(
            "Bytes downloaded (pages and sitemaps)",
            labels,
            {"bytes received": column("bytes_received")},
            note="A 304 or a skipped page downloads no body: the drop from a full fetch is what was saved.",
        ),
        bar_chart(
            "Texts embedded", labels, {"texts embedded": [float(r["texts_embedded"]) for r in history]}
        ),
    ]


def collect(
    store: Readers,
    run_id: int | None = None,
    *,
    runs: int = 20,
    db: str = "",
    bound_secs: float = default_settings.RECRAWLER_MAX_INTERVAL_SECS,
) -> dict[str, Any]:
    """Everything the report shows about *run_id* (None: the latest run), read through *store*'s readers.

    *runs* is how many of the site's runs the charts show; *db* the database URI the approve and
    discard commands name (its password is redacted); *bound_secs* the staleness bound of the
    freshness panel (``RECRAWLER_MAX_INTERVAL_SECS``).
    """
    if runs < 1:
        raise ConfigurationError(f"report: --runs must be at least 1, not {runs}")
    rid = _latest_run_id(store) if run_id is None else run_id
    run = store.run_report(rid)
    if run is None:
        raise ConfigurationError(f"no run {rid} in the database")
    report: dict[str, Any] = run["report"] or {}
    counts: dict[str, int] = report.get("counts") or run["counts"] or {}
    changes: list[dict[str, Any]] = []
    judged: list[dict[str, Any]] = []
    # a held run's report shows what it holds (history readers see it once it is published)
    waits = run["state"] in (RUN_HELD, RUN_SUPERSEDED)
    for row in store.iter_changes(run_id=rid, held=waits):
        entry = {**row, "lines": diff_lines(row["diff"] or "", row["critical"])}
        (changes if row["verdict"] == "changed" else judged).append(entry)
    changes.sort(key=lambda c: c["url"])
    pages: dict[str, list[dict[str, Any]]] = {event: [] for event in PAGE_EVENTS}
    totals = dict.fromkeys(PAGE_EVENTS, 0)
    for page in store.iter_run_pages(rid):
        event = page["event"] if page["event"] in pages else page["status"]
        totals[event] = totals.get(event, 0) + 1
        if len(pages.setdefault(event, [])) < MAX_PAGES:
            pages[event].append(page)
    # held: the run waits; or its removals do (the rest of it is published)
    held = run["state"] == RUN_HELD or totals.get("held", 0) > 0
    db_flag = f" --db {shlex.quote(redact_url(db))}" if db else ""
    history = _history(store, run, runs)
    index: dict[str, Any] = report.get("index") or {}
    now = utcnow()
    site_runs = [r for r in store.iter_runs() if r["site"] == run["site"]]
    published = next((r for r in site_runs if r["state"] == RUN_PUBLISHED), None)
    kb_updated = run["state"] == RUN_PUBLISHED or index.get("state") == "disabled"
    # the knowledge base as the run left it (its report keeps it); a run still running: now
    stored = report.get("freshness")
    if stored and run["finished_at"]:
        fresh, fresh_as_of = freshness_as_stored(stored, _when(run["finished_at"])), run["finished_at"]
    else:
        fresh = freshness_view(store.freshness(run["site"], bound_secs=bound_secs, now=now))
        fresh_as_of = None
    first = not any(r["id"] < rid and r["state"] == RUN_PUBLISHED for r in site_runs)
    return {
        "run": run,
        "report": report,
        "counts": counts,
        "head": [(k, counts.get(k, 0)) for k in HEAD],
        "layers": [(k, counts.get(k, 0), text) for k, text in LAYERS.items()],
        "changes": changes[:MAX_DIFFS],
        "changes_total": len(changes),
        "judged": judged,
        "pages": pages,
        "page_totals": totals,
        "max_pages": MAX_PAGES,
        "held": held,
        "hold_reasons": _hold_reasons(report),
        "commands": [f"recrawler runs {action} {rid}{db_flag}" for action in ("approve", "discard")],
        "skipped": (report.get("reconcile") or {}).get("skipped") or [],
        "outcome": report.get("outcome") or {},
        "index": index,
        "totals": totals_line(counts, first=first),
        # the knowledge base took the run in (or there is none): else the report says it did not
        "kb_updated": kb_updated,
        "not_published_why": index.get("reason") or _ended_with(run["finish_reason"]),
        "published": published,
        "recorded": run.get("pages_recorded") is not None,
        "fresh": fresh,
        "fresh_as_of": fresh_as_of,
        "bound_setting": "RECRAWLER_MAX_INTERVAL_SECS",
        "history": history,
        "charts": _charts(history),
        "generated_at": now.isoformat(timespec="seconds"),
        "version": __version__,
    }


def totals_line(counts: dict[str, int], *, first: bool = False) -> str:
    """The run in one line of totals, as a person reads it: ``412 pages checked: 3 new, 6 changed,
    399 unchanged, 1 gone, 3 errors`` (and the missing and moved pages, when there are)."""
    c = {k: int(counts.get(k, 0)) for k in (*HEAD, "crawled")}
    pages, errors = ("page" if c["crawled"] == 1 else "pages"), ("error" if c["errors"] == 1 else "errors")
    line = (
        f"{c['crawled']} {pages} checked: {c['new']} new, {c['changed']} changed,"
        f" {c['unchanged']} unchanged, {c['gone']} gone, {c['errors']} {errors}"
    )
    if c["quarantined"]:
        line += f", {c['quarantined']} missing (out of search until they answer again)"
    if c["moved"]:
        line += f", {c['moved']} moved"
    return f"First crawl: {line}" if first else line[0].upper() + line[1:]


def _when(value: str) -> datetime:
    from datetime import UTC, datetime

    at = datetime.fromisoformat(value)
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _ended_with(reason: str | None) -> str:
    """Why an unpublished run did not publish, from its finish reason (empty: it finished)."""
    return f"it ended with {reason}" if reason not in (None, "finished") else ""


def _hold_reasons(report: dict[str, Any]) -> list[str]:
    """``reason: explanation`` per hold, from the report's ``alert`` (else the hold names)."""
    # the run's ``reasons`` also name the outage guard's: only the report tells holds apart
    names = [str(r) for r in report.get("held") or []]
    alert = report.get("alert")
    if not alert or not names:
        return names
    # the alert joins "reason: text" with "; ", which a text may hold too: split before a reason
    starts = "|".join(re.escape(name) for name in names)
    return [part.strip() for part in re.split(rf"; (?=(?:{starts}): )", str(alert)) if part.strip()]


def render(context: dict[str, Any]) -> str:
    """The report as one HTML document (styles and charts inline: it opens with no network)."""
    return _environment().get_template("report.html.j2").render(**context)


def write_report(
    store: Readers,
    path: str | Path,
    run_id: int | None = None,
    *,
    runs: int = 20,
    db: str = "",
    bound_secs: float = default_settings.RECRAWLER_MAX_INTERVAL_SECS,
) -> tuple[int, Path]:
    """Write the report of *run_id* (None: the latest) to *path* (``{run_id}`` is replaced).

    Returns (run id, path written). The file is replaced atomically.
    """
    context = collect(store, run_id, runs=runs, db=db, bound_secs=bound_secs)
    rid = int(context["run"]["id"])
    target = Path(str(path).replace("{run_id}", str(rid)))
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(render(context), encoding="utf-8")
    tmp.replace(target)
    return rid, target


async def write_after_run(settings: BaseSettings, store: Readers, run_id: int, db: str) -> None:
    """Write ``RECRAWLER_REPORT_HTML_FILE`` after a run, off the reactor; a failure is a warning."""
    path = settings.get("RECRAWLER_REPORT_HTML_FILE")
    if not path:
        return
    from scrapy.utils.asyncio import run_in_thread

    runs = settings.getint("RECRAWLER_REPORT_HTML_RUNS")
    bound = settings.getfloat("RECRAWLER_MAX_INTERVAL_SECS")
    try:
        _, target = await run_in_thread(
            write_report, store, str(path), run_id, runs=runs, db=db, bound_secs=bound
        )
    except (OSError, RecrawlerError) as exc:
        logger.warning("HTML report of run %(run)d not written: %(exc)s", {"run": run_id, "exc": exc})
        return
    logger.info("HTML report of run %(run)d: %(path)s", {"run": run_id, "path": str(target)})
