"""Smoke tests of the PostgreSQL test infrastructure (tests/conftest.py, tools/pg_cluster.py)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url


def _scalar(url: str, sql: str) -> object:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text(sql)).scalar_one()
    finally:
        engine.dispose()


def test_pg_url_is_a_live_postgresql_15_or_newer(pg_url: str) -> None:
    url = make_url(pg_url)
    assert url.drivername == "postgresql+psycopg"
    version = _scalar(pg_url, "SHOW server_version_num")
    assert isinstance(version, str) and int(version) >= 150000


def test_store_url_is_fresh_and_isolated(store_url: str) -> None:
    """Each test gets its own empty store: a table made here is invisible to the next test."""
    engine = sa.create_engine(store_url)
    try:
        with engine.begin() as conn:
            tables = sa.inspect(conn).get_table_names()
            assert tables == []
            conn.execute(sa.text("CREATE TABLE probe (x INTEGER)"))
            conn.execute(sa.text("INSERT INTO probe VALUES (42)"))
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT x FROM probe")).scalar_one() == 42
    finally:
        engine.dispose()


def test_store_url_second_test_sees_no_probe_table(store_url: str) -> None:
    engine = sa.create_engine(store_url)
    try:
        with engine.connect() as conn:
            assert "probe" not in sa.inspect(conn).get_table_names()
    finally:
        engine.dispose()


def test_store_url_dialects(store_url: str, tmp_path: Path) -> None:
    url = make_url(store_url)
    if url.drivername == "duckdb":
        assert Path(str(url.database)).parent == tmp_path
    else:
        assert url.drivername == "postgresql+psycopg"
        assert str(url.database).startswith("t_")


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.postgres
def test_private_cluster_start_and_stop(pg_cluster_tool: ModuleType) -> None:
    cluster = pg_cluster_tool.PgCluster.start()
    try:
        assert _listening(cluster.port)
        url = cluster.create_database("extra_db")
        assert _scalar(url, "SELECT current_database()") == "extra_db"
    finally:
        cluster.stop()
    assert not cluster.base.exists()
    assert not _listening(cluster.port)


@pytest.mark.parametrize(
    ("strict", "outcome"),
    [("1", pytest.fail.Exception), ("0", pytest.skip.Exception), (None, pytest.skip.Exception)],
)
def test_missing_postgresql_binaries_skip_but_fail_under_strict(
    strict: str | None,
    outcome: type[BaseException],
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    load_tool: Callable[[str], ModuleType],
) -> None:
    """No initdb/pg_ctl: the private-cluster test is skipped under `make test`, but fails under
    SERVESCOPE_TEST_STRICT=1 (`make test-all`, CI) — the rule of every infrastructure skip."""
    monkeypatch.setattr(load_tool("pg_cluster"), "available", lambda: False)
    if strict is None:
        monkeypatch.delenv("SERVESCOPE_TEST_STRICT", raising=False)
    else:
        monkeypatch.setenv("SERVESCOPE_TEST_STRICT", strict)
    with pytest.raises(outcome, match=r"initdb, pg_ctl"):
        request.getfixturevalue("pg_cluster_tool")


def test_unavailable_skips_unless_strict(
    monkeypatch: pytest.MonkeyPatch, unavailable: Callable[[str], NoReturn]
) -> None:
    monkeypatch.setenv("SERVESCOPE_TEST_STRICT", "1")
    with pytest.raises(pytest.fail.Exception, match=r"no widget \(SERVESCOPE_TEST_STRICT=1"):
        unavailable("no widget")
    monkeypatch.setenv("SERVESCOPE_TEST_STRICT", "0")
    with pytest.raises(pytest.skip.Exception, match=r"^no widget$"):
        unavailable("no widget")
