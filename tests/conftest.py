"""Shared fixtures: PostgreSQL (a private cluster or SERVESCOPE_TEST_PG_URL), store URLs for both
dialects, free loopback ports.

- ``pg_url`` (session): ``$SERVESCOPE_TEST_PG_URL`` when set, else a private PostgreSQL cluster
  started by ``tools/pg_cluster.py`` in a temp dir on a free port (stopped and deleted at the end
  of the session), else the test is skipped with the reason. Tests using it are marked
  ``postgres`` automatically.
- ``store_url``: parametrised over ``duckdb`` (a fresh file under ``tmp_path``) and
  ``postgresql`` (a fresh database per test, ``CREATE DATABASE`` with a unique name).
- With ``SERVESCOPE_TEST_STRICT=1`` (set by ``tools/test_all.sh``, i.e. ``make test-all`` and CI)
  a missing PostgreSQL, chromium or llama-server fails the test instead of skipping it, so the
  full suite cannot pass by skipping. Every such skip goes through :func:`unavailable` (tests
  reach it as the ``unavailable`` fixture).
- ``hold_duckdb_lock`` (fixture ``duckdb_lock``): another process holds a DuckDB file inside the
  block (DuckDB allows one process at a time), as a bench or a watcher meets a locked store.
- ``ingest_spool_cli`` (fixture ``ingest_spool_cli``): ``servescope db --db URL ingest-spool``
  run as the console script, its output captured.
- ``FIXTURES`` (fixture ``fixtures_dir``): ``tests/fixtures``, the data files the tests read, all
  inside the repository (their origin and licence: ``tests/fixtures/SOURCES.md``). A clone alone
  runs the suite; nothing is read from beside the checkout.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import textwrap
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURES = REPO_ROOT / "tests" / "fixtures"
PG_URL_ENV = "SERVESCOPE_TEST_PG_URL"
STRICT_ENV = "SERVESCOPE_TEST_STRICT"
SERVESCOPE = Path(sys.executable).parent / "servescope"  # the console script, in the venv


def load_tool(name: str) -> ModuleType:
    """Import ``tools/<name>.py`` (tools/ is scripts, not an installed package)."""
    module_name = f"servescope_tools_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, REPO_ROOT / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def unavailable(reason: str) -> NoReturn:
    """Skip (the default) or, under SERVESCOPE_TEST_STRICT=1, fail: infrastructure is missing."""
    if os.environ.get(STRICT_ENV) == "1":
        pytest.fail(f"{reason} ({STRICT_ENV}=1: make test-all must provision it)", pytrace=False)
    pytest.skip(reason)


def free_tcp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def free_port() -> Callable[[], int]:
    """Call to get a currently free loopback TCP port."""
    return free_tcp_port


@pytest.fixture(name="load_tool")
def _load_tool_fixture() -> Callable[[str], ModuleType]:
    """Call with a name to import ``tools/<name>.py``."""
    return load_tool


@pytest.fixture(name="unavailable")
def _unavailable_fixture() -> Callable[[str], NoReturn]:
    """Call with a reason when infrastructure is missing: skip, or fail under strict mode."""
    return unavailable


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """``tests/fixtures``: the real and hand-built data files (tests/fixtures/SOURCES.md)."""
    return FIXTURES


# -- a DuckDB file held by another process; the spool ingested by the CLI -------------------------

_DUCKDB_HOLDER = textwrap.dedent(
    """
    import sys, time, duckdb
    deadline = time.monotonic() + 60
    while True:  # the bench opens the file for a moment at each flush: retry until we hold it
        try:
            con = duckdb.connect(sys.argv[1])
            break
        except duckdb.IOException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.005)
    print("locked", flush=True)
    sys.stdin.readline()
    con.close()
    """
)


@contextlib.contextmanager
def hold_duckdb_lock(path: Path) -> Iterator[None]:
    """Another process holds the DuckDB file at ``path`` while inside the block.

    Retries for up to 60 s while someone else (a bench flushing) has the file open; the block
    starts once the holder has printed ``locked``. On leaving, a line on its stdin lets the file
    go; the holder is waited for and its pipes closed (killed if it does not end in 30 s)."""
    with subprocess.Popen(
        [sys.executable, "-c", _DUCKDB_HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        assert holder.stdout is not None
        try:
            assert holder.stdout.readline().strip() == "locked", f"could not hold {path}"
            yield
        finally:
            try:
                holder.communicate("\n", timeout=30)  # closes stdin and stdout, waits
            finally:
                if holder.poll() is None:
                    holder.kill()  # Popen's exit then closes the pipes and reaps it


@pytest.fixture
def duckdb_lock() -> Callable[[Path], contextlib.AbstractContextManager[None]]:
    """Call with a DuckDB file's path: a context manager inside which another process holds it."""
    return hold_duckdb_lock


