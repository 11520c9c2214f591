"""Scrapy's log lines without the credentials URLs carry: RedactingLogFormatter, mask_logger."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy.logformatter import LogFormatter

from recrawler.items import Page
from recrawler.redact import redact_text

if TYPE_CHECKING:
    from scrapy.logformatter import LogFormatterResult


class RedactingLogFormatter(LogFormatter):
    """Scrapy's ``LogFormatter`` with credentials masked in every line it formats: a
    ``?token=...`` or ``?api_key=...`` of a sitemap or page URL, a URL's password, key shapes
    (see :func:`recrawler.redact.redact_text`). The add-on installs it when ``LOG_FORMATTER`` is
    Scrapy's own."""

    def crawled(self, *args: Any, **kwargs: Any) -> LogFormatterResult:
        """``Crawled (200) <GET ...>``, masked."""
        return _masked(super().crawled(*args, **kwargs))

    def scraped(self, *args: Any, **kwargs: Any) -> LogFormatterResult:
        """``Scraped from <200 ...>``, masked; a ``Page`` as one short line, never its text."""
        return _one_line(_masked(super().scraped(*args, **kwargs)))

    def dropped(self, *args: Any, **kwargs: Any) -> LogFormatterResult:
        """``Dropped: ...``, masked; a ``Page`` as one short line, never its text."""
        return _one_line(_masked(super().dropped(*args, **kwargs)))

    def item_error(self, *args: Any, **kwargs: Any) -> LogFormatterResult:
        """``Error processing ...``, masked."""
        return _masked(super().item_error(*args, **kwargs))

    def spider_error(self, *args: Any, **kwargs: Any) -> LogFormatterResult:
        """``Spider error processing <GET ...>``, masked."""
        return _masked(super().spider_error(*args, **kwargs))

    def download_error(self, *args: Any, **kwargs: Any) -> LogFormatterResult:
        """``Error downloading <GET ...>``, masked."""
        return _masked(super().download_error(*args, **kwargs))


class Masked:
    """An argument rendered masked, only when its line is emitted (most are below the log level)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __str__(self) -> str:
        return redact_text(str(self.value))


def masked(value: Any) -> Any:
    """*value* as a log argument that shows no credentials (numbers stay numbers, for ``%d``)."""
    return value if isinstance(value, int | float) else Masked(value)


class _MaskArgs(logging.Filter):
    """Masks the arguments of every record of the logger it is added to (see :func:`masked`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, dict):
            record.args = {name: masked(value) for name, value in args.items()}
        elif args:
            record.args = tuple(masked(value) for value in args)
        return True


def mask_logger(logger: logging.Logger) -> None:
    """Mask credentials in what *logger* logs (a Scrapy component's, whose lines show request URLs)."""
    if not any(isinstance(f, _MaskArgs) for f in logger.filters):
        logger.addFilter(_MaskArgs())


def _one_line(result: LogFormatterResult) -> LogFormatterResult:
    """Scrapy puts the item on a line of its own; a Page's short form goes on the same line."""
    args = result["args"]
    item = args.get("item") if isinstance(args, dict) else None
    if isinstance(item, Masked) and isinstance(item.value, Page):
        return {**result, "msg": " ".join(str(result["msg"]).split())}
    return result


def _masked(result: LogFormatterResult) -> LogFormatterResult:
    args = result["args"]
    if isinstance(args, dict):
        return {**result, "args": {name: masked(value) for name, value in args.items()}}
    return {**result, "args": tuple(masked(value) for value in args)}


__all__ = ["Masked", "RedactingLogFormatter", "mask_logger", "masked"]
