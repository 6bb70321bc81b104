"""Engines and short-lived connections, with lock retry (DESIGN §4).

DuckDB lets one process open a file at a time, so nothing here holds a connection: each
``Store.connect()`` opens one, runs a transaction and closes it. When another process holds the
file, the open is retried with jittered exponential backoff up to a deadline, then
``StoreLockedError`` is raised (collectors then spool their batch, see ``store.ingest``).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import sqlalchemy as sa
from sqlalchemy.pool import NullPool, StaticPool

import settings
from errors import StoreError, StoreLockedError

log = logging.getLogger("servescope.sql")

_LOCK_MARKERS = ("could not set lock", "conflicting lock", "database is locked", "lock on file")


def is_lock_error(exc: BaseException) -> bool:
    """True when ``exc`` (or its cause) says another process holds the DuckDB file."""
    seen: BaseException | None = exc
    while seen is not None:
        if any(m in str(seen).lower() for m in _LOCK_MARKERS):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def mask_url(url: str) -> str:
    """The URL with any password replaced by ***, safe to show and log."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return url


_DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306, "mariadb": 3306, "mssql": 1433}


def store_location(url: str) -> str:
    """What names the store's place, whatever URL reaches it, without credentials.

    A file store (DuckDB, SQLite): its dialect and resolved absolute path, so ``duckdb:///x.duckdb``
    from its folder and ``duckdb:////abs/x.duckdb`` agree. A server: dialect, host, port and
    database (no user, password or query). Host aliases of one server (localhost, 127.0.0.1,
    a DNS name) still differ: the store id kept in the store (``Store.store_id``) settles those.
    """
    try:
        parsed = sa.engine.make_url(url)
    except sa.exc.ArgumentError:
        return url
    backend = parsed.get_backend_name()
    if backend in ("duckdb", "sqlite"):
        database = parsed.database or ":memory:"
        if database == ":memory:" or not database:
            return f"{backend}:///:memory:"
        return f"{backend}:///{os.path.realpath(os.path.expanduser(database))}"
    host = (parsed.host or "localhost").lower()
    port = parsed.port or _DEFAULT_PORTS.get(backend)
    return f"{backend}://{host}{f':{port}' if port else ''}/{parsed.database or ''}"


@dataclass(frozen=True)
class StoreIdentity:
    """Which store a spooled batch belongs to, and where this store's spool folder is.

    ``store_id`` is the random id migration 4 keeps in the store (``store_meta``): the same for
    every URL or path that reaches it. ``location`` (``store_location``) is the fallback when an
    id could not be read. ``spool_dir``: SERVESCOPE_SPOOL_DIR when set; else beside the store —
    ``<file>.spool/`` next to a DuckDB/SQLite file, and for a server
    ``<data home>/servescope/spool/<dialect>-<store id>/`` (every URL of the server shares it;
    ``<dialect>-<host>-<port>-<database>-<hash>/`` while the id is unknown).
    """

    store_id: str | None
    location: str
    url: str
    spool_dir: Path

    def owns(self, store_id: str | None, location: str | None) -> bool:
        """True when a batch recorded with this id/location belongs to this store."""
        if store_id and self.store_id:
            return store_id == self.store_id
        return location == self.location


def default_spool_dir(
    location: str, env: Mapping[str, str] | None = None, store_id: str | None = None
) -> Path:
    """The spool folder of the store at ``location`` (see ``StoreIdentity``).

    A file store's folder is beside the file. A server store's is named by its ``store_id``
    when known, so that every URL reaching the same server database shares it; else by a hash
    of its location (``location_spool_dir``).
    """
    override = settings.spool_dir(env)
    if override is not None:
        return override
    scheme, _, rest = location.partition(":///")
    if scheme in ("duckdb", "sqlite") and rest and rest != ":memory:":
        path = Path(rest)
        return path.parent / f"{path.name}.spool"
    if store_id:
        return _server_spool_root(env) / f"{location.split(':', 1)[0]}-{store_id}"
    return location_spool_dir(location, env)


def location_spool_dir(location: str, env: Mapping[str, str] | None = None) -> Path:
    """A server store's spool folder named by its location (used while its id is unknown)."""
    digest = hashlib.sha256(location.encode()).hexdigest()[:12]
    readable = re.sub(r"[^A-Za-z0-9.]+", "-", location.split("://", 1)[-1]).strip("-")[:60]
    return _server_spool_root(env) / f"{location.split(':', 1)[0]}-{readable}-{digest}"


def _server_spool_root(env: Mapping[str, str] | None) -> Path:
    return settings.data_home(env) / "servescope" / "spool"


_store_ids: dict[str, str] = {}


