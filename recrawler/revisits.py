"""Revisits: the schedule's part in a page's write (its next check) and what it tells after."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.utils.misc import load_object

from recrawler.items import Page, PageStatus
from recrawler.state.records import RevisitUpdate

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from recrawler.auditor import Auditor
    from recrawler.intervals import Revisit, SchedulePolicy

#: the path of the spider middleware that decides which pages are due (the schedule is on with it)
SCHEDULE_MIDDLEWARE = "recrawler.spidermiddlewares.schedule.ScheduleMiddleware"

_CHECKED = frozenset({PageStatus.NEW, PageStatus.CHANGED, PageStatus.UNCHANGED})


class Revisits:
    """The commit step's collaborator while the schedule is on (ScheduleMiddleware among the
    ``SPIDER_MIDDLEWARES``): a checked page's next revisit, written in the page's own transaction,
    and, after the write, the audit of the lastmod's claim against what the check found."""

    def __init__(self, policy: SchedulePolicy, auditor: Auditor) -> None:
        self.policy = policy
        self.auditor = auditor

    @classmethod
    def of(cls, crawler: Crawler, policy: SchedulePolicy, auditor: Auditor) -> Revisits | None:
        """The crawl's revisits, or None when no ScheduleMiddleware decides what is due."""
        schedule = load_object(SCHEDULE_MIDDLEWARE)
        middlewares = crawler.settings.getwithbase("SPIDER_MIDDLEWARES")
        for path, order in middlewares.items():
            if order is None:
                continue
            cls_ = load_object(path) if isinstance(path, str) else path
            if isinstance(cls_, type) and issubclass(cls_, schedule):
                return cls(policy, auditor)
        return None

    def revisit_update(self, page: Page, status: PageStatus) -> RevisitUpdate | None:
        """The page's next check, written in the page's own transaction (a failed write keeps
        the old schedule: the page is due again, never later than it should be)."""
        if status not in _CHECKED:
            return None
        changed, new = status == PageStatus.CHANGED, status == PageStatus.NEW
        policy, url = self.policy, page.url
        return RevisitUpdate(
            update=lambda prev: policy.after_check(prev, url=url, changed=changed, new=new),
            found_via=page.found_via,
            found_from=page.found_from,
        )

    async def checked(self, page: Page, status: PageStatus, prev: Revisit | None) -> None:
        """Audit the page's lastmod's claim against what the check found."""
        if (
            status != PageStatus.NEW
            and prev is not None
            and self.policy.lastmod_mode != "ignore"
            and self.policy.lastmod_claims_unchanged(page.lastmod, prev.last_check_at)
        ):
            await self.auditor.observe(page.key, "lastmod", lied=status == PageStatus.CHANGED, url=page.url)


__all__ = ["SCHEDULE_MIDDLEWARE", "Revisits"]
