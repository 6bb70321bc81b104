"""The spool belongs to its store: batches spooled while store X was locked are stored into X,
and into no other store, whatever URL form reaches X and whichever process ingests next.

Real processes (the console script), real DuckDB files held locked by another process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy.engine import make_url

from sim.mockserver import MockServer
from store import ingest, tables
from store.db import store_location
from store.lifecycle import open_store

ROOT = Path(__file__).resolve().parents[2]
SERVESCOPE = Path(sys.executable).parent / "servescope"
Lock = Callable[[Path], AbstractContextManager[None]]  # the duckdb_lock fixture (conftest.py)
IngestSpool = Callable[..., subprocess.CompletedProcess[str]]  # the ingest_spool_cli fixture


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SERVESCOPE_SPOOL_DIR"}
    return {**env, "PYTHONPATH": str(ROOT), "SERVESCOPE_LOCK_TIMEOUT_S": "0.5", **extra}


def bench_args(url: str, db_url: str, requests: int) -> list[str]:
    return [
        str(SERVESCOPE),
        "bench",
        "--endpoint",
        url,
        "--workload",
        "short-in-short-out",
        "--concurrency",
        "2",
        "--requests",
        str(requests),
        "--max-tokens",
        "8",
        "--metrics-url",
        "off",
        "--no-gpu",
        "--db",
        db_url,
    ]


def runs_of(path: Path) -> dict[str, str]:
    store = open_store(f"duckdb:///{path}")
    df = store.read_df("select run_id, status from runs")
    store.dispose()
    return dict(zip(df.run_id, df.status, strict=True))


def ok_requests(path: Path) -> int:
    store = open_store(f"duckdb:///{path}")
    n = int(store.read_df("select count(*) as n from requests where status = 'ok'").n[0])
    store.dispose()
    return n


def test_rows_spooled_for_one_store_never_land_in_another(
    tmp_path: Path, duckdb_lock: Lock, ingest_spool_cli: IngestSpool
) -> None:
    """Bench into X while X is locked (rows spooled), then bench into Y from the same working
    directory: Y holds only its own run, X's batches stay, and X ingests them (reached by a
    relative path from its own folder)."""
    work, xdir, ydir = tmp_path / "work", tmp_path / "x", tmp_path / "y"
    for d in (work, xdir, ydir):
        d.mkdir()
    x, y = xdir / "x.duckdb", ydir / "y.duckdb"
    with MockServer(ttft_ms=5, itl_ms=10) as url:
        server = MockServer.__new__(MockServer)
        server.url = url
        proc = subprocess.Popen(
            bench_args(url, f"duckdb:///{x}", 60),
            cwd=work,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 90
            while server.stats()["completed"] < 6:  # poll the server, not the clock
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline, "no progress"
            with duckdb_lock(x):
                out, err = proc.communicate(timeout=180)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 4, err[-3000:]
        [x_run] = out.split()
        x_spool = sorted(xdir.glob("x.duckdb.spool/*.json"))
        assert x_spool, "nothing spooled beside X"
        assert not (work / "data").exists()  # nothing spooled relative to the working dir
        # a later bench into another store, from the same working directory
        done = subprocess.run(
            bench_args(url, f"duckdb:///{y}", 10),
            cwd=work,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=180,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    [y_run] = done.stdout.split()
    assert runs_of(y) == {y_run: "completed"}  # not X's run
    assert sorted(xdir.glob("x.duckdb.spool/*.json")) == x_spool  # X's batches untouched
    assert x_run not in runs_of(x) or runs_of(x)[x_run] == "running"
    # Y's own ingest leaves them too; X's, by a relative path from X's folder, stores them
    y_ingest = ingest_spool_cli("duckdb:///y.duckdb", cwd=ydir, env=_env())
    assert y_ingest.returncode == 0 and "ingested 0 spooled rows" in y_ingest.stdout
    x_ingest = ingest_spool_cli("duckdb:///x.duckdb", cwd=xdir, env=_env())
    assert x_ingest.returncode == 0, x_ingest.stderr
    assert f"({len(x_spool)} batch(es))" in x_ingest.stdout
    assert runs_of(x) == {x_run: "completed"}
    assert ok_requests(x) == 60
    assert runs_of(y) == {y_run: "completed"} and ok_requests(y) == 10
    assert not list(xdir.glob("x.duckdb.spool/*.json"))


def _requests(run_id: str, n: int, start: int = 0) -> pd.DataFrame:
    return pd.DataFrame(
        {"run_id": run_id, "seq": range(start, start + n), "status": "ok", "ttft_ms": 5.0}
    )


def test_a_shared_spool_folder_keeps_each_batch_for_its_store(
    tmp_path: Path, duckdb_lock: Lock, ingest_spool_cli: IngestSpool
) -> None:
    """With SERVESCOPE_SPOOL_DIR shared by two stores, each ingests only its own batches, and
    `db ingest-spool` says how many it left for which store, and where."""
    shared = tmp_path / "shared-spool"
    x_path, y_path = tmp_path / "x.duckdb", tmp_path / "y.duckdb"
    x = open_store(f"duckdb:///{x_path}", lock_timeout_s=0.3)
    y = open_store(f"duckdb:///{y_path}")
    with duckdb_lock(x_path):
        writer = ingest.BufferedWriter(x, spool_dir=shared)
        writer.add_run({"run_id": "xr", "status": "completed"})
        writer.add("requests", _requests("xr", 25))
        assert writer.flush() == 26
        assert writer.spooled() == (1, 26)
    report = ingest.ingest_spool(y, shared)
    assert (report.rows, report.batches) == (0, 0)
    assert report.others == {x.url: 1}
    assert tables.table_counts(y)["runs"] == 0
    y.dispose()
    x.dispose()
    env = _env(SERVESCOPE_SPOOL_DIR=str(shared))
    cli_y = ingest_spool_cli(f"duckdb:///{y_path}", cwd=tmp_path, env=env)
    assert cli_y.returncode == 0, cli_y.stderr
    assert "ingested 0 spooled rows" in cli_y.stdout
    assert f"left 1 batch(es) of duckdb:///{x_path} in {shared}" in cli_y.stdout
    cli_x = ingest_spool_cli(f"duckdb:///{x_path}", cwd=tmp_path, env=env)
    assert cli_x.returncode == 0 and "ingested 26 spooled rows" in cli_x.stdout
    assert runs_of(x_path) == {"xr": "completed"} and runs_of(y_path) == {}
    assert not list(shared.glob("*.json"))


def test_old_format_batches_are_kept_until_a_store_is_named_for_them(
    tmp_path: Path, ingest_spool_cli: IngestSpool
) -> None:
    path = tmp_path / "o.duckdb"
    store = open_store(f"duckdb:///{path}")
    folder = store.identity().spool_dir
    folder.mkdir(parents=True)
    old = folder / "1700000000.000000-1-abcdef12.json"  # format 1: the tables, no store
    old.write_text(
        json.dumps(
            {"runs": [{"run_id": "old"}], "requests": _requests("old", 3).to_dict("records")}
        )
    )
    report = ingest.ingest_spool(store)
    assert (report.rows, report.legacy) == (0, 1) and old.exists()
    store.dispose()
    plain = ingest_spool_cli(f"duckdb:///{path}", cwd=tmp_path, env=_env())
    assert plain.returncode == 0 and "1 old-format batch(es)" in plain.stdout and old.exists()
    legacy = ingest_spool_cli(f"duckdb:///{path}", "--legacy", cwd=tmp_path, env=_env())
    assert legacy.returncode == 0 and "ingested 4 spooled rows" in legacy.stdout
    assert not old.exists() and runs_of(path) == {"old": None}


def test_a_spooled_running_row_never_replaces_the_run_s_final_status(
    tmp_path: Path, duckdb_lock: Lock
) -> None:
    """The run row spooled at the start ("running") is older than the final one: the flush
    that writes the final one ingests the spool first, and a replay never undoes an end."""
    path = tmp_path / "s.duckdb"
    store = open_store(f"duckdb:///{path}", lock_timeout_s=0.3)
    writer = ingest.BufferedWriter(store, flush_interval_s=3600)
    with duckdb_lock(path):
        writer.add_run({"run_id": "r", "status": "running"})
        writer.add("requests", _requests("r", 10))
        writer.flush()
    assert writer.spooled() == (1, 11)
    writer.add_run({"run_id": "r", "status": "completed"})
    writer.add("requests", _requests("r", 5, start=10))
    writer.close()
    assert writer.spooled() == (0, 0)
    assert runs_of(path) == {"r": "completed"} and ok_requests(path) == 15
    # a copy of the old batch replayed later (another process's ingest) changes nothing
    ingest.spool_batch(
        {"runs": [{"run_id": "r", "status": "running"}]}, writer.spool_dir, store.identity()
    )
    assert ingest.ingest_spool(store).batches == 1
    assert runs_of(path) == {"r": "completed"}


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("duckdb:///data/s.duckdb", "duckdb:///{cwd}/data/s.duckdb", True),
        ("duckdb:///data/s.duckdb", "duckdb:///data/../data/./s.duckdb", True),
        ("duckdb:///data/s.duckdb", "duckdb:///data/t.duckdb", False),
        ("postgresql+psycopg://u:pw@DB:5432/ss", "postgresql://other@db/ss?sslmode=x", True),
        ("postgresql+psycopg://u@db/ss", "postgresql+psycopg://u@db/other", False),
    ],
)
def test_store_location_names_a_place_not_a_spelling(a: str, b: str, same: bool) -> None:
    b = b.replace("{cwd}", os.getcwd())
    assert (store_location(a) == store_location(b)) is same
    assert "pw" not in store_location(a)


def test_the_store_id_is_kept_in_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "i.duckdb"
    store = open_store(f"duckdb:///{path}")
    first = store.store_id
    assert first and len(first) == 32
    kept = store.read_df("select value from store_meta where key = 'store_id'")
    assert kept.value.tolist() == [first]
    monkeypatch.chdir(tmp_path)
    relative = open_store("duckdb:///i.duckdb").identity()
    assert (relative.store_id, relative.spool_dir) == (first, tmp_path / "i.duckdb.spool")
    assert open_store(f"duckdb:///{tmp_path / 'j.duckdb'}").store_id != first


def test_one_store_reached_by_two_urls_has_one_spool(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A DuckDB file by absolute and relative paths, a PostgreSQL database by two host names:
    one store id, one spool folder, and a batch spooled through one URL is stored through the
    other (and left alone by another store sharing the folder)."""
    env = {"XDG_DATA_HOME": str(tmp_path / "xdg")}
    url = make_url(store_url)
    if url.get_backend_name() == "duckdb":
        path = Path(str(url.database))
        monkeypatch.chdir(path.parent)
        alias = f"duckdb:///{path.name}"
    else:
        host = "localhost" if url.host == "127.0.0.1" else "127.0.0.1"
        alias = url.set(host=host).render_as_string(hide_password=False)
    a, b = open_store(store_url), open_store(alias)
    ia, ib = a.identity(env), b.identity(env)
    assert ia.store_id and ia.store_id == ib.store_id
    assert ia.spool_dir == ib.spool_dir
    other = open_store(f"duckdb:///{tmp_path / 'other.duckdb'}")
    assert other.identity(env).spool_dir != ia.spool_dir
    batch = {"runs": [{"run_id": "a1", "status": "completed"}], "requests": _requests("a1", 4)}
    ingest.spool_batch(batch, ia.spool_dir, ia)
    assert ingest.ingest_spool(other, ia.spool_dir).others == {ia.url: 1}
    report = ingest.ingest_spool(b, ib.spool_dir)
    assert (report.rows, report.batches, report.others) == (5, 1, {})
    assert a.read_df("select run_id, status from runs").values.tolist() == [["a1", "completed"]]
    assert tables.table_counts(a)["requests"] == 4
    for store in (a, b, other):
        store.dispose()