class Store:
    """A handle on the store: an engine plus the settings to use it well. Holds no connection."""

    def __init__(
        self,
        engine: sa.Engine,
        *,
        lock_timeout_s: float = 10.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine = engine
        self.lock_timeout_s = lock_timeout_s
        self._open_close_lock = _open_close_lock(engine)
        self._sleep = sleep
        self._clock = clock
        self._store_id: str | None = None

    # --- construction -------------------------------------------------------------------

    @classmethod
    def connect_url(
        cls,
        url: str | None = None,
        *,
        env: Mapping[str, str] | None = None,
        lock_timeout_s: float | None = None,
    ) -> Store:
        """A handle on the store at ``url`` (default: SERVESCOPE_DB) as it is: no schema work
        (``store.lifecycle.open_store`` migrates and seeds; use that)."""
        url = url or settings.db_url(env)
        timeout = settings.lock_timeout_s(env) if lock_timeout_s is None else lock_timeout_s
        return cls(_make_engine(url, trace=settings.sql_trace(env)), lock_timeout_s=timeout)

    @classmethod
    def in_memory(cls) -> Store:
        """A handle on a new in-memory DuckDB store: one shared connection, same API, no schema
        yet (``store.lifecycle.memory_store`` creates it)."""
        return cls(_make_engine("duckdb:///:memory:", trace=False))

    # --- properties -----------------------------------------------------------------------

    @property
    def url(self) -> str:
        return mask_url(str(self.engine.url.render_as_string(hide_password=False)))

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @property
    def location(self) -> str:
        """Where the store is, the same for every URL form reaching it (``store_location``)."""
        return store_location(self.engine.url.render_as_string(hide_password=False))

    def read_store_id(self) -> str | None:
        """Read the id kept in the store (None when it has none yet)."""
        from store import schema

        with self.connect() as conn:
            if not sa.inspect(conn).has_table("store_meta"):
                return None
            value = conn.execute(
                sa.select(schema.store_meta.c.value).where(schema.store_meta.c.key == "store_id")
            ).scalar()
        if value:
            self._store_id = str(value)
            if ":memory:" not in self.location:  # in-memory stores are distinct per engine
                _store_ids[self.location] = self._store_id
        return self._store_id

    @property
    def store_id(self) -> str | None:
        """The id kept in the store (read once per process and location; None when the store
        has none yet or cannot be read now, e.g. locked)."""
        if self._store_id is None and ":memory:" not in self.location:
            self._store_id = _store_ids.get(self.location)
        if self._store_id is None:
            with contextlib.suppress(StoreError):
                self.read_store_id()
        return self._store_id

    def identity(self, env: Mapping[str, str] | None = None) -> StoreIdentity:
        """This store's identity and spool folder (for ``store.ingest``'s spool)."""
        location = self.location
        return StoreIdentity(
            store_id=self.store_id,
            location=location,
            url=self.url,
            spool_dir=default_spool_dir(location, env, self.store_id),
        )

    # --- connections ----------------------------------------------------------------------

    @contextmanager
    def connect(self) -> Iterator[sa.Connection]:
        """A short-lived connection inside one transaction (committed on success)."""
        conn = self._open_with_retry()
        try:
            with conn.begin():
                yield conn
        except _DRIVER_ERRORS as exc:
            if is_lock_error(exc):
                raise StoreLockedError(
                    f"the store {self.url} is locked by another process",
                    hint="another ServeScope process is writing; retry, or use PostgreSQL "
                    "for many writers",
                ) from exc
            raise StoreError(f"store error on {self.url}: {_first_line(exc)}") from exc
        finally:
            with self._open_close_lock:
                conn.close()

    @contextmanager
    def pinned(self) -> Iterator[Store]:
        """A Store whose every ``connect()`` (hence ``read_df``) reuses ONE connection and
        transaction: many small reads cost one open (~16 ms each on a large DuckDB file) and
        see one snapshot. Writes inside it commit with the whole block."""
        with self.connect() as conn:
            yield _PinnedStore(self, conn)

    @contextmanager
    def held_open(self) -> Iterator[Store]:
        """Keep the database open for a block of many short reads and writes: an in-process
        DuckDB database lives while any of its connections does, so each ``connect()`` in the
        block skips reopening the file (20–60 ms on a large one) yet stays its own transaction.
        The file stays locked to other processes for the block (they retry, then spool): use it
        for one view's build or one run's preparation, never across requests. A no-op elsewhere
        (PostgreSQL pools its connections; an in-memory store is always open)."""
        if self.dialect != "duckdb" or ":memory:" in str(self.engine.url):
            yield self
            return
        keeper = self._open_with_retry()
        try:
            yield self
        finally:
            with self._open_close_lock:
                keeper.close()

    def _open_with_retry(self) -> sa.Connection:
        deadline = self._clock() + self.lock_timeout_s
        delay = 0.01
        while True:
            try:
                with self._open_close_lock:
                    return self.engine.connect()
            except Exception as exc:  # the DB-API error type depends on the dialect
                if not is_lock_error(exc):
                    raise StoreError(
                        f"cannot open the store {self.url}: {_first_line(exc)}"
                    ) from exc
                if self._clock() >= deadline:
                    raise StoreLockedError(
                        f"the store {self.url} stayed locked for {self.lock_timeout_s:g} s",
                        hint="another process holds the DuckDB file; stop it, raise "
                        "SERVESCOPE_LOCK_TIMEOUT_S, or use PostgreSQL for many writers",
                    ) from exc
                self._sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 0.5)

    def read_df(
        self, statement: str | sa.Executable, params: Mapping[str, Any] | None = None
    ) -> pd.DataFrame:
        """Run a parameterised read and return its rows as a DataFrame."""
        stmt = sa.text(statement) if isinstance(statement, str) else statement
        with self.connect() as conn:
            result = conn.execute(stmt, dict(params or {}))
            columns = list(result.keys())
            rows = result.fetchall()
        # plain tuples: pandas builds a frame from SQLAlchemy Row objects about 2× slower
        return pd.DataFrame.from_records([tuple(r) for r in rows], columns=columns)

    def dispose(self) -> None:
        """Close pooled connections (the engine stays usable and opens new ones on demand)."""
        self.engine.dispose()


