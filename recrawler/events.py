"""Event sinks: where committed outbox events are delivered (JSONL files, signed webhooks)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import unquote, urlsplit

from recrawler.exceptions import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from scrapy.settings import BaseSettings


class EventSink(Protocol):
    """Receives JSON lines of committed events, in commit order (at-least-once).

    The outbox hands it at most :attr:`batch_size` lines per call and deletes them once the call
    returns; a sink that is not :attr:`immediate` (a network service) is called only when a
    delivery is asked for (``deliver()``: the end of a run, ``recrawler events deliver``), never
    after each commit nor when the store opens or closes.
    """

    batch_size: int
    immediate: bool

    def deliver(self, lines: Sequence[str]) -> None:
        """Deliver *lines* durably or raise ``OSError``."""

    def close(self) -> None:
        """Release resources."""


class JsonLinesSink:
    """Appends one JSON object per line to a file, fsynced per delivered batch."""

    batch_size = 1000
    immediate = True

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


class FanOutSink:
    """Several sinks fed the same lines in turn: each at-least-once (a failing one makes the ones
    before it receive the lines again next time)."""

    def __init__(self, sinks: Sequence[EventSink]) -> None:
        self.sinks = list(sinks)
        self.batch_size = min(s.batch_size for s in self.sinks)
        self.immediate = all(s.immediate for s in self.sinks)

    def __repr__(self) -> str:
        return " and ".join(repr(getattr(s, "path", s)) for s in self.sinks)

    def deliver(self, lines: Sequence[str]) -> None:
        """Deliver *lines* to every sink, in order."""
        for sink in self.sinks:
            sink.deliver(lines)

    def close(self) -> None:
        """Close every sink."""
        for sink in self.sinks:
            sink.close()


def sink_from_settings(settings: BaseSettings) -> EventSink | None:
    """The sink of ``RECRAWLER_WEBHOOK_URL`` and ``RECRAWLER_EVENTS_URI`` (both: the webhook first,
    as its receiver deduplicates by idempotency key), or None when neither is set."""
    from recrawler.webhooks import WebhookSink

    sinks: list[EventSink] = [
        s
        for s in (WebhookSink.from_settings(settings), sink_from_uri(settings.get("RECRAWLER_EVENTS_URI")))
        if s is not None
    ]
    if not sinks:
        return None
    return sinks[0] if len(sinks) == 1 else FanOutSink(sinks)


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
