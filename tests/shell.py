"""Commands as a user types them: ``recrawler ...`` in this process or as a process of its own, and
``scrapy crawl docs`` as a process."""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from recrawler.cli import main as cli_main
from tests.conftest_mockserver import REPO_ROOT

if TYPE_CHECKING:
    from pathlib import Path

    import pytest


def run_cli(*argv: str) -> tuple[int, str]:
    """``recrawler *argv`` in this thread: its exit code and what it wrote to stdout."""
    out = io.StringIO()
    code = cli_main(list(argv), out)
    return code, out.getvalue()


def cli(*argv: str) -> tuple[int, str]:
    """:func:`run_cli` on a thread of its own (some commands run an event loop of their own)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run_cli, *argv).result()


async def acli(*argv: str) -> tuple[int, str]:
    """:func:`run_cli` off the reactor's loop, which goes on meanwhile (as beside a separate process)."""
    return await asyncio.to_thread(run_cli, *argv)


async def acli_out(*argv: str) -> str:
    """:func:`acli` of a command that must succeed: what it wrote to stdout."""
    code, out = await acli(*argv)
    assert code == 0
    return out


def cli_captured(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """``recrawler *argv`` writing where it would in a shell: its exit code and what pytest captured
    of it, stdout then stderr."""
    capsys.readouterr()
    code = cli_main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


def recrawler_process(
    *argv: str, timeout: float = 60, check: bool = False
) -> subprocess.CompletedProcess[str]:
    """``recrawler *argv`` as a process of its own, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "recrawler.cli", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=check,
    )


def crawl_args(sitemap: str, *settings: str, spider: str = "docs") -> list[str]:
    """The words after ``scrapy``: ``crawl docs -a sitemap_url=SITEMAP -s NAME=value ...``."""
    argv = ["crawl", spider, "-a", f"sitemap_url={sitemap}"]
    for setting in settings:
        argv += ["-s", setting]
    return argv


def scrapy_crawl_argv(sitemap: str, *settings: str, spider: str = "docs") -> list[str]:
    """``scrapy crawl docs`` over *sitemap* with *settings* (``NAME=value`` each), in this interpreter."""
    return [sys.executable, "-m", "scrapy", *crawl_args(sitemap, *settings, spider=spider)]


def run_in_checkout(
    argv: list[str], *, timeout: float = 120, check: bool = False
) -> subprocess.CompletedProcess[str]:
    """*argv* run to its end in the checkout (the project its scrapy.cfg names), its output captured."""
    return subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout, check=check)


def scrapy_crawl(
    sitemap: str, *settings: str, timeout: float = 120, check: bool = False
) -> subprocess.CompletedProcess[str]:
    """:func:`scrapy_crawl_argv` run to its end in the checkout, its output captured."""
    return run_in_checkout(scrapy_crawl_argv(sitemap, *settings), timeout=timeout, check=check)


class Watched:
    """A process whose stderr is read line by line as it comes: a test waits for a log line (an
    event), never for a while. Use as a context manager: the process is killed on the way out."""

    def __init__(
        self, argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None
    ) -> None:
        self.process = subprocess.Popen(
            argv,
            cwd=cwd or REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._done = True
            self._changed.notify_all()

    _done = False

    def wait_line(self, text: str, timeout: float = 120.0) -> str:
        """The first line that contains *text*, once the process has written it."""
        with self._changed:
            found = self._changed.wait_for(
                lambda: any(text in line for line in self.lines) or self._done, timeout=timeout
            )
            match = next((line for line in self.lines if text in line), None)
        if not found or match is None:
            tail = "\n".join(self.lines[-40:])
            raise AssertionError(f"no line with {text!r} (exit {self.process.poll()}):\n{tail}")
        return match

    def wait(self, timeout: float) -> int:
        """The exit code, once the process has ended (and its stderr is read to the end)."""
        code = self.process.wait(timeout=timeout)
        self._reader.join(timeout=timeout)
        return code

    @property
    def stderr(self) -> str:
        with self._changed:
            return "\n".join(self.lines)

    def __enter__(self) -> Watched:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=30)
        self._reader.join(timeout=30)
        assert self.process.stderr is not None
        self.process.stderr.close()
