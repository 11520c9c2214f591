"""Python's cyclic garbage collector during a run: what was loaded before it is left alone."""

from __future__ import annotations

import gc

from recrawler.exceptions import ConfigurationError


class GcTuning:
    """While a run crawls, the objects that exist when it opens (Scrapy, lxml, the settings, the
    modules: over 100,000 of them) move to the collector's permanent generation
    (:func:`gc.freeze`), and young collections run every *threshold* allocations instead of
    Python's 700. A full collection then walks only what the run itself keeps alive, and far
    fewer objects are promoted to the older generations. Both are undone when the run ends.

    Setting: ``RECRAWLER_GC_THRESHOLD`` (0: leave the collector as it is).
    """

    def __init__(self, threshold: int) -> None:
        if threshold < 0:
            raise ConfigurationError(f"RECRAWLER_GC_THRESHOLD: bad value {threshold!r}")
        self.threshold = threshold
        self._saved: tuple[int, int, int] | None = None

    @property
    def active(self) -> bool:
        """Whether the run's tuning is in force."""
        return self._saved is not None

    def start(self) -> None:
        """Freeze what exists and raise the young generation's threshold (once)."""
        if not self.threshold or self._saved is not None:
            return
        self._saved = gc.get_threshold()
        gc.freeze()
        gc.set_threshold(self.threshold, *self._saved[1:])

    def stop(self) -> None:
        """Give the collector back as it was."""
        if self._saved is None:
            return
        gc.set_threshold(*self._saved)
        gc.unfreeze()
        self._saved = None


__all__ = ["GcTuning"]
