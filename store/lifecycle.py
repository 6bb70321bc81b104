"""The store's schema lifecycle: open a store ready for use — migrated to the current schema and
its catalog seeded, once per process and URL. The connection handle (``store.db.Store``) knows
nothing of the schema; this module, above it and the migrations, puts them together."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping

import sqlalchemy as sa

from store import catalog, migrations
from store.db import Store

_initialised: set[str] = set()
_lock = threading.Lock()

#: PostgreSQL advisory lock key held while a process migrates and seeds a store: processes
#: opening a new database together (the hosts of ``bench --shard``) would otherwise each
#: create the same tables and seed the same rows, and all but one fail on duplicate keys.
SCHEMA_LOCK_KEY = 0x5E5C_09E0


@contextlib.contextmanager
def _schema_lock(store: Store) -> Iterator[None]:
    """On PostgreSQL, one process at a time migrates and seeds (a session advisory lock on a
    connection of its own); elsewhere nothing (DuckDB's file lock already serialises writers)."""
    if store.dialect != "postgresql":
        yield
        return
    with store.engine.connect() as conn:
        conn.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": SCHEMA_LOCK_KEY})
        conn.commit()
        try:
            yield
        finally:
            conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": SCHEMA_LOCK_KEY})
            conn.commit()


def initialise(store: Store, *, force: bool = False) -> None:
    """Bring ``store``'s schema up to date and seed its catalog, once per process and URL
    (``force``: again)."""
    key = str(store.engine.url)
    with _lock:
        if key in _initialised and not force:
            return
        # held open: the migrations and the seed each connect several times, and reopening a
        # DuckDB file costs ~20 ms a time (a new store took 1.2 s, 0.25 s of it reopening)
        with _schema_lock(store), store.held_open():
            migrations.migrate(store)
            catalog.seed(store)
        store.read_store_id()
        if ":memory:" not in key:
            _initialised.add(key)


def open_store(
    url: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    lock_timeout_s: float | None = None,
) -> Store:
    """Open the store at ``url`` (default: SERVESCOPE_DB; a DuckDB file's folder is created),
    migrating and seeding it once."""
    store = Store.connect_url(url, env=env, lock_timeout_s=lock_timeout_s)
    initialise(store)
    return store


def memory_store() -> Store:
    """An in-memory DuckDB store (tests, previews), migrated and seeded: the same API."""
    store = Store.in_memory()
    initialise(store, force=True)
    return store
