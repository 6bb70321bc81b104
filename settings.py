"""Every setting ServeScope reads from the environment, in one place.

Each setting is documented here and in docs/settings.md (a test fails when one is missing there).
The environment is injected (``env`` arguments) so that tests never mutate ``os.environ``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from errors import ConfigError

DEFAULT_DB_URL = "duckdb:///data/servescope.duckdb"


@dataclass(frozen=True)
class Setting:
    name: str
    default: str
    doc: str


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "SERVESCOPE_DB",
        DEFAULT_DB_URL,
        "SQLAlchemy URL of the store. DuckDB file by default (one process at a time); "
        "postgresql+psycopg://user@host/db for a shared, multi-writer store.",
    ),
    Setting(
        "SERVESCOPE_SPOOL_DIR",
        "",
        "Folder where batches go when the store stays locked past the deadline (default: beside "
        "the store: `<file>.spool/` next to a DuckDB file, a per-store folder under the user's "
        "data dir for a server); each file records its store, which alone ingests it.",
    ),
    Setting(
        "SERVESCOPE_LOCK_TIMEOUT_S",
        "10",
        "How long a write retries a locked DuckDB file (jittered backoff) before spooling.",
    ),
    Setting(
        "SERVESCOPE_CACHE_TTL_S",
        "30",
        "Seconds the dashboard caches query results.",
    ),
    Setting(
        "SERVESCOPE_ROLLUP_MIN_MS",
        "50",
        "A per-run aggregate that took at least this long to compute is stored (run_rollups) "
        "and served until the run's rows change; cheaper ones are recomputed each time.",
    ),
    Setting(
        "SERVESCOPE_SQL_TRACE",
        "",
        "When set to 1, every SQL statement the store runs is logged with its duration.",
    ),
)

_BY_NAME = {s.name: s for s in SETTINGS}


def get(name: str, env: Mapping[str, str] | None = None) -> str:
    """Return the value of setting ``name`` from ``env`` (default: os.environ) or its default."""
    setting = _BY_NAME[name]
    source = os.environ if env is None else env
    value = source.get(name, "")
    return value if value != "" else setting.default


def db_url(env: Mapping[str, str] | None = None) -> str:
    return get("SERVESCOPE_DB", env)


def spool_dir(env: Mapping[str, str] | None = None) -> Path | None:
    """The spool folder set by SERVESCOPE_SPOOL_DIR, or None: each store's own folder
    (``store.db.Store.identity``)."""
    value = get("SERVESCOPE_SPOOL_DIR", env)
    return Path(value).expanduser() if value else None


def data_home(env: Mapping[str, str] | None = None) -> Path:
    """The user's data folder (XDG): ``$XDG_DATA_HOME`` or ``~/.local/share``."""
    source = os.environ if env is None else env
    xdg = source.get("XDG_DATA_HOME", "")
    if xdg:
        return Path(xdg).expanduser()
    home = source.get("HOME", "")
    return (Path(home) if home else Path.home()) / ".local" / "share"


def lock_timeout_s(env: Mapping[str, str] | None = None) -> float:
    return float(get("SERVESCOPE_LOCK_TIMEOUT_S", env))


def cache_ttl_s(env: Mapping[str, str] | None = None) -> int:
    return int(float(get("SERVESCOPE_CACHE_TTL_S", env)))


def rollup_min_s(env: Mapping[str, str] | None = None) -> float:
    return _non_negative("SERVESCOPE_ROLLUP_MIN_MS", env) / 1000.0


def _non_negative(name: str, env: Mapping[str, str] | None) -> float:
    text = get(name, env)
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also NaN
        raise ConfigError(f"{name}={text!r} is not a number ≥ 0 (milliseconds)")
    return value


def sql_trace(env: Mapping[str, str] | None = None) -> bool:
    return get("SERVESCOPE_SQL_TRACE", env) in {"1", "true", "yes"}
