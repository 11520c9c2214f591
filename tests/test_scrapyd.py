"""recrawler on a real Scrapyd (loopback): scrapyd-deploy from this checkout, ``docs`` scheduled twice.

Scrapyd 1.6 needs ``pkg_resources`` (setuptools < 81), so it lives in its own virtualenv, named by
``RECRAWLER_TEST_SCRAPYD_VENV`` (``.ci/run`` builds one): Scrapyd, scrapyd-client, setuptools
>= 77, < 81 and recrawler's dependencies, without recrawler itself (the deployed egg carries it).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import threading
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests import docsite
from tests.conftest_mockserver import REPO_ROOT
from tests.waiting import until

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.conftest_mockserver import Site

SCRAPYD_VENV = os.environ.get("RECRAWLER_TEST_SCRAPYD_VENV")
pytestmark = [
    pytest.mark.skipif(
        not SCRAPYD_VENV,
        reason="RECRAWLER_TEST_SCRAPYD_VENV is not set: a virtualenv with Scrapyd 1.6, scrapyd-client, "
        "setuptools>=77,<81 and recrawler's dependencies (.ci/run builds one)",
    ),
    pytest.mark.timeout(300),
]
T0 = 1_760_000_000.0
#: what scrapyd-deploy packs: the package and what its build reads
PROJECT_FILES = ("pyproject.toml", "setup.py", "scrapy.cfg", "README.md")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clean_env() -> dict[str, str]:
    """This process's environment without what would point Scrapyd's jobs at this checkout's code,
    database or settings: the jobs run the deployed egg with their defaults."""
    drop = ("PYTHONPATH", "SCRAPY_SETTINGS_MODULE", "SCRAPY_PROJECT")
    return {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("RECRAWLER_")}


class Output:
    """Scrapyd's own log as it comes, read on a thread: lines, and a wait for one."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.changed = threading.Condition()

    def read(self, stream: Any) -> None:
        for line in stream:
            with self.changed:
                self.lines.append(line)
                self.changed.notify_all()

    def wait_for(self, *texts: str, timeout: float = 60.0) -> str:
        """The first line holding every one of *texts*, once Scrapyd has logged it."""

        def line() -> str | None:
            return next((x for x in self.lines if all(t in x for t in texts)), None)

        with self.changed:
            found = self.changed.wait_for(line, timeout)
        if found is None:
            pytest.fail(f"Scrapyd did not log {texts!r}:\n" + "".join(self.lines[-20:]))
        return found


@dataclass
class Scrapyd:
    url: str
    workdir: Path
    venv: Path
    output: Output
    project: str = "recrawler"
    spider: str = "docs"

    def get(self, endpoint: str, **params: str) -> Any:
        with urllib.request.urlopen(f"{self.url}{endpoint}?{urllib.parse.urlencode(params)}") as resp:
            return json.load(resp)

    def post(self, endpoint: str, fields: list[tuple[str, str]]) -> Any:
        data = urllib.parse.urlencode(fields).encode()
        with urllib.request.urlopen(f"{self.url}{endpoint}", data=data) as resp:
            return json.load(resp)

    def schedule(self, sitemap_url: str, **settings: str) -> str:
        """``curl .../schedule.json -d project=recrawler -d spider=docs -d sitemap_url=...``."""
        fields = [("project", self.project), ("spider", self.spider), ("sitemap_url", sitemap_url)]
        fields += [("setting", f"{name}={value}") for name, value in settings.items()]
        answer = self.post("schedule.json", fields)
        assert answer["status"] == "ok", answer
        return str(answer["jobid"])

    def wait(self, job: str, deadline_secs: float = 120.0) -> None:
        """Wait until Scrapyd lists *job* as finished."""

        def finished() -> bool:
            jobs = self.get("listjobs.json", project=self.project)
            return any(j["id"] == job for j in jobs["finished"])

        # Scrapyd reports job state only when asked
        try:
            until(finished, f"job {job} to finish", timeout=deadline_secs, poll=0.2)
        except AssertionError:
            pytest.fail(f"job {job} did not finish:\n{self.log(job)}")

    def log(self, job: str) -> str:
        path = self.workdir / "logs" / self.project / self.spider / f"{job}.log"
        return path.read_text(encoding="utf-8") if path.exists() else "(no log)"


