"""The progress line: drawn in place on a terminal, nothing at all anywhere else."""

from __future__ import annotations

import io
import os
import pty

from recrawler.terminal import Progress


class Tty(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_nothing_is_written_when_the_stream_is_not_a_terminal() -> None:
    out = io.StringIO()
    with Progress("embedding", total=10, unit="texts", stream=out) as progress:
        progress.advance(5)
        progress.status("waiting", left=3)
    assert not progress.active
    assert out.getvalue() == ""


def test_a_terminal_sees_counts_and_the_time_left_redrawn_in_place() -> None:
    out, clock = Tty(), Clock()
    with Progress("embedding", total=100, unit="texts", stream=out, clock=clock) as progress:
        clock.now += 10
        progress.advance(25)
        assert progress.line() == "embedding: 25/100 texts (25%), about 30s left"
        clock.now += 10
        progress.status("waiting 50s", left=50)
        assert progress.line() == "embedding: 25/100 texts (25%), waiting 50s, about 50s left"
        clock.now += 20
        assert progress.line().endswith("about 30s left")
    written = out.getvalue()
    assert written.startswith("\rembedding: 25/100 texts (25%), about 30s left\x1b[K")
    assert "\n" not in written
    # closed: the line is erased for the command's own output
    assert written.endswith("\r\x1b[K")


def test_redraws_are_throttled_but_a_new_status_always_shows() -> None:
    out, clock = Tty(), Clock()
    progress = Progress("fetching", total=1000, stream=out, clock=clock, interval=1.0)
    for _ in range(500):
        progress.advance()
    assert out.getvalue().count("\r") == 1
    progress.status("again")
    assert out.getvalue().count("\r") == 2
    progress.close()


def test_a_page_cannot_drive_the_terminal_through_the_status() -> None:
    out = Tty()
    with Progress("calibrate", stream=out) as progress:
        progress.status("fetching https://x/\x1b[2J")
    assert "\x1b[2J" not in out.getvalue()
    assert "\\x1b[2J" in out.getvalue()


def test_a_real_pseudo_terminal_is_a_terminal() -> None:
    leader, follower = pty.openpty()
    try:
        with open(follower, "w", encoding="utf-8", closefd=False) as stream:
            progress = Progress("embedding", total=2, stream=stream)
            assert progress.active
            progress.advance(2)
            progress.close()
        assert b"embedding: 2/2 (100%)" in os.read(leader, 1024)
    finally:
        os.close(leader)
        os.close(follower)
