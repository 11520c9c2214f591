"""Event sinks: where committed outbox events are delivered (JSONL files for now)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import unquote, urlsplit

from recrawler.exceptions import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Sequence


class EventSink(Protocol):
    """Receives JSON lines of committed events, in commit order (at-least-once)."""

    def deliver(self, lines: Sequence[str]) -> None:
        """Deliver *lines* durably or raise."""

    def close(self) -> None:
        """Release resources."""


class JsonLinesSink:
    """Appends one JSON object per line to a file, fsynced per delivered batch."""

    def __init__(self, path: str) -> None:
        self.path = path
        parent = Path(path).resolve().parent
        if not parent.is_dir():
            msg = f"RECRAWLER_EVENTS_URI: directory {str(parent)!r} does not exist"
            raise ConfigurationError(msg)

    def deliver(self, lines: Sequence[str]) -> None:
        """Append *lines* and fsync."""
        with Path(self.path).open("a", encoding="utf-8") as fh:
            fh.write("".join(line + "\n" for line in lines))
            fh.flush()
            os.fsync(fh.fileno())

    def close(self) -> None:
        """Nothing is kept open between batches."""


def sink_from_uri(uri: str | None) -> EventSink | None:
    """Build the sink for ``RECRAWLER_EVENTS_URI`` (``file:///path`` or a bare path)."""
    if not uri:
        return None
    if "://" not in uri:
        return JsonLinesSink(uri)
    parts = urlsplit(uri)
    if parts.scheme != "file":
        msg = f"RECRAWLER_EVENTS_URI: unsupported scheme {parts.scheme!r} in {uri!r} (use file:///path.jsonl)"
        raise ConfigurationError(msg)
    return JsonLinesSink(unquote(parts.path))
