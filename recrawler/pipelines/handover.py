"""What ClassifyPipeline decided for a page: handed to IndexPipeline on the Page itself."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from recrawler.items import PageStatus
    from recrawler.state import ChangeRow, Event, FieldsRow, PageRecord


@dataclass(slots=True, kw_only=True)
class PageUpdate:
    """What ClassifyPipeline decided for a page, waiting to be written with it (``Page.update``
    carries it to IndexPipeline when the knowledge base is kept)."""

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


__all__ = ["PageUpdate"]
