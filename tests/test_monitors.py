"""recrawler's Spidermon monitors in a real Spidermon run over real recrawls (recrawler.monitors)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from scrapy.utils.defer import deferred_f_from_coro_f

pytest.importorskip("spidermon")

from spidermon.core.actions import Action

from recrawler.extensions.reconcile import Reconciler
from recrawler.monitors import RunOutcomeMonitorSuite
from recrawler.state import utcnow
from tests import docsite, shell, statedb

if TYPE_CHECKING:
    from pathlib import Path

    from tests.conftest import Crawls
    from tests.conftest_mockserver import Site

T0 = 1_760_000_000.0
#: what each Spidermon run decided, by run id: {monitor name: (status, reason)}
OUTCOMES: dict[int, dict[str, tuple[str, str | None]]] = {}


class RecordOutcome(Action):
    """Keep every monitor's result where the test can read it (after every run)."""

    def run_action(self) -> None:
        report = self.data.crawler.get_extension(Reconciler).report
        OUTCOMES[report["run_id"] if report else 0] = {
            r.item.name: (r.status, r.reason) for r in self.result.monitor_results
        }


class RecordedSuite(RunOutcomeMonitorSuite):
    monitors_finished_actions = [RecordOutcome]  # noqa: RUF012 (Spidermon's class attribute)


SPIDERMON = {
    "SPIDERMON_ENABLED": True,
    "EXTENSIONS": {"spidermon.contrib.scrapy.extensions.Spidermon": 500},
    "SPIDERMON_ENGINE_STOP_MONITORS": [f"{__name__}.RecordedSuite"],
}


def failed(run_id: int) -> dict[str, str | None]:
    """The monitors that failed (one alert each); the rest passed or skipped."""
    outcomes = OUTCOMES.pop(run_id)
    assert {status for status, _ in outcomes.values()} <= {"OK", "SKIPPED", "FAIL"}
    return {name: reason for name, (status, reason) in outcomes.items() if status == "FAIL"}


@deferred_f_from_coro_f
async def test_clean_run_passes_and_mass_removal_fails(site: Site, crawls: Crawls) -> None:
    names = [f"p{i}.html" for i in range(6)]
    for name in names:
        site.write(name, docsite.page(name, [("Intro", [f"Page {name}."])]), mtime=T0)
    site.write_sitemap(names)

    r1 = await crawls.crawl(site.url("sitemap.xml"), **SPIDERMON)
    assert r1.exit_code == 0
    assert failed(r1.report["run_id"]) == {}

    for name in names[:4]:
        site.remove(name)
    r2 = await crawls.crawl(site.url("sitemap.xml"), **SPIDERMON)
    run = r2.report["run_id"]
    assert r2.report["held"] == ["mass_removal"]
    # one cause, one alert: the mass removal, not "held" besides
    failures = failed(run)
    assert set(failures) == {"recrawler mass removal/no mass removal"}
    reason = failures["recrawler mass removal/no mass removal"]
    assert reason is not None
    assert "4 of 6 live pages would leave the knowledge base" in reason
    assert f"`recrawler runs approve {run} --db sqlite:///" in reason


@deferred_f_from_coro_f
async def test_outage_and_errors_fail_their_monitors(site: Site, crawls: Crawls) -> None:
    names = [f"p{i}.html" for i in range(4)]
    for name in names:
        site.write(name, docsite.page(name, [("Intro", [f"Page {name}."])]), mtime=T0)
    site.write_sitemap(names)
    await crawls.crawl(site.url("sitemap.xml"), **SPIDERMON)
    OUTCOMES.clear()

    for name in names[:3]:
        site.options(name, status=500)
    r2 = await crawls.crawl(site.url("sitemap.xml"), **SPIDERMON)
    assert "error_ratio" in r2.report["reconcile"]["skipped"]
    # one cause (the pages failed), one alert, which says the outage guard removed nothing
    failures = failed(r2.report["run_id"])
    assert set(failures) == {"recrawler error ratio/error ratio within bounds"}
    reason = failures["recrawler error ratio/error ratio within bounds"] or ""
    assert "3 of 4 pages failed" in reason
    assert "the outage guard removed nothing" in reason


