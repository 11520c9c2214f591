"""Item pipelines: ClassifyPipeline decides, IndexPipeline (when enabled) adds the knowledge base;
the decision rides on the Page, and whichever runs last writes the page's state, chunks and
events in one transaction (:mod:`~recrawler.pipelines.commit`)."""

from __future__ import annotations

from recrawler.pipelines.commit import PageUpdate, commit

__all__: list[str] = ["PageUpdate", "commit"]
