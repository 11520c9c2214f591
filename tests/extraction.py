"""Helpers shared by the extraction tests (``tests/test_extract_*.py``)."""

from __future__ import annotations

from recrawler.extract import ContentExtractor


def text(html: str | bytes, **kwargs: list[str]) -> str:
    return ContentExtractor(**kwargs).extract(html).text


def doc(body: str, head: str = "<title>T</title>") -> str:
    return f"<!DOCTYPE html><html><head>{head}</head><body>{body}</body></html>"