@pytest.fixture
def scrapyd(tmp_path: Path) -> Iterator[Scrapyd]:
    assert SCRAPYD_VENV is not None
    with running_scrapyd(tmp_path, Path(SCRAPYD_VENV)) as server:
        yield server


@contextlib.contextmanager
def running_scrapyd(tmp_path: Path, venv: Path) -> Iterator[Scrapyd]:
    """Scrapyd from *venv* on a free loopback port, with its own folders under *tmp_path*."""
    if not (venv / "bin" / "scrapyd").exists():
        pytest.fail(f"{venv}: no bin/scrapyd in it")
    workdir = tmp_path / "scrapyd"
    workdir.mkdir()
    port = free_port()
    (workdir / "scrapyd.conf").write_text(
        "[scrapyd]\n"
        "bind_address = 127.0.0.1\n"
        f"http_port = {port}\n"
        f"eggs_dir = {workdir / 'eggs'}\n"
        f"logs_dir = {workdir / 'logs'}\n"
        f"dbs_dir = {workdir / 'dbs'}\n"
        "items_dir =\n"
        "poll_interval = 0.2\n"
        "max_proc = 2\n",
        encoding="utf-8",
    )
    # scrapyd.conf is read from the working directory; the jobs start there too
    process = subprocess.Popen(
        [str(venv / "bin" / "scrapyd")],
        cwd=workdir,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    with process:
        try:
            assert process.stdout is not None
            seen: list[str] = []
            for line in process.stdout:
                seen.append(line)
                if f"Site starting on {port}" in line:
                    break
            else:
                pytest.fail("Scrapyd did not start:\n" + "".join(seen))
            # keep reading its log, so a full pipe never stalls it
            output = Output(seen)
            threading.Thread(target=output.read, args=(process.stdout,), daemon=True).start()
            yield Scrapyd(url=f"http://127.0.0.1:{port}/", workdir=workdir, venv=venv, output=output)
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def deploy(scrapyd: Scrapyd, tmp_path: Path) -> None:
    """``scrapyd-deploy`` from a copy of this checkout, its deploy target pointed at the test's Scrapyd
    (it writes build/ and *.egg-info/ where it runs)."""
    project = tmp_path / "project"
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO_ROOT / "recrawler", project / "recrawler", ignore=skip)
    for name in PROJECT_FILES:
        shutil.copy(REPO_ROOT / name, project / name)
    cfg = project / "scrapy.cfg"
    text = cfg.read_text(encoding="utf-8")
    assert "url = http://localhost:6800/" in text
    cfg.write_text(text.replace("http://localhost:6800/", scrapyd.url), encoding="utf-8")
    done = subprocess.run(
        [str(scrapyd.venv / "bin" / "scrapyd-deploy")],
        cwd=project,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = done.stdout + done.stderr
    # scrapyd-deploy exits 0 even when Scrapyd refuses the egg: read the server's answer
    assert done.returncode == 0, output
    assert '"status": "ok"' in output, output
    assert scrapyd.get("listspiders.json", project="recrawler")["spiders"] == ["docs"]


def write_site(site: Site) -> str:
    for name in ("a", "b"):
        site.write(f"{name}.html", docsite.page(name.upper(), [("Intro", [f"Text of {name}."])]), mtime=T0)
    return site.write_sitemap(["a.html", "b.html"])


def test_docs_on_scrapyd_twice(scrapyd: Scrapyd, site: Site, tmp_path: Path) -> None:
    deploy(scrapyd, tmp_path)
    sitemap = write_site(site)
    # every page checked each run, none audited: the second run is all conditional requests
    common = {"RECRAWLER_SCHEDULE": "all", "RECRAWLER_AUDIT_SAMPLE": "0"}
    reports = []
    jobs = []
    for n in (1, 2):
        report = tmp_path / f"report{n}.json"
        job = scrapyd.schedule(sitemap, RECRAWLER_REPORT_FILE=str(report), **common)
        jobs.append(job)
        scrapyd.wait(job)
        assert report.exists(), scrapyd.log(job)
        reports.append(json.loads(report.read_text(encoding="utf-8")))
    first, second = reports
    assert (first["counts"]["new"], first["counts"]["unchanged"]) == (2, 0)
    counts = second["counts"]
    assert (counts["new"], counts["changed"], counts["unchanged"], counts["errors"]) == (0, 0, 2, 0)
    assert (counts["validators_sent"], counts["not_modified"]) == (2, 2)
    pages = [r for r in site.requests() if r["path"] in ("a.html", "b.html")]
    assert [r["status"] for r in pages] == [200, 200, 304, 304]
    # both jobs used one database: recrawler.db in Scrapy's data directory of the job's working
    # directory, not beside Scrapyd's own dbs/
    db = (scrapyd.workdir / ".scrapy" / "recrawler.db").resolve()
    assert db.exists()
    assert first["db"] == second["db"] == f"sqlite:///{db}"
    assert not (scrapyd.workdir / "recrawler.db").exists()

    # a job refused at start (here: a corrupt database) is "finished" to Scrapyd like any other;
    # its report file says what happened, without Scrapyd's log
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"not a database" * 100)
    report = tmp_path / "refused.json"
    job = scrapyd.schedule(
        sitemap, RECRAWLER_DB_URI=f"sqlite:///{corrupt}", RECRAWLER_REPORT_FILE=str(report), **common
    )
    scrapyd.wait(job)
    assert report.exists(), scrapyd.log(job)
    refused = json.loads(report.read_text(encoding="utf-8"))
    assert refused["outcome"] == {"state": "refused", "reasons": ["recrawler_state_error"], "exit_code": 5}
    assert "corrupt" in refused["error"]
    # Scrapyd's own log tells them apart, as docs/operating.md's table of exit codes says
    for done in jobs:
        scrapyd.output.wait_for("Process finished: ", f"job={done!r}")
    scrapyd.output.wait_for("Process died: exitstatus=5 ", f"job={job!r}")
    table = (REPO_ROOT / "docs" / "operating.md").read_text(encoding="utf-8")
    assert "| 5 |" in table
    assert "`Process died: exitstatus=5 project=...`" in table
    assert "`Process finished: project='...' spider='docs' job='...'`" in table


