"""The README, executed: its quickstart commands run as written (the bundled site on a free port),
and what it shows a command printing is what the command prints."""

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
    from pathlib import Path

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
#: the quickstart's address of the bundled site; the test serves it on a free port instead
QUICKSTART_BASE = "http://127.0.0.1:8000/"
#: quickstart lines that set up the environment this suite already runs in
SETUP = ("python3 -m venv ", "pip install ")
#: times and dates in shown output (they are the run's own)
WHEN = r"\d{4}-\d\d-\d\d \d\d:\d\d"


def blocks(after: str) -> list[str]:
    """The fenced blocks of the README that follow the heading or text *after*, up to the next heading."""
    section = README.split(after, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```[a-z]*\n(.*?)^```$", section, re.DOTALL | re.MULTILINE)


def command(line: str) -> str:
    """A shell line without its trailing comment."""
    return re.sub(r"\s+# .*$", "", line).strip()


def keys(summary: str) -> list[str]:
    """The summary line's names and separators, in order (``crawled:``, ..., ``|``, ``exit``)."""
    return re.findall(r"\||[a-z_]+(?=: )|\bexit\b|\bindex: \w+", summary)


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A directory that holds the checkout's scrapy.cfg: the quickstart's "this directory", with
    its own .scrapy/ (the test leaves the real checkout alone)."""
    shutil.copy(REPO_ROOT / "scrapy.cfg", tmp_path / "scrapy.cfg")
    return tmp_path


def test_the_quickstart_runs_as_written_and_prints_what_the_readme_shows(checkout: Path) -> None:
    (quickstart,) = blocks("## Quickstart\n")
    lines = [command(line) for line in quickstart.splitlines()]
    # a virtualenv first, and how to stop the site at the end
    assert lines[0].startswith("python3 -m venv .venv && . .venv/bin/activate")
    assert "kill %1" in lines
    assert "--port" in quickstart
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    }
    for name in ("RECRAWLER_DB_URI", "SCRAPY_SETTINGS_MODULE", "SCRAPY_PROJECT"):
        # this directory's scrapy.cfg decides, as for a user
        env.pop(name, None)
    server = None
    base = QUICKSTART_BASE
    crawls: list[subprocess.CompletedProcess[str]] = []
    searches: list[subprocess.CompletedProcess[str]] = []
    try:
        for line in lines:
            if line.startswith(SETUP):
                continue
            if line == "python examples/serve.py &":
                server = subprocess.Popen(
                    [sys.executable, str(REPO_ROOT / "examples" / "serve.py"), "--port", "0"],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                assert server.stdout is not None
                base = server.stdout.readline().split(" at ", 1)[1].split()[0]
                continue
            if line == "kill %1":
                assert server is not None
                server.terminate()
                server.communicate(timeout=10)
                continue
            argv = shlex.split(line.replace(QUICKSTART_BASE, base))
            if argv[0] == "scrapy":
                crawls.append(run([sys.executable, "-m", "scrapy", *argv[1:]], checkout, env))
            elif argv[0] == "recrawler":
                searches.append(run([sys.executable, "-m", "recrawler.cli", *argv[1:]], checkout, env))
            else:
                pytest.fail(f"a quickstart line the test does not know: {line!r}")
    finally:
        if server is not None and server.poll() is None:
            server.terminate()
            server.communicate(timeout=10)
    assert server is not None
    assert server.returncode is not None  # `kill %1` stopped it
    assert [c.returncode for c in crawls] == [0, 0], crawls[-1].stderr[-2000:]
    assert [s.returncode for s in searches] == [0]
    assert (checkout / ".scrapy" / "recrawler.db").exists()

    # the summary line the README opens with has the fields, in the order, a run prints
    (sample,) = blocks("Every run ends with one line you can grep and alert on:\n")
    first = next(line for line in crawls[0].stderr.splitlines() if "crawled: " in line)
    assert keys(first.split("INFO: ", 1)[1]) == keys(sample.strip())
    assert "crawled: 6 new: 6 changed: 0 unchanged: 0 gone: 0 errors: 0" in first
    again = next(line for line in crawls[1].stderr.splitlines() if "crawled: " in line)
    assert "new: 0 changed: 0" in again
    # `recrawler search` prints what "The knowledge base" shows, word for word but the times
    shown_command, shown_output = blocks("## The knowledge base\n")[:2]
    argv = shlex.split(command(shown_command.strip()))
    searched = run([sys.executable, "-m", "recrawler.cli", *argv[1:]], checkout, env)
    assert searched.returncode == 0
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

    # the README's Python snippets, pasted into a file in this directory, find that database
    for snippet, expect in (
        (next(b for b in blocks("From Python (a bot):\n") if "open_kb" in b), "configuration.html#retries"),
        (blocks("### LangChain retriever\n")[0], "configuration.html#retries"),
    ):
        (checkout / "snippet.py").write_text(snippet, encoding="utf-8")
        pasted = run([sys.executable, "snippet.py"], checkout, env)
        assert pasted.returncode == 0, pasted.stderr[-2000:]
        assert expect in pasted.stdout


def test_the_offline_demo_prints_what_the_readme_shows(tmp_path: Path) -> None:
    (shown,) = [b for b in blocks("### The offline demo\n") if b.startswith("run 1")]
    demo = run(
        [sys.executable, str(REPO_ROOT / "examples" / "demo.py"), "--db", str(tmp_path / "demo.db")],
        tmp_path,
        {**os.environ},
    )
    assert demo.returncode == 0, demo.stderr[-2000:]
    printed = [line for line in demo.stdout.splitlines() if line.startswith("run ")]
    assert len(printed) == len(shown.splitlines())
    for line, got in zip(shown.splitlines(), printed, strict=True):
        # each part the README shows between its "..." is printed, in that order
        pattern = ".*".join(re.escape(part.strip()) for part in line.split("...") if part.strip())
        assert re.search(pattern, got), (line, got)


def test_a_taken_port_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run(
            [sys.executable, str(REPO_ROOT / "examples" / "serve.py"), "--port", str(port)],
            tmp_path,
            {**os.environ},
        )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        f"serve.py: cannot listen on 127.0.0.1:{port}: Address already in use; "
        "use another port (--port 8001, or --port 0 for any free one)"
    ]
