"""Commands as a user types them: ``recrawler ...`` in this process or as a process of its own, and
``scrapy crawl docs`` as a process."""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from recrawler.cli import main as cli_main
from tests.conftest_mockserver import REPO_ROOT

if TYPE_CHECKING:
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
