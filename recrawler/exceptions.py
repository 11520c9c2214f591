"""Errors raised by recrawler.

RecrawlerError
 ├── ConfigurationError         an enabled component got a bad setting value
 │    └── MissingDependency      what a setting asks for needs an extra that is not installed
 ├── EventDeliveryError         events could not be delivered (they stay in the outbox); an OSError
 ├── RunRefused                 a run may not start: another run holds the site, or a held run waits
 └── StateStoreError            the database failed (wraps the driver's error)
      ├── PageWriteError         a page write's own statements failed (undone; its group stands)
      ├── StateStoreUnavailable  it cannot be opened or is locked
      │    └── StateStoreLost     it went away mid-run (deleted, replaced, unwritable): said once
      └── SchemaVersionError     it is corrupt or comes from a newer recrawler
"""

from __future__ import annotations


class RecrawlerError(Exception):
    """Base class of every recrawler error."""


class ConfigurationError(RecrawlerError):
    """A setting of an enabled component has a bad value."""


class MissingDependency(ConfigurationError, ModuleNotFoundError):
    """What a setting (or an import) asks for needs a module an extra installs, and it is not
    installed: the message names the extra (``pip install 'recrawler[postgres]'``). A
    ``ModuleNotFoundError`` too, with the missing module's ``name``."""


class EventDeliveryError(RecrawlerError, OSError):
    """Events could not be delivered (a webhook receiver down, refusing, or timing out); they stay
    in the outbox for the next delivery. An ``OSError``, as a sink's failed write is."""


class RunRefused(RecrawlerError):
    """A run may not start: another run of the site holds its lease, or a held run awaits a decision."""

    def __init__(self, message: str, *, held: bool = False) -> None:
        super().__init__(message)
        #: True when a held run blocks the site (it needs ``runs approve`` or ``runs discard``)
        self.held = held


class StateStoreError(RecrawlerError):
    """The state database failed."""


class PageWriteError(StateStoreError):
    """A page write's own statements failed: it was undone, and the group it was in stands."""


class StateStoreUnavailable(StateStoreError):
    """The state database cannot be opened (missing directory, locked, permissions)."""


class StateStoreLost(StateStoreUnavailable):
    """The state database went away during the run (deleted, or its directory; replaced; made
    unwritable). The store says so once, at ERROR, when it notices; every later call fails with
    this, which callers count without logging it again."""


class SchemaVersionError(StateStoreError):
    """The database is corrupt or was written by a newer schema; it is never recreated."""
