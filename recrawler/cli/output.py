"""Terminal output of the CLI: control characters escaped, dates and durations in one format."""

from __future__ import annotations

from typing import TYPE_CHECKING

from recrawler.terminal import terminal_safe

if TYPE_CHECKING:
    from datetime import datetime
    from typing import TextIO

__all__ = ["TerminalOut", "duration", "terminal_safe", "when"]


class TerminalOut:
    """Passes writes on to *out* made :func:`terminal_safe` (URLs, titles, chunks, diffs, ...)."""

    __slots__ = ("_out",)

    def __init__(self, out: TextIO) -> None:
        self._out = out

    def write(self, text: str) -> int:
        """Write *text* with its control characters escaped."""
        self._out.write(terminal_safe(text))
        return len(text)

    def flush(self) -> None:
        """Flush the wrapped stream."""
        self._out.flush()


def when(value: datetime | None) -> str:
    """A timestamp to the minute, or ``-``."""
    return value.strftime("%Y-%m-%d %H:%M") if value is not None else "-"


def duration(secs: float | None) -> str:
    """Seconds in the largest unit that fits (``1.5d``, ``3.0h``, ``12.0m``, ``40s``)."""
    if secs is None:
        return "-"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if secs >= size:
            return f"{secs / size:.1f}{unit}"
    return f"{secs:.0f}s"