@deferred_f_from_coro_f
async def test_a_lie_found_by_the_audit_fails_its_monitor(site: Site, crawls: Crawls) -> None:
    site.write("a.html", docsite.page("A", [("Intro", ["Old text."])]), mtime=T0, lie304=True)
    site.write("b.html", docsite.page("B", [("Intro", ["Stays."])]), mtime=T0)
    sitemap = site.write_sitemap(["a.html", "b.html"])
    await crawls.crawl(sitemap, **SPIDERMON)
    OUTCOMES.clear()

    # a changes, but the server keeps answering 304 to any conditional request
    site.write("a.html", docsite.page("A", [("Intro", ["New text."])]), mtime=T0 + 100, lie304=True)
    r2 = await crawls.crawl(sitemap, RECRAWLER_AUDIT_SAMPLE="100%", **SPIDERMON)
    assert r2.counts["lies"] == 1
    failures = failed(r2.report["run_id"])
    assert set(failures) == {"recrawler audit/no lies found"}
    assert "'signal': 'etag'" in (failures["recrawler audit/no lies found"] or "")


def did_not_begin(why: str) -> None:
    """Every monitor ran on the refused run: one failed, saying it did not begin (and why); the
    others skipped it (one alert for one cause)."""
    outcomes = OUTCOMES.pop(0)
    assert set(outcomes) == {f"{m}/{t}" for m, t in MONITOR_TESTS}
    failures = {name: reason for name, (status, reason) in outcomes.items() if status == "FAIL"}
    assert list(failures) == ["recrawler run/run began"]
    reason = failures["recrawler run/run began"]
    assert reason is not None
    assert "the recrawler run did not begin" in reason
    assert why in reason
    assert {status for name, (status, _) in outcomes.items() if name not in failures} == {"SKIPPED"}


#: every monitor of the suite and its one test, as Spidermon names them
MONITOR_TESTS = [
    ("recrawler run", "run began"),
    ("recrawler outage guard", "removals were not skipped"),
    ("recrawler held run", "run was not held"),
    ("recrawler mass removal", "no mass removal"),
    ("recrawler error ratio", "error ratio within bounds"),
    ("recrawler audit", "no lies found"),
]


@deferred_f_from_coro_f
async def test_monitors_run_when_a_run_is_refused_at_start(site: Site, crawls: Crawls) -> None:
    names = [f"p{i}.html" for i in range(6)]
    for name in names:
        site.write(name, docsite.page(name, [("Intro", [f"Page {name}."])]), mtime=T0)
    sitemap = site.write_sitemap(names)
    assert (await crawls.crawl(sitemap, **SPIDERMON)).exit_code == 0
    OUTCOMES.clear()

    # (a held run of the site no longer refuses a later one: exit 3 at start is gone)
    # exit 6: another live run holds the site's lease
    with statedb.editing(crawls.db_path) as conn:
        site_key = conn.execute("SELECT site FROM runs").fetchone()[0]
        conn.execute(
            "INSERT INTO runs (spider, site, started_at, state) VALUES ('docs', ?, ?, 'running')",
            (site_key, utcnow().isoformat()),
        )
        run_id = conn.execute("SELECT MAX(id) FROM runs").fetchone()[0]
        conn.execute("DELETE FROM leases")
        now = utcnow().isoformat()
        conn.execute(
            "INSERT INTO leases VALUES (?, ?, 'other-host pid 1', ?, ?)", (site_key, run_id, now, now)
        )
    busy = await crawls.crawl(sitemap, **SPIDERMON)
    assert busy.exit_code == 6
    did_not_begin("one run at a time")

    # exit 5: the database is corrupt (or unreachable)
    crawls.db_path.write_bytes(b"not a database" * 100)
    broken = await crawls.crawl(sitemap, **SPIDERMON)
    assert broken.exit_code == 5
    did_not_begin("corrupt")


def test_a_normal_run_with_spidermon_prints_no_warning(site: Site, tmp_path: Path) -> None:
    """``scrapy crawl`` as a user runs it with the suite listed: the monitors pass and nothing
    else is said (Spidermon's runner logs through the deprecated ``Spider.log()``: filtered where
    recrawler places Spidermon, for Spidermon's own module only)."""
    names = [f"p{i}.html" for i in range(3)]
    for name in names:
        site.write(name, docsite.page(name, [("Intro", [f"Page {name}."])]), mtime=T0)
    sitemap = site.write_sitemap(names)
    run = shell.run_in_checkout(
        shell.scrapy_crawl_argv(
            sitemap,
            f"RECRAWLER_DB_URI=sqlite:///{tmp_path / 'state.db'}",
            "SPIDERMON_ENABLED=1",
            'EXTENSIONS={"spidermon.contrib.scrapy.extensions.Spidermon": 500}',
            "SPIDERMON_ENGINE_STOP_MONITORS=recrawler.monitors.RunOutcomeMonitorSuite",
            "LOG_LEVEL=INFO",
        ),
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "[Spidermon] " in run.stderr
    assert "OK" in run.stderr
    assert [line for line in run.stderr.splitlines() if "Warning" in line or "py.warnings" in line] == []
