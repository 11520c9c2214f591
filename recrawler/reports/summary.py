"""The run report (a dict, written as JSON) and its summary line, built from the run's counters and
the reconcile result."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from recrawler.items import PageStatus
from recrawler.redact import redact_url
from recrawler.state import utcnow

if TYPE_CHECKING:
    from recrawler.counters import RunCounters
    from recrawler.outcome import Verdicts
    from recrawler.state import ReconcileResult, Run

_SUMMARY_HEAD = ("crawled", "new", "changed", "unchanged", "gone", "errors")
_SUMMARY_TAIL = (
    "quarantined",
    "moved",
    "restored",
    "validators_sent",
    "not_modified",
    "unchanged_by_hash",
    "verified",
    "missing_held",
    "refused_urls",
    "skipped_schedule",
    "skipped_lastmod",
    "skipped_deltafetch",
    "unchanged_by_fuzzy",
    "audited",
    "lies",
    "robots_forbidden",
)


def counts(c: RunCounters, v: Verdicts, result: ReconcileResult | None) -> dict[str, int]:
    """The report's ``counts``.

    ``crawled`` is ``new + changed + unchanged + gone + errors``: a page checked this run lands
    in exactly one of them, and a listing file (a sitemap) that could not be read counts as an
    error too (``listing_errors``): a site that is down is errors, never ``errors: 0``.
    ``quarantined`` and ``missing_held`` pages answered 404/410 but are not gone (yet): they are
    counted apart, as are ``moved`` pages, whose fetch counts under the page they moved to. Each
    other count is of pages, each counted once (``not_modified``: pages unchanged by a 304, not
    304 answers: an audit fetches a sampled 304 again in full).
    """
    gone = sum(result.gone.values()) if result else 0
    quarantined = result.quarantined if result else 0
    moved = result.moved if result else 0
    out = {
        "new": v.new,
        "changed": v.changed,
        "unchanged": v.unchanged,
        "gone": gone,
        "quarantined": quarantined,
        "moved": moved,
        "errors": c[f"recrawler/page/{PageStatus.ERROR}"] + v.write_failed + c["recrawler/sitemap/error"],
        "write_failed": v.write_failed,
        "listing_errors": c["recrawler/sitemap/error"],
        "not_modified": v.unchanged_by_304,
        "validators_sent": c["recrawler/conditional/sent"],
        "bytes_received": c["recrawler/bytes/received"],
        "unchanged_by_hash": v.unchanged_by_hash,
        "restored": v.restored,
        "missing_held": result.skipped_misses if result else c.total("recrawler/page/missing"),
        "verified": c["recrawler/reconcile/verified"],
        "refused_urls": c["recrawler/url/refused"],
        "skipped_schedule": c["recrawler/page/skipped/schedule"],
        "skipped_lastmod": c["recrawler/page/skipped/lastmod"],
        "skipped_deltafetch": c["recrawler/page/skipped/deltafetch"],
        "unchanged_by_fuzzy": v.unchanged_by_fuzzy,
        "audited": c["recrawler/audit/checked"],
        "lies": c["recrawler/audit/lies"],
        "robots_forbidden": c["recrawler/robots/forbidden"],
    }
    out["crawled"] = sum(out[k] for k in _SUMMARY_HEAD[1:])
    return out


def mirror(c: RunCounters, v: Verdicts, result: ReconcileResult | None, crawled: int) -> None:
    """Write the run's final totals as counters (and so as stats): what committed, what was removed."""
    for code, n in result.gone.items() if result else ():
        c.set(f"recrawler/page/{PageStatus.GONE}/{code}", n)
    c.set(f"recrawler/page/{PageStatus.GONE}", sum(result.gone.values()) if result else 0)
    c.set(f"recrawler/page/{PageStatus.QUARANTINED}", result.quarantined if result else 0)
    c.set(f"recrawler/page/{PageStatus.MOVED}", result.moved if result else 0)
    # the pipelines counted pages as they went; the totals are what committed
    for name in ("new", "changed", "unchanged"):
        value = getattr(v, name)
        if value or f"recrawler/page/{name}" in c:
            c.set(f"recrawler/page/{name}", value)
    if v.write_failed:
        c.set(f"recrawler/page/{PageStatus.ERROR}/write_failed", v.write_failed)
    c.set("recrawler/crawled", crawled)


def hosts_without_304(c: RunCounters, threshold: int) -> list[str]:
    """Hosts that ignore validators: at least *threshold* conditional requests answered in full
    with the very validators they sent (a 304 was due), and no 304 at all. A redeploy's new
    validators and an outage's errors are no such evidence."""
    not_modified = c.family("recrawler/conditional/not_modified")
    return sorted(
        host
        for host, ignored in c.family("recrawler/conditional/ignored").items()
        if "/" not in host and ignored >= threshold and not not_modified.get(host)
    )


def build(
    run: Run,
    reason: str,
    *,
    counts: dict[str, int],
    result: ReconcileResult | None,
    skipped: list[str],
    hold: dict[str, str],
    hosts_without_304: list[str],
    db_uri: str,
    schedule: dict[str, Any],
    audit: dict[str, Any],
    deploy: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The run report (JSON): what docs/reference.md's "Run report" section documents. A run
    that detected a deploy leads with it."""
    return {
        "run_id": run.id,
        "spider": run.spider,
        "site": run.site,
        "deploy": deploy or {"detected": False, "signals": [], "reason": None, "checking": 0},
        "started_at": run.started_at.isoformat(),
        "finished_at": utcnow().isoformat(),
        "finish_reason": reason,
        "counts": counts,
        "alert": "; ".join(f"{why}: {text}" for why, text in hold.items()) or None,
        "held": sorted(hold),
        "reconcile": {"applied": bool(result and result.applied), "skipped": skipped},
        "hosts_without_304": hosts_without_304,
        "db": redact_url(db_uri),
        "schedule": schedule,
        "audit": audit,
    }


def deploy_line(deploy: dict[str, Any]) -> str:
    """``deploy detected: <why>; checking all N pages``."""
    why = deploy.get("reason") or ", ".join(deploy.get("signals") or ()) or "a deploy"
    return f"deploy detected: {why}; checking all {deploy.get('checking', 0)} pages"


def summary_line(report: dict[str, Any]) -> str:
    """``crawled: N new: N changed: N unchanged: N gone: N errors: N | <per layer>``, and a run
    that detected a deploy says so (``| deploy: <signals>``)."""
    c = report["counts"]
    line = " ".join(f"{k}: {c[k]}" for k in _SUMMARY_HEAD)
    line += " | " + " ".join(f"{k}: {c.get(k, 0)}" for k in _SUMMARY_TAIL)
    index = report.get("index") or {}
    if index.get("state") not in (None, "disabled"):
        line += (
            f" | index: {index['state']} chunks_added: {index.get('chunks_added', 0)}"
            f" texts_embedded: {index.get('texts_embedded', 0)}"
        )
    deploy = report.get("deploy") or {}
    if deploy.get("detected"):
        line += f" | deploy: {', '.join(deploy.get('signals') or ()) or 'detected'}"
    if report["reconcile"]["skipped"]:
        line += f" | reconcile skipped: {', '.join(report['reconcile']['skipped'])}"
    if report.get("held"):
        line += f" | HELD: {', '.join(report['held'])}"
    outcome = report.get("outcome")
    if outcome:
        line += f" | exit {outcome['exit_code']}"
    return line


__all__ = ["build", "counts", "deploy_line", "hosts_without_304", "mirror", "summary_line"]
