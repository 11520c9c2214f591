"""Commands as a user types them: ``recrawler ...`` in this process or as a process of its own."""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from recrawler.cli import main as cli_main

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