USER_VENV = os.environ.get("RECRAWLER_TEST_SCRAPYD_USER_VENV")
USER_SETTINGS = """\
BOT_NAME = "docsbot"
SPIDER_MODULES = ["docsbot.spiders"]
ADDONS = {"recrawler.addon.RecrawlerAddon": 0}
"""
USER_SPIDER = """\
from recrawler.spiders import RecrawlSitemapSpider


class SupportDocsSpider(RecrawlSitemapSpider):
    name = "supportdocs"
"""


@pytest.mark.skipif(
    not USER_VENV,
    reason="RECRAWLER_TEST_SCRAPYD_USER_VENV is not set: Scrapyd's virtualenv for projects that "
    "depend on recrawler (recrawler installed in it; .ci/run builds one)",
)
def test_a_project_that_depends_on_recrawler_deploys_to_scrapyd_with_recrawler_installed(
    site: Site, tmp_path: Path
) -> None:
    """A user's own Scrapy project (its egg carries its spiders, not recrawler): Scrapyd's
    virtualenv has recrawler installed, as docs/deploy.md says."""
    assert USER_VENV is not None
    project = tmp_path / "docsbot"
    (project / "docsbot" / "spiders").mkdir(parents=True)
    (project / "docsbot" / "__init__.py").write_text("", encoding="utf-8")
    (project / "docsbot" / "settings.py").write_text(USER_SETTINGS, encoding="utf-8")
    (project / "docsbot" / "spiders" / "__init__.py").write_text("", encoding="utf-8")
    (project / "docsbot" / "spiders" / "support.py").write_text(USER_SPIDER, encoding="utf-8")
    with running_scrapyd(tmp_path, Path(USER_VENV)) as server:
        server.project, server.spider = "docsbot", "supportdocs"
        (project / "scrapy.cfg").write_text(
            f"[settings]\ndefault = docsbot.settings\n\n[deploy]\nurl = {server.url}\nproject = docsbot\n",
            encoding="utf-8",
        )
        done = subprocess.run(
            [str(server.venv / "bin" / "scrapyd-deploy")],
            cwd=project,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        output = done.stdout + done.stderr
        assert done.returncode == 0, output
        assert '"status": "ok"' in output, output
        assert server.get("listspiders.json", project="docsbot")["spiders"] == ["supportdocs"]
        report = tmp_path / "report.json"
        job = server.schedule(write_site(site), RECRAWLER_REPORT_FILE=str(report), RECRAWLER_AUDIT_SAMPLE="0")
        server.wait(job)
        assert report.exists(), server.log(job)
        counts = json.loads(report.read_text(encoding="utf-8"))["counts"]
        assert (counts["new"], counts["errors"]) == (2, 0)
