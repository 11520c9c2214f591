"""Terminal output: control characters escaped, and a one-line progress display shown only on a TTY."""

from __future__ import annotations

import re
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType
    from typing import Self, TextIO

__all__ = ["Progress", "terminal_safe"]

# C0 and C1 controls but tab and newline: what a page or a database holds never drives the terminal
_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# return to the line's start, and erase to its end (ECMA-48 EL)
_REDRAW, _ERASE = "\r", "\x1b[K"


def terminal_safe(text: str) -> str:
    """Return *text* with control characters shown as escapes (``\\x1b``); tab and newline stay."""
    return _UNSAFE.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _secs(secs: float) -> str:
    secs = max(0, round(secs))
    if secs < 60:
        return f"{secs}s"
    if secs < 3600:
        return f"{secs // 60}m{secs % 60:02d}s"
    return f"{secs // 3600}h{secs // 60 % 60:02d}m"


class Progress:
    """What a long step is doing and how long is left, as one line redrawn in place on *stream*
    (``sys.stderr`` by default) when it is a terminal; nothing at all otherwise (logs, pipes, cron).

        with Progress("embedding", total=n, unit="texts") as progress:
            for batch in batches:
                ...
                progress.advance(len(batch))

    The time left is *left* when a step knows it (a wait), else estimated from the rate so far.
    """

    def __init__(
        self,
        label: str,
        total: int | None = None,
        *,
        unit: str = "",
        stream: TextIO | None = None,
        interval: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.done = 0
        self.stream: TextIO = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        #: False: every call is a no-op (the stream is not a terminal)
        self.active: bool = bool(isatty and isatty())
        self._interval = interval
        self._clock = clock
        self._started = clock()
        self._drawn = -interval
        self._status = ""
        self._left: float | None = None
        self._deadline: float | None = None
        self._shown = False

    def advance(self, n: int = 1, *, status: str | None = None) -> None:
        """Count *n* more units done (and say what is being done now)."""
        self.done += n
        if status is not None:
            self._status = status
        self._deadline = None
        self._draw()

    def status(self, text: str, *, left: float | None = None) -> None:
        """Say what is being done now; *left*: the seconds this step still needs, when known."""
        self._status = text
        self._deadline = None if left is None else self._clock() + left
        self._draw(force=True)

    def tick(self) -> None:
        """Redraw (a countdown given to :meth:`status` moves on)."""
        self._draw()

    def line(self) -> str:
        """The progress line as it would be drawn now."""
        parts = [self.label]
        if self.total is not None:
            pct = f" ({100 * self.done // self.total}%)" if self.total else ""
            parts.append(f"{self.done}/{self.total} {self.unit}".rstrip() + pct)
        elif self.done:
            parts.append(f"{self.done} {self.unit}".rstrip())
        if self._status:
            parts.append(self._status)
        left = self._time_left()
        if left is not None:
            parts.append(f"about {_secs(left)} left")
        return terminal_safe(": ".join(parts[:2]) + "".join(f", {p}" for p in parts[2:]))

    def _time_left(self) -> float | None:
        now = self._clock()
        if self._deadline is not None:
            return max(self._deadline - now, 0.0)
        elapsed = now - self._started
        if self.total is None or not self.done or elapsed <= 0:
            return None
        return (self.total - self.done) * elapsed / self.done

    def _draw(self, *, force: bool = False) -> None:
        if not self.active:
            return
        now = self._clock()
        if not force and now - self._drawn < self._interval:
            return
        self._drawn = now
        self._shown = True
        self.stream.write(_REDRAW + self.line() + _ERASE)
        self.stream.flush()

    def close(self) -> None:
        """Erase the line (what was done is for the command's own output to say)."""
        if self.active and self._shown:
            self.stream.write(_REDRAW + _ERASE)
            self.stream.flush()
        self.active = False

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
