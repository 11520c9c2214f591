"""The run's own counts: what decides; Scrapy's stats only mirror them."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from recrawler.redact import redact_url

if TYPE_CHECKING:
    from collections.abc import Iterator

    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)


#: the family counting the state store failures a run went on without, one count per exception class
STATE_ERRORS = "recrawler/state/error"


def state_error_key(exc: BaseException) -> str:
    """The count of a state store failure: ``recrawler/state/error/<its exception class>``."""
    return f"{STATE_ERRORS}/{type(exc).__name__}"


class RunCounters:
    """The run's own counts, keyed by their stat names (``recrawler/page/new``, ...), and what was
    logged once this run and is only counted since (:meth:`first`, :meth:`refused`).

    Guards, breakers and the report read these; every write is mirrored to Scrapy's stats
    collector for monitoring, and nothing reads the stats back, so a ``DummyStatsCollector``
    changes no decision.
    """

    def __init__(self, stats: StatsCollector | None = None) -> None:
        self._values: dict[str, int | float] = {}
        self._stats = stats
        #: what was logged once this run and is only counted since (see :meth:`first`)
        self._logged: set[str] = set()

    def first(self, what: str) -> bool:
        """True the first time *what* happens this run: a reason is logged once, then only counted."""
        if what in self._logged:
            return False
        self._logged.add(what)
        return True

    def refused(self, url: str, reason: str, source: str, spider: Any = None) -> None:
        """Count a URL the policy refused, from any source; the first of each reason this run is
        logged (credentials never)."""
        self.inc("recrawler/url/refused")
        self.inc(f"recrawler/url/refused/{reason}")
        if self.first(reason):
            logger.warning(
                "refused %(source)s URL (%(reason)s): %(url)s; further %(reason)s URLs are only counted",
                {"source": source, "reason": reason, "url": redact_url(url)[:300]},
                extra={"spider": spider},
            )

    def inc(self, key: str, count: int = 1) -> None:
        """Add *count* to *key*."""
        self._values[key] = self._values.get(key, 0) + count
        if self._stats is not None:
            self._stats.inc_value(key, count)

    def state_error(self, exc: BaseException) -> None:
        """Count a state store failure the run goes on without (:func:`state_error_key`)."""
        self.inc(state_error_key(exc))

    def set(self, key: str, value: int | float) -> None:
        """Set *key* to *value* (a one-off: a total decided at the end, a duration)."""
        self._values[key] = value
        if self._stats is not None:
            self._stats.set_value(key, value)

    def max(self, key: str, value: int | float) -> None:
        """Keep the largest *value* seen for *key* (a high-water mark)."""
        if value > self._values.get(key, value - 1):
            self._values[key] = value
            if self._stats is not None:
                self._stats.max_value(key, value)

    def __getitem__(self, key: str) -> int:
        return int(self._values.get(key, 0))

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def family(self, prefix: str) -> dict[str, int | float]:
        """``{suffix: value}`` for every key under ``prefix/``, sorted by key."""
        start = prefix.rstrip("/") + "/"
        return {k[len(start) :]: v for k, v in sorted(self._values.items()) if k.startswith(start)}

    def total(self, prefix: str) -> int:
        """The sum of the direct members of the ``prefix/`` family (one level, no nested totals)."""
        return int(sum(v for k, v in self.family(prefix).items() if "/" not in k))

    def items(self) -> Iterator[tuple[str, int | float]]:
        """Every count, sorted by key."""
        return iter(sorted(self._values.items()))

    def as_dict(self) -> dict[str, int | float]:
        """A copy of every count, as the stats collector should hold it."""
        return dict(self._values)


class Counting:
    """A component that counts on the run's counters: :meth:`_inc` adds to :attr:`counters`,
    and counts nothing when the component was built without a run (None)."""

    counters: RunCounters | None = None

    def _inc(self, name: str, count: int = 1) -> None:
        counters = self.counters
        if counters is not None:
            counters.inc(name, count)


__all__ = ["STATE_ERRORS", "Counting", "RunCounters", "state_error_key"]