def ingest_spool_cli(
    db_url: str, *flags: str, cwd: Path | None = None, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``servescope db --db DB_URL ingest-spool [FLAGS]``, output captured (text).

    ``env`` defaults to this environment with the checkout on ``PYTHONPATH``."""
    return subprocess.run(
        [str(SERVESCOPE), "db", "--db", db_url, "ingest-spool", *flags],
        cwd=cwd,
        env=dict(env) if env is not None else {**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(name="ingest_spool_cli")
def _ingest_spool_cli_fixture() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Call as :func:`ingest_spool_cli`: ``servescope db --db URL ingest-spool``, captured."""
    return ingest_spool_cli


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "pg_url" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.postgres)


# -- PostgreSQL ----------------------------------------------------------------------------------


class _PgServer:
    """The session's PostgreSQL server: an external URL or a private cluster."""

    def __init__(self) -> None:
        self.url: str | None = None
        self.error: str | None = None
        self.cluster: Any = None  # tools/pg_cluster.PgCluster when we started one
        self.created: list[str] = []

    def libpq(self, database: str) -> str:
        assert self.url is not None
        return (
            make_url(self.url)
            .set(drivername="postgresql", database=database)
            .render_as_string(hide_password=False)
        )

    def create_database(self, name: str) -> str:
        assert self.url is not None
        pg_cluster = load_tool("pg_cluster")
        pg_cluster.create_database(self.libpq(make_url(self.url).database or "postgres"), name)
        self.created.append(name)
        return make_url(self.url).set(database=name).render_as_string(hide_password=False)

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()  # the data dir goes with it
            return
        if self.url is None or not self.created:
            return
        import psycopg

        # An external server: drop the databases this session created (names are ours: t_<hex>).
        with psycopg.connect(self.libpq("postgres"), autocommit=True) as conn:
            for name in self.created:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def _pg_server() -> Iterator[_PgServer]:
    server = _PgServer()
    external = os.environ.get(PG_URL_ENV)
    if external:
        server.url = external
    else:
        pg_cluster = load_tool("pg_cluster")
        if not pg_cluster.available():
            server.error = (
                f"PostgreSQL not available: set {PG_URL_ENV}="
                "postgresql+psycopg://user@host:port/db or install the server "
                "(initdb, pg_ctl; PostgreSQL 15)"
            )
        else:
            try:
                server.cluster = pg_cluster.PgCluster.start()
                server.url = server.cluster.url()
            except pg_cluster.PgClusterError as exc:
                server.error = f"could not start a private PostgreSQL cluster: {exc}"
    try:
        yield server
    finally:
        server.close()


PG_BINARIES_MISSING = "PostgreSQL server binaries not installed (initdb, pg_ctl; PostgreSQL 15)"


@pytest.fixture
def pg_cluster_tool() -> ModuleType:
    """``tools/pg_cluster.py`` where initdb and pg_ctl exist; else skipped (strict: failed)."""
    pg_cluster = load_tool("pg_cluster")
    if not pg_cluster.available():
        unavailable(PG_BINARIES_MISSING)
    return pg_cluster


@pytest.fixture(scope="session")
def pg_url(_pg_server: _PgServer) -> str:
    """SQLAlchemy URL (postgresql+psycopg://user@127.0.0.1:PORT/db) of a live PostgreSQL."""
    if _pg_server.url is None:
        unavailable(_pg_server.error or "PostgreSQL not available")
    return _pg_server.url


@contextlib.contextmanager
def _dispose_engines_on_exit() -> Iterator[None]:
    """Dispose every SQLAlchemy engine that connected inside the block, as a process exit would.

    Closes the connections resting in their pools (psycopg warns, ResourceWarning, when a
    connection is garbage-collected open, and warnings are errors); a connection still checked
    out — a real leak — is not touched and still warns.
    """
    engines: weakref.WeakSet[sa.Engine] = weakref.WeakSet()

    def record(conn: sa.Connection) -> None:
        engines.add(conn.engine)

    sa.event.listen(sa.Engine, "engine_connect", record)
    try:
        yield
    finally:
        sa.event.remove(sa.Engine, "engine_connect", record)
        for engine in list(engines):
            engine.dispose()


@pytest.fixture(params=["duckdb", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty store URL: a DuckDB file, or a new PostgreSQL database for this test.

    Engines the test opened are disposed after it (pooled connections closed)."""
    if request.param == "duckdb":
        url = f"duckdb:///{tmp_path / 'store.duckdb'}"
    else:
        request.getfixturevalue("pg_url")  # skips (or fails, strict) when there is no server
        server: _PgServer = request.getfixturevalue("_pg_server")
        url = server.create_database(f"t_{uuid.uuid4().hex[:16]}")
    with _dispose_engines_on_exit():
        yield url


@pytest.fixture(autouse=True)
def _store_every_rollup(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep every rollup however cheap (production keeps those over 50 ms), so that every test
    that reads a run twice also reads its stored rollup back (and sees it invalidated)."""
    monkeypatch.setenv("SERVESCOPE_ROLLUP_MIN_MS", "0")