class _PinnedStore(Store):
    """``Store.pinned()``: connect() yields the one open connection, already in a transaction."""

    def __init__(self, parent: Store, conn: sa.Connection) -> None:
        super().__init__(parent.engine, lock_timeout_s=parent.lock_timeout_s)
        self._conn = conn

    @contextmanager
    def connect(self) -> Iterator[sa.Connection]:
        yield self._conn

    @contextmanager
    def pinned(self) -> Iterator[Store]:
        yield self


def _driver_errors() -> tuple[type[Exception], ...]:
    """SQLAlchemy's errors and those of the drivers whose raw connections the bulk paths use
    (DuckDB's Arrow insert, PostgreSQL's COPY), so every store failure leaves as a StoreError."""
    found: list[type[Exception]] = [sa.exc.SQLAlchemyError]
    with contextlib.suppress(ImportError):
        import duckdb

        found.append(duckdb.Error)
    with contextlib.suppress(ImportError):
        import psycopg

        found.append(psycopg.Error)
    return tuple(found)


_DRIVER_ERRORS = _driver_errors()

_DUCKDB_OPEN_CLOSE: dict[str, threading.Lock] = {}


def _open_close_lock(engine: sa.Engine) -> threading.Lock | contextlib.nullcontext[None]:
    """For a DuckDB file: one lock per file and process around opening and closing connections.

    In-process DuckDB connections share one database instance, created by the first open and
    destroyed by the last close. Opened concurrently from two threads, the second connection
    can be handed the instance before the first finished setting it up, and its next Arrow
    scan fails with "Table Function with name python_arrow_scan does not exist" (seen in
    tests/integration/test_rollups.py's concurrent writer). Queries themselves run unlocked.
    """
    if engine.dialect.name != "duckdb":
        return contextlib.nullcontext()
    with _engines_lock:
        return _DUCKDB_OPEN_CLOSE.setdefault(str(engine.url), threading.Lock())


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc)
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


_engines: dict[tuple[str, bool], sa.Engine] = {}
_engines_lock = threading.Lock()


def _make_engine(url: str, *, trace: bool) -> sa.Engine:
    """One engine per URL and process (its pool is shared; in-memory DuckDB is never shared)."""
    if ":memory:" in url:
        return _new_engine(url, trace=trace)
    with _engines_lock:
        engine = _engines.get((url, trace))
        if engine is None:
            engine = _engines[(url, trace)] = _new_engine(url, trace=trace)
        return engine


def _new_engine(url: str, *, trace: bool) -> sa.Engine:
    parsed = sa.engine.make_url(url)
    kwargs: dict[str, Any] = {}
    if parsed.get_backend_name() == "duckdb":
        database = parsed.database or ":memory:"
        if database == ":memory:":
            kwargs["poolclass"] = StaticPool
        else:
            Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
            kwargs["poolclass"] = NullPool  # never keep the file open between uses
    elif parsed.get_backend_name() == "postgresql":
        kwargs["pool_pre_ping"] = True
    try:
        engine = sa.create_engine(parsed, **kwargs)
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError) as exc:
        raise StoreError(
            f"cannot use the store URL {mask_url(url)}: {exc}",
            hint="use duckdb:///path/to/file.duckdb or postgresql+psycopg://user@host/db",
        ) from exc
    if trace:
        _install_tracer(engine)
    return engine


def _install_tracer(engine: sa.Engine) -> None:
    @sa.event.listens_for(engine, "before_cursor_execute")
    def _before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        conn.info.setdefault("_t0", []).append(time.perf_counter())

    @sa.event.listens_for(engine, "after_cursor_execute")
    def _after(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        started = conn.info["_t0"].pop()
        log.info("%.1f ms  %s", (time.perf_counter() - started) * 1000, " ".join(statement.split()))
