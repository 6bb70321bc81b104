"""One exception tree for ServeScope.

Third-party errors (httpx, SQLAlchemy, DuckDB, psycopg, tomllib, pynvml) are translated into
these once, at the seam where they are caught; everything above the seam sees only these.

    ServeScopeError
    ├── ConfigError              bad settings, unknown names (workload, SLO profile, GPU, model)
    ├── InputError               bad user input: CLI arguments, dataset files, engine params
    │   └── ImportFormatError    a third-party result file that cannot be parsed (file, key, reason)
    ├── StoreError               the store failed
    │   ├── StoreLockedError     the DuckDB file stayed locked past the retry deadline
    │   └── MigrationError       the schema could not be brought up to date
    ├── EndpointError            an inference endpoint could not be used at all (not per-request)
    └── CollectorError           a collector (GPU, /metrics, Prometheus) cannot run
"""

from __future__ import annotations

import signal
from enum import IntEnum


class ExitCode(IntEnum):
    """What every ``servescope`` command's exit status means (stopped by a signal: 128 + it)."""

    OK = 0
    #: the command ran but could not do all it was asked (e.g. some import files refused)
    PARTIAL = 1
    #: bad input, unusable endpoint or store: nothing was done (a ServeScopeError)
    ERROR = 2
    #: a bench run failed (no success, or more failures than --max-error-rate), a watch
    #: collected nothing (every scrape of every target failed), a verify check failed,
    #: compare found a significant regression beyond its --fail-on threshold, or a
    #: ``watch --slo --fail-on-breach`` window breached the profile
    FAILED = 3
    #: the store stayed locked: rows were kept in the spool (``servescope db ingest-spool``)
    SPOOLED = 4


#: The signals that stop a command as Ctrl-C does (its exit status is then 128 + the signal's
#: number). ``servescope ui`` forwards them to Streamlit; ``bench`` handles them itself.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class ServeScopeError(Exception):
    """Base of every error ServeScope raises on purpose.

    ``hint`` tells the user what to do about it; the UI shows it under the title.
    """

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} ({self.hint})"


class ConfigError(ServeScopeError):
    """A setting, catalog entry or named thing is unknown or invalid."""


class InputError(ServeScopeError):
    """User input (arguments, files) is invalid."""


class ImportFormatError(InputError):
    """A third-party result file cannot be parsed; names the file, the key and the reason."""

    def __init__(self, path: str, reason: str, *, key: str | None = None, hint: str | None = None):
        where = f"{path}: key {key!r}: " if key else f"{path}: "
        super().__init__(where + reason, hint=hint)
        self.path = path
        self.key = key
        self.reason = reason


class StoreError(ServeScopeError):
    """The store failed."""


class StoreLockedError(StoreError):
    """The store stayed locked by another process past the retry deadline."""


class MigrationError(StoreError):
    """The schema could not be migrated."""


class EndpointError(ServeScopeError):
    """An endpoint cannot be used at all (unreachable, no models, wrong API)."""


class CollectorError(ServeScopeError):
    """A collector cannot run (no GPU driver, bad /metrics URL, Prometheus error)."""
