"""What ClassifyPipeline decided for a page, and the hand-over of it to IndexPipeline."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from recrawler.items import Page, PageStatus
    from recrawler.state import ChangeRow, Event, FieldsRow, PageRecord


@dataclass(slots=True, kw_only=True)
class PageUpdate:
    """What ClassifyPipeline decided for a page, waiting to be written."""

    page: Page
    status: PageStatus
    record: PageRecord
    #: how an unchanged verdict was reached: not_modified, hash, rebaseline or fuzzy
    how: str = ""
    events: list[Event] = field(default_factory=list)
    #: the page's new field-level record (None: keep the stored one)
    fields: FieldsRow | None = None
    #: an entry for the page's history
    change: ChangeRow | None = None
    #: the page was quarantined and is back: it counts as restored
    restored: bool = False
    #: the page has text but no chunks yet (stored before indexing was on): index it
    backfill: bool = False
    #: the page answers with what the knowledge base shows again: what unpublished runs changed
    #: of it is undone
    revert: bool = False


class PendingUpdates:
    """Updates handed from ClassifyPipeline to IndexPipeline, by page key; bounded, oldest dropped
    (a dropped update only means the page is checked again next run)."""

    def __init__(self, maxsize: int = 10_000) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[str, PageUpdate] = OrderedDict()

    def put(self, update: PageUpdate) -> None:
        """Hand *update* over."""
        self._data[update.page.key] = update
        if len(self._data) > self.maxsize:
            self._data.popitem(last=False)

    def pop(self, key: str) -> PageUpdate | None:
        """Take the update for *key*."""
        return self._data.pop(key, None)


__all__ = ["PageUpdate", "PendingUpdates"]
