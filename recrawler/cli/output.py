"""Terminal output of the CLI: control characters escaped, tables, JSON lines, dates and durations."""

from __future__ import annotations

import json
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from recrawler.terminal import terminal_safe

if TYPE_CHECKING:
    from typing import TextIO

__all__ = ["Column", "Table", "TerminalOut", "duration", "json_line", "terminal_safe", "when"]


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


def _json_default(value: object) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, set | frozenset):
        return sorted(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def json_line(value: object) -> str:
    """*value* as one line of JSON: bytes as hex, datetimes as ISO 8601, sets as sorted lists."""
    return json.dumps(value, default=_json_default) + "\n"


class Column:
    """A table column: its header, its width (at least the header's; longer values push the next
    columns right) and its alignment (numbers right)."""

    __slots__ = ("name", "right", "width")

    def __init__(self, name: str, width: int = 0, *, right: bool = False) -> None:
        self.name = name
        self.width = max(width, len(name))
        self.right = right

    def cell(self, value: object) -> str:
        """*value* padded to the column (``-`` for None)."""
        text = "-" if value is None else str(value)
        return text.rjust(self.width) if self.right else text.ljust(self.width)


class Table:
    """Rows under a header line, in columns of fixed widths so rows stream as they are read; a
    table without rows writes *empty* instead (``no pages stored``)."""

    def __init__(self, out: TextIO, columns: list[Column], *, empty: str) -> None:
        self.out = out
        self.columns = columns
        self.empty = empty
        self.rows = 0

    def _write(self, cells: list[str]) -> None:
        # padding only: a trailing control character from the database is shown, escaped
        self.out.write("  ".join(cells).rstrip(" ") + "\n")

    def row(self, *values: object) -> None:
        """Write one row (the header first)."""
        if not self.rows:
            self._write([c.cell(c.name) for c in self.columns])
        self.rows += 1
        self._write([c.cell(v) for c, v in zip(self.columns, values, strict=True)])

    def end(self) -> int:
        """Say so when there were no rows; return how many there were."""
        if not self.rows:
            self.out.write(self.empty + "\n")
        return self.rows
