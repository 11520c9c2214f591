"""Self-audit and trust: the run's random sample, and which of a host's signals still count."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import TYPE_CHECKING, Any, Self

from recrawler.counters import Counting, state_error_key
from recrawler.exceptions import ConfigurationError, StateStoreError
from recrawler.redact import redact_url
from recrawler.state import TRUST_SIGNALS, utcnow
from recrawler.urls import key_host

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from recrawler.counters import RunCounters
    from recrawler.intervals import SchedulePolicy
    from recrawler.state import PageRecord, Run, Schedule, Trust

logger = logging.getLogger(__name__)

#: lies and switch-offs kept for the run report (the stats count them all)
_REPORT_LIMIT = 100


class Auditor(Counting):
    """One per crawl (an extension the add-on places, found with ``crawler.get_extension``): draws
    the audit sample, holds hosts' trust, records lies. The Runtime hands it the store's trust and
    schedule roles, the run's counters and the schedule policy when the run begins (:meth:`bind`).

    Settings: ``RECRAWLER_AUDIT_SAMPLE``, ``RECRAWLER_AUDIT_DISTRUST_AFTER``,
    ``RECRAWLER_AUDIT_TRUST_AFTER``.
    Stats: ``recrawler/audit/sampled``, ``recrawler/audit/lies``, ``recrawler/audit/lies/<signal>``,
    ``recrawler/audit/distrusted``.
    """

    def __init__(self, *, sample: float, distrust_after: int, trust_after: int = 10) -> None:
        if distrust_after < 1:
            raise ConfigurationError(f"RECRAWLER_AUDIT_DISTRUST_AFTER: bad value {distrust_after!r}")
        if trust_after < 0:
            raise ConfigurationError(f"RECRAWLER_AUDIT_TRUST_AFTER: bad value {trust_after!r}")
        #: honest audited claims after which a host's signal counts as found honest
        self.trust_after = trust_after
        #: the store's trust and schedule roles and the schedule policy (its run clock and
        #: staleness bound: a share is audited per bound, not per run), from :meth:`bind`
        self._roles: tuple[Trust, Schedule, SchedulePolicy] | None = None
        self.sample = sample
        self.distrust_after = distrust_after
        self.sample_keys: set[str] = set()
        #: (host, signal) pairs switched off, before and during this run
        self.off: set[tuple[str, str]] = set()
        #: (host, signal) pairs the audit found honest before this run (enough claims, no lie)
        self.found_honest: set[tuple[str, str]] = set()
        #: this run's lies and switch-offs, for the report
        self.lies: list[dict[str, Any]] = []
        self.distrusted: list[dict[str, str]] = []
        self._ready: asyncio.Future[None] | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """From the settings, for a spider that opted in (bound to the store when the run begins)."""
        from recrawler.intervals import parse_audit_sample
        from recrawler.meta import require_opt_in

        require_opt_in(crawler)
        s = crawler.settings
        return cls(
            sample=parse_audit_sample(s.get("RECRAWLER_AUDIT_SAMPLE")),
            distrust_after=s.getint("RECRAWLER_AUDIT_DISTRUST_AFTER"),
            trust_after=s.getint("RECRAWLER_AUDIT_TRUST_AFTER"),
        )

    def bind(
        self, host_trust: Trust, schedule: Schedule, counters: RunCounters, policy: SchedulePolicy
    ) -> None:
        """The store roles it reads and writes, the run's counters and the schedule policy."""
        self._roles = (host_trust, schedule, policy)
        self.counters = counters

    def _bound(self) -> tuple[Trust, Schedule, SchedulePolicy]:
        if self._roles is None:
            raise RuntimeError("the Auditor is used before the run began (Auditor.bind)")
        return self._roles

    async def ready(self, run: Run) -> None:
        """Load trust and draw the sample, once per run (every caller awaits the same work)."""
        if self._ready is None:
            self._ready = asyncio.ensure_future(self._load(run))
        await asyncio.shield(self._ready)

    async def _load(self, run: Run) -> None:
        host_trust, schedule, policy = self._bound()
        try:
            records = await host_trust.trust()
            self.off = {(r.host, r.signal) for r in records if not r.trusted}
            self.found_honest = {
                (r.host, r.signal)
                for r in records
                if r.trusted and not r.lies and r.checks >= self.trust_after
            }
            self.sample_keys = set(
                await schedule.audit_sample(run, self.sample, now=policy.now, bound_secs=policy.default_bound)
            )
        except StateStoreError as exc:
            # no sample and full trust: the run goes on as it would without the audit
            self._inc(state_error_key(exc))
            logger.error("could not load trust or draw the audit sample: %(exc)s", {"exc": exc})
            return
        if self.sample_keys:
            self._inc("recrawler/audit/sampled", len(self.sample_keys))
        for host, signal in sorted(self.off):
            logger.info(
                "host %(host)s: %(signal)s is switched off (caught lying; "
                "`recrawler trust --reset %(host)s`)",
                {"host": host, "signal": signal},
            )

    def trusted(self, host: str, signal: str) -> bool:
        """False when *signal* was caught lying on *host* and is switched off."""
        return (host, signal) not in self.off

    def honest(self, host: str, signal: str) -> bool:
        """True when the audit found *signal* of *host* honest (``RECRAWLER_AUDIT_TRUST_AFTER``
        claims checked, none a lie) and it is still trusted."""
        return (host, signal) in self.found_honest and self.trusted(host, signal)

    def trusted_validators(self, rec: PageRecord) -> PageRecord:
        """*rec* without the validators its host's trust switched off (they are not sent)."""
        if not self.off:
            return rec
        host = key_host(rec.key)
        etag = rec.etag if self.trusted(host, "etag") else None
        last_modified = rec.last_modified if self.trusted(host, "last_modified") else None
        if (etag, last_modified) == (rec.etag, rec.last_modified):
            return rec
        return dataclasses.replace(rec, etag=etag, last_modified=last_modified)

    def in_sample(self, key: str) -> bool:
        """True for pages drawn into this run's audit sample."""
        return key in self.sample_keys

    async def observe(self, key: str, signal: str, *, lied: bool, url: str) -> None:
        """Record one checked claim of *signal* for *key*'s host; a lie may switch it off."""
        host = key_host(key)
        if not self.trusted(host, signal):
            return
        try:
            rec = await self._bound()[0].record_trust(
                host, signal, lied=lied, url=url, at=utcnow(), distrust_after=self.distrust_after
            )
        except StateStoreError as exc:
            self._inc(state_error_key(exc))
            logger.error("could not record trust for %(host)s: %(exc)s", {"host": host, "exc": exc})
            return
        if lied:
            self._inc("recrawler/audit/lies")
            self._inc(f"recrawler/audit/lies/{signal}")
            if len(self.lies) < _REPORT_LIMIT:
                self.lies.append({"host": host, "signal": signal, "url": url})
            logger.warning(
                "audit: %(signal)s of %(host)s lied: %(url)s changed although %(claim)s",
                {"signal": signal, "host": host, "url": redact_url(url), "claim": _CLAIMS[signal]},
            )
        if not rec.trusted and (host, signal) not in self.off:
            self.off.add((host, signal))
            self._inc("recrawler/audit/distrusted")
            self.distrusted.append({"host": host, "signal": signal})
            logger.warning(
                "audit: %(signal)s switched off for host %(host)s after %(lies)d lie(s) "
                "(`recrawler trust --reset %(host)s` to trust it again)",
                {"signal": signal, "host": host, "lies": rec.lies},
            )

    def report(self) -> dict[str, Any]:
        """The ``audit`` section of the run report."""
        c = self.counters
        return {
            "sample": len(self.sample_keys),
            "checked": c["recrawler/audit/checked"] if c is not None else 0,
            "refetched": c["recrawler/audit/refetched"] if c is not None else 0,
            "lies": list(self.lies),
            "distrusted": list(self.distrusted),
            "switched_off": [{"host": h, "signal": s} for h, s in sorted(self.off)],
        }


_CLAIMS = {
    "lastmod": "its sitemap lastmod was not newer than the last check",
    "etag": "the server answered 304 to If-None-Match",
    "last_modified": "the server answered 304 to If-Modified-Since",
}
assert set(_CLAIMS) == set(TRUST_SIGNALS)

__all__ = ["Auditor"]
